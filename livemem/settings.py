"""One typed settings tree (pydantic-settings): every environment variable of the platform, with its type and
default, in one module.

Each section is a ``pydantic_settings.BaseSettings`` whose fields name their variable (``validation_alias``); an
empty variable counts as unset, except where emptiness means something (an empty role list: no role). Entry
points (the HTTP app, the MCP server, the CLI, the Dagster code location) read the tree, or the section they
need, once with ``from_env()`` and pass it down; keyword arguments override the environment. A bad value is a
``ConfigError`` naming the setting and its variable (never the value: it may be a key).

The sources file (``RAG_SOURCES``) is the other half: ``livemem.sources.config`` validates it against its JSON Schemas
(every mistake with its file, line and column) into typed sections. docs/settings.md lists every variable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from livemem.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCES_FILE = PROJECT_ROOT / "examples" / "sources.yaml"
DEFAULT_INDEX_DIR = PROJECT_ROOT / "rag_index"
ACCESS_LEVELS = ("public", "internal")

CommaList = Annotated[list[str], NoDecode]  # "a, b" in the environment (not JSON)


def _split_commas(value: Any) -> Any:
    return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value


_MAPPING: ContextVar[Mapping[str, str] | None] = ContextVar("livemem_settings_mapping", default=None)


class _MappingSource(EnvSettingsSource):
    """The environment source reading a given mapping instead of ``os.environ`` (``Section.from_mapping``)."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = dict(env)
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return self._mapping


class Section(BaseSettings):
    """A section of the tree, read from the environment (variable names are case-sensitive)."""

    model_config = SettingsConfigDict(case_sensitive=True, populate_by_name=True, extra="ignore")
    title: ClassVar[str] = "settings"
    keep_empty: ClassVar[frozenset[str]] = frozenset()  # variables whose empty value is meaningful

    @model_validator(mode="before")
    @classmethod
    def _empty_is_unset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        names = cls.variables()
        return {k: v for k, v in data.items() if not (v == "" and k in names and k not in cls.keep_empty)}

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Environment variable -> field name, for every field read from the environment."""
        return {f.validation_alias: n for n, f in cls.model_fields.items() if isinstance(f.validation_alias, str)}

    @classmethod
    def from_env(cls, **overrides: Any) -> Self:
        """The section from the environment, ``overrides`` (field names) taking precedence."""
        return cls._checked(lambda: cls(**overrides))

    @classmethod
    def defaults(cls, **overrides: Any) -> Self:
        """The section's defaults, ``overrides`` taking precedence, the environment not read: what a core function
        uses when no entry point passed it the section."""
        token = _MAPPING.set({})
        try:
            return cls._checked(lambda: cls(**overrides))
        finally:
            _MAPPING.reset(token)

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> Self:
        """The section from ``env`` (variable -> value) instead of the process environment, parsed and checked the
        same way; the process environment is not read."""
        token = _MAPPING.set(env)
        try:
            return cls._checked(cls)
        finally:
            _MAPPING.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        env = _MAPPING.get()
        if env is None:
            return init_settings, env_settings, dotenv_settings, file_secret_settings
        return init_settings, _MappingSource(settings_cls, env)

    @classmethod
    def _checked(cls, build: Any) -> Self:
        try:
            return build()
        except ValidationError as exc:
            # Only the messages: the input values may hold API keys.
            problems = "; ".join(f"{cls._named(e['loc'])}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"invalid {cls.title}: {problems}") from None
        except SettingsError as exc:  # a variable holding JSON that does not parse
            field = re.search(r'field "(\w+)"', str(exc))
            variable = {n: v for v, n in cls.variables().items()}.get(field.group(1) if field else "", "a variable")
            raise ConfigError(f"invalid {cls.title}: {variable} is not valid JSON") from None

    @classmethod
    def _named(cls, loc: tuple[Any, ...]) -> str:
        if not loc:
            return "settings"
        head, names = str(loc[0]), cls.variables()
        field = names.get(head, head)
        variable = next((v for v, n in names.items() if n == field), None)
        where = f"{field} ({variable})" if variable else field
        return ".".join([where, *map(str, loc[1:])])


class PathSettings(Section):
    """Where the sources file, the index home and the Dagster instance are."""

    title: ClassVar[str] = "path settings"
    sources_file: Path = Field(DEFAULT_SOURCES_FILE, validation_alias="RAG_SOURCES", description="YAML sources file")
    index_dir: Path = Field(DEFAULT_INDEX_DIR, validation_alias="RAG_INDEX_DIR", description="index home")
    dagster_home: Path | None = Field(None, validation_alias="DAGSTER_HOME", description="Dagster instance")


class TraceSettings(Section):
    """Where usage traces are written (serving, MCP) and read (the nightly rollup, personal memory)."""

    title: ClassVar[str] = "trace settings"
    dir: Path | None = Field(None, validation_alias="RAG_TRACE_DIR", description="default: <index home>/traces")
    dsn: str | None = Field(
        None, validation_alias="RAG_TRACE_DSN", repr=False, description="Postgres: traces in a table there"
    )
    # checked (at least 16 bytes) where trace ids are signed: ``livemem.usage.traces.TraceSigner``
    secret: str | None = Field(
        None,
        validation_alias="RAG_TRACE_SECRET",
        repr=False,
        description="key signing trace ids (default: one generated once in the trace directory)",
    )

    def directory(self, index_dir: str | Path) -> Path:
        """The trace directory of an index home: writers and the rollup resolve it here, so they never disagree."""
        return self.dir or Path(index_dir) / "traces"


class ChromaSettings(Section):
    """A Chroma server holding the versions' vectors (unset: local Chroma files when a version asks for them)."""

    title: ClassVar[str] = "Chroma settings"
    host: str | None = Field(None, validation_alias="CHROMA_HOST")
    port: int = Field(8000, ge=1, le=65535, validation_alias="CHROMA_PORT")

    @property
    def address(self) -> tuple[str, int] | None:
        return (self.host, self.port) if self.host else None


