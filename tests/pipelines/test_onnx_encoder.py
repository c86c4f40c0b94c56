"""The ONNX Runtime encoder (the default): the same vectors as torch on real texts, on the batch and the single-query
path; exported once; selectable in serving (``LIVEMEM_ENCODER``) and for builds (``index.encoder``); int8 query
vectors (serving's default) close to the float32 ones and ranking as they do, never used to embed an index;
int8-block index vectors (the default for builds) close to float32, the same whatever a text is batched with, under
their own model id (``index.precision``)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.examples import SHARED_DATA
from support.serving import build_and_publish, make_workspace

from livemem.errors import ConfigError
from livemem.ingest.build import build_version
from livemem.model.embedding import Embedder, default_model_path
from livemem.model.onnx_encoder import OnnxEncoder, fingerprint
from livemem.settings import CacheSettings, EncoderSettings
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

SCIFACT = SHARED_DATA / "ir" / "scifact"


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx_embedder(onnx_cache) -> Embedder:
    """ONNX Runtime with float32 index vectors: torch's vectors."""
    return Embedder(encoder="onnx", threads=2, onnx_cache_dir=onnx_cache, precision="fp32")


@pytest.fixture(scope="module")
def block_embedder(onnx_cache) -> Embedder:
    """ONNX Runtime with int8-block index vectors (the default)."""
    return Embedder(encoder="onnx", threads=2, onnx_cache_dir=onnx_cache)


@pytest.fixture(scope="module")
def torch_embedder() -> Embedder:
    """The reference backend (the session's ``embedder`` follows the default, ONNX)."""
    return Embedder(encoder="torch", threads=2)


def real_texts() -> list[str]:
    """SciFact abstracts as the pipeline embeds them (most exceed the model's 256 word pieces) and claims."""
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as fh:
        docs = [json.loads(next(fh)) for _ in range(40)]
    with open(SCIFACT / "queries.train.jsonl", encoding="utf-8") as fh:
        claims = [json.loads(next(fh))["text"] for _ in range(20)]
    odd = ["", "  leading and trailing spaces  ", "Ünïcödé café — naïve 日本語 ∞Δ∞", "SNAP"]
    return [f"# {d['title']}\n\n{d['text']}\n" for d in docs] + claims + odd


def test_onnx_vectors_match_torch_on_real_texts(torch_embedder, onnx_embedder):
    texts = real_texts()
    reference = torch_embedder.encode(texts)
    batched = onnx_embedder.encode(texts)
    assert batched.shape == reference.shape == (len(texts), 384)
    assert batched.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    assert (batched * reference).sum(axis=1).min() >= 0.9999
    # The single-query path (no padding, no mask) gives the batch path's vectors, and torch's single-query ones.
    one_by_one = np.stack([onnx_embedder.encode_one(t) for t in texts[-30:]])
    assert one_by_one.dtype == np.float32
    np.testing.assert_allclose(one_by_one, batched[-30:], atol=1e-5)
    torch_one = np.stack([torch_embedder.encode_one(t) for t in texts[-30:]])
    assert (one_by_one * torch_one).sum(axis=1).min() >= 0.99999
    assert (one_by_one * reference[-30:]).sum(axis=1).min() >= 0.99999
    # Sorting batches by length must not change which vector belongs to which text.
    np.testing.assert_allclose(onnx_embedder.encode(texts[::-1])[::-1], batched, atol=1e-5)


