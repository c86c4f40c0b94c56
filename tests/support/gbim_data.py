"""The bundled spatial example (West Virginia benefits facilities) as a sources-file section, and entity ids in it."""

from __future__ import annotations

from pathlib import Path

from livemem.gbim import entity_id

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "examples" / "spatial" / "wv_benefits_facilities.geojson"
SOURCE = "wv-benefits-facilities"
OAK_HILL = entity_id(SOURCE, "wvb-001")
LIEAP = entity_id(SOURCE, "wvb-008")

SPATIAL = f"""\
spatial:
  worldview_id: wv-benefits
  region: {{name: West Virginia, bbox: [-82.65, 37.2, -77.7, 40.64]}}
  sources:
    - name: {SOURCE}
      path: {EXAMPLE}
      crs: EPSG:26917
      dataset: wv_benefits
      gbim_entity: facility
      id_field: facility_id
      label_field: name
      description_field: description
      collection: gis_wv_benefits
"""
