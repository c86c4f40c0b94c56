"""Serving settings, read from the environment in one place.

==============================  =====================================================================
``RAG_INDEX_DIR``               index home (default ``rag_index/`` in the project)
``RAG_API_KEYS``                JSON object ``{"<api key>": "<role>"}``; requests without a key are ``public``
``RAG_ROLES``                   JSON object ``{"<role>": ["public", "internal"]}``: access levels per role
``RAG_TRACE_DIR``               where traces go (default ``<index home>/traces``)
``RAG_TRACE_DSN``               Postgres connection string: traces go to a table there instead of files
``RAG_TRACE_SECRET``            key signing trace ids (default: one generated once in ``<trace dir>/.trace-secret``)
``RAG_CACHE_SIZE``              result cache entries (0 turns the cache off; default 1024)
``RAG_RECENCY_HALF_LIFE_DAYS``  half-life of ``recency_bias`` (default 90)
``RAG_FUSION``                  hybrid fusion: ``linear`` (default), ``rrf``, ``minmax`` or ``zscore`` (``livemem/fusion.py``)
``RAG_RRF_K``                   reciprocal rank fusion constant (default 10; ``rrf`` only)
``RAG_REFRESH_INTERVAL_S``      how often ``CURRENT`` is re-read (default 0: before every request)
``RAG_TORCH_THREADS``           torch (or ONNX Runtime) and BLAS threads per serving process (default 1)
``LIVEMEM_ENCODER``             query encoder backend: ``onnx`` (default; faster) or ``torch`` (the reference; same vectors)
``LIVEMEM_QUERY_PRECISION``     query vectors on ``onnx``: ``int8`` (default; 2.2-2.4x faster, nDCG@10 -0.002) or ``fp32``
``RAG_MAX_BODY_BYTES``          largest request body accepted (default 1 MiB; bigger: 413, unread)
``RAG_SPARQL_WORKERS``          SPARQL worker processes per serving process: queries at once (default 2)
``RAG_SPARQL_TIMEOUT_S``        wall-clock limit of one SPARQL query; its worker is killed after it (default 2)
``RAG_SPARQL_MEMORY_MB``        memory one SPARQL query may use in its worker (default 256)
==============================  =====================================================================
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from livemem.config import index_dir_from_env, trace_dir_from_env
from livemem.errors import ConfigError

ACCESS_LEVELS = ("public", "internal")


class Settings(BaseModel):
    index_dir: Path = Field(default_factory=index_dir_from_env)
    api_keys: dict[str, str] = Field(default_factory=dict, description="API key -> role")
    roles: dict[str, list[str]] = Field(
        default_factory=lambda: {"public": ["public"], "internal": ["public", "internal"]},
        description="role -> access levels whose collections it may read",
    )
    public_role: str = "public"
    trace_dir: Path | None = None
    trace_dsn: str | None = None
    cache_size: int = Field(1024, ge=0)
    recency_half_life_days: float = Field(90.0, gt=0)
    fusion_method: Literal["linear", "minmax", "zscore", "rrf"] = "linear"  # chosen on SciFact train: docs/serving.md
    rrf_k: float = Field(10.0, gt=0)
    rrf_dense_weight: float = Field(1.0, ge=0)
    rrf_sparse_weight: float | None = Field(None, ge=0, description="None: the method's default (livemem.fusion)")
    rrf_depth: int = Field(1000, ge=10)
    refresh_interval_s: float = Field(0.0, ge=0)
    torch_threads: int = Field(1, ge=1)
    encoder: Literal["torch", "onnx"] = "onnx"
    query_precision: Literal["fp32", "int8"] = "int8"  # docs/encoder.md: index vectors stay float32
    max_body_bytes: int = Field(2**20, ge=1024, description="request bodies above this size are refused (413)")
    sparql_workers: int = Field(2, ge=1, le=64)
    sparql_timeout_s: float = Field(2.0, gt=0, le=600)
    sparql_memory_mb: int = Field(256, ge=16)
    warm_up: bool = True

    @field_validator("roles")
    @classmethod
    def _known_levels(cls, roles: dict[str, list[str]]) -> dict[str, list[str]]:
        for role, levels in roles.items():
            unknown = set(levels) - set(ACCESS_LEVELS)
            if unknown:
                raise ValueError(
                    f"role {role!r} names unknown access levels {sorted(unknown)} (known: {ACCESS_LEVELS})"
                )
        return roles

    @model_validator(mode="after")
    def _roles_defined(self) -> Settings:
        if self.public_role not in self.roles:
            raise ValueError(f"the public role {self.public_role!r} is not defined in roles")
        for key, role in self.api_keys.items():
            if role not in self.roles:
                raise ValueError(f"API key ...{key[-4:]} maps to role {role!r}, which is not defined in roles")
        return self

    @property
    def traces_path(self) -> Path:
        return self.trace_dir or (Path(self.index_dir) / "traces")

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        values: dict[str, object] = {}
        for env, name in (("RAG_API_KEYS", "api_keys"), ("RAG_ROLES", "roles")):
            raw = os.environ.get(env)
            if raw:
                try:
                    values[name] = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{env} is not valid JSON: {exc}") from exc
        for env, name in (
            ("RAG_TRACE_DSN", "trace_dsn"),
            ("RAG_CACHE_SIZE", "cache_size"),
            ("RAG_RECENCY_HALF_LIFE_DAYS", "recency_half_life_days"),
            ("RAG_FUSION", "fusion_method"),
            ("RAG_RRF_K", "rrf_k"),
            ("RAG_REFRESH_INTERVAL_S", "refresh_interval_s"),
            ("RAG_TORCH_THREADS", "torch_threads"),
            ("LIVEMEM_ENCODER", "encoder"),
            ("LIVEMEM_QUERY_PRECISION", "query_precision"),
            ("RAG_MAX_BODY_BYTES", "max_body_bytes"),
            ("RAG_SPARQL_WORKERS", "sparql_workers"),
            ("RAG_SPARQL_TIMEOUT_S", "sparql_timeout_s"),
            ("RAG_SPARQL_MEMORY_MB", "sparql_memory_mb"),
        ):
            if os.environ.get(env):
                values[name] = os.environ[env]
        values = {**values, **overrides}
        if values.get("trace_dir") is None:  # the rollup resolves the same directory (livemem.config)
            values["trace_dir"] = trace_dir_from_env(values.get("index_dir") or index_dir_from_env())
        try:
            return cls(**values)
        except ValidationError as exc:
            # Only the messages: the input values may hold API keys.
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"invalid serving settings: {problems}") from None
