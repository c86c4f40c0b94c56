"""Writes the bundled example's documents (examples/corpus/benefits/flyers/): a two-page PDF flyer, a Word document
and a web page, with the text below, byte for byte the same on every run (fixed dates, no random ids), so the
committed files can be regenerated and checked:

    .venv/bin/python examples/make_documents.py          # writes the three files
    .venv/bin/python examples/make_documents.py --check  # exit 1 when a committed file differs from what it writes

The facts agree with examples/corpus/benefits/fayette-county.md (addresses and phones are fictional). The PDF has
what real flyers have and extraction must cope with: a running header and a "Page n of 2" footer on every page
(dropped), outline bookmarks (headings), a list and a table, and a word hyphenated at a line end (rejoined).
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "corpus" / "benefits" / "flyers"
PDF_NAME = "winter-heating-flyer.pdf"
DOCX_NAME = "food-pantry-days.docx"
HTML_NAME = "summer-meals.html"
FIXED_ZIP_TIME = (2026, 9, 1, 0, 0, 0)

# page 1 then page 2 of the flyer: (kind, text) with kind "title", "h" (an outline entry), "p", "li" or "row"
FLYER_PAGES = [
    [
        ("title", "Winter Heating Help in Fayette County"),
        (
            "p",
            "LIEAP, the Low Income Energy Assistance Program, helps pay winter heating costs: electric, natural gas,",
        ),
        ("p", "propane, fuel oil, coal or wood. Payments usually go straight to your utility or fuel dealer."),
        ("h", "When LIEAP opens"),
        ("p", "LIEAP opens for a limited window in winter and closes early if funds run out. Apply as soon as it"),
        ("p", "opens: volunteers at the Oak Hill benefits hub hold LIEAP application days every Wednesday."),
        ("h", "Who can apply"),
        ("p", "Households within the income limits who pay for their own heat. Renters whose heat is in the rent may"),
        ("p", "still qualify in some cases; ask the hub to check your situation before you give up on the bene-"),
        ("p", "fit. The first step is a short conversation."),
    ],
    [
        ("h", "Documents to bring"),
        ("li", "Your most recent heating bill or fuel receipt"),
        ("li", "Proof of income for everyone in the household"),
        ("li", "Social Security numbers for household members"),
        ("h", "Where to get help"),
        ("row", "Oak Hill benefits hub | 210 Main Street, Oak Hill | (304) 555-0142"),
        ("row", "Montgomery library branch | applications at the front desk | (304) 555-0148"),
        ("h", "Emergency heating help"),
        ("p", "If your heat has been shut off or you have less than a week of fuel, ask about Emergency LIEAP."),
        ("p", "Call the hub at (304) 555-0142 and say it is a heating emergency."),
    ],
]
RUNNING_HEADER = "Living Memory volunteers · Fayette County flyer"

PANTRY_TITLE = "Food Pantry Days in Fayette County"
PANTRY_INTRO = (
    "Food pantries give free groceries, with no application at most sites. Bring a bag and, where asked, proof of a "
    "Fayette County address."
)
PANTRY_ROWS = [
    ("Town", "Pantry", "Days", "Phone"),
    ("Oak Hill", "Hilltop Community Pantry", "Tue & Thu 10–2", "(304) 555-0150"),
    ("Fayetteville", "Gorge Neighbours Pantry", "Wed 3–6 pm", "(304) 555-0151"),
    ("Montgomery", "Riverside Church Pantry", "1st & 3rd Sat 9–noon", "(304) 555-0152"),
    ("Mount Hope", "Mount Hope Mission Pantry", "Mon 11–3", "(304) 555-0153"),
]
PANTRY_TIPS = [
    "Pantry hours change around holidays: call before you travel.",
    "The Mount Hope pantry also runs a backpack program for school-age children.",
    "SNAP and WIC are separate: a pantry visit does not affect them.",
]

SUMMER_HTML = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Summer Meals for Kids | Fayette County</title>
<style>nav a { margin-right: 1em }</style><script>console.log("site menu")</script></head>
<body>
<header><p>Fayette County Community Site</p>
<nav><a href="/">Home</a> <a href="/news">News</a> <a href="/contact">Contact us</a></nav></header>
<main>
<h1>Summer Meals for Kids</h1>
<p>Free lunches for children and teens aged 18 and under, at parks and libraries from June to August. No
application, no ID and no sign-up: children just come and eat.</p>
<h2>Where and when</h2>
<table>
<tr><th>Site</th><th>Town</th><th>Lunch served</th></tr>
<tr><td>Collins Park</td><td>Oak Hill</td><td>Mon–Fri 11:30–1:00</td></tr>
<tr><td>Fayetteville library</td><td>Fayetteville</td><td>Mon–Thu noon–1:00</td></tr>
<tr><td>Montgomery riverfront shelter</td><td>Montgomery</td><td>Tue &amp; Thu 11:30–12:30</td></tr>
</table>
<h2>Good to know</h2>
<ul>
<li>Meals are eaten on site; some sites hand out a weekend bag on Fridays.</li>
<li>Adults may come with their children but meals are for children only.</li>
<li>Questions: call the Oak Hill benefits hub at <a href="tel:+13045550142">(304) 555-0142</a>.</li>
</ul>
</main>
<footer><p>© 2026 Fayette County Community Site · <a href="/privacy">Privacy</a></p></footer>
</body>
</html>
"""


