"""Documents made in tests, reproducibly: text-layer PDFs (one text a page), DOCX, HTML and a scanned PDF (an
image, no text layer). reportlab's ``invariant`` mode and python-docx with fixed core properties give the same
bytes for the same text, so a state machine that writes the same document twice commits nothing new."""

from __future__ import annotations

import io
import textwrap
from datetime import datetime


def pdf_of(pages: list[str]) -> bytes:
    """A PDF with one page per text; paragraphs (blank-line separated) wrapped at 90 characters."""
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=letter, invariant=1)
    for text in pages:
        y = letter[1] - 72
        for line in text.splitlines():
            for part in textwrap.wrap(line, 90) or [""]:
                if y < 72:
                    break
                pdf.setFont("Helvetica", 10)
                pdf.drawString(72, y, part)
                y -= 13
        pdf.showPage()
    pdf.save()
    return out.getvalue()


def docx_of(text: str) -> bytes:
    """A DOCX of ``text``: ``#`` lines as headings, other lines as paragraphs."""
    import docx

    document = docx.Document()
    document.core_properties.created = document.core_properties.modified = datetime(2026, 1, 1)
    for line in text.splitlines():
        if line.startswith("#"):
            document.add_heading(line.lstrip("#").strip() or "Untitled", level=min(line.count("#", 0, 6), 6))
        elif line.strip():
            document.add_paragraph(line)
    out = io.BytesIO()
    document.save(out)
    return _fixed_zip(out.getvalue())


def _fixed_zip(data: bytes) -> bytes:
    """The same zip with every member's time fixed (python-docx stamps the current time)."""
    import zipfile

    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(2026, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(fixed, source.read(info.filename))
    return out.getvalue()


def html_of(text: str) -> str:
    """A web page of ``text`` with navigation and a footer around its main content."""
    from html import escape

    body = []
    for line in text.splitlines():
        if line.startswith("#"):
            level = min(line.count("#", 0, 6), 6)
            body.append(f"<h{level}>{escape(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            body.append(f"<p>{escape(line)}</p>")
    return (
        "<!doctype html><html><head><title>Page</title></head><body>"
        '<nav><a href="/">Home</a> <a href="/about">About</a></nav><main>'
        + "\n".join(body)
        + "</main><footer>© 2026 Example</footer></body></html>\n"
    )


def scanned_pdf() -> bytes:
    """A one-page PDF holding only an image (a scanned flyer: no text layer)."""
    from PIL import Image
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    png = io.BytesIO()
    Image.new("L", (64, 64), 200).save(png, "PNG")
    out = io.BytesIO()
    page = canvas.Canvas(out, invariant=1)
    page.drawImage(ImageReader(io.BytesIO(png.getvalue())), 72, 72, 300, 300)
    page.showPage()
    page.save()
    return out.getvalue()
