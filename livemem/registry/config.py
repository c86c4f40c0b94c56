"""The ``registry:`` section of the sources file, typed (``RegistryConfig``), and the verification logic's
version."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from livemem.sources.config import SourcesConfig

# bump when verification logic changes: the next run re-verifies and re-stages (v2: the row's HSDS fields, bad fields
# flagged instead of dropping the row, undated policy, several states)
LOGIC_VERSION = "registry-v2"
UNDATED_POLICIES = ("hidden", "unverified_shown", "listed")


class RegistryConfig(BaseModel):
    """The ``registry:`` section of the sources file (``schemas/registry_config.schema.json``), typed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["csv", "json", "postgres", "hsds"]  # hsds: an HSDS datapackage directory, imported in memory
    path: Path | None = None
    table: str = "local_resources"
    dsn_env: str = "RAG_REGISTRY_DSN"
    state: str = "WV"
    states: tuple[str, ...] = ()  # several states: the first is the primary (``state`` then defaults to it)
    freshness_days: int = 180
    max_invalid_share: float = 0.1
    undated: Literal["hidden", "unverified_shown", "listed"] = "hidden"
    invalid_fields: Literal["flag", "reject"] = "flag"
    dsn: str | None = Field(default=None, repr=False)  # a secret: never in the sources file, never printed

    @model_validator(mode="before")
    @classmethod
    def _primary_state(cls, data: object) -> object:
        """``states: [FL, GA]`` without ``state``: the first is the primary; ``state`` with ``states`` must be one."""
        if isinstance(data, dict) and data.get("states"):
            states = [str(s) for s in data["states"]]
            if not data.get("state"):
                data = {**data, "state": states[0]}
            elif data["state"] not in states:
                raise ValueError(f"registry.state {data['state']} is not one of registry.states {states}")
        return data

    @property
    def covered_states(self) -> tuple[str, ...]:
        """Every state the registry covers, the primary first."""
        return tuple(dict.fromkeys((self.state, *self.states)))

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
        if self.kind == "hsds":
            return f"hsds package {self.path}"
        return f"{self.kind} file {self.path}"

    def fingerprint(self) -> str:
        """Changes whenever the same rows would verify differently."""
        payload = [LOGIC_VERSION, list(self.covered_states), self.freshness_days, self.undated, self.invalid_fields]
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]
