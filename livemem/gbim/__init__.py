"""GBIM export: spatial features → entities (centroid, EPSG:4326 position, county) + relations → an index version.

Each feature of a configured spatial source (GeoJSON, GeoPackage, Shapefile or a PostGIS table / query) becomes
one entity (``schemas/gbim_entity.schema.json``):

- geometry: null or empty geometries are quarantined with a reason; invalid ones are repaired with shapely's
  ``make_valid`` (flagged ``geometry_repaired``) or quarantined when nothing valid is left;
- centroid in the working projected CRS (default EPSG:26917, NAD83 / UTM 17N): the geometry is reprojected there
  first when its source CRS differs, so ``centroid_x`` / ``centroid_y`` are metres and ``srid`` the EPSG code;
- ``lon`` / ``lat``: the centroid reprojected to EPSG:4326 with pyproj (``always_xy``);
- county: the feature's own county attribute, else the county polygon (configured boundary source) holding the
  centroid; when both exist and disagree the entity is flagged ``county_disagreement``;
- ``outside_region``: the centroid lies farther than ``region.tolerance_km`` outside the configured bbox.

Relations (subject, predicate, object, provenance): ``part_of`` its worldview, ``located_in`` its county,
``serves_zip`` each ZIP code of its zip attribute, and where the data carries them (``linked_relations``):
``serves_program`` (a ``programs`` attribute), ``operated_by`` (an ``operator`` attribute) and ``near`` (another
entity of the same access level within ``NEAR_KM``, nearest first); exported as the ``gbim_relations`` table and
as N-Triples / Turtle (rdflib) in ``gbim/``. Descriptions are embedded through the shared embedding cache into the GIS Chroma
collections and the ``gis/`` snapshot serving reads.

``export_gbim`` stages a new version derived from the current one (``store.derive_version``) and writes only
these parts; publishing is a separate step, after the checks.

In the order of the data flow: ``config`` (the spatial section, typed), ``read`` (features, county polygons),
``entities`` (features → entities and their own relations), ``relations`` (links between entities, finding them
by name), ``rdf`` (the graph and its serialisations), ``export`` (staging a version), ``checks`` (on a staged
version). This module re-exports what callers use.
"""

from livemem.gbim.checks import check_entities_valid, check_entity_flags
from livemem.gbim.config import (
    COUNTIES_FILE,
    EXPORT_VERSION,
    GBIM_DIR,
    GBIM_IRI,
    CountyBoundaries,
    Region,
    SpatialConfig,
    SpatialSource,
    load_spatial,
)
from livemem.gbim.entities import entity_id, entity_record, features_to_entities, relations_for, zip_codes
from livemem.gbim.export import (
    GbimResult,
    _write_empty_chunk_parts,  # bench/gbim_bench.py times the writers alone
    _write_gis_snapshot,
    _write_tables,
    counties_geojson,
    export_gbim,
)
from livemem.gbim.rdf import RDF_MEDIA_TYPES, node_iri, rdf_graph, serialize_rdf
from livemem.gbim.read import county_of_points, read_counties, read_features
from livemem.gbim.relations import find_entities, linked_relations, normalize_name

__all__ = [
    "COUNTIES_FILE",
    "EXPORT_VERSION",
    "GBIM_DIR",
    "GBIM_IRI",
    "RDF_MEDIA_TYPES",
    "CountyBoundaries",
    "GbimResult",
    "Region",
    "SpatialConfig",
    "SpatialSource",
    "_write_empty_chunk_parts",
    "_write_gis_snapshot",
    "_write_tables",
    "check_entities_valid",
    "check_entity_flags",
    "counties_geojson",
    "county_of_points",
    "entity_id",
    "entity_record",
    "export_gbim",
    "features_to_entities",
    "find_entities",
    "linked_relations",
    "load_spatial",
    "node_iri",
    "normalize_name",
    "rdf_graph",
    "read_counties",
    "read_features",
    "relations_for",
    "serialize_rdf",
    "zip_codes",
]
