"""Documents (PDF, DOCX, ODT, HTML) turned into markdown-ish text the markdown chunker splits by headings, with the
start of each PDF page, so a chunk knows its page (docs/documents.md).

- PDF (``pypdfium2``, Apache-2.0/BSD): the text layer of each page in reading order (two-column pages column by
  column), soft hyphens at line ends rejoined (``taki-`` / ``mata`` → ``takimata``), ligatures (ﬁ, ﬂ, ﬀ …) spelled
  out, lines repeated at the top or bottom of 60% of the pages or more (running headers, footers, ``Page 2 of 9``)
  and bare page numbers dropped, outline
  (bookmark) titles made ``##`` headings and the first line ``#`` when it is the document's title, bullets ``- ``; pages are joined by a blank line and ``Extracted.pages`` holds the offset
  where each starts. Form field values and link text are part of the text layer pdfium reads.
- DOCX (``python-docx``, MIT): headings (``Title`` as ``#``, ``Heading n`` as ``n + 1`` marks), list paragraphs as
  ``- `` items, tables as ``cell | cell`` rows, in body order.
- ODT (``content.xml`` read with ``lxml``, BSD-3; no entities resolved): ``text:h`` with its outline level,
  paragraphs, list items, table rows.
- HTML (``BeautifulSoup`` over ``lxml``, MIT/BSD): the main content (``<main>`` or ``<article>`` when there is one,
  else ``<body>``) without navigation, headers, footers, scripts and forms' chrome; ``h1``–``h6`` as ``#`` lines,
  list items, table rows, link text kept.

A document that cannot be turned into text raises ``DocumentError`` with a short ``reason`` reported in
``skipped_files``: ``encrypted``, ``malformed`` (also any ``PdfiumError`` while a page, the metadata or the outline
is read: a page tree that contains itself), ``no_text_layer`` (a scanned document: OCR is out of scope),
``too_large`` (over ``DOCUMENT_MAX_BYTES``, a zip whose parts expand past ``MAX_EXPANDED_BYTES`` — a decompression
bomb — or a worker that ran out of its memory limit), ``timeout`` and ``extraction_failed`` (any other exception a
library or a rule raised on the file: never the build's) and ``extractor_missing`` (the format's library is not
installed: the ``documents`` extra). ``extract_isolated`` runs the extraction in a worker
process with a memory limit and a deadline, so a hostile file costs at most that.
"""

from __future__ import annotations

import importlib.util
import io
import logging
import multiprocessing
import multiprocessing.util
import re
import threading
import unicodedata
import zipfile
from bisect import bisect_right
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import PurePosixPath

from livemem.settings import BuildSettings

log = logging.getLogger(__name__)

# bump when the rules below change: with the library's version it names the extractor (``extractor_id``), which is
# part of every document's provenance and of the build's plan (a new extractor re-extracts only its own formats)
EXTRACTION_RULES = 2  # 2: right-to-left runs of a PDF line in logical order
DOCUMENT_FORMATS = {".pdf": "pdf", ".docx": "docx", ".odt": "odt", ".html": "html", ".htm": "html"}
LIBRARIES = {"pdf": "pypdfium2", "docx": "python-docx", "odt": "lxml", "html": "beautifulsoup4"}
# the modules each format imports: the ``documents`` extra (``pip install 'living-memory[documents]'``)
MODULES = {"pdf": ("pypdfium2",), "docx": ("docx",), "odt": ("lxml",), "html": ("bs4", "lxml")}
EXTRA = "pip install 'living-memory[documents]'"
DOCUMENT_MAX_BYTES = 50_000_000  # a bigger document is reported (``too_large``), never parsed
MAX_EXPANDED_BYTES = 200_000_000  # DOCX / ODT: the zip's parts may expand to this much, no more
TIMEOUT_ENV = "LIVEMEM_DOCUMENT_TIMEOUT"  # seconds one document may take to extract (default 60)
MEMORY_ENV = "LIVEMEM_DOCUMENT_MEMORY_MB"  # address space the extraction worker may add (default 2048)


