"""A version built from the sources: chunking, reading files (worker processes), the builder, the checks a staged
version must pass, and the proof that a published version is its sources."""