def test_int8_query_vectors_rank_real_texts_as_float32_ones_do(onnx_embedder, onnx_cache):
    texts = real_texts()
    abstracts, claims = texts[:40], texts[40:60]
    int8 = Embedder(encoder="onnx", threads=1, onnx_cache_dir=onnx_cache, query_precision="int8", precision="fp32")
    quantised = np.stack([int8.encode_one(t) for t in claims])
    exact = np.stack([onnx_embedder.encode_one(t) for t in claims])
    assert quantised.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(quantised, axis=1), 1.0, atol=1e-5)
    cosine = (quantised * exact).sum(axis=1)
    assert cosine.min() >= 0.98 and cosine.max() < 0.99999  # close, and really the quantised model
    # Index vectors are not the query precision's: the embedding cache never holds a dynamically quantised vector.
    documents = int8.encode(abstracts)
    np.testing.assert_allclose(documents, onnx_embedder.encode(abstracts), atol=1e-6)
    # Ranking: each claim's first abstract under int8 is among its first three under float32 (most claims' judged
    # abstracts are not among these 40, so near-ties between unrelated ones may swap).
    exact_top3 = np.argsort(-(exact @ documents.T), axis=1)[:, :3]
    int8_first = np.argmax(quantised @ documents.T, axis=1)
    assert all(first in top3 for first, top3 in zip(int8_first, exact_top3, strict=True))
    assert np.abs(quantised @ documents.T - exact @ documents.T).max() < 0.03
    assert int8.onnx_query.file.name == "model.int8.onnx"
    assert int8.onnx_query.file.parent == onnx_embedder.onnx.file.parent  # one export, its quantised copy beside it
    assert int8.with_encoder("torch").query_precision == "int8"
    torch_queries = Embedder(encoder="torch", threads=1, query_precision="int8")
    assert (torch_queries.encode_one(claims[0]) @ exact[0]) >= 0.99999  # torch queries are always float32
    with pytest.raises(ValueError, match="expected one of fp32, int8"):
        Embedder(query_precision="int4")


def test_export_happens_once_and_every_encoder_reuses_it(onnx_embedder, onnx_cache, tmp_path):
    exported = onnx_embedder.onnx.file
    assert exported.parent.parent == onnx_cache
    stamp = exported.stat().st_mtime_ns
    again = OnnxEncoder(default_model_path(), cache_dir=onnx_cache, threads=1)
    assert again.file == exported and exported.stat().st_mtime_ns == stamp
    assert [p.name for p in onnx_cache.iterdir()] == [exported.parent.name]
    quantised = OnnxEncoder(default_model_path(), cache_dir=onnx_cache, threads=1, precision="int8").file
    stamp = quantised.stat().st_mtime_ns
    assert OnnxEncoder(default_model_path(), cache_dir=onnx_cache, precision="int8").file.stat().st_mtime_ns == stamp
    assert {"model.int8.onnx", "model.onnx"} <= {p.name for p in exported.parent.glob("*.onnx")} <= {
        "model.int8.onnx", "model.onnx", "model.int8-block.onnx"}  # fmt: skip
    # Other weights (here: another config) name another export, so a changed model is never served stale.
    changed = tmp_path / "model"
    shutil.copytree(default_model_path(), changed, ignore=shutil.ignore_patterns("model.safetensors"))
    (changed / "model.safetensors").symlink_to(default_model_path() / "model.safetensors")
    (changed / "config.json").write_text((changed / "config.json").read_text().replace("}", ', "note": 1}', 1))
    assert fingerprint(changed) != exported.parent.name


