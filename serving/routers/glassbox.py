"""GET /glassbox: a small page that shows how an answer was made (docs/glassbox.md).

The page and its files are static (``serving/static/glassbox/``); everything it shows comes from the public API
the page calls with the key the person types in (``/chat``, ``/chunks/{id}?verify=true``, ``/manifest``,
``/gis/query?format=geojson``), so it can show nothing the key could not read. The county outlines come from the
served index version (``GET /glassbox/counties.geojson``: the ``spatial.counties`` boundaries the GBIM export
used, written into the version as ``gbim/counties.geojson``); without them the page draws the places alone. The
map is an SVG drawn in the browser, with no tile server, CDN or external script, so it works offline. A
Content-Security-Policy allows scripts, styles and requests from this origin only, and the script writes every
value with ``textContent``, never as HTML.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import FileResponse

from livemem.gbim import COUNTIES_FILE
from serving.deps import CurrentSnapshot, caller_role

router = APIRouter(tags=["glassbox"], include_in_schema=False)

STATIC = Path(__file__).resolve().parent.parent / "static" / "glassbox"
FILES = {
    "glassbox.js": "text/javascript; charset=utf-8",
    "glassbox.css": "text/css; charset=utf-8",
}
GEOJSON_MEDIA_TYPE = "application/geo+json"
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


@router.get("/glassbox/counties.geojson", dependencies=[Depends(caller_role)])  # an unknown key: the API's 401
def glassbox_counties(snap: CurrentSnapshot) -> FileResponse:
    """The county polygons of the served version (EPSG:4326, ``name`` + geometry), 404 when it has none.

    Only a file the manifest lists is served (serving verified its SHA-256 when it loaded the version), never a
    path from the sources file."""
    listed = snap.manifest.get("files")
    target = snap.path / COUNTIES_FILE
    if (isinstance(listed, dict) and COUNTIES_FILE not in listed) or not target.is_file():
        raise HTTPException(
            404,
            f"index version {snap.version_id} holds no county polygons: configure spatial.counties in the sources "
            "file and run the Dagster job `export_gbim` (docs/gbim.md)",
        )
    return FileResponse(target, media_type=GEOJSON_MEDIA_TYPE, headers=HEADERS)


@router.get("/glassbox/{name}")
def glassbox_file(name: str) -> FileResponse:
    """The page's script and style sheet (a fixed list: no path is taken from the URL)."""
    if name not in FILES:
        raise HTTPException(404, f"no glassbox file {name!r}")
    return FileResponse(STATIC / name, media_type=FILES[name], headers=HEADERS)
