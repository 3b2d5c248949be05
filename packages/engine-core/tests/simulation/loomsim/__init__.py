"""Loom's deterministic simulation: a seeded, single-threaded scheduler over the real Engine and
Sweeper on the memory store, with a misbehaving queue, crash/pause/error injection after any store or
queue call, stale due-index reads, and an invariant checker run after every seed.

Entry points: ``loomsim.runner.run_seed(seed)`` and ``run_many(seeds, jobs)``; the pytest file
``test_sim_invariants.py`` and the CLI ``sim_main.py`` (``make soak``) sit on top of them.
"""
