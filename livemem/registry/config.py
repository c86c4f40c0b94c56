"""The ``registry:`` section of the sources file, typed (``RegistryConfig``), and the verification logic's
version."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from livemem.sources.config import SourcesConfig

LOGIC_VERSION = "registry-v1"  # bump when verification logic changes: the next run re-verifies and re-stages


class RegistryConfig(BaseModel):
    """The ``registry:`` section of the sources file (``schemas/registry_config.schema.json``), typed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["csv", "json", "postgres"]
    path: Path | None = None
    table: str = "local_resources"
    dsn_env: str = "RAG_REGISTRY_DSN"
    state: str = "WV"
    freshness_days: int = 180
    max_invalid_share: float = 0.1
    dsn: str | None = Field(default=None, repr=False)  # a secret: never in the sources file, never printed

    @classmethod
    def from_sources(cls, config: SourcesConfig) -> RegistryConfig | None:
        """The section, validated against its schema (errors carry file:line:col), then typed with its path
        resolved against the sources file; None when the file has none."""
        raw = config.section("registry", "registry_config")
        if raw is None:
            return None
        cfg = cls.model_validate(raw)
        if cfg.path is None:
            return cfg
        path = cfg.path.expanduser()
        return cfg.model_copy(update={"path": path if path.is_absolute() else (config.path.parent / path).resolve()})

    def describe(self) -> str:
        if self.kind == "postgres":
            return f"postgres table {self.table} (DSN from ${self.dsn_env})"
        return f"{self.kind} file {self.path}"

    def fingerprint(self) -> str:
        """Changes whenever the same rows would verify differently."""
        payload = [LOGIC_VERSION, self.state, self.freshness_days]
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]