def flyer_pdf() -> bytes:
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    page = canvas.Canvas(out, pagesize=letter, invariant=1, pageCompression=1)
    page.setTitle("Winter Heating Help in Fayette County")
    page.setAuthor("Living Memory volunteers")
    _width, height = letter
    for number, lines in enumerate(FLYER_PAGES, start=1):
        page.setFont("Helvetica", 9)
        page.drawString(72, height - 40, RUNNING_HEADER)
        page.drawString(72, 40, f"Page {number} of {len(FLYER_PAGES)}")
        y = height - 90
        for kind, text in lines:
            if kind == "title":
                page.setFont("Helvetica-Bold", 20)
                page.drawString(72, y, text)
                y -= 34
                continue
            if kind == "h":
                y -= 8
                key = f"h{number}-{y}"
                page.bookmarkPage(key, fit="XYZ", top=y + 16)
                page.addOutlineEntry(text, key, level=0)
                page.setFont("Helvetica-Bold", 14)
                page.drawString(72, y, text)
                y -= 22
                continue
            page.setFont("Helvetica", 11)
            if kind == "li":
                text = "• " + text
            elif kind == "row":
                cells = text.split(" | ")
                for x, cell in zip((72, 250, 450), cells, strict=True):
                    page.drawString(x, y, cell)
                y -= 16
                continue
            page.drawString(72, y, text)
            y -= 16
        page.showPage()
    page.save()
    return out.getvalue()


def pantry_docx() -> bytes:
    import datetime as dt

    import docx

    document = docx.Document()
    props = document.core_properties
    props.author = "Living Memory volunteers"
    props.created = props.modified = dt.datetime(2026, 9, 1)
    props.last_modified_by = "Living Memory volunteers"
    props.revision = 1
    document.add_heading(PANTRY_TITLE, level=0)
    document.add_paragraph(PANTRY_INTRO)
    document.add_heading("Pantry days", level=1)
    table = document.add_table(rows=0, cols=len(PANTRY_ROWS[0]))
    for row in PANTRY_ROWS:
        cells = table.add_row().cells
        for cell, text in zip(cells, row, strict=True):
            cell.text = text
    document.add_heading("Before you go", level=1)
    for tip in PANTRY_TIPS:
        document.add_paragraph(tip, style="List Bullet")
    raw = io.BytesIO()
    document.save(raw)
    return _fixed_zip(raw.getvalue())


def _fixed_zip(data: bytes) -> bytes:
    """The same zip package with every entry's time fixed (python-docx stamps the time of saving)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            fixed = zipfile.ZipInfo(info.filename, FIXED_ZIP_TIME)
            fixed.compress_type = zipfile.ZIP_DEFLATED
            fixed.external_attr = 0o644 << 16
            target.writestr(fixed, source.read(info))
    return out.getvalue()


def documents() -> dict[str, bytes]:
    return {PDF_NAME: flyer_pdf(), DOCX_NAME: pantry_docx(), HTML_NAME: SUMMER_HTML.encode("utf-8")}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    HERE.mkdir(parents=True, exist_ok=True)
    differ = []
    for name, data in documents().items():
        path = HERE / name
        if check:
            if not path.is_file() or path.read_bytes() != data:
                differ.append(name)
            continue
        path.write_bytes(data)
        print(f"wrote {path} ({len(data)} bytes)")
    if differ:
        print(f"differ from what examples/make_documents.py writes: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