class DenseSettings(Section):
    """The dense scan's knobs, read once by the entry point into its ``EngineConfig`` (below), which the loader hands
    to every snapshot it builds (docs/dense-scan.md, docs/approximate-search.md)."""

    title: ClassVar[str] = "dense scan settings"
    scan_threads: int | None = Field(
        None,
        ge=0,
        le=64,
        validation_alias="LIVEMEM_SCAN_THREADS",
        description="dense scan threads (default: cores − 1)",
    )
    kernel: Literal["int8", "fbgemm", "torch-half"] | None = Field(
        None, validation_alias="LIVEMEM_DENSE_KERNEL", description="the dense first stage's kernel (default: int8)"
    )
    ann: Literal["auto", "exact"] = Field(
        "auto",
        validation_alias="LIVEMEM_ANN",
        description="auto: segments with an approximate-search graph answer candidates from it; exact: every row "
        "scanned (docs/approximate-search.md)",
    )
    ann_candidates: int = Field(
        200,
        ge=1,
        le=100_000,
        validation_alias="LIVEMEM_ANN_CANDIDATES",
        description="candidates a graph gives at least, scored exactly (max(this, min(4·k', k' + this)), k' the "
        "graph's share of k by rows; more under filters; docs/approximate-search.md)",
    )
    ann_breadth: int = Field(
        600,
        ge=1,
        le=100_000,
        validation_alias="LIVEMEM_ANN_BREADTH",
        description="rows a graph walk keeps in view (usearch expansion_search), at least the candidates asked for "
        "(docs/approximate-search.md)",
    )


class BuildSettings(Section):
    """How a build runs, read when it starts (docs/build-speed.md)."""

    title: ClassVar[str] = "build settings"
    workers: int | None = Field(
        None,
        ge=0,
        le=256,
        validation_alias="LIVEMEM_BUILD_WORKERS",
        description="build worker processes (default: cores)",
    )
    progress_interval_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        validation_alias="LIVEMEM_PROGRESS_INTERVAL_S",
        description="seconds between progress lines of a long build step (0: every batch)",
    )
    document_timeout: float = Field(
        60.0,
        gt=0,
        le=3600,
        validation_alias="LIVEMEM_DOCUMENT_TIMEOUT",
        description="seconds one PDF/DOCX/ODT/HTML document may take to extract (docs/documents.md)",
    )
    document_budget_s: float = Field(
        600.0,
        ge=0,
        le=86400,
        validation_alias="LIVEMEM_DOCUMENT_BUDGET_S",
        description="seconds of document extraction one build may spend in all (0: no limit); the documents past it "
        "are reported deferred and extracted by the next build (docs/documents.md)",
    )
    document_memory_mb: int = Field(
        2048,
        ge=64,
        le=65536,
        validation_alias="LIVEMEM_DOCUMENT_MEMORY_MB",
        description="address space (MiB) the document extraction worker may add (docs/documents.md)",
    )
    ann_min_rows: int = Field(
        500_000,
        ge=0,
        le=1_000_000_000,
        validation_alias="LIVEMEM_ANN_MIN_ROWS",
        description="a segment of at least this many rows, and a GBIM export of at least this many entities, gets "
        "an approximate-search graph (0: never; docs/approximate-search.md)",
    )
    segment_rows: int = Field(
        1_000_000,
        ge=1,
        le=1_000_000_000,
        validation_alias="LIVEMEM_SEGMENT_ROWS",
        description="chunk rows a build writes per segment, and the most a merge writes into one: a build holds one "
        "segment's rows, texts and vectors at a time (≈ 16 GB at the peak per million chunks; docs/approximate-search.md)",
    )


