"""Documents in a real git repository, built for real: the PDFs of ../shared/data/docs/pdf (page provenance, an
encrypted one reported, two columns in reading order, ligatures spelled out), a scanned PDF, a malformed PDF and a
DOCX decompression bomb reported in skipped_files while the rest of the source builds; provenance checks resolve
against the extracted text."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import pypdf
import pytest
from support.documents import scanned_pdf

from livemem.index import records
from livemem.ingest import checks
from livemem.ingest.build import build_version
from livemem.ingest.documents import extract
from livemem.ingest.provenance import verify_chunk
from livemem.settings import BuildSettings
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome

PDFS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "docs" / "pdf"
GUIDE = "# Guide\n\n## SNAP\n\nFood help in Oak Hill.\n"
# the openings of \lipsum paragraphs 1-8, in the order the .tex source sets them (two columns per page)
LIPSUM_OPENINGS = [
    "Lorem ipsum dolor sit amet, consectetuer",
    "Nam dui ligula",
    "Nulla malesuada porttitor",
    "Quisque ullamcorper placerat",
    "Fusce mauris",
    "Suspendisse vel felis",
    "Sed commodo posuere",
    "Morbi luctus",
]


def docx_bomb() -> bytes:
    """A DOCX whose document part expands from about 300 kB to 300 MB."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as part:
            block = b" " * (1 << 20)
            for _ in range(300):
                part.write(block)
    return out.getvalue()


