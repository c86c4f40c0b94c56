"""Document extractors compared: speed (pages/s, files/s in worker processes) and fidelity (against known text).

Per format, the candidates (all non-AGPL; PyMuPDF is AGPL and out):
- PDF: ``pypdfium2`` (the product's rules on top: ``livemem.ingest.documents``), ``pypdf``, ``pdfminer.six``;
- DOCX: ``python-docx`` (the product's rules), ``mammoth`` (its markdown conversion);
- ODT: the package's ``content.xml`` read with ``lxml`` (the product's rules), ``odfpy``'s DOM;
- HTML: ``BeautifulSoup`` over ``lxml`` (the product's rules), ``trafilatura`` (markdown output).

Fidelity is measured on documents whose text is known: the ``.tex`` / ``.odt`` sources in ``../shared/data/docs/pdf``
(001: the literal text; 002: its ODT source; 026: the order of the \\lipsum paragraphs across two columns) and the
bundled example's generated documents (``examples/make_documents.py``: the text that was typeset). Words are compared
lower-cased without punctuation: ``recall`` (the source's words found, as a multiset), ``noise`` (extracted words not
in the source: running headers, footers, page numbers, navigation) and ``order`` (difflib's ratio of the two word
sequences: 1.0 is every word in reading order). Speed: every sample file extracted ``--repeat`` times by 2 worker
processes (the build's default on this 2-core machine), pages and files per second of wall time.

    .venv/bin/python -m bench.extraction               # writes bench/results/extraction.json and .md
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import platform
import re
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from importlib.metadata import version
from itertools import pairwise
from pathlib import Path

from livemem.ingest import documents
from livemem.sources.config import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"
PDFS = PROJECT_ROOT.parent / "shared" / "data" / "docs" / "pdf"
FLYERS = PROJECT_ROOT / "examples" / "corpus" / "benefits" / "flyers"
LIPSUM_OPENINGS = ["Lorem ipsum dolor sit amet, consectetuer", "Nam dui ligula", "Nulla malesuada porttitor",
                   "Quisque ullamcorper placerat", "Fusce mauris", "Suspendisse vel felis", "Sed commodo posuere",
                   "Morbi luctus"]  # fmt: skip


# --- the candidates ---------------------------------------------------------------------------------------------


def pdf_pypdfium2(raw: bytes) -> tuple[str, int]:
    out = documents.extract("x.pdf", raw)
    return out.text, len(out.pages)


def pdf_pypdf(raw: bytes) -> tuple[str, int]:
    import pypdf

    reader = pypdf.PdfReader(io.BytesIO(raw))
    return "\n\n".join(page.extract_text() for page in reader.pages), len(reader.pages)


def pdf_pdfminer(raw: bytes) -> tuple[str, int]:
    from pdfminer.high_level import extract_text

    text = extract_text(io.BytesIO(raw))
    return text, text.count("\f") or 1


def docx_python_docx(raw: bytes) -> tuple[str, int]:
    return documents.extract("x.docx", raw).text, 1


def docx_mammoth(raw: bytes) -> tuple[str, int]:
    import mammoth

    return mammoth.convert_to_markdown(io.BytesIO(raw)).value, 1


def odt_odfpy(raw: bytes) -> tuple[str, int]:
    """odfpy's DOM walked with the same rules (the product's first ODT extractor)."""
    from odf import opendocument, teletype
    from odf.namespaces import TABLENS, TEXTNS

    try:
        document = opendocument.load(io.BytesIO(raw))
    except Exception as exc:  # odfpy raises KeyError, xml.sax errors on a damaged package
        raise ValueError(f"not an OpenDocument text: {exc!r}") from exc
    blocks: list[str] = []

    def walk(node) -> None:
        for child in node.childNodes:
            qname = getattr(child, "qname", None)
            if qname == (TEXTNS, "h"):
                level = int(child.getAttrNS(TEXTNS, "outline-level") or 1)
                text = " ".join(teletype.extractText(child).split())
                if text:
                    blocks.append("#" * min(6, level) + " " + text)
            elif qname == (TEXTNS, "p"):
                text = " ".join(teletype.extractText(child).split())
                if text:
                    blocks.append(text)
            elif qname == (TEXTNS, "list-item"):
                text = " ".join(teletype.extractText(child).split())
                if text:
                    blocks.append("- " + text)
            elif qname == (TABLENS, "table-row"):
                cells = [
                    " ".join(teletype.extractText(c).split())
                    for c in child.childNodes
                    if getattr(c, "qname", None) == (TABLENS, "table-cell")
                ]
                if any(cells):
                    blocks.append(" | ".join(cells))
            elif qname is not None:
                walk(child)

    walk(document.text)
    return documents._join_blocks(blocks), 1


def odt_lxml(raw: bytes) -> tuple[str, int]:
    return documents.extract("x.odt", raw).text, 1


def html_bs4(raw: bytes) -> tuple[str, int]:
    return documents.extract("x.html", raw).text, 1


def html_trafilatura(raw: bytes) -> tuple[str, int]:
    import trafilatura

    return trafilatura.extract(raw.decode("utf-8"), output_format="markdown", include_tables=True) or "", 1


CANDIDATES = {
    "pdf": {"pypdfium2": pdf_pypdfium2, "pypdf": pdf_pypdf, "pdfminer.six": pdf_pdfminer},
    "docx": {"python-docx": docx_python_docx, "mammoth": docx_mammoth},
    "odt": {"lxml (content.xml)": odt_lxml, "odfpy": odt_odfpy},
    "html": {"beautifulsoup4": html_bs4, "trafilatura": html_trafilatura},
}
CHOSEN = {"pdf": "pypdfium2", "docx": "python-docx", "odt": "lxml (content.xml)", "html": "beautifulsoup4"}
PACKAGES = {"pypdfium2": "pypdfium2", "pypdf": "pypdf", "pdfminer.six": "pdfminer.six", "python-docx": "python-docx",
            "mammoth": "mammoth", "odfpy": "odfpy", "lxml (content.xml)": "lxml", "beautifulsoup4": "beautifulsoup4",
            "trafilatura": "trafilatura"}  # fmt: skip
LICENCES = {"pypdfium2": "Apache-2.0 / BSD-3", "pypdf": "BSD-3", "pdfminer.six": "MIT", "python-docx": "MIT",
            "mammoth": "BSD-2", "odfpy": "Apache-2.0 / GPL-2 / LGPL-2.1", "lxml (content.xml)": "BSD-3",
            "beautifulsoup4": "MIT", "trafilatura": "Apache-2.0"}  # fmt: skip


# --- known text ---------------------------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("-\n", ""))


def tex_body(path: Path) -> str:
    body = path.read_text(encoding="utf-8").split("\\begin{document}", 1)[1].split("\\end{document}", 1)[0]
    return re.sub(r"\\[a-zA-Z]+(\[[^]]*\])?(\{[^}]*\})?", " ", body)


def known_samples() -> list[tuple[str, str, bytes, str]]:
    """(format, name, document, its known text)."""
    import examples.make_documents as make

    odt_source = (PDFS / "002-trivial-libre-office-writer" / "source.odt").read_bytes()
    flyer_text = "\n".join(text for page in make.FLYER_PAGES for _, text in page).replace("-\nfit", "fit")
    pantry_text = "\n".join([make.PANTRY_TITLE, make.PANTRY_INTRO, "Pantry days",
                             *(" ".join(r) for r in make.PANTRY_ROWS), "Before you go", *make.PANTRY_TIPS])  # fmt: skip
    from bs4 import BeautifulSoup

    main = BeautifulSoup(make.SUMMER_HTML, "lxml").find("main").get_text(" ")
    return [
        ("pdf", "001 minimal-document.pdf (.tex)", (PDFS / "001-trivial/minimal-document.pdf").read_bytes(),
         tex_body(PDFS / "001-trivial/minimal-document.tex")),
        ("pdf", "002 trivial-libre-office-writer.pdf (.odt)",
         (PDFS / "002-trivial-libre-office-writer/002-trivial-libre-office-writer.pdf").read_bytes(),
         documents.extract("s.odt", odt_source).text),
        ("pdf", "flyer: winter-heating-flyer.pdf", (FLYERS / make.PDF_NAME).read_bytes(), flyer_text),
        ("docx", "flyer: food-pantry-days.docx", (FLYERS / make.DOCX_NAME).read_bytes(), pantry_text),
        ("odt", "002 source.odt", odt_source, documents.extract("s.odt", odt_source).text),
        ("html", "flyer: summer-meals.html", (FLYERS / make.HTML_NAME).read_bytes(), main),
    ]  # fmt: skip


def fidelity(extracted: str, known: str) -> dict[str, float]:
    got, want = words(extracted), words(known)
    common = sum((Counter(got) & Counter(want)).values())
    return {
        "recall": round(common / max(1, len(want)), 3),
        "noise": round((len(got) - common) / max(1, len(got)), 3),
        "order": round(difflib.SequenceMatcher(None, got, want, autojunk=False).ratio(), 3),
    }


def lipsum_order(text: str) -> str:
    flat = " ".join(text.replace("-\n", "").split())
    found = [flat.find(o) for o in LIPSUM_OPENINGS]
    in_order = sum(1 for a, b in pairwise(found) if 0 <= a < b)
    return f"{in_order}/{len(LIPSUM_OPENINGS) - 1}"


def speed_samples(fmt: str) -> list[bytes]:
    if fmt == "pdf":
        return [p.read_bytes() for p in sorted(PDFS.glob("*/*.pdf")) if "password" not in p.name] + [
            (FLYERS / "winter-heating-flyer.pdf").read_bytes()
        ]
    if fmt == "docx":
        return [(FLYERS / "food-pantry-days.docx").read_bytes()]
    if fmt == "odt":
        return [(PDFS / "002-trivial-libre-office-writer/source.odt").read_bytes()]
    return [(FLYERS / "summer-meals.html").read_bytes()]


def _run(args: tuple[str, str, list[bytes]]) -> tuple[int, int]:
    fmt, name, samples = args
    pages = 0
    for raw in samples:
        pages += CANDIDATES[fmt][name](raw)[1]
    return len(samples), pages


def speed(fmt: str, name: str, repeat: int, workers: int) -> dict[str, float]:
    samples = speed_samples(fmt)
    for raw in samples:  # warm: imports, first-call costs
        CANDIDATES[fmt][name](raw)
    jobs = [(fmt, name, samples)] * repeat
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_run, [(fmt, name, samples[:1])] * workers))  # start and import in every worker
        started = time.perf_counter()
        done = list(pool.map(_run, jobs))
        elapsed = time.perf_counter() - started
    files = sum(f for f, _ in done)
    pages = sum(p for _, p in done)
    return {"files_per_s": round(files / elapsed, 1), "pages_per_s": round(pages / elapsed, 1),
            "seconds": round(elapsed, 2), "files": files, "pages": pages}  # fmt: skip


def isolated_speed(repeat: int) -> dict[str, float]:
    """The build's path: every sample PDF through ``extract_isolated`` (one bounded worker process, a document at a
    time, the bytes and the text crossing a pipe), started once before timing."""
    samples = speed_samples("pdf")
    documents.extract_isolated("warm.pdf", samples[0])
    started = time.perf_counter()
    pages = sum(len(documents.extract_isolated("x.pdf", raw).pages) for _ in range(repeat) for raw in samples)
    elapsed = time.perf_counter() - started
    files = repeat * len(samples)
    return {"files_per_s": round(files / elapsed, 1), "pages_per_s": round(pages / elapsed, 1), "files": files}


def main(repeat: int, workers: int) -> dict:
    report: dict = {"command": f"python -m bench.extraction --repeat {repeat} --workers {workers}", "formats": {}}
    report["pdf_isolated"] = isolated_speed(repeat)
    known = known_samples()
    for fmt, candidates in CANDIDATES.items():
        entry: dict = {}
        for name in candidates:
            row: dict = {"version": version(PACKAGES[name]), "licence": LICENCES[name], "chosen": CHOSEN[fmt] == name}
            row["speed"] = speed(fmt, name, repeat, workers)
            row["fidelity"] = {}
            for sample_fmt, label, raw, text in known:
                if sample_fmt == fmt:
                    row["fidelity"][label] = fidelity(candidates[name](raw)[0], text)
            if fmt == "pdf":
                multi = (PDFS / "026-latex-multicolumn/multicolumn.pdf").read_bytes()
                extracted = candidates[name](multi)[0]
                row["two_column_order"] = lipsum_order(extracted)
                row["ligatures_left"] = len(re.findall("[\ufb00-\ufb06]", extracted + candidates[name](
                    (PDFS / "021-pdfa/crazyones-pdfa.pdf").read_bytes())[0]))  # fmt: skip
            entry[name] = row
        report["formats"][fmt] = entry
    load = os.getloadavg()
    report["machine"] = (f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                         f"load average at the end {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}")  # fmt: skip
    return report


def write(report: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "extraction.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    lines = [
        "# Document extraction: candidates per format",
        "",
        f"Command: `{report['command']}` — {report['machine']}.",
        "",
        "Speed: every sample file extracted by worker processes (wall time). Fidelity per sample: recall (share of the "
        "known words found), noise (share of extracted words not in the known text: headers, footers, page "
        "numbers, navigation), order (difflib ratio of the word sequences, 1.0 = all in reading order).",
        "",
    ]
    for fmt, entry in report["formats"].items():
        lines += [
            f"## {fmt.upper()}",
            "",
            "| extractor | version | licence | files/s | pages/s | sample | recall | noise | order |",
        ]
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for name, row in entry.items():
            mark = f"**{name}** (chosen)" if row["chosen"] else name
            samples = list(row["fidelity"].items()) or [("—", {"recall": "", "noise": "", "order": ""})]
            for i, (label, fid) in enumerate(samples):
                head = (f"| {mark} | {row['version']} | {row['licence']} | {row['speed']['files_per_s']} | "
                        f"{row['speed']['pages_per_s']} |") if i == 0 else "| | | | | |"  # fmt: skip
                lines.append(f"{head} {label} | {fid['recall']} | {fid['noise']} | {fid['order']} |")
        if fmt == "pdf":
            iso = report["pdf_isolated"]
            lines += [
                "",
                f"The build's path (`extract_isolated`: one bounded worker, one document at a time): "
                f"{iso['files_per_s']} files/s, {iso['pages_per_s']} pages/s over {iso['files']} files.",
            ]
            lines += ["", "| extractor | two-column paragraph order (multicolumn.pdf) | ligature characters left (multicolumn + crazyones) |",
                      "|---|---|---|"]  # fmt: skip
            for name, row in entry.items():
                lines.append(f"| {name} | {row['two_column_order']} | {row['ligatures_left']} |")
        lines.append("")
    (RESULTS / "extraction.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    options = parser.parse_args()
    write(main(options.repeat, options.workers))
    print((RESULTS / "extraction.md").read_text(encoding="utf-8"))