class ScheduleSettings(Section):
    """Which Dagster schedules start running by themselves, read when the code location loads (docs/attention.md)."""

    title: ClassVar[str] = "schedule settings"
    off: CommaList = Field(
        default_factory=list,
        validation_alias="LIVEMEM_SCHEDULES_OFF",
        description="schedules that start stopped instead of running (names, or all)",
    )

    _commas = field_validator("off", mode="before")(_split_commas)


class CacheSettings(Section):
    """Where derived files are kept, read when they are first needed."""

    title: ClassVar[str] = "cache settings"
    serving_cache: Path | None = Field(
        None, validation_alias="LIVEMEM_SERVING_CACHE", description="default: <index home>/cache/serving"
    )
    onnx_cache: Path | None = Field(
        None, validation_alias="LIVEMEM_ONNX_CACHE", description="default: ~/.cache/livemem/onnx"
    )


def default_scan_threads() -> int:
    """The dense scan's background threads when ``LIVEMEM_SCAN_THREADS`` is unset: one fewer than the cores, at most
    one (two on 2 cores would hold three threads on two cores while BM25 runs; ``livemem.index.scan``)."""
    return min(2, os.cpu_count() or 1) - 1


ANN_MODES = ("auto", "exact")
DENSE_KERNELS: tuple[str, ...] = get_args(get_args(DenseSettings.model_fields["kernel"].annotation)[0])


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """How this process's retrieval engine reads and searches an index, in one frozen value: the dense scan's knobs
    (``DenseSettings``: the first-stage kernel tried first, the scan's background threads, whether segments' graphs
    answer candidates and how many, how wide a walk) and where serving copies are written and mapped
    (``CacheSettings.serving_cache``; None: each home's ``cache/serving``).

    An entry point builds it once (``EngineConfig.from_env()``, or ``from_settings`` from the sections it holds) and
    passes it down: ``IndexHome(root, engine=...)`` (``load_snapshot``, ``IndexReader``, ``OpenVersions`` and
    pruning read ``home.engine``), ``load_snapshot_at(path, engine=...)``, ``cached_gis_index(path, engine)``. The
    loader hands it to what it builds: ``DenseRows.config`` (the kernel, the scan pool, the graph walk) and the
    segments' serving copies (``livemem.version.mapped.cache_root``). A core function given none uses
    ``EngineConfig.defaults()``, never the environment; two snapshots of one process may hold different ones."""

    kernel: Literal["int8", "fbgemm", "torch-half"] | None = None  # None: int8, then FBGEMM, then torch.mv
    scan_threads: int = dataclasses.field(default_factory=default_scan_threads)
    ann: Literal["auto", "exact"] = DenseSettings.model_fields["ann"].default
    ann_candidates: int = DenseSettings.model_fields["ann_candidates"].default
    ann_breadth: int = DenseSettings.model_fields["ann_breadth"].default
    serving_cache: Path | None = None

    def __post_init__(self) -> None:
        problems = [
            f"kernel {self.kernel!r} is not one of {', '.join(DENSE_KERNELS)}"
            if self.kernel not in (None, *DENSE_KERNELS)
            else "",
            f"ann {self.ann!r} is not one of {', '.join(ANN_MODES)}" if self.ann not in ANN_MODES else "",
            "scan_threads must be 0 to 64" if not 0 <= self.scan_threads <= 64 else "",
            "ann_candidates must be at least 1" if self.ann_candidates < 1 else "",
            "ann_breadth must be at least 1" if self.ann_breadth < 1 else "",
        ]
        if any(problems):
            raise ConfigError(f"invalid engine config: {'; '.join(p for p in problems if p)}")
        if self.serving_cache is not None and not isinstance(self.serving_cache, Path):
            object.__setattr__(self, "serving_cache", Path(self.serving_cache))

    @classmethod
    def defaults(cls, **overrides: Any) -> EngineConfig:
        """The defaults (``overrides``: field names), the environment not read: what a core function uses when no
        entry point passed it a config."""
        return cls(**overrides)

    @classmethod
    def from_settings(cls, dense: DenseSettings, caches: CacheSettings, **overrides: Any) -> EngineConfig:
        """The config of the sections an entry point holds (``LivingMemorySettings.engine`` of the whole tree)."""
        scan_threads = default_scan_threads() if dense.scan_threads is None else dense.scan_threads
        found = {"kernel": dense.kernel, "scan_threads": scan_threads, "ann": dense.ann,
                 "ann_candidates": dense.ann_candidates, "ann_breadth": dense.ann_breadth,
                 "serving_cache": caches.serving_cache}  # fmt: skip
        return cls(**{**found, **overrides})

    @classmethod
    def from_env(cls, **overrides: Any) -> EngineConfig:
        """The config from the environment (``LIVEMEM_DENSE_KERNEL``, ``LIVEMEM_SCAN_THREADS``, ``LIVEMEM_ANN*``,
        ``LIVEMEM_SERVING_CACHE``): what every entry point builds once (the serving state, the CLI, the Dagster code
        location, the benchmarks)."""
        return cls.from_settings(DenseSettings.from_env(), CacheSettings.from_env(), **overrides)

    def replace(self, **changes: Any) -> EngineConfig:
        """This config with ``changes`` (field names): another value, this one unchanged."""
        return dataclasses.replace(self, **changes)


