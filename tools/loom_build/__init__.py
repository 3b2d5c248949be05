"""Loom's build tooling behind ``tools/build_lambda.py``: one module per job.

- :mod:`.common`: paths, the error type, hashing, reading pins from a lock;
- :mod:`.wheels`: the local packages' reproducible wheels, and earlier versions rebuilt from git history;
- :mod:`.locks`: a Lambda's lock against the built wheels, and the lock without the example workflows;
- :mod:`.versions`: moving a local package's version and the Lambdas' pins of it;
- :mod:`.extras`: a platform team's own workflow packages, locked by sha256;
- :mod:`.zips`: one deterministic zip per function, for an architecture.
"""
