"""Loom control-plane Lambda. Handler: ``loom_control_plane.handler.handler`` (Function URL, AWS_IAM)."""
