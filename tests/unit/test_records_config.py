"""Chunk identity, seal detection, breath parsing and the sources file."""

from pathlib import Path

import pytest

from livemem.errors import ConfigError
from livemem.index import records
from livemem.sources.breath import parse_breath
from livemem.sources.config import load_sources

PROJECT = Path(__file__).resolve().parents[2]


def test_chunk_id_is_stable_and_content_addressed() -> None:
    sha = records.content_hash("same text")
    first = records.chunk_id("docs", "a.md", sha, 0)
    assert first == records.chunk_id("docs", "a.md", sha, 0)
    assert first != records.chunk_id("docs", "a.md", sha, 1)  # repeated text in one file
    assert first != records.chunk_id("docs", "b.md", sha, 0)
    assert first != records.chunk_id("other", "a.md", sha, 0)
    assert first != records.chunk_id("docs", "a.md", records.content_hash("other text"), 0)


def test_seal_detection() -> None:
    assert records.is_sealed("Seal: ∞Δ∞\nArticle I", sealed_by_config=False)
    assert records.is_sealed("plain text", sealed_by_config=True)
    assert not records.is_sealed("plain text ∞ Δ", sealed_by_config=False)


def test_breath_parsing() -> None:
    breath = parse_breath("# BREATH\n\nPhase: Δ7\ntone: Slow\n")
    assert (breath.phase, breath.tone, breath.decay_rate) == ("Δ7", "slow", 0.01)
    assert parse_breath("phase: D2\n").phase == "Δ2"
    missing = parse_breath(None)
    assert (missing.phase, missing.tone) == (None, "normal")
    assert parse_breath("tone: furious").tone == "normal"


def test_bundled_example_sources_load() -> None:
    config = load_sources(PROJECT / "examples" / "sources.yaml")
    assert config.names == ["governance", "wv-benefits", "caseworker", "client-code"]
    gov = config.source("governance")
    assert gov.repo == PROJECT
    assert gov.selects("examples/corpus/governance/CHARTER.md")
    assert not gov.selects("examples/corpus/benefits/fayette-county.md")
    assert gov.is_sealed_path("examples/corpus/governance/CONSTITUTION.md")
    benefits = config.source("wv-benefits")
    assert benefits.domain_metadata("examples/corpus/benefits/fayette-county.md") == {
        "dataset": "wv_benefits",
        "state": "WV",
        "county": "Fayette",
    }
    assert config.source("caseworker").access == "internal"


def test_schema_error_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "sources.yaml"
    bad.write_text(
        "sources:\n  - name: docs\n    repo: ./repo\n    collection: docs\n    access: secret\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as err:
        load_sources(bad)
    message = str(err.value)
    assert f"{bad}:5:13" in message
    assert "sources[0].access" in message
    assert "'secret' is not one of ['public', 'internal']" in message


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "sources.yaml"
    bad.write_text("sources:\n  - name: docs\n    repo: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"sources\.yaml:\d+:\d+: not valid YAML"):
        load_sources(bad)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    bad = tmp_path / "sources.yaml"
    bad.write_text(
        "sources:\n"
        "  - {name: Docs, repo: ./r, collection: d}\n"
        "  - {name: ok, repo: ./r, collection: docs, colour: blue}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as err:
        load_sources(bad)
    message = str(err.value)
    assert "sources[0].name" in message and "sources[0].collection" in message
    assert "'colour' was unexpected" in message


def test_duplicate_names_and_conflicting_access_are_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "sources.yaml"
    bad.write_text(
        "sources:\n"
        "  - {name: a, repo: ./r, collection: docs, access: public}\n"
        "  - {name: a, repo: ./r2, collection: docs, access: internal}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as err:
        load_sources(bad)
    assert "'a' is also the name of sources[0]" in str(err.value)
    assert "collection 'docs' is public in source 'a' but internal" in str(err.value)


def test_missing_sources_file_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"does not exist .*RAG_SOURCES"):
        load_sources(tmp_path / "nope.yaml")
