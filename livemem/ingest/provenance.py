"""Checking a chunk's provenance against its source repository as it is now.

Every chunk is an exact substring of its file (``chunking``; of a document's extracted text, ``documents``), so a chunk is ``current`` when the file at the
source's configured ref still contains its text, ``changed`` when the file is there but no longer does, and
``missing`` when the file, the repository or the ref is gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from livemem.errors import SourceError
from livemem.ingest.documents import blob_text
from livemem.sources.gitsource import GitSource


def verify_chunk(record: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """``{status, detail, indexed_commit, checked_commit}`` for a chunk record of the manifest's version."""
    prov = record["provenance"]
    out = {"indexed_commit": prov["commit"], "checked_commit": None}
    source = manifest.get("sources", {}).get(record["source"])
    if not source or not source.get("repo"):
        return {**out, "status": "missing", "detail": f"source {record['source']!r} is not in the manifest"}
    ref = source.get("ref") or "HEAD"
    try:
        with GitSource(Path(source["repo"]), record["source"]) as repo:
            head = repo.resolve(ref)
            raw = repo.read_file(head, prov["path"])
    except SourceError as exc:
        return {**out, "status": "missing", "detail": str(exc)}
    out["checked_commit"] = head
    if raw is None:
        return {**out, "status": "missing", "detail": f"{prov['path']} no longer exists at {ref} ({head[:12]})"}
    if record["content"] in blob_text(prov["path"], raw):  # a document: its extracted text
        same = "unchanged since" if head == prov["commit"] else "still contains the chunk since"
        return {**out, "status": "current", "detail": f"{prov['path']} at {ref} ({head[:12]}) {same} the index"}
    return {
        **out,
        "status": "changed",
        "detail": f"{prov['path']} at {ref} ({head[:12]}) no longer contains this chunk's text",
    }
