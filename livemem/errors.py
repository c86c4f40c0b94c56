"""Errors a user can act on: each says what is wrong and where."""


class LivingMemoryError(Exception):
    """Base class for errors reported to users (CLI, Dagster UI, API)."""


class ConfigError(LivingMemoryError):
    """The sources file or a setting is invalid."""


class SourceError(LivingMemoryError):
    """A configured source cannot be read (missing path, not a git repository, unknown ref)."""


class PublishConflict(LivingMemoryError):
    """The index moved on while a version was being staged; the staged version is not published."""