class RegistrySettings(Section):
    """Bounds on the registry input (``livemem.registry.load``), checked before its rows are held in memory."""

    title: ClassVar[str] = "registry settings"
    max_rows: int = Field(
        100_000,
        ge=1,
        validation_alias="RAG_REGISTRY_MAX_ROWS",
        description="rows a registry source may hold; more: the verification is refused, naming the limit",
    )
    max_bytes: int = Field(
        128 * 1024 * 1024,
        ge=1,
        validation_alias="RAG_REGISTRY_MAX_BYTES",
        description="size of a registry CSV / JSON file; bigger: refused before it is read",
    )


ENCODERS = ("torch", "onnx")
QUERY_PRECISIONS = ("fp32", "int8")
INDEX_PRECISIONS = ("int8-block", "fp32")  # the first is the default (docs/encoder.md)


def _one_of(variable: str, choices: tuple[str, ...]) -> Any:
    """A before-validator: the value stripped and lower-cased (blank: unset), else ``variable=value`` refused."""

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        name = value.strip().lower()
        if name and name not in choices:
            raise ValueError(f"{variable}={name!r}: expected one of {', '.join(choices)}")
        return name or None

    return check


class EncoderSettings(Section):
    """The backend and the precisions of an ``Embedder`` made without them (builds, the CLI), read when it is made
    (docs/encoder.md). The serving section reads the same variables with its own defaults (int8 queries)."""

    title: ClassVar[str] = "encoder settings"
    encoder: Literal["torch", "onnx"] | None = Field(
        None, validation_alias="LIVEMEM_ENCODER", description="torch or onnx (default: onnx)"
    )
    query_precision: Literal["fp32", "int8"] | None = Field(
        None, validation_alias="LIVEMEM_QUERY_PRECISION", description="query vectors on onnx (default: fp32)"
    )

    index_precision: Literal["int8-block", "fp32"] | None = Field(
        None,
        validation_alias="LIVEMEM_INDEX_PRECISION",
        description="index vectors on onnx: int8-block (default; 1.5x the build speed) or fp32",
    )

    _encoder = field_validator("encoder", mode="before")(_one_of("LIVEMEM_ENCODER", ENCODERS))
    _precision = field_validator("query_precision", mode="before")(_one_of("LIVEMEM_QUERY_PRECISION", QUERY_PRECISIONS))
    _index = field_validator("index_precision", mode="before")(_one_of("LIVEMEM_INDEX_PRECISION", INDEX_PRECISIONS))


class PersonaSpec(BaseModel):
    """One persona of ``LIVEMEM_PERSONAS``: the access it needs, the collections it searches (patterns), how the
    answer is framed and headed (``livemem.answer.chat.Persona``)."""

    access: list[str]
    collections: list[str] = Field(default_factory=lambda: ["*"])
    framing: str = ""
    heading: str | None = None


