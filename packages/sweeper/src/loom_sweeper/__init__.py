"""Loom sweeper Lambda. Handler: ``loom_sweeper.handler.handler`` (EventBridge schedule, every minute)."""
