"""Where a version's vectors live in Chroma: a persistent directory in the version (default) or a Chroma server.

Both are opened the same way, ``open_vectors(staged_dir, base_dir, server)``, and used like a Chroma client
(``list_collections``, ``get_collection``, ``get_or_create_collection``, ``delete_collection``), so the steps
that write vectors (chunks, GBIM) do not care which one is configured:

Chroma is an optional extra (``pip install 'living-memory[chroma]'``): the product builds, publishes and serves
without it, and a build that asks for it without it installed is refused before anything is written
(``require_chroma``). The server is the one the entry point's ``ChromaSettings`` names (``CHROMA_HOST``), passed
down as ``SourcesConfig.chroma_server`` and ``IndexHome.chroma_server``; nothing here reads the environment.

- **Embedded** (no ``CHROMA_HOST``): ``<version>/chroma/`` is a ``PersistentClient`` directory, copied from the
  base version and then changed. Published versions are never opened again by a writer.
- **Server** (``CHROMA_HOST`` and optionally ``CHROMA_PORT``, e.g. ``chroma run --host 127.0.0.1``): each
  version maps its logical collections onto server collections named ``lm-<home>.<version>.<collection>``,
  recorded in ``<version>/chroma/SERVER.json``. A version shares the server collections of its base until it
  changes one (copy on write), so a published version's vectors are never modified and the same atomic switch
  of ``CURRENT`` publishes them. Server collections no version references any more are deleted when versions
  are pruned or failed stagings are cleared (``gc_server_collections``).

This module owns everything Chroma: the directory name (``CHROMA``), opening and closing a client
(``open_chroma`` / ``close_chroma``), the extra's check (``require_chroma``) and the server's garbage collection. It
imports nothing else of ``livemem.version``; the home's janitor (``livemem.version.janitor``) calls it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from livemem.errors import ConfigError
from livemem.sources.config import SourcesConfig

CHROMA = "chroma"  # a version's Chroma directory (``<version>/chroma/``), named in the home's layout
SERVER_FILE = "SERVER.json"
INSTALL = "pip install 'living-memory[chroma]'"
PAGE = 2000
BATCH = 4000  # below Chroma's largest batch per call (~5,461)


def upsert(collection: Any, ids: list[str], vectors: Any, documents: list[str], metadatas: list[dict]) -> None:
    """Upsert records in batches Chroma accepts."""
    for start in range(0, len(ids), BATCH):
        end = start + BATCH
        collection.upsert(
            ids=ids[start:end], embeddings=vectors[start:end], documents=documents[start:end],
            metadatas=metadatas[start:end],
        )  # fmt: skip


def delete(collection: Any, ids: list[str]) -> None:
    """Delete records by id in batches Chroma accepts."""
    for start in range(0, len(ids), BATCH):
        collection.delete(ids=ids[start : start + BATCH])


def open_chroma(path: Path):
    """A persistent Chroma client on ``path`` with telemetry off (no network). ``chromadb`` is the optional ``chroma``
    extra, imported only in this module's functions (``require_chroma`` refuses a build that needs it when it is
    missing)."""
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))


def close_chroma(client: Any) -> None:
    """Release Chroma's files so the directory can be renamed, copied or opened elsewhere."""
    from chromadb.api.shared_system_client import SharedSystemClient

    try:
        client.close()
    finally:
        SharedSystemClient.clear_system_cache()


class ChromaNotInstalled(ConfigError):
    """The configuration asks for a Chroma mirror, but ``chromadb`` (the ``chroma`` extra) is not installed."""


def require_chroma(config: SourcesConfig) -> None:
    """Refuse, before anything is built or written, a build whose configuration asks for Chroma (``index.vector_store:
    chroma`` in the sources file, or a Chroma server named by ``CHROMA_HOST``) when ``chromadb`` cannot be imported;
    the error names the setting that asked and the install command. Nothing to check when Chroma is not asked for."""
    if not config.uses_chroma:
        return
    try:
        import chromadb  # noqa: F401  (the extra: imported only where a version is mirrored to Chroma)
    except ImportError as exc:
        if config.chroma_server is not None:
            host, port = config.chroma_server
            asked = f"CHROMA_HOST={host} (port {port}) asks for a Chroma server mirror of the index"
        else:
            asked = f"{config.path}: index.vector_store: chroma asks for a Chroma mirror of the index"
        raise ChromaNotInstalled(
            f"{asked}, but chromadb is not installed ({exc}): install the extra with `{INSTALL}`, or drop the "
            "setting (serving never reads Chroma; docs/deploy.md); nothing was built"
        ) from exc


