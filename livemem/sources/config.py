"""The sources file: validated against ``schemas/sources.schema.json`` (every mistake reported with its file,
line and column) and resolved into typed sections.

Where it and the index home are comes from the settings tree (``livemem.settings.PathSettings``: ``RAG_SOURCES``,
default the bundled example ``examples/sources.yaml``; ``RAG_INDEX_DIR``, default ``rag_index/`` in the project).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import pathspec
import yaml

from livemem import yamlio
from livemem.errors import ConfigError
from livemem.schemas import load_schema, validator
from livemem.settings import PROJECT_ROOT as PROJECT_ROOT  # benchmarks import it from here
from livemem.settings import ChromaSettings

# The chunking defaults a sources file starts from (livemem/ingest/chunking.py applies them).
# Bump whenever the same file and settings would give different chunks (it forces re-chunking every source).
# 4: chunks carry the date their document names (``livemem.dates.document_date``) in ``domain``.
# 5: sentence vectors of prose chunks (``livemem.index.sentences``; their splitting rule is part of this version).
# 6: Git LFS pointer files are reported skipped (``lfs_pointer``), not indexed.
CHUNKER_VERSION = 6
MODEL_MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length, [CLS] and [SEP] included
DEFAULT_CHUNK_TOKENS = MODEL_MAX_TOKENS - 2


@dataclass(frozen=True)
class MetadataRule:
    """Domain metadata (county, dataset, ...) set on chunks of files matching ``paths`` (all files if empty)."""

    values: dict[str, Any]
    paths: tuple[str, ...] = ()

    def applies_to(self, rel_path: str) -> bool:
        return not self.paths or _spec(self.paths).match_file(rel_path)


@dataclass(frozen=True)
class SourceConfig:
    """One git repository to index, and how."""

    name: str
    repo: Path
    collection: str
    access: str = "public"
    ref: str = "HEAD"
    subdir: str = ""
    include: tuple[str, ...] = ("**/*",)
    exclude: tuple[str, ...] = ()
    sealed: tuple[str, ...] = ()
    metadata: tuple[MetadataRule, ...] = ()

    def relative(self, repo_path: str) -> str | None:
        """The path relative to ``subdir``, or None when the file lies outside it."""
        if not self.subdir:
            return repo_path
        prefix = self.subdir.rstrip("/") + "/"
        return repo_path[len(prefix) :] if repo_path.startswith(prefix) else None

    def selects(self, repo_path: str) -> bool:
        """Whether a file (path inside the repository) is indexed by this source."""
        rel = self.relative(repo_path)
        if rel is None:
            return False
        return _spec(self.include).match_file(rel) and not _spec(self.exclude).match_file(rel)

    def is_sealed_path(self, repo_path: str) -> bool:
        rel = self.relative(repo_path)
        return bool(self.sealed) and rel is not None and _spec(self.sealed).match_file(rel)

    def domain_metadata(self, repo_path: str) -> dict[str, Any]:
        rel = self.relative(repo_path) or repo_path
        merged: dict[str, Any] = {}
        for rule in self.metadata:
            if rule.applies_to(rel):
                merged.update(rule.values)
        return merged

    def fingerprint(self, chunking: dict[str, Any]) -> str:
        """Changes whenever the way this source's files become chunks changes (forces re-chunking)."""
        payload = {
            "collection": self.collection,
            "access": self.access,
            "subdir": self.subdir,
            "include": self.include,
            "exclude": self.exclude,
            "sealed": self.sealed,
            "metadata": [[r.paths, r.values] for r in self.metadata],
            "chunking": chunking,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=list).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Governance:
    max_chunks: int = 1_000_000
    max_size_mb: float = 10_240.0


@dataclass(frozen=True)
class Retention:
    """Which published versions are kept (``index.retention``; docs/versions.md): the ``keep_last`` newest, and
    the newest of each of the last ``daily_days`` UTC days and of each of the last ``weekly_weeks`` ISO weeks (by
    publish time). The current version is always kept. The plain integer form ``retention: 5`` is ``keep_last: 5``."""

    keep_last: int = 5
    daily_days: int = 0
    weekly_weeks: int = 0

    @classmethod
    def of(cls, value: int | dict[str, int] | Retention | None) -> Retention:
        if value is None:
            return cls()
        if isinstance(value, Retention):
            return value
        if isinstance(value, int):
            return cls(keep_last=value)
        return cls(**{k: int(v) for k, v in value.items()})