class PersonaSettings(Section):
    """Personas overriding or extending the built-in ones, read whenever a persona is resolved (docs/seed-compat.md)."""

    title: ClassVar[str] = "persona settings"
    personas: dict[str, PersonaSpec] = Field(
        default_factory=dict, validation_alias="LIVEMEM_PERSONAS", description='JSON {"name": {"access": [...], ...}}'
    )


WEB_RESULT_FIELDS = ("title", "snippet", "url", "published_at")


def _positive(variable: str, kind: type) -> Any:
    """A before-validator: a positive ``kind`` (int or float) from its text, else refused naming ``variable``."""

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        raw = value.strip()
        try:
            number = kind(raw)
        except ValueError:
            raise ValueError(f"{variable} must be a {kind.__name__}, not {raw!r}") from None
        if number <= 0:
            raise ValueError(f"{variable} must be positive, not {raw!r}")
        return number

    return check


class WebSettings(Section):
    """The web gateway (``livemem.answer.web.web_gateway``, read when the context service starts): off unless
    ``LIVEMEM_WEB_URL`` names a JSON search API (docs/web.md). Which roles may receive web context is the context
    section's ``LIVEMEM_WEB_ROLES``."""

    title: ClassVar[str] = "web gateway settings"
    keep_empty: ClassVar[frozenset[str]] = frozenset({"LIVEMEM_WEB_LIMIT_PARAM"})  # empty: no limit parameter

    url: str | None = Field(None, validation_alias="LIVEMEM_WEB_URL", description="the search endpoint (unset: off)")
    key: str | None = Field(None, validation_alias="LIVEMEM_WEB_KEY", repr=False, description="sent in a header only")
    key_header: str = Field("Authorization", validation_alias="LIVEMEM_WEB_KEY_HEADER")
    query_param: str = Field("q", validation_alias="LIVEMEM_WEB_QUERY_PARAM")
    limit_param: str | None = Field("count", validation_alias="LIVEMEM_WEB_LIMIT_PARAM", description="empty: none")
    results_path: str = Field("results", validation_alias="LIVEMEM_WEB_RESULTS_PATH")
    fields: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias="LIVEMEM_WEB_FIELDS", description="JSON: our field -> the API's"
    )
    timeout_s: float = Field(5.0, validation_alias="LIVEMEM_WEB_TIMEOUT_S")
    allowed_domains: CommaList = Field(default_factory=list, validation_alias="LIVEMEM_WEB_ALLOWED_DOMAINS")
    denied_domains: CommaList = Field(default_factory=list, validation_alias="LIVEMEM_WEB_DENIED_DOMAINS")
    max_results: int = Field(5, validation_alias="LIVEMEM_WEB_MAX_RESULTS")
    calls_per_minute: int = Field(30, validation_alias="LIVEMEM_WEB_CALLS_PER_MINUTE")

    _commas = field_validator("allowed_domains", "denied_domains", mode="before")(_split_commas)
    _timeout = field_validator("timeout_s", mode="before")(_positive("LIVEMEM_WEB_TIMEOUT_S", float))
    _max_results = field_validator("max_results", mode="before")(_positive("LIVEMEM_WEB_MAX_RESULTS", int))
    _calls = field_validator("calls_per_minute", mode="before")(_positive("LIVEMEM_WEB_CALLS_PER_MINUTE", int))

    @field_validator("url", mode="before")
    @classmethod
    def _http_url(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        url = value.strip()
        parts = urlsplit(url)
        if url and (parts.scheme not in ("http", "https") or not parts.hostname):
            raise ValueError(f"LIVEMEM_WEB_URL must be an http(s) URL, not {url!r}")
        return url or None

    @field_validator("limit_param", mode="before")
    @classmethod
    def _no_limit_param(cls, value: Any) -> Any:
        return value or None

    @field_validator("fields", mode="before")
    @classmethod
    def _json_fields(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ValueError(
                    'LIVEMEM_WEB_FIELDS must be a JSON object such as {"snippet": "description"}'
                ) from None
        if not isinstance(value, dict) or not set(value) <= set(WEB_RESULT_FIELDS):
            raise ValueError(f"LIVEMEM_WEB_FIELDS maps some of {', '.join(WEB_RESULT_FIELDS)} to the API's field names")
        return value


class PersonalSettings(Section):
    """Personal memory (cards and exchanges a user keeps; docs/context.md)."""

    title: ClassVar[str] = "personal memory settings"
    dir: Path | None = Field(
        None, validation_alias="LIVEMEM_PERSONAL_DIR", description="default: <index home>/personal"
    )
    retention_days: int = Field(365, ge=1, validation_alias="LIVEMEM_PERSONAL_RETENTION_DAYS")
    max_users_per_key: int = Field(
        1000,
        ge=1,
        validation_alias="LIVEMEM_PERSONAL_MAX_USERS_PER_KEY",
        description="users (user_id values, and the key itself) one API key may keep memory for; beyond: 403",
    )

    def directory(self, index_dir: str | Path) -> Path:
        return self.dir or Path(index_dir) / "personal"


class McpSettings(Section):
    """The MCP server's caller (docs/mcp.md)."""

    title: ClassVar[str] = "MCP settings"
    role: str | None = Field(None, validation_alias="LIVEMEM_MCP_ROLE", description="default: the public role")
    operator_roles: CommaList = Field(default_factory=list, validation_alias="LIVEMEM_MCP_OPERATOR_ROLES")

    _commas = field_validator("operator_roles", mode="before")(_split_commas)


DEFAULT_RDF_BASE_IRI = "https://living-memory.example.org/"  # livemem.gbim.GBIM_IRI is this + "gbim/"


class ServingSettings(Section):
    """The serving app (HTTP and MCP): index, roles, traces, retrieval, encoder, limits (docs/serving.md)."""

    title: ClassVar[str] = "serving settings"
    index_dir: Path = Field(DEFAULT_INDEX_DIR, validation_alias="RAG_INDEX_DIR")
    api_keys: dict[str, str] = Field(
        default_factory=dict, validation_alias="RAG_API_KEYS", repr=False, description="key -> role"
    )
    roles: dict[str, list[str]] = Field(
        default_factory=lambda: {"public": ["public"], "internal": ["public", "internal"]},
        validation_alias="RAG_ROLES",
        description="role -> access levels whose collections it may read",
    )
    public_role: str = "public"
    trace_dir: Path | None = Field(None, validation_alias="RAG_TRACE_DIR", description="default: <index>/traces")
    trace_dsn: str | None = Field(None, validation_alias="RAG_TRACE_DSN", repr=False)
    trace_secret: str | None = Field(
        None, validation_alias="RAG_TRACE_SECRET", repr=False, description="default: generated in the trace directory"
    )
    cache_size: int = Field(1024, ge=0, validation_alias="RAG_CACHE_SIZE")
    recency_half_life_days: float = Field(90.0, gt=0, validation_alias="RAG_RECENCY_HALF_LIFE_DAYS")
    # chosen on SciFact train: docs/serving.md
    fusion_method: Literal["linear", "minmax", "zscore", "rrf"] = Field("linear", validation_alias="RAG_FUSION")
    rrf_k: float = Field(10.0, gt=0, validation_alias="RAG_RRF_K")
    rrf_dense_weight: float = Field(1.0, ge=0)
    rrf_sparse_weight: float | None = Field(None, ge=0, description="None: the method's default (livemem.query.fusion)")
    rrf_depth: int = Field(1000, ge=10)
    fusion_feedback: bool = Field(
        False,
        validation_alias="RAG_FUSION_FEEDBACK",
        description="pseudo-relevance feedback in hybrid (livemem.query.fusion)",
    )
    fusion_sentences: bool = Field(
        True,
        validation_alias="RAG_FUSION_SENTENCES",
        description="hybrid and dense blend the best sentence of their first chunks in (indexes with sentence vectors)",
    )
    refresh_interval_s: float = Field(0.0, ge=0, validation_alias="RAG_REFRESH_INTERVAL_S")
    open_versions: int = Field(
        2,
        ge=0,
        le=64,
        validation_alias="RAG_OPEN_VERSIONS",
        description="older versions (version / as_of) a process keeps loaded, least recently used out; 0: none "
        "(each such request loads its version and drops it after; docs/versions.md)",
    )
    torch_threads: int = Field(1, ge=1, validation_alias="RAG_TORCH_THREADS")
    encoder: Literal["torch", "onnx"] = Field("onnx", validation_alias="LIVEMEM_ENCODER")
    # docs/encoder.md: query vectors in int8 (2.4x faster), whatever precision the index was embedded in
    query_precision: Literal["fp32", "int8"] = Field("int8", validation_alias="LIVEMEM_QUERY_PRECISION")
    # the model id serving files its personal-memory vectors under (match the builds' to share their snapshots)
    index_precision: Literal["int8-block", "fp32"] = Field("int8-block", validation_alias="LIVEMEM_INDEX_PRECISION")
    onnx_cache: Path | None = Field(
        None, validation_alias="LIVEMEM_ONNX_CACHE", description="default: ~/.cache/livemem/onnx"
    )
    max_body_bytes: int = Field(
        2**20, ge=1024, validation_alias="RAG_MAX_BODY_BYTES", description="bigger request bodies: 413"
    )
    body_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        validation_alias="RAG_BODY_TIMEOUT_S",
        description="a request body not whole this long after its headers: 408, connection closed",
    )
    sparql_workers: int = Field(2, ge=1, le=64, validation_alias="RAG_SPARQL_WORKERS")
    sparql_timeout_s: float = Field(2.0, gt=0, le=600, validation_alias="RAG_SPARQL_TIMEOUT_S")
    sparql_memory_mb: int = Field(256, ge=16, validation_alias="RAG_SPARQL_MEMORY_MB")
    cors_origins: CommaList = Field(
        default_factory=list,
        validation_alias="RAG_CORS_ORIGINS",
        description="browser origins (scheme://host[:port]) that may call /facts and /gbim (docs/sparql.md); "
        "* for any; none: no CORS headers",
    )
    rdf_base_iri: str = Field(
        DEFAULT_RDF_BASE_IRI,
        validation_alias="RAG_RDF_BASE_IRI",
        description="served RDF names nodes <base>gbim/...; this server's URL makes entity IRIs dereference",
    )
    warm_up: bool = True

    _cors_commas = field_validator("cors_origins", mode="before")(_split_commas)

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            parts = urlsplit(origin)
            if origin != "*" and (
                parts.scheme not in ("http", "https")
                or not parts.netloc
                or origin != f"{parts.scheme}://{parts.netloc}"
            ):
                raise ValueError(
                    f"RAG_CORS_ORIGINS: {origin!r} is not an origin: write scheme://host[:port] "
                    "(no path, no trailing slash), or * for any"
                )
        if "*" in origins and len(origins) > 1:
            raise ValueError("RAG_CORS_ORIGINS: * (any origin) stands alone")
        return origins

    @field_validator("rdf_base_iri")
    @classmethod
    def _base_iri(cls, base: str) -> str:
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError(f"RAG_RDF_BASE_IRI: {base!r} is not an http(s) URL without query or fragment")
        return base if base.endswith("/") else base + "/"

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
    def _roles_defined(self) -> Self:
        if self.public_role not in self.roles:
            raise ValueError(f"the public role {self.public_role!r} is not defined in roles")
        for key, role in self.api_keys.items():
            if role not in self.roles:
                raise ValueError(f"API key ...{key[-4:]} maps to role {role!r}, which is not defined in roles")
        return self

    @property
    def traces_path(self) -> Path:
        return self.trace_dir or Path(self.index_dir) / "traces"


DEFAULT_WARM_UP_QUESTIONS = (
    "How do I apply for SNAP food assistance?",
    "Where can I get help paying the heating bill in Fayette County?",
    "Medicaid renewal documents in Raleigh County",
    "Food pantry near Beckley WV",
    "What does the constitution say about sealed decisions?",
)


class ContextSettings(Section):
    """Settings of /context and /chat (and their MCP tools), from ``LIVEMEM_*`` and ``LLM_*`` (docs/context.md)."""

    title: ClassVar[str] = "context settings"
    keep_empty: ClassVar[frozenset[str]] = frozenset({"LIVEMEM_WV_ROLES", "LIVEMEM_WEB_ROLES"})  # empty: no role

    top_k: int = Field(
        6, ge=1, le=50, validation_alias="LIVEMEM_CONTEXT_TOP_K", description="text passages per message (default)"
    )
    prompt_budget_chars: int = Field(
        6000, ge=500, validation_alias="LIVEMEM_PROMPT_BUDGET_CHARS", description="size limit of the assembled prompt"
    )
    max_passage_chars: int = Field(900, ge=100, description="a passage longer than this is cut in the prompt")
    min_dense: float = Field(0.25, description="a passage is evidence when its cosine similarity reaches this")
    spatial_k: int = Field(4, ge=0, le=50)
    min_spatial: float = Field(0.3, description="without a county, an entity is evidence from this cosine on")
    registry_limit: int = Field(6, ge=0, le=100)
    wv_roles: CommaList = Field(
        default_factory=list, validation_alias="LIVEMEM_WV_ROLES", description="roles whose every message is WV-scoped"
    )
    web_roles: CommaList | None = Field(
        None, validation_alias="LIVEMEM_WEB_ROLES", description="roles that may receive web context (None: all)"
    )
    cache_size: int = Field(512, ge=0, validation_alias="LIVEMEM_ANSWER_CACHE_SIZE")
    cache_ttl_s: float = Field(600.0, gt=0, validation_alias="LIVEMEM_ANSWER_CACHE_TTL_S")
    cache_path: Path | None = Field(
        None, validation_alias="LIVEMEM_ANSWER_CACHE_PATH", description="persistent answer cache (SQLite)"
    )
    warm_up: bool = Field(True, validation_alias="LIVEMEM_WARM_UP")
    warm_up_questions: list[str] = Field(default_factory=lambda: list(DEFAULT_WARM_UP_QUESTIONS))
    warm_up_questions_file: Path | None = Field(
        None, validation_alias="LIVEMEM_WARM_UP_QUESTIONS", description="a file of questions, one per line"
    )
    guardrail: str = Field("annotate", pattern="^(annotate|refuse|off)$", validation_alias="LIVEMEM_CHAT_GUARDRAIL")
    llm_base_url: str | None = Field(None, validation_alias="LLM_BASE_URL")
    llm_model: str | None = Field(None, validation_alias="LLM_MODEL")
    llm_api_key: str | None = Field(None, validation_alias="LLM_API_KEY", repr=False)
    llm_timeout_s: float = Field(20.0, gt=0, validation_alias="LLM_TIMEOUT_S")
    llm_retries: int = Field(2, ge=0, le=10, validation_alias="LLM_RETRIES")
    audit: bool = Field(True, validation_alias="LIVEMEM_AUDIT")
    audit_dir: Path | None = Field(None, validation_alias="LIVEMEM_AUDIT_DIR")
    thread_store_size: int = Field(
        10_000, ge=0, validation_alias="LIVEMEM_THREAD_STORE_SIZE", description="threads remembered per process"
    )
    thread_ttl_s: float = Field(
        1800.0, gt=0, validation_alias="LIVEMEM_THREAD_TTL_S", description="a thread is forgotten this long after"
    )
    answer_words: int = Field(
        200, ge=20, le=2000, validation_alias="LIVEMEM_ANSWER_WORDS", description="answer budget without a persona's"
    )

    _commas = field_validator("wv_roles", "web_roles", mode="before")(_split_commas)

    @model_validator(mode="after")
    def _questions_from_file(self) -> Self:
        if self.warm_up_questions_file is not None and "warm_up_questions" not in self.model_fields_set:
            text = self.warm_up_questions_file.read_text(encoding="utf-8")
            self.warm_up_questions = [q.strip() for q in text.splitlines() if q.strip()]
        return self

    @property
    def model_name(self) -> str:
        """What answers: the configured LLM, or the extractive answerer."""
        return self.llm_model if self.llm_base_url and self.llm_model else "extractive"


class LivingMemorySettings(Section):
    """The whole tree: one section per concern. An entry point reads it once and hands each part its section."""

    title: ClassVar[str] = "settings"
    paths: PathSettings = Field(default_factory=PathSettings)
    traces: TraceSettings = Field(default_factory=TraceSettings)
    chroma: ChromaSettings = Field(default_factory=ChromaSettings)
    dense: DenseSettings = Field(default_factory=DenseSettings)
    build: BuildSettings = Field(default_factory=BuildSettings)
    schedules: ScheduleSettings = Field(default_factory=ScheduleSettings)
    caches: CacheSettings = Field(default_factory=CacheSettings)
    registry: RegistrySettings = Field(default_factory=RegistrySettings)
    encoders: EncoderSettings = Field(default_factory=EncoderSettings)
    personas: PersonaSettings = Field(default_factory=PersonaSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    personal: PersonalSettings = Field(default_factory=PersonalSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    serving: ServingSettings = Field(default_factory=ServingSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)

    @property
    def engine(self) -> EngineConfig:
        """The retrieval engine's config of this tree (its ``dense`` and ``caches`` sections)."""
        return EngineConfig.from_settings(self.dense, self.caches)

    @classmethod
    def from_env(cls, **overrides: Any) -> Self:
        """Every section from the environment; a bad value anywhere is one ConfigError naming its section."""
        sections = {
            name: overrides.pop(name, None) or field.annotation.from_env()  # type: ignore[union-attr]
            for name, field in cls.model_fields.items()
        }
        return cls(**sections, **overrides)