class DocumentError(Exception):
    """A document that cannot be turned into text; ``reason`` is its ``skipped_files`` reason."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Extracted:
    """A document's text (markdown-ish: ``#`` headings, ``- `` items, ``a | b`` table rows), the offset where each
    page starts (PDF; empty for other formats) and the extractor that made it."""

    text: str
    extractor: str
    pages: tuple[int, ...] = field(default=())

    def page_of(self, offset: int) -> int | None:
        """The 1-based page the text at ``offset`` is on (None without pages)."""
        return bisect_right(self.pages, offset) if self.pages else None


def document_format(path: str) -> str | None:
    """``pdf``, ``docx``, ``odt`` or ``html`` for a document's path, else None."""
    return DOCUMENT_FORMATS.get(PurePosixPath(path).suffix.lower())


def installed(fmt: str) -> bool:
    """Whether the libraries that extract ``fmt`` are installed (the ``documents`` extra)."""
    for module in MODULES[fmt]:
        try:
            if importlib.util.find_spec(module) is None:
                return False
        except (ImportError, ValueError):  # a broken or blocked installation counts as none
            return False
    return True


def extractor_id(fmt: str) -> str:
    """The library and its version and the rules' version that extract ``fmt``: ``pypdfium2 5.15.2 r1``
    (``pypdfium2 not-installed r1`` without the ``documents`` extra: installing it re-extracts those files)."""
    lib = LIBRARIES[fmt]
    try:
        found = package_version(lib) if installed(fmt) else "not-installed"
    except PackageNotFoundError:
        found = "not-installed"
    return f"{lib} {found} r{EXTRACTION_RULES}"


def extractors() -> dict[str, str]:
    """``extractor_id`` of every format."""
    return {fmt: extractor_id(fmt) for fmt in sorted(set(DOCUMENT_FORMATS.values()))}


def extract(path: str, raw: bytes) -> Extracted:
    """The text of the document ``raw`` named ``path`` (in this process; ``extract_isolated`` bounds it)."""
    fmt = document_format(path)
    if fmt is None:
        raise ValueError(f"{path} is not a document ({', '.join(DOCUMENT_FORMATS)})")
    if len(raw) > DOCUMENT_MAX_BYTES:
        raise DocumentError("too_large", f"{len(raw)} bytes, over {DOCUMENT_MAX_BYTES}")
    if not installed(fmt):
        raise DocumentError("extractor_missing", f"{LIBRARIES[fmt]} is not installed: {EXTRA}")
    try:
        out = _EXTRACT[fmt](raw)
    except (DocumentError, MemoryError):
        raise
    except Exception as exc:  # whatever else one file makes a library (or a rule) raise is that file's report
        raise DocumentError(_failure_reason(fmt, exc), f"{type(exc).__name__}: {exc}") from exc
    text, pages = out if isinstance(out, tuple) else (out, ())
    if not text.strip():
        raise DocumentError("no_text_layer" if fmt == "pdf" else "empty", "no text found")
    return Extracted(text, extractor_id(fmt), tuple(pages))


def _failure_reason(fmt: str, exc: Exception) -> str:
    """``malformed`` for pdfium's own error (a page, the metadata or the outline it cannot load), else
    ``extraction_failed``."""
    if fmt == "pdf" and type(exc).__name__ == "PdfiumError":
        return "malformed"
    return "extraction_failed"


# --- PDF ---------------------------------------------------------------------------------------------------------

_LIGATURES = {c: unicodedata.normalize("NFKC", c) for c in "ﬀﬁﬂﬃﬄﬅﬆ"}
_LIGATURE_TABLE = str.maketrans(_LIGATURES)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffe\uffff]")
_DIGITS = re.compile(r"\d+")
_BULLET = re.compile(r"^\s*[•◦▪‣●○■–]\s+")  # a typeset list item: a markdown one


