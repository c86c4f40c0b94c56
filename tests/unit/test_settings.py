"""The settings tree: every section read from the environment with its types and defaults, overrides winning,
mistakes named by setting and variable (never by value), and every reader seeing the same values."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from livemem.answer.chat import personas
from livemem.answer.web import web_gateway
from livemem.errors import ConfigError
from livemem.model.embedding import Embedder
from livemem.personal import PersonalStore
from livemem.settings import (
    DEFAULT_INDEX_DIR,
    DEFAULT_SOURCES_FILE,
    BuildSettings,
    CacheSettings,
    ContextSettings,
    DenseSettings,
    EncoderSettings,
    LivingMemorySettings,
    PersonaSettings,
    ServingSettings,
    TraceSettings,
    WebSettings,
)
from livemem.sources.breath import Breath
from livemem.sources.config import load_sources
from livemem.usage.attention import AttentionConfig, rollup_day
from livemem.usage.traces import TraceSigner, feedback_events, retrieval_events
from livemem.version.store import IndexHome

VARIABLES = (
    "RAG_SOURCES", "RAG_INDEX_DIR", "DAGSTER_HOME", "RAG_TRACE_DIR", "RAG_TRACE_DSN", "CHROMA_HOST", "CHROMA_PORT",
    "LIVEMEM_PERSONAL_DIR", "LIVEMEM_PERSONAL_RETENTION_DAYS", "LIVEMEM_MCP_ROLE", "LIVEMEM_MCP_OPERATOR_ROLES",
    "RAG_API_KEYS", "RAG_ROLES", "LIVEMEM_WV_ROLES", "LIVEMEM_WEB_ROLES", "LLM_MODEL", "LIVEMEM_WARM_UP_QUESTIONS",
    "LIVEMEM_ENCODER", "LIVEMEM_QUERY_PRECISION", "LIVEMEM_INDEX_PRECISION", "LIVEMEM_SCAN_THREADS", "LIVEMEM_DENSE_KERNEL",
    "LIVEMEM_BUILD_WORKERS", "LIVEMEM_SERVING_CACHE", "LIVEMEM_ONNX_CACHE", "RAG_TRACE_SECRET", "LIVEMEM_PERSONAS",
    "LIVEMEM_WEB_URL", "LIVEMEM_WEB_KEY", "LIVEMEM_WEB_KEY_HEADER", "LIVEMEM_WEB_QUERY_PARAM", "LIVEMEM_WEB_LIMIT_PARAM",
    "LIVEMEM_WEB_RESULTS_PATH", "LIVEMEM_WEB_FIELDS", "LIVEMEM_WEB_TIMEOUT_S", "LIVEMEM_WEB_ALLOWED_DOMAINS",
    "LIVEMEM_WEB_DENIED_DOMAINS", "LIVEMEM_WEB_MAX_RESULTS", "LIVEMEM_WEB_CALLS_PER_MINUTE",
)  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_without_any_variable(clean_env) -> None:
    tree = LivingMemorySettings.from_env()
    assert tree.paths.sources_file == DEFAULT_SOURCES_FILE and tree.paths.index_dir == DEFAULT_INDEX_DIR
    assert tree.paths.dagster_home is None
    assert tree.traces.directory(tree.paths.index_dir) == DEFAULT_INDEX_DIR / "traces" and tree.traces.dsn is None
    assert tree.chroma.address is None and load_sources(DEFAULT_SOURCES_FILE, tree.chroma).chroma_server is None
    assert tree.personal.retention_days == 365 and tree.mcp.operator_roles == []
    assert tree.serving.roles == {"public": ["public"], "internal": ["public", "internal"]}
    assert tree.context.web_roles is None and tree.context.model_name == "extractive"


def test_every_reader_sees_the_tree(clean_env, tmp_path: Path) -> None:
    clean_env.setenv("RAG_INDEX_DIR", str(tmp_path / "home"))
    clean_env.setenv("RAG_TRACE_DIR", str(tmp_path / "traces"))
    clean_env.setenv("CHROMA_HOST", "chroma.internal")
    clean_env.setenv("CHROMA_PORT", "8123")
    clean_env.setenv("LIVEMEM_PERSONAL_DIR", str(tmp_path / "personal"))
    clean_env.setenv("LIVEMEM_PERSONAL_RETENTION_DAYS", "30")
    clean_env.setenv("LIVEMEM_MCP_OPERATOR_ROLES", "admin, ops,")
    clean_env.setenv("RAG_API_KEYS", json.dumps({"k-123456": "internal"}))
    tree = LivingMemorySettings.from_env()
    assert tree.paths.index_dir == tmp_path / "home" and tree.serving.index_dir == tmp_path / "home"
    assert tree.serving.traces_path == tmp_path / "traces" == tree.traces.directory(tree.paths.index_dir)
    chroma_server = load_sources(DEFAULT_SOURCES_FILE, tree.chroma).chroma_server  # what the entry points pass down
    assert tree.chroma.address == ("chroma.internal", 8123) == chroma_server
    store = PersonalStore.configured(tree.personal, tree.paths.index_dir, tree.traces.dsn)  # what serving passes down
    assert store.directory == tmp_path / "personal" and store.retention_days == 30 and store.dsn is None
    assert tree.mcp.operator_roles == ["admin", "ops"]
    assert tree.serving.api_keys == {"k-123456": "internal"}
    # Keyword arguments win over the environment.
    assert ServingSettings.from_env(index_dir=tmp_path / "other").index_dir == tmp_path / "other"


def test_an_empty_variable_is_unset_except_a_role_list(clean_env, tmp_path: Path) -> None:
    clean_env.setenv("RAG_INDEX_DIR", "")
    clean_env.setenv("LLM_MODEL", "")
    clean_env.setenv("LIVEMEM_WEB_ROLES", "")  # no role may receive web context (unset: every role may)
    clean_env.setenv("LIVEMEM_WV_ROLES", "community, caseworker")
    questions = tmp_path / "questions.txt"
    questions.write_text("First question?\n\n  Second question?\n", encoding="utf-8")
    clean_env.setenv("LIVEMEM_WARM_UP_QUESTIONS", str(questions))
    tree = LivingMemorySettings.from_env()
    assert tree.paths.index_dir == DEFAULT_INDEX_DIR and tree.context.llm_model is None
    assert tree.context.web_roles == [] and tree.context.wv_roles == ["community", "caseworker"]
    assert tree.context.warm_up_questions == ["First question?", "Second question?"]
    assert ContextSettings.from_env(warm_up_questions=["Mine?"]).warm_up_questions == ["Mine?"]


def test_a_bad_value_names_the_setting_and_its_variable_never_the_value(clean_env) -> None:
    clean_env.setenv("CHROMA_PORT", "eighty")
    with pytest.raises(ConfigError, match=r"invalid Chroma settings: port \(CHROMA_PORT\)"):
        LivingMemorySettings.from_env()
    clean_env.delenv("CHROMA_PORT")
    clean_env.setenv("RAG_API_KEYS", '{"secret-key-value": ')
    with pytest.raises(ConfigError, match="RAG_API_KEYS is not valid JSON") as bad_json:
        ServingSettings.from_env()
    clean_env.setenv("RAG_API_KEYS", json.dumps({"secret-key-value": "nobody"}))
    with pytest.raises(ConfigError, match="maps to role 'nobody'") as unknown_role:
        ServingSettings.from_env()
    assert "secret-key-value" not in str(bad_json.value) + str(unknown_role.value)


def test_the_rollup_reads_the_traces_where_rag_trace_dir_puts_them(clean_env, tmp_path: Path) -> None:
    """The defect this tree removes: ``rollup_day`` without ``trace_dir`` read ``<index home>/traces`` while the
    serving app wrote under ``RAG_TRACE_DIR``."""
    trace_dir = tmp_path / "writable-traces"
    clean_env.setenv("RAG_TRACE_DIR", str(trace_dir))
    home = IndexHome(tmp_path / "rag_index")
    day = datetime.now(UTC).date()
    chunk_ids = ["5f0c8a52-0000-4000-8000-000000000001", "5f0c8a52-0000-4000-8000-000000000002"]
    events = retrieval_events(
        trace_id="t-1", query="heating bill help", chunk_ids=chunk_ids, scores=[0.9, 0.8], role="public",
        breath_phase=None, index_version="v1", mode="hybrid", return_="chunks", filters={}, collections=["docs"],
        cache_hit=False,
    ) + feedback_events(
        trace_id="t-1", chunk_ids=chunk_ids[:1], useful=True, role="public", breath_phase=None, index_version="v1"
    )  # fmt: skip
    trace_dir.mkdir()
    name = f"{day.isoformat()}-serving.jsonl"
    (trace_dir / name).write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")

    # the entry point (the rollup asset's trace resource) reads the section and passes it down
    result = rollup_day(home, day, AttentionConfig(), Breath("Δ3", "normal"), traces=TraceSettings.from_env())
    assert result.files == [name] and result.events == len(events) and result.malformed == 0
    assert result.chunks_used == 2  # both chunks the answer returned


def test_the_cli_query_reads_what_the_serving_roles_allow(clean_env, tmp_path: Path, make_repo, embedder) -> None:
    """``livemem query --role R`` searches the collections role R reads in the serving app (``RAG_ROLES``)."""
    from typer.testing import CliRunner

    from livemem.ingest.build import build_version
    from livemem.sources.config import load_sources
    from orchestration.cli import app

    open_repo = make_repo(files={"open.md": "# Heating\n\nHeating bill help in Beckley.\n"})
    staff_repo = make_repo(files={"staff.md": "# Heating\n\nHeating bill escalation contacts for staff.\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        "sources:\n"
        f"  - {{name: open, repo: {open_repo.path}, collection: open, access: public}}\n"
        f"  - {{name: staff, repo: {staff_repo.path}, collection: staff, access: internal}}\n",
        encoding="utf-8",
    )
    home = IndexHome(tmp_path / "index")
    built = build_version(load_sources(sources), home, embedder)
    home.publish(built.version_id, None, 5)
    clean_env.setenv("RAG_ROLES", json.dumps({"public": ["public"], "caseworker": ["public", "internal"]}))
    base = ["--sources", str(sources), "--index-dir", str(home.root), "query", "heating bill", "--json"]
    runner = CliRunner()

    def collections(role: str) -> set[str]:
        done = runner.invoke(app, [*base, "--role", role])
        assert done.exit_code == 0, done.output
        return {r["collection"] for r in json.loads(done.output)["results"]}

    assert collections("caseworker") == {"open", "staff"}
    assert collections("public") == {"open"}
    unknown = runner.invoke(app, [*base, "--role", "internal"])  # not a role of this deployment
    assert unknown.exit_code == 1 and "unknown role 'internal'" in unknown.output


def test_dagster_resources_name_the_variables_set_and_show_defaults_for_the_rest(
    clean_env, tmp_path: Path, make_repo
) -> None:
    """What the Dagster UI shows: ``EnvVar`` of each variable that is set (resolved when a run starts), the
    settings tree's default for the others, never an empty field standing for "the environment"."""
    from dagster import EnvVar

    from livemem.settings import DEFAULT_INDEX_DIR
    from orchestration.definitions import build_definitions

    repo = make_repo(files={"a.md": "# A\n\nalpha\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n"
        "spatial:\n"
        "  sources:\n"
        "    - {name: offices, postgis: {dsn_env: OFFICES_DSN, table: offices}, crs: 'EPSG:4326',\n"
        "       dataset: offices, gbim_entity: office, id_field: office_id, label_field: name}\n",
        encoding="utf-8",
    )
    clean_env.setenv("RAG_SOURCES", str(sources))
    clean_env.setenv("RAG_TRACE_DSN", "postgresql://traces@db/traces")
    clean_env.setenv("OFFICES_DSN", "postgresql://gis@db/gis")
    resources = build_definitions().resources
    assert resources["git_sources"].sources_file == EnvVar("RAG_SOURCES")
    assert resources["index_store"].index_dir == str(DEFAULT_INDEX_DIR)  # RAG_INDEX_DIR is unset
    assert resources["trace_store"].dsn == EnvVar("RAG_TRACE_DSN") and resources["trace_store"].directory == ""
    assert resources["spatial_databases"].dsns == {"OFFICES_DSN": EnvVar("OFFICES_DSN")}
    assert resources["embedder"].encoder == "onnx"


def test_the_typed_sources_file_sections_default_as_their_schemas_say() -> None:
    """The attention and registry sections are typed models; a value the file leaves out is the schema's default
    (the schema is what users read and what locates mistakes)."""
    from livemem.registry import RegistryConfig
    from livemem.schemas import load_schema
    from livemem.usage.attention import AttentionConfig

    for model, schema in ((AttentionConfig, "attention_config"), (RegistryConfig, "registry_config")):
        for name, spec in load_schema(schema)["properties"].items():
            if "default" in spec:
                assert model.model_fields[name].default == spec["default"], (schema, name)
    weights = load_schema("attention_config")["properties"]["weights"]["properties"]
    assert AttentionConfig().weights.model_dump() == {name: spec["default"] for name, spec in weights.items()}


@pytest.mark.parametrize(
    ("section", "variable", "value", "field"),
    [
        (DenseSettings, "LIVEMEM_SCAN_THREADS", "two", "scan_threads"),
        (DenseSettings, "LIVEMEM_SCAN_THREADS", "-1", "scan_threads"),
        (DenseSettings, "LIVEMEM_SCAN_THREADS", "100000", "scan_threads"),
        (DenseSettings, "LIVEMEM_DENSE_KERNEL", "float8", "kernel"),
        (BuildSettings, "LIVEMEM_BUILD_WORKERS", "1e9", "workers"),
        (BuildSettings, "LIVEMEM_BUILD_WORKERS", "100000", "workers"),
    ],
)
def test_the_process_knobs_refuse_what_they_cannot_use(clean_env, section, variable, value, field) -> None:
    """The dense scan's and the build's knobs: a value that is no number, negative, absurdly large or no known
    kernel is a ConfigError naming the field and its variable, never a crash deep in a worker."""
    clean_env.setenv(variable, value)
    with pytest.raises(ConfigError, match=rf"{field} \({variable}\)"):
        section.from_env()


def test_the_process_knobs_default_to_automatic(clean_env) -> None:
    assert DenseSettings.from_env().scan_threads is None and DenseSettings.from_env().kernel is None
    assert BuildSettings.from_env().workers is None
    assert CacheSettings.from_env().serving_cache is None and CacheSettings.from_env().onnx_cache is None
    clean_env.setenv("LIVEMEM_BUILD_WORKERS", "3")
    clean_env.setenv("LIVEMEM_SERVING_CACHE", "/tmp/copies")
    assert BuildSettings.from_env().workers == 3
    assert CacheSettings.from_env().serving_cache == Path("/tmp/copies")


def embedder_of(settings: EncoderSettings) -> tuple[str, str, str]:
    made = Embedder.configured(settings)  # how an entry point makes the embedder it passes down
    return made.encoder, made.query_precision, made.precision


def test_the_encoder_knobs_default_read_and_refuse(clean_env) -> None:
    """``LIVEMEM_ENCODER`` and ``LIVEMEM_QUERY_PRECISION``, read by an entry point into the ``Embedder`` it makes."""
    assert EncoderSettings.from_env().encoder is None and EncoderSettings.from_env().query_precision is None
    assert embedder_of(EncoderSettings.from_env()) == ("onnx", "fp32", "int8-block")  # the library's defaults
    clean_env.setenv("LIVEMEM_ENCODER", "torch")
    clean_env.setenv("LIVEMEM_QUERY_PRECISION", "int8")
    assert LivingMemorySettings.from_env().encoders == EncoderSettings(encoder="torch", query_precision="int8")
    assert Embedder().encoder == "onnx"  # the core reads no variable: an Embedder made without them has defaults
    clean_env.setenv("LIVEMEM_ENCODER", " Torch ")  # as an Embedder always read it (the serving section: exactly)
    clean_env.setenv("LIVEMEM_QUERY_PRECISION", "INT8")
    assert embedder_of(EncoderSettings.from_env())[:2] == ("torch", "int8")
    clean_env.setenv("LIVEMEM_ENCODER", "tensorflow")
    with pytest.raises(ConfigError, match=r"encoder \(LIVEMEM_ENCODER\)") as refused:
        EncoderSettings.from_env()
    assert "LIVEMEM_ENCODER='tensorflow'" in str(refused.value)
    assert "query_precision" not in str(refused.value)  # each variable is named for its own mistake only
    clean_env.setenv("LIVEMEM_ENCODER", "onnx")
    clean_env.setenv("LIVEMEM_QUERY_PRECISION", "int4")
    with pytest.raises(ConfigError, match=r"query_precision \(LIVEMEM_QUERY_PRECISION\)"):
        LivingMemorySettings.from_env()


def test_the_index_precision_defaults_reads_and_refuses(clean_env) -> None:
    """``LIVEMEM_INDEX_PRECISION``: the precision (and with it the model id) of an ``Embedder``'s index vectors."""
    assert EncoderSettings.from_env().index_precision is None
    assert embedder_of(EncoderSettings.from_env())[2] == "int8-block"  # the library's default
    clean_env.setenv("LIVEMEM_INDEX_PRECISION", "fp32")
    tree = LivingMemorySettings.from_env()
    assert tree.encoders.index_precision == tree.serving.index_precision == "fp32"
    clean_env.setenv(
        "LIVEMEM_INDEX_PRECISION", " FP32 "
    )  # as an Embedder always read it (the serving section: exactly)
    assert embedder_of(EncoderSettings.from_env())[2] == "fp32"
    clean_env.setenv("LIVEMEM_INDEX_PRECISION", "int8")  # the dynamic int8 copy embeds queries only
    with pytest.raises(ConfigError, match=r"index_precision \(LIVEMEM_INDEX_PRECISION\)") as refused:
        EncoderSettings.from_env()
    assert "LIVEMEM_INDEX_PRECISION='int8'" in str(refused.value) and "query_precision" not in str(refused.value)


def test_the_trace_secret_is_read_from_the_tree(clean_env, tmp_path: Path) -> None:
    assert TraceSettings.from_env().secret is None
    generated = TraceSigner.for_directory(tmp_path, ServingSettings.from_env().trace_secret)  # generated once
    assert (tmp_path / ".trace-secret").exists()
    clean_env.setenv("RAG_TRACE_SECRET", "one secret for every replica")
    tree = LivingMemorySettings.from_env()
    assert tree.traces.secret == "one secret for every replica" and "replica" not in repr(tree.traces)
    assert ServingSettings.from_env().trace_secret == tree.traces.secret  # what the serving app passes its signer
    configured = TraceSigner.for_directory(tmp_path / "elsewhere", ServingSettings.from_env().trace_secret)
    token = configured.issue(role="public", index_version="v1", chunk_ids=["a"])
    assert TraceSigner(b"one secret for every replica").verify(token, role="public") is not None
    assert generated.verify(token, role="public") is None
    clean_env.setenv("RAG_TRACE_SECRET", "too short")
    with pytest.raises(ValueError, match="at least 16 bytes"):
        TraceSigner.for_directory(tmp_path, ServingSettings.from_env().trace_secret)


def test_personas_default_read_and_refuse(clean_env) -> None:
    assert PersonaSettings.from_env().personas == {} and "caseworker" in personas(PersonaSettings.from_env())
    clean_env.setenv("LIVEMEM_PERSONAS", json.dumps({"Field Worker": {"access": ["public"], "framing": "Be brief."}}))
    assert "field_worker" not in personas()  # the core reads no variable: the entry point passes the section
    worker = personas(PersonaSettings.from_env())["field_worker"]
    assert (worker.access, worker.collections, worker.framing, worker.heading) == (
        frozenset({"public"}), ("*",), "Be brief.", None
    )  # fmt: skip
    assert LivingMemorySettings.from_env().personas.personas["Field Worker"].access == ["public"]
    clean_env.setenv("LIVEMEM_PERSONAS", '{"field worker": ')
    with pytest.raises(ConfigError, match="LIVEMEM_PERSONAS is not valid JSON"):
        PersonaSettings.from_env()
    clean_env.setenv("LIVEMEM_PERSONAS", json.dumps({"field worker": {"framing": "no access named"}}))
    with pytest.raises(ConfigError, match=r"personas \(LIVEMEM_PERSONAS\)\.field worker\.access"):
        PersonaSettings.from_env()


def test_the_web_gateway_knobs_default_read_and_refuse(clean_env) -> None:
    web = WebSettings.from_env()
    assert web.url is None and web_gateway(web) is None and LivingMemorySettings.from_env().web == web
    assert (web.key_header, web.query_param, web.limit_param, web.results_path) == (
        "Authorization",
        "q",
        "count",
        "results",
    )
    assert (web.timeout_s, web.max_results, web.calls_per_minute, web.fields) == (5.0, 5, 30, {})
    clean_env.setenv("LIVEMEM_WEB_URL", " https://search.example.org/api ")
    clean_env.setenv("LIVEMEM_WEB_KEY", "sk-secret-web-key")
    clean_env.setenv("LIVEMEM_WEB_LIMIT_PARAM", "")  # empty: no limit parameter (unset: count)
    clean_env.setenv("LIVEMEM_WEB_FIELDS", json.dumps({"snippet": "description"}))
    clean_env.setenv("LIVEMEM_WEB_DENIED_DOMAINS", "example.com, spam.example")
    clean_env.setenv("LIVEMEM_WEB_MAX_RESULTS", "3")
    web = WebSettings.from_env()
    assert web.url == "https://search.example.org/api" and "sk-secret" not in repr(web)
    assert (web.limit_param, web.fields, web.denied_domains) == (
        None,
        {"snippet": "description"},
        ["example.com", "spam.example"],
    )
    gateway = web_gateway(WebSettings.from_env())  # what the context service is handed
    assert gateway.provider.key == "sk-secret-web-key" and gateway.policy.max_results == 3
    assert web_gateway(WebSettings.from_mapping({})) is None  # a mapping given: the process environment is not read
    for variable, value, problem in (
        ("LIVEMEM_WEB_URL", "ftp://search.example.org", r"must be an http\(s\) URL"),
        ("LIVEMEM_WEB_TIMEOUT_S", "soon", "must be a float"),
        ("LIVEMEM_WEB_CALLS_PER_MINUTE", "0", "must be positive"),
        ("LIVEMEM_WEB_MAX_RESULTS", "2.5", "must be a int"),
        ("LIVEMEM_WEB_FIELDS", "{", "must be a JSON object"),
        ("LIVEMEM_WEB_FIELDS", '{"body": "text"}', "maps some of title"),
    ):
        with pytest.raises(ConfigError, match=rf"\({variable}\): Value error, {variable} {problem}") as bad:
            WebSettings.from_mapping(
                {
                    "LIVEMEM_WEB_URL": "https://search.example.org",
                    "LIVEMEM_WEB_KEY": "sk-secret-web-key",
                    variable: value,
                }
            )
        assert "sk-secret" not in str(bad.value)
