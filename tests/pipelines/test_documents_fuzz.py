"""One bad document never stops a build (issue 49): real documents (the PDFs of ../shared/data/docs/pdf and the
bundled flyers) mutated at random with a fixed seed — bytes flipped, cut short, slices gone or repeated, object
references pointed elsewhere, a DOCX part damaged, markup nested deep — committed beside good files and the 591-byte
PDF whose page tree holds itself, and built for real: the build is staged and published, every good file is indexed,
every mutated file is indexed or listed in ``skipped_files`` (with a report naming its extractor and error), never
both, and ``index_complete`` passes. ``bench/fuzz_documents.py`` runs the same over 1,000 documents and more."""

from __future__ import annotations

from support.fuzz_documents import SELF_REFERENCING, fuzz_build, good_files, held

FUZZ_DOCUMENTS = 60


def test_mutated_documents_are_reported_and_the_good_files_publish(tmp_path) -> None:
    outcome = fuzz_build(tmp_path, FUZZ_DOCUMENTS)  # a stand-in embedder: extraction is what is tested
    assert outcome["result"].staged, outcome["result"].reason
    assert held(outcome) == []
    skipped = outcome["skipped"]
    assert skipped[SELF_REFERENCING] == "malformed"
    mutated = set(outcome["mutations"])
    assert len(mutated & set(skipped)) >= 10 and len(mutated & outcome["indexed"]) >= 10  # both kinds were drawn
    assert set(good_files()) <= outcome["indexed"]
    reports = outcome["result"].sources["docs"].skip_reports
    assert {r["path"] for r in reports} == set(skipped)  # each skipped document with its reason, extractor and error
    assert all(r["reason"] == skipped[r["path"]] and r["extractor"] and r["error"] for r in reports)
    manifest = outcome["result"].manifest
    assert manifest["changes"]["per_source"]["docs"]["skip_reports"] == reports  # the report is in the manifest too