@dataclass(frozen=True)
class SourcesConfig:
    """The whole sources file, validated, with paths resolved."""

    path: Path
    sources: tuple[SourceConfig, ...]
    max_chunk_chars: int = 2000
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS  # word pieces per embedded chunk (livemem/ingest/chunking.py)
    max_file_bytes: int = 1_000_000
    retention: Retention = field(default_factory=Retention)
    vector_store: str = "none"  # "none" | "chroma"; see ``uses_chroma``
    encoder: str | None = None  # "torch" | "onnx": the build's embedding backend; None: the embedder's own
    precision: str | None = None  # "int8-block" | "fp32": the index vectors' precision on onnx; None: the embedder's
    sentences: bool = True  # embed each prose chunk's sentences too (livemem/index/sentences.py)
    governance: Governance = field(default_factory=Governance)
    breath_source: str | None = None
    breath_path: str = "BREATH.md"
    # Not from the file: the Chroma server (host, port) the entry point's ``ChromaSettings`` names (``CHROMA_HOST``),
    # handed to ``load_sources``; None: no server (a build never reads the environment for it).
    chroma_server: tuple[str, int] | None = None

    def source(self, name: str) -> SourceConfig:
        for src in self.sources:
            if src.name == name:
                return src
        raise ConfigError(f"{self.path}: no source named {name!r} (known: {', '.join(self.names)})")

    def section(self, name: str, schema: str) -> dict[str, Any] | None:
        """A top-level section owned by another step (``registry``, ``spatial``), validated against
        ``schemas/<schema>.schema.json`` with every problem reported at its file, line and column; None if absent.
        Relative paths inside it are the caller's to resolve against ``self.path.parent``."""
        raw = getattr(self, "_raw", {}).get(name)
        if raw is None:
            return None
        problems = _located_errors(self.path, getattr(self, "_root", None), raw, schema, [name])
        if problems:
            raise ConfigError(f"invalid {name} section in the sources file:\n  " + "\n  ".join(problems))
        return raw

    @property
    def uses_chroma(self) -> bool:
        """Whether versions keep their vectors in Chroma too (``index.vector_store: chroma``, or a Chroma server
        named by ``CHROMA_HOST``, passed in as ``chroma_server``). Serving reads the retrieval snapshot either way; by
        default no Chroma store is written, which is most of a version's bytes and build time at scale. Chroma is the
        optional ``chroma`` extra (``livemem.version.vectors.require_chroma``)."""
        return self.vector_store == "chroma" or self.chroma_server is not None

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    @property
    def chunking(self) -> dict[str, Any]:
        return {
            "max_chunk_chars": self.max_chunk_chars, "max_file_bytes": self.max_file_bytes,
            "chunk_tokens": self.chunk_tokens, "chunker": CHUNKER_VERSION, "sentences": self.sentences,
        }  # fmt: skip


@cache
def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec:
    """Compiled gitignore-style patterns (``**/*.md``, ``docs/``), compiled once per pattern list."""
    return pathspec.PathSpec.from_lines("gitwildmatch", patterns)


def _node_at(node: yaml.Node | None, parts: list[Any]) -> yaml.Node | None:
    """The YAML node at a JSON path, to report line and column of a schema error."""
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return node
    return node