def open_vectors(staged: Path, base_dir: Path | None, server: tuple[str, int] | None) -> LocalVectors | ServerVectors:
    """The vector store of a version being staged, starting from ``base_dir``'s (None: start empty): on the Chroma
    ``server`` (host, port) the entry point's ``ChromaSettings`` names, else a directory in the version."""
    return ServerVectors(staged, base_dir, server) if server else LocalVectors(staged, base_dir)


class LocalVectors:
    """A persistent Chroma directory inside the version."""

    def __init__(self, staged: Path, base_dir: Path | None) -> None:
        target = staged / CHROMA
        self.carried = False
        if base_dir is not None and (base_dir / CHROMA).is_dir() and not target.exists():
            shutil.copytree(base_dir / CHROMA, target)
            self.carried = True
        self.client = open_chroma(target)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def close(self) -> None:
        close_chroma(self.client)


def _home_tag(staged: Path) -> str:
    """Short, stable id of the index home, so several homes can share one Chroma server."""
    return hashlib.sha256(str(staged.resolve().parent.parent).encode()).hexdigest()[:8]


def _http_client(address: tuple[str, int]):
    import chromadb
    from chromadb.config import Settings

    return chromadb.HttpClient(host=address[0], port=address[1], settings=Settings(anonymized_telemetry=False))


class ServerVectors:
    """A version's collections on a Chroma server, shared with its base version until changed."""

    def __init__(self, staged: Path, base_dir: Path | None, address: tuple[str, int]) -> None:
        self.staged = staged
        self.version = staged.name
        self.prefix = f"lm-{_home_tag(staged)}."
        self.client = _http_client(address)
        # A mapping already in the staged directory was copied there from the base version: inherited too.
        source = (base_dir if base_dir is not None else staged) / CHROMA / SERVER_FILE
        self.inherited: dict[str, str] = (
            json.loads(source.read_text(encoding="utf-8"))["collections"] if source.is_file() else {}
        )
        self.own: dict[str, str] = {}
        self.carried = bool(self.inherited)

    def _physical(self, name: str) -> str:
        return f"{self.prefix}{self.version}.{name}"

    def list_collections(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(name=n) for n in sorted({*self.inherited, *self.own})]

    def get_collection(self, name: str, **_: Any):
        return self.get_or_create_collection(name, create=False)

    def get_or_create_collection(self, name: str, metadata: dict | None = None, create: bool = True, **_: Any):
        if name in self.own:
            return self.client.get_collection(self.own[name], embedding_function=None)
        physical = self._physical(name)
        if name in self.inherited:  # copy on write: the base version keeps its collection untouched
            source = self.client.get_collection(self.inherited.pop(name), embedding_function=None)
            target = self.client.get_or_create_collection(
                physical, metadata=source.metadata or {"hnsw:space": "cosine"}, embedding_function=None
            )
            total = source.count()
            for offset in range(0, total, PAGE):
                page = source.get(include=["embeddings", "documents", "metadatas"], limit=PAGE, offset=offset)
                target.add(
                    ids=page["ids"],
                    embeddings=page["embeddings"],
                    documents=page["documents"],
                    metadatas=page["metadatas"],
                )
        elif not create:
            raise KeyError(f"no collection {name!r} in version {self.version}")
        else:
            target = self.client.get_or_create_collection(
                physical, metadata=metadata or {"hnsw:space": "cosine"}, embedding_function=None
            )
        self.own[name] = physical
        return target

    def delete_collection(self, name: str) -> None:
        self.inherited.pop(name, None)
        physical = self.own.pop(name, None)
        if physical is not None:
            self.client.delete_collection(physical)

    def close(self) -> None:
        """Record which server collections this version uses (its own and the unchanged inherited ones)."""
        target = self.staged / CHROMA
        target.mkdir(parents=True, exist_ok=True)
        mapping = {**self.inherited, **self.own}
        (target / SERVER_FILE).write_text(json.dumps({"collections": mapping}, indent=2), encoding="utf-8")


def gc_server_collections(home_root: Path, address: tuple[str, int] | None) -> list[str]:
    """Delete this home's collections on the Chroma server at ``address`` that no version (published or staged)
    references any more; None (no server configured): nothing to do."""
    if address is None:
        return []
    referenced: set[str] = set()
    for parent in ("versions", "staging"):
        for mapping in (home_root / parent).glob(f"*/{CHROMA}/{SERVER_FILE}"):
            try:
                referenced |= set(json.loads(mapping.read_text(encoding="utf-8"))["collections"].values())
            except (OSError, ValueError, KeyError):
                return []  # unreadable mapping: delete nothing rather than something still in use
    prefix = f"lm-{hashlib.sha256(str(home_root.resolve()).encode()).hexdigest()[:8]}."
    client = _http_client(address)
    removed = []
    for collection in client.list_collections():
        name = collection.name if hasattr(collection, "name") else str(collection)
        if name.startswith(prefix) and name not in referenced:
            client.delete_collection(name)
            removed.append(name)
    return removed
