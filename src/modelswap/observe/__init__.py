"""Observability: the activity log, metrics and usage extraction."""
