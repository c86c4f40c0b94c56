"""Every step that carries data from a base version gives identical tables when re-run on unchanged input.

On the bundled example (four chunk sources, a spatial source, the registry): chunks, GBIM and the registry are
each staged once, then forced to run again on the same input; every table of the version (its own and the ones
it carried from other steps), the retrieval snapshot and the vector store must be unchanged. The attention
rollup's re-run of a day is covered in tests/pipelines/test_attention.py (``test_rerunning_a_day_gives_the_same_result``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from support.examples import copy_bundled_example

from livemem.gbim import export_gbim
from livemem.ingest.build import build_version
from livemem.ingest.verify import compare_versions, read_collections, table_fingerprints
from livemem.registry import RegistryConfig, run_verification
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome

NOW = datetime(2026, 11, 1, tzinfo=UTC)


def test_forced_reruns_on_unchanged_input_give_identical_versions(tmp_path: Path, embedder) -> None:
    _, sources = copy_bundled_example(tmp_path)
    config = load_sources(sources)
    home = IndexHome(tmp_path / "index")
    registry = RegistryConfig.from_sources(config)

    def publish(result) -> str:
        assert result.version_id, result.reason
        home.publish(result.version_id, result.base_version, 10)
        return result.version_id

    publish(build_version(config, home, embedder))
    publish(export_gbim(config, home, embedder))
    first = publish(run_verification(registry, home, now=NOW))
    steps = {
        "chunks": lambda: build_version(config, home, embedder, force=True),
        "gbim": lambda: export_gbim(config, home, embedder, force=True),
        "registry": lambda: run_verification(registry, home, now=NOW, force=True),
    }
    previous = first
    for step, rerun in steps.items():
        again = publish(rerun())
        before, after = home.version_dir(previous), home.version_dir(again)
        assert table_fingerprints(after) == table_fingerprints(before), step
        comparison = compare_versions(after, before)
        assert comparison.equal, (step, comparison.lines())
        names = ["gbim_spatial", "gis_wv_benefits"]
        assert _plain(read_collections(after, names)) == _plain(read_collections(before, names)), step
        for part in ("gis", "gbim"):
            assert _files(after / part) == _files(before / part), (step, part)
        previous = again
    assert len(table_fingerprints(home.version_dir(previous))) >= 9  # chunk, gbim and registry tables all present


def _plain(collections: dict[str, dict[str, tuple]]) -> dict[str, dict[str, tuple]]:
    return {
        name: {cid: (doc, meta, tuple(vec.round(6))) for cid, (doc, meta, vec) in rows.items()}
        for name, rows in collections.items()
    }


def _files(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
