"""HTTP client for the Living Memory retrieval API.

The API is read-only and exposes two endpoints:

* ``POST /query`` — body ``{"query": str, "top_k": int, "filters": {...}}``; returns ranked passages.
* ``GET /chunks/{id}`` — returns a single passage with its full provenance.

Only the Python standard library is used so the client can be dropped into a caseworker laptop or a
cron job without installing anything.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BASE_URL = "https://memory.example.org"
DEFAULT_TIMEOUT_S = 10.0


class LivingMemoryError(RuntimeError):
    """Raised when the API answers with an error status or an unreadable body."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Provenance:
    """Where a passage came from: repository, file, commit and line range."""

    repo: str
    path: str
    commit: str
    start_line: int | None = None
    end_line: int | None = None

    def cite(self) -> str:
        """Return a short human-readable citation such as ``governance/CHARTER.md@1a2b3c4:10-42``."""
        lines = ""
        if self.start_line is not None:
            lines = f":{self.start_line}-{self.end_line if self.end_line is not None else self.start_line}"
        return f"{self.path}@{self.commit[:7]}{lines}"


@dataclass(frozen=True)
class Chunk:
    """One retrieved passage."""

    id: str
    text: str
    collection: str
    heading_path: list[str]
    provenance: Provenance
    score: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Chunk:
        """Build a :class:`Chunk` from one item of an API response."""
        prov = data.get("provenance") or {}
        return cls(
            id=str(data["id"]),
            text=data.get("text", ""),
            collection=data.get("collection", ""),
            heading_path=list(data.get("heading_path") or []),
            provenance=Provenance(
                repo=prov.get("repo", ""),
                path=prov.get("path", ""),
                commit=prov.get("commit", ""),
                start_line=prov.get("start_line"),
                end_line=prov.get("end_line"),
            ),
            score=data.get("score"),
            metadata=dict(data.get("metadata") or {}),
        )


@dataclass(frozen=True)
class QueryResult:
    """The ranked answer to a query, plus the build that produced it."""

    query: str
    chunks: list[Chunk]
    build_id: str | None = None

    def best(self) -> Chunk | None:
        """Return the top-ranked chunk, or ``None`` when nothing matched."""
        return self.chunks[0] if self.chunks else None


class LivingMemoryClient:
    """Small synchronous client for the retrieval API.

    Example::

        client = LivingMemoryClient("https://memory.example.org")
        result = client.query("heating bill help in Beckley", top_k=3, filters={"collection": "benefits"})
        for chunk in result.chunks:
            print(chunk.provenance.cite(), chunk.score)
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def query(self, query: str, top_k: int = 5, filters: dict[str, Any] | None = None) -> QueryResult:
        """Search the index and return up to ``top_k`` passages.

        ``filters`` narrows the search, e.g. ``{"collection": "benefits"}`` or ``{"path": "CHARTER.md"}``.
        Internal collections are only searched when the client was created with a valid token.
        """
        if not query.strip():
            raise ValueError("query must not be empty")
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        body = {"query": query, "top_k": top_k, "filters": filters or {}}
        data = self._request("POST", "/query", body)
        chunks = [Chunk.from_json(item) for item in data.get("results", [])]
        return QueryResult(query=query, chunks=chunks, build_id=data.get("build_id"))

    def get_chunk(self, chunk_id: str) -> Chunk:
        """Fetch a single passage by id, with its full provenance."""
        quoted = urllib.parse.quote(chunk_id, safe="")
        return Chunk.from_json(self._request("GET", f"/chunks/{quoted}"))

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base_url + path, data=payload, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:500]
            raise LivingMemoryError(f"{method} {path} failed: {exc.code} {detail}", status=exc.code) from exc
        except urllib.error.URLError as exc:
            raise LivingMemoryError(f"cannot reach {self.base_url}: {exc.reason}") from exc
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LivingMemoryError(f"{method} {path} returned a body that is not JSON") from exc


def search(query: str, top_k: int = 5, base_url: str = DEFAULT_BASE_URL, **filters: Any) -> list[Chunk]:
    """One-shot helper: ``search("WIC clinic hours", collection="benefits")``."""
    return LivingMemoryClient(base_url).query(query, top_k=top_k, filters=filters or None).chunks


def format_answer(result: QueryResult, max_chars: int = 300) -> str:
    """Render a result as plain text with a citation under each passage."""
    if not result.chunks:
        return f"No passages found for {result.query!r}."
    parts = []
    for rank, chunk in enumerate(result.chunks, start=1):
        heading = " > ".join(chunk.heading_path) or chunk.provenance.path
        snippet = chunk.text if len(chunk.text) <= max_chars else chunk.text[: max_chars - 1] + "…"
        parts.append(f"{rank}. {heading}\n   {snippet}\n   source: {chunk.provenance.cite()}")
    return "\n\n".join(parts)
