"""One chunk by id, as the role may read it (``GET /chunks/{id}``, the MCP ``verify_chunk`` tool and the
``livemem://chunks/{id}`` resource), optionally checked against its source repository now."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from livemem.engine.snapshot import Snapshot, without_paths
from livemem.ingest.provenance import verify_chunk
from serving.services.errors import ServiceError

if TYPE_CHECKING:
    from serving.state import Role, ServingState


class ChunkService:
    def __init__(self, state: ServingState) -> None:
        self.state = state

    def chunk(self, chunk_id: str, role: Role, verify: bool = False, snap: Snapshot | None = None) -> dict[str, Any]:
        """The ``ChunkResponse`` body of ``chunk_id`` in ``snap`` (default: the version CURRENT names); one the role
        may not read is a 404 exactly like one that does not exist."""
        snap = snap or self.state.reader.snapshot()
        row = snap.row_of.get(chunk_id)
        if row is None or snap.columns["access"][row] not in role.access:
            raise ServiceError(404, f"no chunk {chunk_id[:80]} in index version {snap.version_id}")
        record = snap.record(row)
        verification = verify_chunk(record, snap.manifest) if verify else None
        if verification is not None:  # a git error names the repository's path on this server
            verification["detail"] = without_paths(verification["detail"])
        return {
            **record,
            "collection": record["metadata"]["collection"],
            "index_version": snap.version_id,
            "verification": verification,
        }
