"""Entities and relations as RDF (rdflib): the graph, and its serialisations by media type."""

from __future__ import annotations

from typing import Any

from livemem.gbim.config import GBIM_IRI


def node_iri(kind: str, value: str, gbim_iri: str = GBIM_IRI) -> str:
    from urllib.parse import quote

    return f"{gbim_iri}{kind}/{quote(value, safe='')}"


def rdf_graph(
    entities: list[dict[str, Any]],
    relations: list[dict[str, Any]],
    labels: dict[str, str] | None = None,
    gbim_iri: str = GBIM_IRI,
):
    """An rdflib graph of the entities (type, label, dataset, WGS 84 position) and their relations; ``labels``:
    the labels of other entities the relations name (an entity's own facts served alone); ``gbim_iri``: the
    namespace of the nodes and predicates (serving's ``RAG_RDF_BASE_IRI`` + ``gbim/``)."""
    from rdflib import RDF, RDFS, XSD, Graph, Literal, Namespace, URIRef

    gbim = Namespace(gbim_iri)
    geo = Namespace("http://www.w3.org/2003/01/geo/wgs84_pos#")
    graph = Graph()
    graph.bind("gbim", gbim)
    graph.bind("geo", geo, replace=True)  # rdflib binds geo: to GeoSPARQL by default; here it is WGS 84
    for e in entities:
        subject = URIRef(node_iri("entity", e["entity_id"], gbim_iri))
        graph.add((subject, RDF.type, URIRef(node_iri("class", e["gbim_entity"], gbim_iri))))
        graph.add((subject, RDFS.label, Literal(e["label"])))
        graph.add((subject, gbim.description, Literal(e["description"])))
        graph.add((subject, gbim.dataset, Literal(e["dataset"])))
        if e["lat"] is not None and e["lon"] is not None:
            graph.add((subject, geo.lat, Literal(e["lat"], datatype=XSD.double)))
            graph.add((subject, geo.long, Literal(e["lon"], datatype=XSD.double)))
    for r in relations:
        target = URIRef(node_iri(r["object_kind"], r["object"], gbim_iri))
        graph.add((URIRef(node_iri("entity", r["subject"], gbim_iri)), gbim[r["predicate"]], target))
        if r["object_kind"] != "entity":  # an entity has its own label
            graph.add((target, RDFS.label, Literal(r["object"])))
        elif labels and r["object"] in labels:
            graph.add((target, RDFS.label, Literal(labels[r["object"]])))
    return graph


# Media types the facts are written and served in, and rdflib's name for each.
RDF_MEDIA_TYPES = {
    "text/turtle": "turtle",
    "application/n-triples": "nt",
    "application/ld+json": "json-ld",
    "application/rdf+xml": "xml",
}


def serialize_rdf(graph, media_type: str) -> str:
    """``graph`` as text in one of ``RDF_MEDIA_TYPES``; N-Triples sorted (diffable), Turtle exact."""
    if media_type == "text/turtle":
        import io

        out = io.BytesIO()
        _exact_turtle(graph).serialize(out, encoding="utf-8")
        return out.getvalue().decode("utf-8")
    if media_type == "application/ld+json":
        context = {prefix: str(iri) for prefix, iri in graph.namespaces() if prefix in ("gbim", "geo", "rdfs", "xsd")}
        return graph.serialize(format="json-ld", context=context, auto_compact=True)
    text = graph.serialize(format=RDF_MEDIA_TYPES[media_type])
    if media_type == "application/n-triples":
        return "".join(line + "\n" for line in sorted(text.splitlines()) if line.strip())
    return text


def _exact_turtle(graph):
    """rdflib's Turtle serializer, except that ``xsd:double`` literals keep their lexical form.

    rdflib writes a double in Turtle's short form through ``%e`` (six significant digits: 38.0123456 becomes
    3.801235e+01, another value; RDFLib/rdflib#1852), so the Turtle would not be the graph of the N-Triples."""
    from rdflib import XSD, Literal
    from rdflib.plugins.serializers.turtle import TurtleSerializer

    class ExactTurtleSerializer(TurtleSerializer):
        def label(self, node, position):
            if isinstance(node, Literal) and node.datatype == XSD.double:
                return node._literal_n3(qname_callback=lambda dt: self.get_pname(dt, gen_prefix=False))
            return super().label(node, position)

    return ExactTurtleSerializer(graph)
