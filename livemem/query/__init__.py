"""Ranking one snapshot's chunks and entities: filters, the dense scan, BM25, fusion, the result cache and the GIS entities of a version."""
