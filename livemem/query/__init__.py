"""Ranking one snapshot's chunks and entities: filters, the dense scan and BM25 (over ``livemem.index``'s vectors and
postings), fusion, the result cache and the GIS entities of a version."""
