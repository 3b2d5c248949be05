"""Adapters: the only modules of engine-core that import boto3 or botocore (or, for the Lambda runtime,
Powertools). Nothing here is re-exported from ``engine_core``: import an adapter by name.

==================  ==============================================================================
module              what
==================  ==============================================================================
``dynamodb``        the state store on the design's single table (``_dynamo_branches``: its fan-out items;
                    ``_dynamo_wire``: items in and out, ClientError translated, in one place)
``memory``          the state store in a dict, same conditions (tests, the simulation, the bench)
``sqlite``          the state store in one local SQLite file, same conditions, safe across processes
                    (``sqlite_db``: the file, its connections and transactions; ``sqlite_branches``: its
                    fan-out items; ``sqlite_index``: its indexes; ``sqlite_housekeeping``: TTLs and endings;
                    ``sqlite_queue``: the step queue on the same file)
``_items``          the item mapping both stores share (model <-> flat attributes, sort keys)
``sqs``             the step queue and the DLQ's failure notices
``eventbridge``     status-change events
``fake_queue``      an in-process SQS stand-in with injectable faults (``engine_core.testing`` re-exports it)
``clients``         the boto3 clients the functions make, from a session that lists only Loom's services
``bootstrap``       the Lambda's engine, built from its environment
``lambda_runtime``  the handlers' shared Powertools setup (logger, metrics) and runtime
==================  ==============================================================================

A new store is a new adapter module with a ``store_from_env(env, settings, client_config)`` function, a
line in ``STORES``, and a pass of the contract suite (``tests/adapter/test_store_contract.py`` runs on
every store named here).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ..ports import StateStore
from ..settings import ConfigurationError, EngineSettings

STORE_ENV = "LOOM_STORE"
DEFAULT_STORE = "dynamodb"
STORES: dict[str, str] = {"dynamodb": "engine_core.adapters.dynamodb", "memory": "engine_core.adapters.memory",
                          "sqlite": "engine_core.adapters.sqlite"}
"""``LOOM_STORE`` value -> the adapter module whose ``store_from_env`` builds that store. Modules load
only when chosen, so a memory-backed process never imports boto3 for its store."""


def store_name(env: Mapping[str, str]) -> str:
    name = env.get(STORE_ENV) or DEFAULT_STORE
    if name not in STORES:
        raise ConfigurationError(f"{STORE_ENV}={name!r} is not a store; choose one of {', '.join(sorted(STORES))}")
    return name


def build_store(env: Mapping[str, str], settings: EngineSettings, client_config: Any = None) -> StateStore:
    """The store ``LOOM_STORE`` names (default ``dynamodb``), configured from the same environment.

    Example:
        >>> build_store({"LOOM_STORE": "memory"}, EngineSettings(shards=4))  # doctest: +ELLIPSIS
        <engine_core.adapters.memory.MemoryStore object at ...>
    """
    module = importlib.import_module(STORES[store_name(env)])
    return module.store_from_env(env, settings, client_config)


__all__ = ["DEFAULT_STORE", "STORES", "STORE_ENV", "build_store", "store_name"]
