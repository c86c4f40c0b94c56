"""Document extraction (livemem/ingest/documents.py): structure as markdown, the PDF clean-up rules, what a chunk's
page is, and the limits a hostile document meets in the real extraction worker process."""

from __future__ import annotations

import io
import zipfile
import zlib
from pathlib import Path

import pytest

from livemem.ingest import chunking, documents
from livemem.ingest.chunking import chunk_file
from livemem.ingest.documents import DocumentError, Extracted, extract, extract_isolated
from livemem.ingest.read import _chunk_pages
from livemem.settings import BuildSettings

ROOT = Path(__file__).resolve().parents[2]
FLYERS = ROOT / "examples" / "corpus" / "benefits" / "flyers"
PDFS = ROOT.parent / "shared" / "data" / "docs" / "pdf"


def test_every_document_extension_is_chunked_as_markdown() -> None:
    assert set(documents.DOCUMENT_FORMATS) == chunking.DOCUMENT_EXTENSIONS
    assert {chunking.file_type(f"a{ext}") for ext in chunking.DOCUMENT_EXTENSIONS} == {"markdown"}


def test_docx_headings_lists_and_tables_become_markdown() -> None:
    text = extract("food-pantry-days.docx", (FLYERS / "food-pantry-days.docx").read_bytes()).text
    assert text.startswith("# Food Pantry Days in Fayette County\n\n")
    assert "\n\n## Pantry days\n\nTown | Pantry | Days | Phone\nOak Hill | Hilltop Community Pantry |" in text
    assert "## Before you go\n\n- Pantry hours change around holidays: call before you travel.\n- The Mount" in text
    paths = {tuple(c.heading_path) for c in chunk_file("x.docx", text, max_tokens=40)}
    assert ("Food Pantry Days in Fayette County", "Before you go") in paths


ODT_CONTENT = """<?xml version="1.0" encoding="UTF-8"?>
<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"
  xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"
  xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0">
<office:body><office:text>
<text:h text:outline-level="1">Council minutes</text:h>
<text:p>Present:<text:s text:c="2"/>five members.<text:note><text:note-body><text:p>a note</text:p></text:note-body></text:note></text:p>
<text:h text:outline-level="2">Votes</text:h>
<text:list><text:list-item><text:p>Budget approved</text:p></text:list-item>
<text:list-item><text:p>Park hours extended</text:p></text:list-item></text:list>
<table:table><table:table-row><table:table-cell><text:p>Item</text:p></table:table-cell>
<table:table-cell><text:p>Result</text:p></table:table-cell></table:table-row>
<table:table-row><table:table-cell><text:p>Budget</text:p></table:table-cell>
<table:table-cell><text:p>5-0</text:p></table:table-cell></table:table-row></table:table>
</office:text></office:body></office:document-content>"""


