"""What one serving process holds: the index reader, the retriever (one embedder), the cache, the trace writer and
the trace signer (its secret is shared by every worker and replica, so any of them accepts feedback on a trace),
personal memory's store, the personas, and the services every front door calls (``serving.services``: HTTP routes,
MCP tools and ``livemem query``). ``from_settings`` is where serving reads its settings, once per process: the
serving section, and beside it the personal-memory and persona sections and the engine config it passes down."""

from __future__ import annotations

from dataclasses import dataclass, field

from threadpoolctl import threadpool_limits

from livemem.answer.chat import Persona, personas
from livemem.engine.versions import IndexReader, OpenVersions
from livemem.model.embedding import Embedder
from livemem.personal import PersonalStore
from livemem.query.cache import ResultCache
from livemem.query.fusion import FusionSettings
from livemem.query.retrieval import Retriever
from livemem.settings import EngineConfig, PersonalSettings, PersonaSettings
from livemem.usage.traces import PostgresTraceWriter, TraceSigner, TraceWriter, trace_writer
from livemem.version.store import IndexHome
from serving.metrics import Metrics
from serving.services.chunks import ChunkService
from serving.services.context import ContextService
from serving.services.facts import FactsService
from serving.services.feedback import FeedbackService
from serving.services.gis import GisService
from serving.services.query import QueryService
from serving.settings import Settings


@dataclass(frozen=True)
class Role:
    name: str
    access: frozenset[str]


@dataclass
class ServingState:
    settings: Settings
    reader: IndexReader
    retriever: Retriever
    cache: ResultCache
    traces: TraceWriter | PostgresTraceWriter
    signer: TraceSigner
    personal: PersonalStore  # LIVEMEM_PERSONAL_* and the traces' database (livemem.personal)
    personas: dict[str, Persona]  # the built-in personas and LIVEMEM_PERSONAS (livemem.answer.chat.personas)
    metrics: Metrics = field(init=False)
    older: OpenVersions = field(init=False)  # non-current versions requests name (``version`` / ``as_of``), LRU
    query: QueryService = field(init=False)
    gis: GisService = field(init=False)
    facts: FactsService = field(init=False)
    chunks: ChunkService = field(init=False)
    feedback: FeedbackService = field(init=False)
    # /context, /chat and their MCP tools: made on first use (``serving.services.context.context_service``), or set
    # by an entry point or a test with its own ``ContextSettings`` before
    context_service: ContextService | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.metrics = Metrics(self)
        self.older = OpenVersions(self.reader.home, self.settings.open_versions)  # RAG_OPEN_VERSIONS
        self.query = QueryService(self)
        self.gis = GisService(self)
        self.facts = FactsService(self)
        self.chunks = ChunkService(self)
        self.feedback = FeedbackService(self)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        embedder: Embedder | None = None,
        *,
        personal: PersonalSettings | None = None,
        persona_settings: PersonaSettings | None = None,
        engine: EngineConfig | None = None,
    ) -> ServingState:
        """The state of a serving process. ``personal``, ``persona_settings``: those sections of the settings tree,
        ``engine``: its engine config (``LivingMemorySettings.engine``: an entry point holding the tree passes them),
        else read from the environment here."""
        # A multi-threaded BLAS makes the one matrix-vector product per query several times slower (thread
        # wake-ups, contention with torch and other workers): one thread per serving process, like torch.
        threadpool_limits(settings.torch_threads, user_api="blas")
        # the dense scan's knobs (LIVEMEM_DENSE_KERNEL, LIVEMEM_SCAN_THREADS, LIVEMEM_ANN*) and where serving copies
        # are written and mapped (LIVEMEM_SERVING_CACHE), read here once: every version the reader loads gets them
        engine = engine or EngineConfig.from_env()
        personal = personal or PersonalSettings.from_env()
        fusion = FusionSettings.from_serving(settings)
        return cls(
            settings=settings,
            reader=IndexReader(
                IndexHome(settings.index_dir, engine=engine), refresh_interval_s=settings.refresh_interval_s
            ),
            retriever=Retriever(
                embedder
                or Embedder(
                    threads=settings.torch_threads,
                    encoder=settings.encoder,
                    query_precision=settings.query_precision,
                    precision=settings.index_precision,
                    onnx_cache_dir=settings.onnx_cache,
                ),
                fusion,
                settings.recency_half_life_days,
            ),
            cache=ResultCache(settings.cache_size),
            traces=trace_writer(settings.traces_path, settings.trace_dsn),
            signer=TraceSigner.for_directory(settings.traces_path, settings.trace_secret),
            personal=PersonalStore.configured(personal, settings.index_dir, settings.trace_dsn),
            personas=personas(persona_settings or PersonaSettings.from_env()),
        )

    def role(self, name: str) -> Role:
        return Role(name, frozenset(self.settings.roles[name]))