def test_serving_with_the_onnx_encoder_answers_as_torch_does(
    tmp_path_factory, torch_embedder, onnx_embedder, block_embedder, onnx_cache
):
    root = tmp_path_factory.mktemp("onnx-serving")
    home = IndexHome(root / "rag_index")
    sources = make_workspace(root)
    build_and_publish(sources, home, torch_embedder)
    # the settings the app is given (LIVEMEM_ENCODER=onnx, LIVEMEM_ONNX_CACHE), not the process environment
    int8_settings = Settings.defaults(index_dir=home.root, warm_up=False, encoder="onnx", onnx_cache=onnx_cache)
    assert (int8_settings.encoder, int8_settings.query_precision) == ("onnx", "int8")  # serving's defaults
    onnx_settings = Settings.defaults(
        index_dir=home.root, warm_up=False, encoder="onnx", onnx_cache=onnx_cache, query_precision="fp32"
    )
    answers = {}
    for name, app in (
        ("torch", create_app(Settings.defaults(index_dir=home.root, warm_up=False), torch_embedder)),
        ("onnx", create_app(onnx_settings)),  # the app makes its own embedder from the settings
        ("int8", create_app(int8_settings)),
    ):
        with TestClient(app) as client:
            answers[name] = []
            for mode in ("dense", "hybrid"):
                response = client.post("/query", json={"query": "SNAP food help in Fayette", "mode": mode})
                assert response.status_code == 200, response.text
                answers[name].append([(r["chunk_id"], r["score"]) for r in response.json()["results"]])
    assert answers["onnx"][0], "the dense query found nothing"
    for torch_hits, onnx_hits in zip(answers["torch"], answers["onnx"], strict=True):
        assert [c for c, _ in onnx_hits] == [c for c, _ in torch_hits]
        np.testing.assert_allclose([s for _, s in onnx_hits], [s for _, s in torch_hits], atol=1e-4)
    # int8 query vectors: the same best chunk, dense scores within a few hundredths of the float32 ones.
    int8_dense, exact_dense = answers["int8"][0], answers["onnx"][0]
    assert int8_dense[0][0] == exact_dense[0][0]
    exact_scores = dict(exact_dense)
    assert all(abs(score - exact_scores[c]) < 0.03 for c, score in int8_dense if c in exact_scores)
    # Same vectors, same cache keys: a from-scratch build with the ONNX encoder, given the torch build's
    # embedding cache, embeds nothing again.
    fresh = IndexHome(root / "onnx_index")
    fresh.cache_dir.mkdir(parents=True)
    shutil.copy(home.cache_dir / "embeddings.sqlite", fresh.cache_dir / "embeddings.sqlite")
    rebuilt = build_version(load_sources(sources), fresh, onnx_embedder)
    assert rebuilt.embeddings_computed == 0 and rebuilt.embeddings_reused > 0
    # int8-block vectors have their own model id, so their keys: given the same cache, such a build embeds every
    # text itself (none of the float32 vectors is taken for its own) and names the precision in its manifest.
    blocked = IndexHome(root / "block_index")
    blocked.cache_dir.mkdir(parents=True)
    shutil.copy(home.cache_dir / "embeddings.sqlite", blocked.cache_dir / "embeddings.sqlite")
    built = build_version(load_sources(sources), blocked, block_embedder)
    assert built.embeddings_reused == 0 and built.embeddings_computed == rebuilt.embeddings_reused
    assert blocked.manifest(built.version_id)["model"]["id"] == "sentence-transformers/all-MiniLM-L6-v2:int8-block"


def test_an_unknown_encoder_is_refused_by_name():
    for variable, value, field in (
        ("LIVEMEM_ENCODER", "tensorflow", "encoder"),
        ("LIVEMEM_QUERY_PRECISION", "int4", "query_precision"),
        ("LIVEMEM_INDEX_PRECISION", "int4", "index_precision"),
    ):
        env = {variable: value}  # the others unset (their defaults)
        with pytest.raises(ConfigError, match=field):
            Settings.from_mapping(env)
        with pytest.raises(ConfigError, match=f"{variable}='{value}'"):
            EncoderSettings.from_mapping(env)  # what an entry point reads before it makes an Embedder
    with pytest.raises(ValueError, match="expected one of torch, onnx"):
        Embedder(encoder="int8")
    with pytest.raises(ValueError, match="expected one of int8-block, fp32"):
        Embedder(precision="int8")  # the dynamic int8 copy is for queries only