def _pdf(raw: bytes) -> tuple[str, list[int]]:
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(raw)
    except pdfium.PdfiumError as exc:
        message = str(exc)
        if "password" in message.lower():
            raise DocumentError("encrypted", "the PDF needs a password") from exc
        raise DocumentError("malformed", message) from exc
    try:
        pages = []
        for i in range(len(doc)):
            page = doc[i]
            textpage = page.get_textpage()
            pages.append(_pdf_page_lines(textpage.get_text_bounded()))
            textpage.close()
            page.close()
        title = (doc.get_metadata_dict().get("Title") or "").strip()
        toc = []
        for item in doc.get_toc(max_depth=6):
            dest = item.get_dest()
            index = dest.get_index() if dest is not None else None
            if index is not None:
                toc.append((item.get_title().strip(), index, item.level))
    finally:
        doc.close()
    pages = _drop_running_lines(pages)
    _mark_outline(pages, toc)
    _mark_title(pages, title)
    parts: list[str] = []
    starts: list[int] = []
    offset = 0
    for lines in pages:
        starts.append(offset)
        body = "\n".join(lines).strip("\n")
        parts.append(body)
        offset += len(body) + 2
    return "\n\n".join(parts), starts


def _pdf_page_lines(text: str) -> list[str]:
    """One page's lines: hyphenated words rejoined (pdfium marks a hyphen it put at a line end as ``\\x02`` and
    removes the line break), ligatures spelled out, control characters gone."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\x02\n", "").replace("\x02", "")
    text = _CONTROL.sub("", text.translate(_LIGATURE_TABLE))
    return [_BULLET.sub("- ", _logical_order(line.rstrip()), count=1) for line in text.split("\n")]


# Hebrew, Arabic, Syriac, Thaana, N'Ko and their presentation forms; a run of them may hold marks, spaces, digits
_RTL = "\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc"
_RTL_RUN = re.compile(f"[{_RTL}](?:[{_RTL}\\s\\d\u064b-\u065f\u0670]*[{_RTL}\u064b-\u065f\u0670])?")
_DIGITS = re.compile(r"\d+")


def _logical_order(line: str) -> str:
    """pdfium reads a line left to right as drawn, so right-to-left words come out reversed (visual order):
    each run of right-to-left letters (with the spaces, marks and digits inside it) is put back in logical order;
    numbers inside a run keep their own left-to-right order. A line without such letters is unchanged."""
    if not re.search(f"[{_RTL}]", line):
        return line

    def logical(match: re.Match[str]) -> str:
        return _DIGITS.sub(lambda digits: digits.group()[::-1], match.group()[::-1])

    return _RTL_RUN.sub(logical, line)


def _drop_running_lines(pages: list[list[str]]) -> list[list[str]]:
    """Without the lines repeated at the top or bottom of most pages (digits compared as one: ``Page 3 of 9``), and
    without a bare page number as a page's first or last line."""

    def edges(lines: list[str]) -> list[int]:
        filled = [i for i, line in enumerate(lines) if line.strip()]
        return sorted({*filled[:2], *filled[-2:]})

    def key(line: str) -> str:
        return _DIGITS.sub("#", line.strip().lower())

    counts: Counter[str] = Counter()
    for lines in pages:
        counts.update({key(lines[i]) for i in edges(lines)})
    need = max(2, -(-len(pages) * 3 // 5))  # on at least 60% of the pages, and on two at least
    running = {k for k, n in counts.items() if len(pages) >= 2 and n >= need}
    out = []
    for lines in pages:
        drop = {i for i in edges(lines) if key(lines[i]) in running}
        filled = [i for i, line in enumerate(lines) if line.strip() and i not in drop]
        for i in filled[:1] + filled[-1:]:
            if lines[i].strip().isdigit():
                drop.add(i)
        out.append([line for i, line in enumerate(lines) if i not in drop])
    return out


def _mark_title(pages: list[list[str]], title: str) -> None:
    """The first line of the first page becomes the ``#`` heading when it is the document's title (metadata)."""
    first = next((i for i, line in enumerate(pages[0]) if line.strip()), None) if pages else None
    if title and first is not None and " ".join(pages[0][first].split()).lower() == " ".join(title.split()).lower():
        pages[0][first] = "# " + pages[0][first].strip()


def _mark_outline(pages: list[list[str]], toc: list[tuple[str, int, int]]) -> None:
    """Each outline (bookmark) title found as a line of its page becomes a markdown heading of its level + 2
    (``##``: the document's title is above the outline); a numbered line (``1 Foo``) matches the title ``Foo``."""
    for title, index, level in toc:
        if not title or not 0 <= index < len(pages):
            continue
        want = title.lower()
        for i, line in enumerate(pages[index]):
            bare = line.strip().lower()
            if bare == want or re.fullmatch(r"[\d.]+\s+" + re.escape(want), bare):
                pages[index][i] = "#" * min(6, level + 2) + " " + line.strip()
                break


# --- DOCX --------------------------------------------------------------------------------------------------------


def _check_zip(raw: bytes) -> zipfile.ZipFile:
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile as exc:
        raise DocumentError("malformed", f"not a zip package: {exc}") from exc
    expanded = sum(info.file_size for info in archive.infolist())
    if expanded > MAX_EXPANDED_BYTES:
        raise DocumentError("too_large", f"its parts expand to {expanded} bytes, over {MAX_EXPANDED_BYTES}")
    return archive


def _docx(raw: bytes) -> str:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    _check_zip(raw)
    try:
        document = docx.Document(io.BytesIO(raw))
    except Exception as exc:  # python-docx raises KeyError, ValueError, lxml errors on a damaged package
        raise DocumentError("malformed", f"not a Word document: {exc!r}") from exc
    blocks: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            text = " ".join(item.text.split())
            if not text:
                continue
            style = (item.style.name if item.style is not None else "") or ""
            level = _heading_level(style)
            if level:
                blocks.append("#" * level + " " + text)
            elif style.startswith("List") or (item._p.pPr is not None and item._p.pPr.numPr is not None):
                blocks.append("- " + text)
            else:
                blocks.append(text)
        elif isinstance(item, Table):
            rows = [" | ".join(" ".join(cell.text.split()) for cell in row.cells) for row in item.rows]
            blocks.append("\n".join(r for r in rows if r.strip(" |")))
    return _join_blocks(blocks)


def _heading_level(style: str) -> int:
    """``Title`` is the document's ``#``; ``Heading n`` is under it (``n + 1`` marks)."""
    if style == "Title":
        return 1
    found = re.fullmatch(r"Heading (\d)", style)
    return min(6, int(found.group(1)) + 1) if found else 0


def _join_blocks(blocks: list[str]) -> str:
    """Blocks separated by blank lines; consecutive list items stay one block."""
    out: list[str] = []
    for block in blocks:
        if out and block.startswith("- ") and out[-1].split("\n")[-1].startswith("- "):
            out[-1] += "\n" + block
        else:
            out.append(block)
    return "\n\n".join(out)


# --- ODT ---------------------------------------------------------------------------------------------------------


_ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_ODF_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_ODF_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"


def _odt(raw: bytes) -> str:
    """An ODT's ``content.xml`` read with lxml (no entities resolved, nothing fetched): bench/extraction.py measured
    it several times faster than odfpy's DOM for the same text (bench/results/extraction.md)."""
    from lxml import etree

    archive = _check_zip(raw)
    try:
        content = archive.read("content.xml")
        parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, load_dtd=False)
        root = etree.fromstring(content, parser)
    except (KeyError, zipfile.BadZipFile, etree.XMLSyntaxError) as exc:
        raise DocumentError("malformed", f"not an OpenDocument text: {exc!r}") from exc
    body = root.find(f"{{{_ODF_OFFICE}}}body/{{{_ODF_OFFICE}}}text")
    if body is None:
        raise DocumentError("malformed", "no office:text body")
    blocks: list[str] = []
    _odf_blocks(body, blocks, in_list=False)
    return _join_blocks(blocks)


def _odf_blocks(node, blocks: list[str], in_list: bool) -> None:
    for child in node:
        tag = child.tag if isinstance(child.tag, str) else ""
        if tag == f"{{{_ODF_TEXT}}}h":
            text = _odf_text(child)
            if text:
                level = int(child.get(f"{{{_ODF_TEXT}}}outline-level") or 1)
                blocks.append("#" * min(6, max(1, level)) + " " + text)
        elif tag == f"{{{_ODF_TEXT}}}p":
            text = _odf_text(child)
            if text:
                blocks.append(("- " if in_list else "") + text)
        elif tag == f"{{{_ODF_TEXT}}}list":
            _odf_blocks(child, blocks, in_list=True)
        elif tag == f"{{{_ODF_TABLE}}}table":
            rows = []
            for row in child.iter(f"{{{_ODF_TABLE}}}table-row"):
                cells = [_odf_text(cell) for cell in row if cell.tag == f"{{{_ODF_TABLE}}}table-cell"]
                if any(cells):
                    rows.append(" | ".join(cells))
            if rows:
                blocks.append("\n".join(rows))
        elif tag and not tag.endswith(("}sequence-decls", "}tracked-changes", "}note-citation")):
            _odf_blocks(child, blocks, in_list)


def _odf_text(element) -> str:
    """An element's text with ``text:s`` (spaces), tabs and line breaks as whitespace, whitespace collapsed."""
    parts: list[str] = []

    def walk(el) -> None:
        if el.text:
            parts.append(el.text)
        for child in el:
            tag = child.tag if isinstance(child.tag, str) else ""
            if tag in (f"{{{_ODF_TEXT}}}s", f"{{{_ODF_TEXT}}}tab", f"{{{_ODF_TEXT}}}line-break"):
                parts.append(" ")
            elif tag != f"{{{_ODF_TEXT}}}note":  # a footnote's text is not the sentence's
                walk(child)
            if child.tail:
                parts.append(child.tail)

    walk(element)
    return " ".join("".join(parts).split())


# --- HTML --------------------------------------------------------------------------------------------------------

_HTML_CHROME = ("script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "svg", "iframe")
_SPACE_BEFORE_PUNCTUATION = re.compile(r" ([.,;:!?)])")  # "<a>(304) 555-0142</a>." read as "... ." otherwise
_HTML_BLOCKS = {"p", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "dt", "dd", "figcaption"}


def _html(raw: bytes) -> str:
    from bs4 import BeautifulSoup

    try:
        soup = BeautifulSoup(raw, "lxml")
    except Exception as exc:
        raise DocumentError("malformed", f"not HTML: {exc!r}") from exc
    root = soup.find("main") or soup.find("article") or soup.body or soup
    for tag in root.find_all(_HTML_CHROME):
        tag.decompose()
    blocks: list[str] = []
    for tag in root.find_all(_HTML_BLOCKS):
        if tag.find_parent(_HTML_BLOCKS - {"blockquote"}) is not None:
            continue  # its text is its block's
        if tag.name == "tr":
            cells = [" ".join(c.get_text(" ").split()) for c in tag.find_all(["td", "th"])]
            text = " | ".join(cells) if any(cells) else ""
        else:
            text = _SPACE_BEFORE_PUNCTUATION.sub(r"\1", " ".join(tag.get_text(" ").split()))
        if not text:
            continue
        if tag.name[0] == "h" and tag.name[1:].isdigit():
            text = "#" * int(tag.name[1]) + " " + text
        elif tag.name == "li":
            text = "- " + text
        blocks.append(text)
    if not blocks:  # text without block elements
        text = " ".join(root.get_text(" ").split())
        blocks = [text] if text else []
    out: list[str] = []
    for block in blocks:  # table rows stay one block, like list items
        if out and " | " in block and " | " in out[-1].split("\n")[-1] and not block.startswith("#"):
            out[-1] += "\n" + block
        else:
            out.append(block)
    return _join_blocks(out)


_EXTRACT = {"pdf": _pdf, "docx": _docx, "odt": _odt, "html": _html}


# --- bounded extraction -------------------------------------------------------------------------------------------

_POOL: ProcessPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_POOL_MEMORY_MB: int | None = None  # the memory limit the worker of ``_POOL`` was started under


def _limits(settings: BuildSettings | None) -> tuple[float, int]:
    settings = settings or BuildSettings.defaults()
    return settings.document_timeout, settings.document_memory_mb


def _limit_memory(extra_mb: int) -> None:
    """A worker's initializer: its address space may grow by ``extra_mb`` MiB, no more (a decompression bomb then
    fails with MemoryError or ends the worker, never the build)."""
    import resource

    try:
        with open("/proc/self/status", encoding="ascii") as status:
            size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return
    limit = size + extra_mb * 1024 * 1024
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _pool(memory_mb: int) -> ProcessPoolExecutor:
    global _POOL, _POOL_MEMORY_MB
    if _POOL is not None and memory_mb != _POOL_MEMORY_MB:
        _discard_pool()  # a worker under another memory limit: the next one gets this one
    with _POOL_LOCK:
        if _POOL is None:
            _POOL_MEMORY_MB = memory_mb
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["livemem.ingest.read"])
            _POOL = ProcessPoolExecutor(1, mp_context=context, initializer=_limit_memory, initargs=(memory_mb,))
            # A process started by multiprocessing (a build worker, a Dagster multiprocess step) joins its live
            # children when it ends, before the executor's own exit hook could stop this worker: it would wait
            # forever. Finalizers of priority >= 0 run first, so the worker is ended there.
            multiprocessing.util.Finalize(None, _discard_pool, exitpriority=10)
        return _POOL


def _discard_pool() -> None:
    """End the extraction worker (one that runs past its deadline is killed) so the next document gets a fresh one."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is None:
        return
    for process in list(getattr(pool, "_processes", {}).values()):
        if process.is_alive():
            process.kill()
    pool.shutdown(wait=True, cancel_futures=True)


def _extract_text(path: str, raw: bytes) -> Extracted:
    try:
        return extract(path, raw)
    except MemoryError as exc:
        raise DocumentError("too_large", "ran out of its memory limit") from exc


def extract_isolated(path: str, raw: bytes, settings: BuildSettings | None = None) -> Extracted:
    """``extract`` in a worker process with at most ``document_memory_mb`` more address space and
    ``document_timeout`` seconds (``settings``, the build section: ``LIVEMEM_DOCUMENT_MEMORY_MB``,
    ``LIVEMEM_DOCUMENT_TIMEOUT``; None: their defaults); either exceeded raises ``DocumentError`` (``too_large``,
    ``timeout``)."""
    fmt = document_format(path)
    if fmt is None:
        raise ValueError(f"{path} is not a document")
    if len(raw) > DOCUMENT_MAX_BYTES:
        raise DocumentError("too_large", f"{len(raw)} bytes, over {DOCUMENT_MAX_BYTES}")
    if not installed(fmt):  # judged here, where the build's extractor id was: the worker is this interpreter
        raise DocumentError("extractor_missing", f"{LIBRARIES[fmt]} is not installed: {EXTRA}")
    timeout, memory_mb = _limits(settings)
    future = _pool(memory_mb).submit(_extract_text, path, raw)
    try:
        # named by this process's extractor id: the one its build's plan compared with the base
        return replace(future.result(timeout=timeout), extractor=extractor_id(document_format(path) or ""))
    except FutureTimeout as exc:
        _discard_pool()
        raise DocumentError("timeout", f"extraction took over {timeout:g} s") from exc
    except BrokenProcessPool as exc:
        _discard_pool()
        raise DocumentError("too_large", "the extraction worker died (out of its memory limit, or killed)") from exc
    except DocumentError:
        raise
    except Exception as exc:  # an error the worker could not hand back as a DocumentError: still this file's
        raise DocumentError("extraction_failed", f"{type(exc).__name__}: {exc}") from exc


def blob_text(path: str, raw: bytes) -> str:
    """The text a file's chunks are substrings of: a document's extracted text, any other file decoded."""
    if document_format(path) is not None:
        try:
            return extract_isolated(path, raw).text
        except DocumentError:
            return ""
    return raw.decode("utf-8", errors="replace")
