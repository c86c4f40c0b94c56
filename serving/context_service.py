"""Moved to ``serving.services.context`` (the services behind every front door); this name stays for its importers."""

from serving.services.context import ContextService, context_service

__all__ = ["ContextService", "context_service"]
