"""The rebuilt files of a build: their provenance (``history``), their chunk, parent and skipped-file rows and
BM25 tokens (read and chunked by ``livemem.ingest.read``), and the vectors of their texts (``embed_new``: only
text never embedded before is embedded, the rest comes from the cache)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from livemem.errors import LivingMemoryError
from livemem.index.postings import TermIds
from livemem.index.sentences import Sentences, pack_codes
from livemem.ingest.plan import FilePlan
from livemem.ingest.read import ExtractionBudget, FileTask, ReadJob, read_and_chunk, skip_row
from livemem.model.embed_cache import EmbeddingCache, Store
from livemem.model.embedding import Embedder
from livemem.settings import BuildSettings
from livemem.sources.config import SourcesConfig

log = logging.getLogger(__name__)


@dataclass
class Chunked:
    """What a batch of one source's rebuilt files gives, in path order."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    parents: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    terms: list[TermIds] = field(default_factory=list)  # BM25 tokens of ``rows``, batch by batch, in their order
    truncated: list[tuple[str, int]] = field(default_factory=list)  # (path, size) of files indexed in part


def chunk_batches(
    plan: FilePlan,
    config: SourcesConfig,
    model_id: str,
    settings: BuildSettings,
    budget: ExtractionBudget | None = None,
) -> Iterator[Chunked]:
    """Rows, parent rows and skipped-file rows of the rebuilt files, batch by batch in path order: read and chunked
    by worker processes when there are many files (``read_and_chunk``). A file whose path cannot be indexed (a name
    that is not UTF-8, or ``..``, ``.git``, a ``/`` inside a name: ``TreeEntry.problem``) is reported as skipped for
    that reason without being read (in the first batch). ``budget``: the build's extraction budget."""
    named = [p for p in plan.rebuilt if plan.tree[p].problem is None]
    found = history(plan, named)
    job = ReadJob(
        plan.source, str(plan.git.path), model_id, config.max_file_bytes, config.max_chunk_chars, config.chunk_tokens,
        settings,
    )  # fmt: skip
    created = {p: None if p in plan.new else plan.base_created.get(p) for p in named}
    tasks = [FileTask(p, plan.tree[p], found[p], created[p]) for p in sorted(named)]
    unnamed = Chunked()
    for path in sorted(set(plan.rebuilt) - set(named)):
        entry = plan.tree[path]
        unnamed.skipped.append(skip_row(plan.source.name, path, entry, entry.problem or ""))
        log.warning("source %s: %s skipped (%s)", plan.source.name, path, entry.problem)
    if unnamed.skipped:
        yield unnamed
    for batch in read_and_chunk(job, tasks, plan.git, budget):
        terms = cast(TermIds, batch.terms)  # read_and_chunk's batches have their terms
        out = Chunked(rows=batch.rows, parents=batch.parents, skipped=batch.skipped, terms=[terms])
        for path, size in batch.truncated:
            out.truncated.append((path, size))
            log.warning("source %s: %s is %d bytes; indexed its first %d", job.source.name, path, size,
                        job.max_file_bytes)  # fmt: skip
        yield out


def history(plan: FilePlan, paths: list[str] | None = None) -> dict:
    """Provenance of every rebuilt file (of ``paths`` when given), as a from-scratch build computes it (one walk
    of the whole history).

    A file the base indexed with a known ``created_at`` only needs its last change, which lies in the commits
    since the base when it was touched there; a file new to the source (added, moved in from another source,
    selected by a changed glob, or skipped before) needs its first add, which may lie before the base.
    """
    wanted = set(plan.rebuilt if paths is None else paths)
    ranged = {p for p in wanted if p not in plan.new and plan.base_created.get(p)}
    found: dict = {}
    if ranged and plan.base_commit and plan.git.is_ancestor(plan.base_commit, plan.head):
        found = plan.git.history(plan.head, ranged, since=plan.base_commit)
    missing = wanted - set(found)
    if missing:
        found.update(plan.git.history(plan.head, missing))
    still = wanted - set(found)
    if still:
        raise LivingMemoryError(
            f"source {plan.source.name!r}: no commit in the history of {plan.head} touches {sorted(still)[:5]}"
        )
    return found


# Sentence vectors are stored as int8 codes (livemem.index.sentences): the cache keeps them so (a quarter of float32's
# bytes; at 123k chunks writing 570k float32 sentence vectors took two thirds of a full build).
SENTENCE_CODES = Store("sentence_codes", pack_codes, dtype=np.uint8, extra=4)


def embed_sentences(
    texts: list[list[str]], cache_dir: Path, embedder: Embedder, report: Callable[[str, int, int], None] | None = None
) -> tuple[Sentences, int, int]:
    """The sentences of each chunk row (``texts[r]``: its sentence texts) as int8 codes, from the cache or computed,
    with how many were computed and how many came from the cache; ``report``: progress (``livemem.ingest.progress``)."""
    flat = [t for row in texts for t in row]

    def progress(done: int, todo: int) -> None:
        log.info("embedded %d/%d new sentences", done, todo)
        if report is not None:
            report("sentences", done, todo)

    with EmbeddingCache(cache_dir, embedder.dim) as cache:
        packed, computed, reused = cache.embed(flat, embedder, progress, SENTENCE_CODES)
    return Sentences.from_packed(packed, [len(row) for row in texts], embedder.dim), computed, reused


def embed_new(
    texts: list[str], cache_dir: Path, embedder: Embedder, report: Callable[[str, int, int], None] | None = None
) -> tuple[np.ndarray, int, int]:
    """The vectors of ``texts`` with how many were computed and how many came from the cache; ``report``: progress
    (``livemem.ingest.progress``)."""
    total = len(texts)

    def progress(done: int, todo: int) -> None:
        log.info("embedded %d/%d new texts (%d chunks to store)", done, todo, total)
        if report is not None:
            report("chunks", done, todo)

    with EmbeddingCache(cache_dir, embedder.dim) as cache:
        return cache.embed(texts, embedder, progress)
