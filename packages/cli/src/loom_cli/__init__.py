"""The ``loom`` command: a terminal client for Loom's control plane."""

__version__ = "0.1.0"
