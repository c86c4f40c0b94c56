"""The registry source: the ``registry:`` section of the sources file, and where its Postgres DSN comes from."""

from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from livemem.errors import ConfigError
from livemem.registry import RegistryConfig
from livemem.settings import PathSettings
from livemem.sources.config import SourcesConfig, load_sources


class RegistrySourceResource(ConfigurableResource):
    """The local_resources registry named in the sources file (CSV / JSON file or Postgres table)."""

    sources_file: str = Field(default="", description="YAML sources file; empty: $RAG_SOURCES or the bundled example.")
    dsn: str = Field(
        default="",
        description="Postgres connection string; empty: the environment variable the registry section names "
        "(dsn_env, default RAG_REGISTRY_DSN), else libpq's PG* variables.",
    )

    def sources(self) -> SourcesConfig:
        return load_sources(Path(self.sources_file) if self.sources_file else PathSettings.from_env().sources_file)

    def config(self) -> RegistryConfig | None:
        """The registry configuration, or None when the sources file has no ``registry:`` section."""
        cfg = RegistryConfig.from_sources(self.sources())
        return cfg.model_copy(update={"dsn": self.dsn}) if cfg is not None and self.dsn else cfg

    def require(self) -> RegistryConfig:
        cfg = self.config()
        if cfg is None:
            raise ConfigError(f"{self.sources().path}: no registry section (see docs/registry.md)")
        return cfg
