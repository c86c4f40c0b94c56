"""Minimal standard-library client for the Living Memory retrieval API."""

from .client import (
    Chunk,
    LivingMemoryClient,
    LivingMemoryError,
    Provenance,
    QueryResult,
    format_answer,
    search,
)

__all__ = [
    "Chunk",
    "LivingMemoryClient",
    "LivingMemoryError",
    "Provenance",
    "QueryResult",
    "format_answer",
    "search",
]

__version__ = "0.1.0"
