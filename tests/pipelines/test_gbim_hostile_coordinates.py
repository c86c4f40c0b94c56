"""Issue 33, defect 8: a GeoJSON feature with ``Infinity`` in its coordinates failed the whole GBIM export
(``GEOSException`` from ``make_valid``). Non-finite coordinates (``Infinity``, ``NaN``, ``1e999``, which GDAL cannot
even parse) and coordinates out of range are a quarantined feature with its reason; the rest of the layer exports
and passes the blocking checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.gbim_data import EXAMPLE

from livemem.gbim import export_gbim
from livemem.gbim.checks import check_entities_valid
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome

BAD = {  # facility id -> the x coordinate written into a copy of a good point feature (EPSG:26917 metres)
    "bad-inf": "Infinity",
    "bad-minus-inf": "-Infinity",
    "bad-nan": "NaN",
    "bad-far": "1e30",  # finite, but nowhere on Earth once projected
}


def hostile_layer(path: Path, extra: dict[str, str]) -> Path:
    """The bundled facilities layer with one copy of its point feature ``wvb-002`` per entry of ``extra``."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    index, template = next((i, line) for i, line in enumerate(lines) if '"wvb-002"' in line)
    added = [
        template.replace('"wvb-002"', f'"{pk}"').replace("483673.77", x).rstrip(",") + "," for pk, x in extra.items()
    ]
    path.write_text("\n".join([*lines[:index], *added, *lines[index:]]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("overflow", [False, True], ids=["gdal-reads-it", "1e999-gdal-cannot-parse"])
def test_non_finite_and_out_of_range_features_are_quarantined_and_the_layer_exports(
    tmp_path, make_repo, embedder, overflow
):
    extra = {**BAD, **({"bad-overflow": "1e999"} if overflow else {})}
    hostile_layer(tmp_path / "facilities.geojson", extra)
    repo = make_repo(files={"guide.md": "# Guide\n\nFood help in Fayette County.\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n"
        "spatial:\n"
        "  worldview_id: wv-benefits\n"
        "  sources:\n"
        "    - {name: facilities, path: facilities.geojson, crs: 'EPSG:26917', dataset: wv_benefits,\n"
        "       gbim_entity: facility, id_field: facility_id, label_field: name, collection: gis_wv_benefits}\n",
        encoding="utf-8",
    )
    config = load_sources(sources)
    home = IndexHome(tmp_path / "index")

    result = export_gbim(config, home, embedder)  # was: GEOSException, nothing staged

    assert result.staged
    section = result.section
    assert section["entities"] == 10  # every good feature of the layer
    reasons = {q["source_pk"]: q["reason"] for q in section["quarantined"]}
    assert set(reasons) == {*extra, "wvb-011"}  # wvb-011: the layer's own empty geometry
    for pk in ("bad-inf", "bad-minus-inf", "bad-nan", *(["bad-overflow"] if overflow else [])):
        assert reasons[pk].startswith("non-finite coordinate"), reasons[pk]
    assert reasons["bad-far"].startswith("coordinates out of range"), reasons["bad-far"]
    assert section["sources"]["facilities"]["quarantined"] == len(extra) + 1
    outcome = check_entities_valid(home.locate(result.version_id))
    assert outcome.passed, outcome.failures
    home.publish(result.version_id, result.base_version, config.retention)
    assert home.current() == result.version_id


def test_a_geographic_layer_quarantines_a_feature_beyond_180_degrees(tmp_path, make_repo, embedder):
    layer = tmp_path / "points.geojson"
    points = [("p1", -81.1, 37.9), ("p2", -81.2, 37.8), ("far", 200.0, 37.9), ("pole", -81.0, 95.0)]
    layer.write_text(
        '{"type": "FeatureCollection", "features": ['
        + ", ".join(
            f'{{"type": "Feature", "properties": {{"id": "{pk}", "name": "Point {pk}"}}, '
            f'"geometry": {{"type": "Point", "coordinates": [{x}, {y}]}}}}'
            for pk, x, y in points
        )
        + "]}\n",
        encoding="utf-8",
    )
    repo = make_repo(files={"guide.md": "# Guide\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n"
        "spatial:\n  worldview_id: wv\n  sources:\n"
        "    - {name: points, path: points.geojson, crs: 'EPSG:4326', dataset: d, gbim_entity: place,\n"
        "       id_field: id, label_field: name, collection: gis_points}\n",
        encoding="utf-8",
    )
    result = export_gbim(load_sources(sources), IndexHome(tmp_path / "index"), embedder)
    assert result.staged and result.section["entities"] == 2
    reasons = {q["source_pk"]: q["reason"] for q in result.section["quarantined"]}
    assert set(reasons) == {"far", "pole"}
    assert "beyond ±180° / ±90° for EPSG:4326" in reasons["far"] and "(-81.0, 95.0)" in reasons["pole"]
