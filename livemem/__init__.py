"""Living Memory core: the domain logic shared by the Dagster platform and the serving app.

Modules:
- ``config``     sources file (YAML, JSON-Schema validated) and environment settings
- ``gitsource``  reading files, history and provenance from git objects at a commit
- ``chunking``   splitting markdown (by headings), code and text into chunks
- ``records``    chunk identity, seal detection, the chunk record
- ``embedding``  the all-MiniLM-L6-v2 embedder and its content-hash cache
- ``store``      the index home: versions, staging, atomic publish, retention, readers
- ``build``      building a new index version incrementally from the sources
- ``checks``     the checks a staged version must pass before it is published
- ``breath``     the current breath phase and tone (BREATH.md)
"""