def test_onnx_is_the_default_and_a_sources_file_picks_the_build_backend(tmp_path, monkeypatch, onnx_cache):
    monkeypatch.setenv("LIVEMEM_ENCODER", "torch")  # the library never reads the environment: entry points do
    assert Embedder().encoder == "onnx" and Embedder().precision == "int8-block"
    assert (Embedder().query_precision, Embedder().onnx_cache_dir) == ("fp32", None)
    assert Settings.defaults(index_dir=tmp_path).index_precision == "int8-block"
    fp32 = {"LIVEMEM_INDEX_PRECISION": "fp32", "LIVEMEM_ONNX_CACHE": str(onnx_cache)}
    configured = Embedder.configured(EncoderSettings.from_mapping(fp32), CacheSettings.from_mapping(fp32).onnx_cache)
    assert configured.model_id == "sentence-transformers/all-MiniLM-L6-v2" and configured.onnx_cache_dir == onnx_cache
    assert (
        Settings.from_mapping(fp32).index_precision == "fp32" and Settings.from_mapping(fp32).onnx_cache == onnx_cache
    )
    assert Settings.defaults(index_dir=tmp_path).encoder == "onnx"
    torch = {"LIVEMEM_ENCODER": "torch"}
    assert Settings.from_mapping(torch).encoder == "torch"
    assert Embedder.configured(EncoderSettings.from_mapping(torch)).encoder == "torch"
    sources = make_workspace(tmp_path)
    text = sources.read_text()
    assert load_sources(sources).encoder is None  # not named: the embedder keeps its own backend
    sources.write_text(text.replace("  retention: 3\n", "  retention: 3\n  encoder: onnx\n"), encoding="utf-8")
    config = load_sources(sources)
    assert config.encoder == "onnx"
    base = Embedder(encoder="torch", threads=1, batch_size=16, onnx_cache_dir=onnx_cache)
    chosen = base.with_encoder(config.encoder)
    assert (chosen.encoder, chosen.threads, chosen.batch_size, chosen.onnx_cache_dir) == ("onnx", 1, 16, onnx_cache)
    assert base.with_encoder(None) is base and chosen.with_encoder("onnx") is chosen
    assert base.model_id == "sentence-transformers/all-MiniLM-L6-v2"  # torch: float32 whatever the precision
    assert chosen.model_id == "sentence-transformers/all-MiniLM-L6-v2:int8-block"
    exact = chosen.with_encoder(None, "fp32")
    assert (exact.encoder, exact.precision, exact.model_id) == ("onnx", "fp32", base.model_id)
    assert base.for_model_id(chosen.model_id).encoder == "onnx"  # int8-block vectors: on onnx, whatever the base
    assert chosen.for_model_id(base.model_id).model_id == base.model_id
    assert chosen.for_model_id(chosen.model_id) is chosen and base.for_model_id("other/model") is None
    sources.write_text(text.replace("  retention: 3\n", "  retention: 3\n  precision: fp32\n"), encoding="utf-8")
    assert load_sources(sources).precision == "fp32"
    sources.write_text(text.replace("  retention: 3\n", "  retention: 3\n  precision: int8\n"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"sources.yaml:\d+:\d+: index.precision: 'int8' is not one of"):
        load_sources(sources)
    sources.write_text(text.replace("  retention: 3\n", "  retention: 3\n  encoder: int8\n"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"sources.yaml:\d+:\d+: index.encoder: 'int8' is not one of"):
        load_sources(sources)


def test_a_build_embeds_with_the_backend_its_sources_file_names(tmp_path, onnx_cache):
    sources = make_workspace(tmp_path)
    text = sources.read_text()
    given = Embedder(encoder="torch", threads=1, onnx_cache_dir=onnx_cache)
    sources.write_text(text.replace("  retention: 3\n", "  retention: 3\n  encoder: onnx\n"), encoding="utf-8")
    built = build_version(load_sources(sources), IndexHome(tmp_path / "named"), given)
    assert built.embeddings_computed > 0 and given.encoded == 0  # every vector came from the ONNX embedder
    sources.write_text(text, encoding="utf-8")
    built = build_version(load_sources(sources), IndexHome(tmp_path / "unnamed"), given)
    assert built.embeddings_computed > 0 and given.encoded == built.embeddings_computed  # not named: its own


def test_int8_block_index_vectors_are_close_to_float32_and_the_same_in_any_batch(block_embedder, onnx_embedder):
    texts = real_texts()  # 40 abstracts, 20 claims, 4 odd texts
    vectors = block_embedder.encode(texts)
    exact = onnx_embedder.encode(texts)
    assert block_embedder.onnx_index.file.name == "model.int8-block.onnx"
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosine = (vectors * exact).sum(axis=1)
    assert cosine[:60].min() >= 0.999 and cosine.max() < 0.9999999  # close, and really the quantised model
    assert cosine.min() >= 0.998  # the empty text ([CLS] [SEP] only) is the farthest
    # A text's vector does not depend on the texts batched with it, to the bit: an incremental build (a few
    # changed texts) and a from-scratch build (all of them) give the same vector (tests/pipelines/test_differential.py).
    rng = np.random.default_rng(15)
    for size in (1, 2, 3, 7, 16, 33, 64):
        picked = rng.permutation(len(texts))[:size]
        np.testing.assert_array_equal(block_embedder.encode([texts[i] for i in picked]), vectors[picked])
    # Ranking: each claim's first abstract under int8-block is among its first three under float32 (most claims'
    # judged abstracts are not among these 40), and no similarity moves by more than a hundredth.
    blocked_scores = vectors[40:60] @ vectors[:40].T
    exact_scores = exact[40:60] @ exact[:40].T
    exact_top3 = np.argsort(-exact_scores, axis=1)[:, :3]
    assert all(first in top3 for first, top3 in zip(np.argmax(blocked_scores, axis=1), exact_top3, strict=True))
    assert np.abs(blocked_scores - exact_scores).max() < 0.01
