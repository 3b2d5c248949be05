"""Loom's local runtime: plays the Lambda service for the deployed functions, on one machine.

It starts moto on 127.0.0.1, applies ``terraform/envs/local`` to it, reads each function's deployed
configuration back, checks that the zip it runs is the one deployed, and then does Lambda's job: an
SQS event source mapping for the worker, the schedule for the sweeper, the Function URL for the
control plane, each handler in isolated processes with Lambda's environment and timeout.

Only the local runtime installs crash-point hooks (``loom_local.faults``); it is never in a zip.
"""

__version__ = "0.1.0"
