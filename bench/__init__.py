"""Loom benchmarks: what a step costs on the wire, in capacity units and in dollars, and how that grows.

Run everything with ``make bench`` (or ``.venv/bin/python -m bench``); see ``python -m bench --help``
for single sections. Results land in ``docs/benchmarks.md`` and ``docs/bench/*.png``.
"""
