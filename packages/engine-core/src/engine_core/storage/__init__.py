"""Moved to ``engine_core.adapters``: ``storage.memory``, ``storage.dynamodb`` and ``storage._items`` are aliases
of the adapter modules, kept until nothing imports them."""