def odt(content: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        archive.writestr("content.xml", content)
    return out.getvalue()


def test_odt_headings_lists_and_tables_become_markdown() -> None:
    text = extract("minutes.odt", odt(ODT_CONTENT)).text
    assert text == (
        "# Council minutes\n\nPresent: five members.\n\n## Votes\n\n- Budget approved\n- Park hours extended"
        "\n\nItem | Result\nBudget | 5-0"
    )
    assert extract("x.odt", (PDFS / "002-trivial-libre-office-writer/source.odt").read_bytes()).text.startswith(
        "Lorem ipsum dolor sit amet, consetetur sadipscing elitr"
    )


def test_odt_entities_are_not_expanded() -> None:
    laughs = ODT_CONTENT.replace(
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>',
    ).replace("five members.", "five members &b;.")
    assert "aaaaaaaaaa" not in extract("laughs.odt", odt(laughs)).text


def test_html_keeps_main_content_and_drops_navigation() -> None:
    text = extract("summer-meals.html", (FLYERS / "summer-meals.html").read_bytes()).text
    assert text.startswith("# Summer Meals for Kids\n\nFree lunches")
    assert "## Where and when\n\nSite | Town | Lunch served\nCollins Park | Oak Hill | Mon–Fri 11:30–1:00" in text
    assert "- Questions: call the Oak Hill benefits hub at (304) 555-0142." in text  # link text kept
    for chrome in ("Contact us", "Privacy", "site menu", "Community Site"):
        assert chrome not in text


def test_html_without_main_uses_the_body() -> None:
    page = b"<html><body><nav>Menu</nav><h2>Notice</h2><p>Office closed <b>Friday</b>.</p></body></html>"
    assert extract("n.htm", page).text == "## Notice\n\nOffice closed Friday."


def test_pdf_flyer_drops_running_lines_and_rejoins_hyphens() -> None:
    doc = extract("flyer.pdf", (FLYERS / "winter-heating-flyer.pdf").read_bytes())
    assert doc.extractor.startswith("pypdfium2 ") and len(doc.pages) == 2
    assert "Living Memory volunteers" not in doc.text and "Page 1 of 2" not in doc.text
    assert "give up on the benefit." in doc.text  # "bene-" / "fit." across a line end
    assert doc.text.startswith("# Winter Heating Help in Fayette County\n")  # the title (PDF metadata)
    assert "\n## Documents to bring\n- Your most recent heating bill" in doc.text  # outline entry, bullets
    page_two = doc.text[doc.pages[1] :]
    assert page_two.startswith("## Documents to bring") and doc.page_of(doc.pages[1]) == 2


def test_running_line_rules() -> None:
    bodies = [["Apply in person.", "Bring ID."], ["Call the hub.", "Ask for Ann."], ["Open Monday.", "Closed Friday."]]
    pages = [["ACME report", *body, f"Page {i} of 3"] for i, body in enumerate(bodies, 1)]
    assert documents._drop_running_lines(pages) == bodies
    # a line on the edge of only one page in three stays
    pages[1][0] = "Other heading"
    assert documents._drop_running_lines(pages)[1] == ["Other heading", *bodies[1]]
    one = [["Title", "Body", "7"]]
    assert documents._drop_running_lines(one) == [["Title", "Body"]]  # a bare page number goes, one page or many


def test_page_lines_spell_out_ligatures_and_rejoin_soft_hyphens() -> None:
    assert documents._pdf_page_lines("The ﬁrst e\ufb03cient\r\nbene\x02fit ﬂow") == [
        "The first efficient",
        "benefit flow",
    ]


def test_chunk_pages_and_ranges() -> None:
    text = "First page words.\n\nSecond page starts here and\n\ncontinues on the third page."
    doc = Extracted(text, "pypdfium2 test", (0, 19, 48))
    chunks = [chunking.Chunk("First page words."), chunking.Chunk(text[19:].strip())]
    pages = _chunk_pages(text, chunks, doc)
    assert pages[0] == {"format": "pdf", "extractor": "pypdfium2 test", "page": 1}
    assert pages[1] == {"format": "pdf", "extractor": "pypdfium2 test", "page": 2, "page_end": 3}


def test_encrypted_malformed_and_scanned_pdfs_name_their_reason() -> None:
    with pytest.raises(DocumentError) as caught:
        extract("p.pdf", (PDFS / "005-libreoffice-writer-password/libreoffice-writer-password.pdf").read_bytes())
    assert caught.value.reason == "encrypted"
    with pytest.raises(DocumentError) as caught:
        extract("p.pdf", b"%PDF-1.4\nnot really")
    assert caught.value.reason == "malformed"
    with pytest.raises(DocumentError) as caught:
        extract("p.docx", b"PK\x03\x04 broken zip")
    assert caught.value.reason == "malformed"


def test_zip_bomb_is_refused_before_parsing() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("content.xml", "w") as part:
        for _ in range(documents.MAX_EXPANDED_BYTES // (1 << 20) + 1):
            part.write(b"\0" * (1 << 20))
    assert len(out.getvalue()) < 1_000_000
    with pytest.raises(DocumentError) as caught:
        extract("bomb.odt", out.getvalue())
    assert caught.value.reason == "too_large" and "expand" in str(caught.value)


def pdf_with_content(content: bytes) -> bytes:
    """A one-page PDF whose page content stream is ``content`` (Flate-compressed)."""
    data = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


def test_decompression_bomb_pdf_meets_the_worker_memory_limit() -> None:
    bomb = pdf_with_content(b"BT /F1 12 Tf 72 720 Td (Hello) Tj ET\n" + b" " * (150 << 20))
    assert len(bomb) < 400_000
    limits = BuildSettings.defaults(document_memory_mb=64)  # a worker started under this limit
    try:
        with pytest.raises(DocumentError) as caught:
            extract_isolated("bomb.pdf", bomb, limits)
        assert caught.value.reason == "too_large"
        small = pdf_with_content(b"BT /F1 12 Tf 72 720 Td (Hello flyer) Tj ET\n")
        assert extract_isolated("ok.pdf", small, limits).text == "Hello flyer"  # the next document gets a fresh worker
    finally:
        documents._discard_pool()


def test_a_document_over_its_deadline_is_reported_and_the_worker_ended() -> None:
    raw = (PDFS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf").read_bytes()
    documents._discard_pool()
    try:
        with pytest.raises(DocumentError) as caught:
            extract_isolated("slow.pdf", raw, BuildSettings.defaults(document_timeout=0.001))
        assert caught.value.reason == "timeout" and documents._POOL is None
        assert len(extract_isolated("slow.pdf", raw, BuildSettings.defaults(document_timeout=60)).pages) == 4
    finally:
        documents._discard_pool()


def test_the_591_byte_pdf_whose_page_tree_holds_itself_is_malformed_not_an_error(monkeypatch) -> None:
    """Regression (issue 49): pdfium opens it and raises ``PdfiumError: Failed to load page.`` on its second page,
    which ``_pdf`` let through, so one file failed the whole build. Any error reading a page is the file's report."""
    from support.fuzz_documents import self_referencing_pdf

    raw = self_referencing_pdf()
    assert len(raw) == 591
    with pytest.raises(DocumentError) as caught:
        extract("loop.pdf", raw)
    assert caught.value.reason == "malformed" and "Failed to load page" in caught.value.detail
    try:
        with pytest.raises(DocumentError) as isolated:
            extract_isolated("loop.pdf", raw)  # the same in the worker process the build extracts in
        assert isolated.value.reason == "malformed"
    finally:
        documents._discard_pool()

    def broken_rule(pages):
        raise IndexError("a rule's bug")

    monkeypatch.setattr(documents, "_drop_running_lines", broken_rule)  # any other exception: extraction_failed
    with pytest.raises(DocumentError) as other:
        extract("flyer.pdf", (FLYERS / "winter-heating-flyer.pdf").read_bytes())
    assert other.value.reason == "extraction_failed" and other.value.detail == "IndexError: a rule's bug"


def test_right_to_left_words_read_in_logical_order() -> None:
    """pdfium gives Arabic in drawing order (reversed); the extracted text has the word as it is written."""
    text = extract("habibi.pdf", (PDFS / "015-arabic/habibi.pdf").read_bytes()).text
    word = "\u062d\u064e\u0628\u064a\u0628\u064a"  # habibi in Arabic script, with its fatha
    assert text.count(word) == 2 and word[::-1] not in text and "habibi" in text
    assert documents._logical_order("see \u0645\u0643\u064a\u0644\u0639 12 \u0645\u0644\u0633 now") == (
        "see \u0633\u0644\u0645 12 \u0639\u0644\u064a\u0643\u0645 now"  # the run reversed, its number kept
    )


def _extract_in_child(raw: bytes, queue) -> None:  # a spawned process: multiprocessing.parent_process() is set
    from livemem.ingest.documents import DocumentError as Error
    from livemem.ingest.documents import extract_isolated as isolated

    try:
        isolated("bomb.pdf", raw, BuildSettings.defaults(document_memory_mb=64))
        outcome: tuple = ("extracted",)
    except Error as exc:
        outcome = ("refused", exc.reason)
    small = pdf_with_content(b"BT /F1 12 Tf 72 720 Td (Hello flyer) Tj ET\n")
    queue.put((*outcome, isolated("ok.pdf", small).text))
    # the process then ends: its extraction worker must not keep it from exiting


def test_the_memory_limit_holds_in_a_multiprocessing_child_too() -> None:
    """A Dagster multiprocess step or a build worker (both started by multiprocessing) extracts in a worker of its
    own too: a bomb is refused ``too_large`` there, the next document is extracted, and the process then exits
    (it joins its live children when it ends: the extraction worker is ended first, not waited for forever)."""
    import multiprocessing

    bomb = pdf_with_content(b"BT /F1 12 Tf 72 720 Td (Hello) Tj ET\n" + b" " * (150 << 20))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_extract_in_child, args=(bomb, queue))
    child.start()
    try:
        assert queue.get(timeout=120) == ("refused", "too_large", "Hello flyer")
        child.join(60)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