def load_sources(path: str | os.PathLike[str], chroma: ChromaSettings | None = None) -> SourcesConfig:
    """Read, validate and resolve a sources file (an entry point passes ``RAG_SOURCES``: ``PathSettings``, and its
    ``ChromaSettings``: the Chroma server a build mirrors vectors to; None: none). Raises ConfigError listing every
    problem with its location."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"sources file {file} does not exist (set RAG_SOURCES to a YAML sources file)")
    size = file.stat().st_size
    if size > yamlio.MAX_BYTES:
        raise ConfigError(f"{file}: refused: the sources file is {size} bytes, over the {yamlio.MAX_BYTES} allowed")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 (byte {exc.start}): a sources file is UTF-8 text") from exc
    try:
        data, root = yamlio.load_node(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)
        what = "refused" if isinstance(exc, yamlio.YAMLLimitError) else "not valid YAML"
        raise ConfigError(f"{where}: {what}: {getattr(exc, 'problem', exc)}") from exc
    problems = _located_errors(file, root, data, "sources", [])
    if problems:
        raise ConfigError("invalid sources file:\n  " + "\n  ".join(problems))
    config = _resolve(file, data)
    if chroma is not None and chroma.address is not None:
        config = replace(config, chroma_server=chroma.address)
    object.__setattr__(config, "_raw", data)
    object.__setattr__(config, "_root", root)
    return config


def _located_errors(file: Path, root: yaml.Node | None, data: Any, schema: str, prefix: list[Any]) -> list[str]:
    """Schema violations of ``data`` (found at ``prefix`` in the file), each as ``file:line:col: path: message``."""
    problems = []
    for err in sorted(validator(schema).iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        parts = [*prefix, *err.absolute_path]
        node = _node_at(root, parts)
        where = f"{file}:{node.start_mark.line + 1}:{node.start_mark.column + 1}" if node else str(file)
        dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")
        problems.append(f"{where}: {dotted or '(top level)'}: {err.message}")
    return problems


def _resolve(file: Path, data: dict[str, Any]) -> SourcesConfig:
    defaults = load_schema("sources")["$defs"]["source"]["properties"]
    base = file.resolve().parent
    sources = []
    seen: dict[str, int] = {}
    problems = []
    for i, raw in enumerate(data["sources"]):
        name = raw["name"]
        if name in seen:
            problems.append(f"{file}: sources[{i}].name: {name!r} is also the name of sources[{seen[name]}]")
        seen[name] = i
        repo = Path(os.path.expanduser(raw["repo"]))
        sources.append(
            SourceConfig(
                name=name,
                repo=repo if repo.is_absolute() else (base / repo).resolve(),
                collection=raw["collection"],
                access=raw.get("access", defaults["access"]["default"]),
                ref=raw.get("ref", "HEAD"),
                subdir=raw.get("subdir", "").strip("/"),
                include=tuple(raw.get("include", ["**/*"])),
                exclude=tuple(raw.get("exclude", [])),
                sealed=tuple(raw.get("sealed", [])),
                metadata=tuple(MetadataRule(r["set"], tuple(r.get("paths", []))) for r in raw.get("metadata", [])),
            )
        )
    access_by_collection: dict[str, tuple[str, str]] = {}
    for src in sources:
        other = access_by_collection.setdefault(src.collection, (src.access, src.name))
        if other[0] != src.access:
            problems.append(
                f"{file}: collection {src.collection!r} is {other[0]} in source {other[1]!r} "
                f"but {src.access} in source {src.name!r}; a collection has one access level"
            )
    index = data.get("index", {})
    breath = data.get("breath")
    if breath and breath["source"] not in seen:
        problems.append(f"{file}: breath.source: no source named {breath['source']!r}")
    if problems:
        raise ConfigError("invalid sources file:\n  " + "\n  ".join(problems))
    gov = index.get("governance", {})
    return SourcesConfig(
        path=file.resolve(),
        sources=tuple(sources),
        max_chunk_chars=index.get("max_chunk_chars", 2000),
        chunk_tokens=index.get("chunk_tokens", DEFAULT_CHUNK_TOKENS),
        max_file_bytes=index.get("max_file_bytes", 1_000_000),
        retention=Retention.of(index.get("retention")),
        vector_store=index.get("vector_store", "none"),
        encoder=index.get("encoder"),
        precision=index.get("precision"),
        sentences=index.get("sentences", True),
        governance=Governance(gov.get("max_chunks", 1_000_000), float(gov.get("max_size_mb", 10_240))),
        breath_source=breath["source"] if breath else None,
        breath_path=breath.get("path", "BREATH.md") if breath else "BREATH.md",
    )