@pytest.fixture(scope="module")
def built(tmp_path_factory, embedder):
    from tests.support.git import GitRepo

    root = tmp_path_factory.mktemp("documents")
    repo = GitRepo(root / "repo")
    repo.commit(
        {
            "guide.md": GUIDE,
            "docs/four-pages.pdf": (PDFS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf").read_bytes(),
            "docs/password.pdf": (
                PDFS / "005-libreoffice-writer-password/libreoffice-writer-password.pdf"
            ).read_bytes(),
            "docs/multicolumn.pdf": (PDFS / "026-latex-multicolumn/multicolumn.pdf").read_bytes(),
            "docs/crazyones.pdf": (PDFS / "021-pdfa/crazyones-pdfa.pdf").read_bytes(),
            "docs/outline.pdf": (PDFS / "006-pdflatex-outline/pdflatex-outline.pdf").read_bytes(),
            "docs/writer.odt": (PDFS / "002-trivial-libre-office-writer/source.odt").read_bytes(),
            "docs/scanned-flyer.pdf": scanned_pdf(),
            "docs/broken.pdf": b"%PDF-1.7\n" + b"\x00garbage" * 100,
            "docs/bomb.docx": docx_bomb(),
        }
    )
    sources = root / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    config = load_sources(sources)
    home = IndexHome(root / "index")
    result = build_version(config, home, embedder)
    home.publish(result.version_id, result.base_version, config.retention)
    version_dir = home.version_dir(home.current())
    recs = checks.read_records(version_dir)
    return {"repo": repo, "home": home, "dir": version_dir, "records": recs, "result": result}


def by_path(built, path: str) -> list[dict]:
    return sorted((r for r in built["records"] if r["provenance"]["path"] == path),
                  key=lambda r: r["metadata"]["chunk_index"])  # fmt: skip


def test_bad_documents_are_reported_and_the_rest_builds(built) -> None:
    manifest = json.loads((built["dir"] / "manifest.json").read_text(encoding="utf-8"))
    skipped = manifest["sources"]["docs"]["skipped_files"]
    assert skipped == {"encrypted": 1, "malformed": 1, "no_text_layer": 1, "too_large": 1}
    from livemem.version import connect

    con = connect(built["dir"])
    try:
        rows = dict(con.execute("SELECT path, reason FROM skipped_files").fetchall())
    finally:
        con.close()
    assert rows == {
        "docs/password.pdf": "encrypted",
        "docs/broken.pdf": "malformed",
        "docs/scanned-flyer.pdf": "no_text_layer",
        "docs/bomb.docx": "too_large",
    }
    indexed = {r["provenance"]["path"] for r in built["records"]}
    assert indexed == {"guide.md", "docs/four-pages.pdf", "docs/multicolumn.pdf", "docs/crazyones.pdf",
                       "docs/outline.pdf", "docs/writer.odt"}  # fmt: skip


def test_pdf_chunks_know_their_page(built) -> None:
    recs = by_path(built, "docs/four-pages.pdf")
    pdf = pypdf.PdfReader(PDFS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf")  # an independent reading of the pages
    pages = [" ".join(page.extract_text().replace("-\n", "").split()) for page in pdf.pages]
    seen = set()
    for rec in recs:
        meta = rec["metadata"]
        first, last = meta["page"], meta.get("page_end", meta["page"])
        assert meta["format"] == "pdf" and meta["extractor"].startswith("pypdfium2 ")
        assert 1 <= first < last <= 4 if "page_end" in meta else 1 <= first <= 4
        seen.update(range(first, last + 1))
        words = " ".join(rec["content"].split())
        # the chunk's first words are on its first page, its last words on its last page
        assert words[:60] in pages[first - 1] or first != last
        assert pages[first - 1].find(words[:40]) >= 0 or words[:40] in (pages[first - 1] + " " + pages[first])
        assert words[-40:] in pages[last - 1] or words[-40:] in (pages[last - 2] + " " + pages[last - 1])
    assert seen == {1, 2, 3, 4}
    assert [r["metadata"]["page"] for r in recs] == sorted(r["metadata"]["page"] for r in recs)
    assert any("page_end" in r["metadata"] for r in recs)  # a chunk over a page break says so


def test_two_columns_read_in_order_and_ligatures_spelled_out(built) -> None:
    text = "\n".join(r["content"] for r in by_path(built, "docs/multicolumn.pdf"))
    positions = [text.find(opening) for opening in LIPSUM_OPENINGS]
    assert -1 not in positions and positions == sorted(positions), positions
    assert "Austria 8.9 83,879 Vienna German" in text  # the table, a row per line
    crazy = "\n".join(r["content"] for r in by_path(built, "docs/crazyones.pdf"))
    assert "misfits" in crazy and "differently" in crazy
    assert not re.search("[\ufb00-\ufb06]", crazy + text)


def test_outline_titles_become_heading_paths(built) -> None:
    paths = {tuple(r["metadata"]["heading_path"]) for r in by_path(built, "docs/outline.pdf")}
    assert ("1 Foo",) in paths and ("2 Bar",) in paths


def test_odt_is_indexed(built) -> None:
    recs = by_path(built, "docs/writer.odt")
    assert recs and recs[0]["content"].startswith("Lorem ipsum dolor sit amet")
    assert recs[0]["metadata"]["format"] == "odt" and "page" not in recs[0]["metadata"]


def test_provenance_resolves_against_the_extracted_text(built) -> None:
    manifest = json.loads((built["dir"] / "manifest.json").read_text(encoding="utf-8"))
    outcome = checks.check_provenance(built["dir"], manifest)
    assert outcome.passed, outcome.failures
    rec = by_path(built, "docs/four-pages.pdf")[2]
    assert verify_chunk(rec, manifest)["status"] == "current"
    # every chunk is an exact substring of the extracted text, which is the parent document
    raw = (PDFS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf").read_bytes()
    text = extract("x.pdf", raw).text
    assert all(r["content"] in text for r in by_path(built, "docs/four-pages.pdf"))
    # a replaced PDF: the chunk is reported changed, not current
    built["repo"].commit({"docs/four-pages.pdf": (PDFS / "001-trivial/minimal-document.pdf").read_bytes()})
    assert verify_chunk(rec, manifest)["status"] == "changed"


def test_markdown_chunk_ids_are_unchanged(built) -> None:
    recs = by_path(built, "guide.md")
    want = records.chunk_id("docs", "guide.md", records.content_hash("# Guide\n\n## SNAP\n\nFood help in Oak Hill."), 0)
    assert [r["chunk_id"] for r in recs] == [want]
    assert "page" not in recs[0]["metadata"] and "format" not in recs[0]["metadata"]


def test_extractor_upgrade_reextracts_only_its_documents_and_rebuild_matches(tmp_path, make_repo, embedder,
                                                                            monkeypatch) -> None:  # fmt: skip
    from livemem.ingest import documents
    from livemem.ingest.verify import rebuild_and_compare

    repo = make_repo(
        files={
            "guide.md": GUIDE,
            "flyer.pdf": (PDFS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf").read_bytes(),
            "notes.odt": (PDFS / "002-trivial-libre-office-writer/source.odt").read_bytes(),
        }
    )
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    config = load_sources(sources)
    home = IndexHome(tmp_path / "index")
    first = build_version(config, home, embedder)
    home.publish(first.version_id, first.base_version, config.retention)
    report = rebuild_and_compare(config, home, embedder)  # verify --rebuild: from scratch gives the same version
    assert report.equal, report.comparison.lines()
    before = {r["chunk_id"]: r for r in checks.read_records(home.version_dir(home.current()))}

    original = documents.extractor_id
    monkeypatch.setattr(documents, "extractor_id", lambda fmt: original(fmt) + (".1" if fmt == "pdf" else ""))
    again = build_version(config, home, embedder)  # no new commit, but the PDF extractor changed
    assert again.staged, again.reason
    stats = again.sources["docs"]
    assert stats.changed_paths == ["flyer.pdf"] and stats.files_unchanged == 2
    manifest = again.manifest
    outcome = checks.check_index_complete(home.staged_dir(again.version_id), manifest, config,
                                          home.version_dir(home.current()))  # fmt: skip
    assert outcome.passed, outcome.failures
    home.publish(again.version_id, again.base_version, config.retention)
    after = checks.read_records(home.version_dir(home.current()))
    pdf = [r for r in after if r["provenance"]["path"] == "flyer.pdf"]
    assert pdf and all(r["metadata"]["extractor"].endswith(".1") for r in pdf)
    kept = [r for r in after if r["provenance"]["path"] != "flyer.pdf"]
    assert kept and all(r["chunk_id"] in before for r in kept)  # markdown and ODT rows carried, ids unchanged


def test_incremental_builds_of_documents_equal_from_scratch_builds(tmp_path, make_repo, embedder, monkeypatch) -> None:
    """Differential: after each change (a PDF edited, renamed, replaced by a scanned one, brought back, an extractor
    upgraded) the incremental version equals a from-scratch build of the same commits (verify --rebuild)."""
    from livemem.ingest import documents
    from livemem.ingest.verify import rebuild_and_compare

    four = (PDFS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf").read_bytes()
    repo = make_repo(files={"guide.md": GUIDE, "flyer.pdf": four,
                            "notes.odt": (PDFS / "002-trivial-libre-office-writer/source.odt").read_bytes()})  # fmt: skip
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    config = load_sources(sources)
    home = IndexHome(tmp_path / "index")
    original = documents.extractor_id
    steps = [
        ("edited", lambda: repo.commit({"flyer.pdf": (PDFS / "026-latex-multicolumn/multicolumn.pdf").read_bytes()})),
        ("renamed", lambda: repo.commit({"old/flyer.pdf": (repo.path / "flyer.pdf").read_bytes()}, ["flyer.pdf"])),
        ("scanned", lambda: repo.commit({"old/flyer.pdf": scanned_pdf()})),
        ("text again", lambda: repo.commit({"old/flyer.pdf": four})),
        ("upgrade", lambda: monkeypatch.setattr(documents, "extractor_id", lambda fmt: original(fmt) + "+")),
    ]
    skipped = {}
    for name, change in [("first", lambda: None), *steps]:
        change()
        result = build_version(config, home, embedder)
        assert result.staged, f"{name}: {result.reason}"
        home.publish(result.version_id, result.base_version, config.retention)
        skipped[name] = dict(result.sources["docs"].skipped)
        report = rebuild_and_compare(config, home, embedder)
        assert report.equal, (name, report.comparison.lines())
    assert skipped["scanned"] == {"no_text_layer": 1} and skipped["text again"] == {}
    pages = {r["metadata"].get("page") for r in checks.read_records(home.version_dir(home.current()))
             if r["provenance"]["path"] == "old/flyer.pdf"}  # fmt: skip
    assert pages == {1, 2, 3, 4}


def test_documents_in_build_worker_processes_give_the_same_version(tmp_path, make_repo, embedder,
                                                                   monkeypatch) -> None:  # fmt: skip
    """A large build reads in worker processes (livemem.ingest.read): each extracts its documents in its own bounded
    extraction worker, and the version is byte for byte the one a single process builds."""
    from livemem.ingest import read as read_module

    repo = make_repo(
        files={
            "guide.md": GUIDE,
            "a.pdf": (PDFS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf").read_bytes(),
            "b.pdf": (PDFS / "026-latex-multicolumn/multicolumn.pdf").read_bytes(),
            "c.pdf": (PDFS / "005-libreoffice-writer-password/libreoffice-writer-password.pdf").read_bytes(),
            "d.odt": (PDFS / "002-trivial-libre-office-writer/source.odt").read_bytes(),
        }
    )
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    config = load_sources(sources)
    monkeypatch.setattr(read_module, "CHUNK_BATCH_FILES", 2)  # 3 batches
    monkeypatch.setattr(read_module, "POOL_MIN_FILES", 2)
    results = {}
    for workers in ("1", "2"):
        settings = BuildSettings.defaults(workers=int(workers))
        results[workers] = build_version(config, IndexHome(tmp_path / f"index-{workers}"), embedder, settings=settings)
    one, two = results["1"], results["2"]
    assert one.manifest["segments"] == two.manifest["segments"]
    assert dict(one.sources["docs"].skipped) == dict(two.sources["docs"].skipped) == {"encrypted": 1}


def test_documents_past_the_build_extraction_budget_are_deferred_then_extracted(tmp_path, make_repo) -> None:
    """``LIVEMEM_DOCUMENT_BUDGET_S``: once a build has spent its extraction budget, its other documents are reported
    ``deferred`` (not extracted, not indexed) and the next build extracts them, even when no commit touched them."""
    from support.fuzz_documents import HashEmbedder, good_files

    files = good_files()
    documents = sorted(p for p in files if not p.endswith(".md"))
    repo = make_repo(files=files)
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    config, home, embedder = load_sources(sources), IndexHome(tmp_path / "index"), HashEmbedder()
    first = build_version(config, home, embedder, settings=BuildSettings.defaults(document_budget_s=1e-6))
    stats = first.sources["docs"]
    # the first document is extracted (some budget was left), which spends it: every other one waits
    assert stats.skipped == {"deferred": len(documents) - 1}
    deferred = {r["path"] for r in stats.skip_reports if r["reason"] == "deferred"}
    assert deferred == set(documents[1:]) and all("budget" in r["error"] for r in stats.skip_reports)
    home.publish(first.version_id, first.base_version, config.retention)
    repo.commit({"guide.md": GUIDE + "\nMore food help.\n"})  # a commit that touches none of them
    second = build_version(config, home, embedder)
    assert second.staged and dict(second.sources["docs"].skipped) == {}
    assert sorted(second.sources["docs"].changed_paths) == sorted({"guide.md", *deferred})
    home.publish(second.version_id, second.base_version, config.retention)
    indexed = {r["provenance"]["path"] for r in checks.read_records(home.version_dir(home.current()))}
    assert indexed == set(files)
    assert not build_version(config, home, embedder).staged  # nothing deferred is left: nothing to build
