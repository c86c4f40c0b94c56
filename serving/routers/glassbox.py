"""GET /glassbox: a small page that shows how an answer was made (docs/glassbox.md).

The page and its files are static (``serving/static/glassbox/``); everything it shows comes from the public API
the page calls with the key the person types in (``/chat``, ``/chunks/{id}?verify=true``, ``/manifest``,
``/gis/query?format=geojson``), so it can show nothing the key could not read. The county polygons (US Census
cartographic boundaries of West Virginia, public domain) are served beside it: the map is an SVG drawn in the
browser, with no tile server, CDN or external script, so it works offline. A Content-Security-Policy allows
scripts, styles and requests from this origin only, and the script writes every value with ``textContent``,
never as HTML.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

router = APIRouter(tags=["glassbox"], include_in_schema=False)

STATIC = Path(__file__).resolve().parent.parent / "static" / "glassbox"
FILES = {
    "glassbox.js": "text/javascript; charset=utf-8",
    "glassbox.css": "text/css; charset=utf-8",
    "wv_counties.geojson": "application/geo+json",
}
HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",  # a new release's page and script are picked up at once
}


@router.get("/glassbox")
def glassbox_page() -> FileResponse:
    """The page: ask a question, see the answer, its citations with provenance, the registry rows, the map."""
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/glassbox/{name}")
def glassbox_file(name: str) -> FileResponse:
    """The page's script, style sheet and the county polygons (a fixed list: no path is taken from the URL)."""
    if name not in FILES:
        raise HTTPException(404, f"no glassbox file {name!r}")
    return FileResponse(STATIC / name, media_type=FILES[name], headers=HEADERS)
