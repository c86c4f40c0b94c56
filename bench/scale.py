"""Scale benchmark (issue 13): what a full build, a one-file change, a nightly attention publish and a serving
worker cost as the corpus grows, measured with the project's own pipeline and nothing else.

Run from the project root::

    .venv/bin/python -m bench.scale --sizes 2500,25000              # recorded in results/scale.{json,md}
    .venv/bin/python -m bench.scale --sizes 123000 --work bench/.work/scale   # on a quiet machine
    .venv/bin/python -m bench.scale --sizes 500000 --allow-huge     # the >= 500k point (hours, many GB)

Each size is a target number of **chunks**. The corpus is SciFact (``../shared/data/ir/scifact/corpus.jsonl``)
cycled: file ``docs/c<copy>/<id>.md`` holds ``# {title}``, a line ``Copy <copy> of SciFact document <id>.`` (so
every cycled copy differs from the others) and the abstract; as many files are taken, in corpus order, as it
needs for the target chunk count (counted with ``livemem.ingest.chunking.chunk_file``). The repository is written in one
``git fast-import`` (seconds even for 100,000 files; bare, no working tree), tagged ``bench-base``, and kept under
``--work`` for the next run, which resets its branch to the tag. The index home is new on every run.

The embedding model is replaced by ``StandInEmbedder``, a **stand-in** that exists only in this benchmark: it has
the interface ``build_version``, the embedding cache and ``Retriever`` use (``model_id``, ``dim`` 384, ``encode``,
``encode_one``) and returns L2-normalised float32 vectors derived from a SHAKE-256 hash of each text, so that
only the pipeline is timed, never the model. Its vectors are noise: dense rankings are meaningless, timings are
not (serving does the same matrix product and partial sort whatever the vectors hold).

Per size, in one index home:

1. ``full_build``: ``build_version`` + ``IndexHome.publish`` on an empty home (empty embedding cache); the
   builder's own ``timings``; the version's size on disk.
2. ``one_file_change``: one file (fixed seed) gets a sentence appended, committed; build + publish; the disk the
   new version adds.
   With ``--documents N`` (a **mixed corpus**), the repository also holds N generated PDFs
   (``docs/pdf/p<i>.pdf``, 3 pages each of SciFact abstracts, made with reportlab, reproducible) and then
   ``one_pdf_change``: one PDF (fixed seed) gets a sentence added on its last page, committed; build + publish;
   what it re-extracted and re-embedded. A one-PDF change must cost what it changes, like a one-file change.
3. ``attention_publish``: a trace file of 200 events for one day (``rag_index/traces/<day>-bench.jsonl``), then
   ``livemem.usage.attention.rollup_day`` + publish; time and disk added.
4. ``serving``: a fresh worker process loads the full build's version with ``livemem.engine.snapshot.load_snapshot``
   (what ``IndexReader.snapshot()`` runs when ``CURRENT`` moves), then switches to the one-file change's version
   and to the attention version, holding the old snapshot while loading the new one as ``IndexReader`` does;
   each load is timed. Then ``--queries`` hybrid top-10 queries (SciFact train queries, vector given: the
   stand-in's vector of the query text) through ``Retriever.search``, after 20 warm-up queries: p50 / p99. Its
   ``VmRSS`` / ``VmHWM`` (``/proc/self/status``) are recorded; then a second worker does the same while the first
   stays alive, and the total unique memory of the two (``Pss`` from ``/proc/<pid>/smaps_rollup``) is compared
   with twice one worker's ``VmRSS``.

"Disk added by a version" counts each file of its directory whose inode no other kept version uses (hard-linked
files shared with another version count nothing); "versions total" counts every inode under ``versions/``
once. The embedding cache, attention state and signals outside ``versions/`` are reported apart.

Approximate search (issue 38): a segment of at least ``LIVEMEM_ANN_MIN_ROWS`` rows gets its graph in the build
(its time is in ``segment_s``); the worker then runs the same queries again with every row scanned
(``LIVEMEM_ANN=exact``) and reports both latencies and the recall@10 of the final top 10 against exact. Measure it
with ``--embedder structured`` (``StructuredStandIn``: real vectors plus per-copy noise; hash vectors have no
neighbours to find)::

    LIVEMEM_ANN_MIN_ROWS=250000 .venv/bin/python -m bench.scale --sizes 1000000 --allow-huge \
        --embedder structured --noise 1.0 --output bench/results/scale-1m.json

Beyond what a build fits in memory: a full build of 2M chunks was killed by the OOM killer at 24.3 GB of anonymous
memory on this 24 GB machine (twice, the second time after ``EmbeddingCache.embed`` stopped holding an object per
vector); 1.5M fits (≈ 20 GB at its peak). ``bench.scale_home`` measures the one-file change, the attention publish
and serving over such a home (``bench/results/scale-1.5m.md``).

Results: ``--output`` (default ``bench/results/scale.json``) and the same path with ``.md``; the machine facts
and the exact command are in both. Other processes sharing the CPUs distort wall times: every phase records the
load average and its process CPU time beside the wall time.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import hashlib
import io
import json
import logging
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.registry_bench import machine_facts

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = PROJECT_ROOT.parent / "shared/data/ir/scifact/corpus.jsonl"
DEFAULT_QUERIES = PROJECT_ROOT.parent / "shared/data/ir/scifact/queries.train.jsonl"
DEFAULT_WORK = PROJECT_ROOT / "bench/.work/scale"
DEFAULT_OUTPUT = PROJECT_ROOT / "bench/results/scale.json"
SOURCE = COLLECTION = "scifact"
MAX_CHUNK_CHARS = 2000
RETENTION = 10  # every version of a run stays kept: disk added is measured against all of them
HUGE = 400_000  # sizes from here on need --allow-huge
BASE_TAG = "bench-base"
BRANCH = "main"
SEED = 13
ATTENTION_DAY = date(2026, 3, 1)
ATTENTION_EVENTS = 200
WARMUP_QUERIES = 20
COMMIT_TIME = 1_767_225_600  # 2026-01-01T00:00:00Z: generated repositories are identical on every machine
IDENTITY = "Living Memory bench <bench@example.invalid>"

KERNEL_ENV = "LIVEMEM_DENSE_KERNEL"  # DenseSettings.kernel (read by the serving worker: worker_main)
log = logging.getLogger("bench.scale")


class StandInEmbedder:
    """STAND-IN for ``livemem.model.embedding.Embedder``, for this benchmark only (never shipped in ``livemem``).

    Vectors are a SHAKE-256 hash of each text read as 384 signed bytes, L2-normalised: deterministic, distinct
    per text, and about a microsecond each, so a build is timed without the model.
    """

    model_id = "bench/stand-in-shake256-hash-embedder"
    dim = 384
    batch_size = 64

    def __init__(self) -> None:
        self.encoded = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        raw = b"".join(hashlib.shake_256(t.encode("utf-8")).digest(self.dim) for t in texts)
        vectors = np.frombuffer(raw, dtype=np.int8).reshape(len(texts), self.dim).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        self.encoded += len(texts)
        return vectors

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]


COPY_LINE = re.compile(r"Copy \d+ of SciFact document")


class StructuredStandIn(StandInEmbedder):
    """STAND-IN with the structure of real vectors, for measuring approximate search (``--embedder structured``).

    A cycled copy's chunk gets the **real** all-MiniLM-L6-v2 vector of the same chunk in copy 0 (its text with the
    copy number set to 0; embedded once by the real model, cached in ``--work``) plus a per-text noise vector of
    norm ``noise`` (SHAKE-256 of the text, as ``StandInEmbedder``), renormalised: copies of one abstract are
    distinct points around its real vector, the corpus keeps the real topics, and queries (``encode_queries``) are
    the real model's vectors of the SciFact questions, without noise. Hash vectors (the default stand-in) are
    structureless: every row nearly ties with every other, the case no graph index is for."""

    def __init__(self, noise: float, cache: Path) -> None:
        super().__init__()
        self.noise = noise
        self.model_id = f"bench/stand-in-scifact-minilm-plus-noise-{noise:g}"
        self.cache = cache
        self._real: dict[str, np.ndarray] = {}
        if cache.is_file():
            with np.load(cache) as stored:
                self._real = dict(zip(stored["keys"].tolist(), stored["vectors"], strict=True))
        self._model = None
        self._unsaved, self._saved_at = 0, time.monotonic()
        atexit.register(self.save)

    def _real_vectors(self, texts: Sequence[str]) -> np.ndarray:
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._real}
        if missing:
            if self._model is None:
                from livemem.model.embedding import Embedder

                self._model = Embedder(threads=max(1, os.cpu_count() or 1))
            vectors = self._model.encode(list(missing.values()))
            self._real.update(zip(missing, np.asarray(vectors, dtype=np.float32), strict=True))
            self._unsaved += len(missing)
            if time.monotonic() - self._saved_at > 120:
                self.save()
        return np.stack([self._real[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        """Write the real vectors computed so far to the cache (every two minutes while embedding, and at exit)."""
        if not self._unsaved:
            return
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cache.with_suffix(".tmp.npz")
        np.savez(tmp, keys=np.array(list(self._real)), vectors=np.stack(list(self._real.values())))
        os.replace(tmp, self.cache)
        self._unsaved, self._saved_at = 0, time.monotonic()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        base = self._real_vectors([COPY_LINE.sub("Copy 0 of SciFact document", t) for t in texts])
        vectors = base + np.float32(self.noise) * super().encode(texts)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._real_vectors(list(texts))


def make_embedder(kind: str, noise: float, work: Path) -> StandInEmbedder:
    if kind == "structured":
        return StructuredStandIn(noise, work / "real-vectors.npz")
    return StandInEmbedder()


# --- measuring -------------------------------------------------------------------------------------------------
def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@contextmanager
def phase(entry: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Record wall time, process CPU time and the load average around a block into ``entry``."""
    entry["loadavg_before"] = _load()
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        yield entry
    finally:
        entry["wall_s"] = round(time.perf_counter() - t0, 3)
        entry["cpu_s"] = round(time.process_time() - c0, 3)
        entry["loadavg_after"] = _load()


def _inodes(directory: Path) -> dict[tuple[int, int], int]:
    """Size of every regular file under ``directory``, by (device, inode): a hard-linked file appears once."""
    found: dict[tuple[int, int], int] = {}
    for root, _, files in os.walk(directory):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            found[(st.st_dev, st.st_ino)] = st.st_size
    return found


def _segments(home, version_id: str) -> set[str]:
    return {e["id"] for e in home.manifest(version_id).get("segments") or []}


def version_bytes_added(home, version_id: str) -> dict[str, int]:
    """Bytes of ``version_id``'s files whose inode no other kept version uses, by top-level entry of the version
    directory (``tables.duckdb``, ``chroma``, ...), plus ``parts``: the shared segments it names that no other kept
    version names; and their ``total``."""
    others: set[tuple[int, int]] = set()
    other_segments: set[str] = set()
    for other in home.published_versions():
        if other != version_id:
            others.update(_inodes(home.version_dir(other)))
            other_segments |= _segments(home, other)
    added: dict[str, int] = {}
    for entry in sorted(home.version_dir(version_id).iterdir()):
        found = _inodes(entry) if entry.is_dir() else _inodes_of_file(entry)
        added[entry.name] = sum(size for key, size in found.items() if key not in others)
    added["parts"] = sum(
        sum(_inodes(home.root / "parts" / seg).values()) for seg in _segments(home, version_id) - other_segments
    )
    added["total"] = sum(added.values())
    return added


def _inodes_of_file(path: Path) -> dict[tuple[int, int], int]:
    st = os.lstat(path)
    return {(st.st_dev, st.st_ino): st.st_size}


def disk_state(home) -> dict[str, int]:
    """Bytes under ``versions/`` (each inode once) and under the rest of the index home."""
    out = {"versions_total_bytes": sum(_inodes(home.versions).values())}
    out["parts_bytes"] = sum(_inodes(home.root / "parts").values()) if (home.root / "parts").is_dir() else 0
    out["cache_bytes"] = sum(_inodes(home.cache_dir).values()) if home.cache_dir.is_dir() else 0
    outside = [p for p in home.root.iterdir() if p.name not in ("versions", "cache", "staging", "parts")]
    out["other_home_bytes"] = sum(
        sum(_inodes(p).values()) if p.is_dir() else p.stat().st_size for p in outside if p.exists()
    )
    return out


def proc_kib(path: str, key: str) -> int | None:
    """A ``key:  N kB`` value from a /proc status-like file, in KiB."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def percentiles_ms(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples) * 1000.0
    return {
        "p50_ms": round(float(np.percentile(values, 50)), 3),
        "p99_ms": round(float(np.percentile(values, 99)), 3),
        "mean_ms": round(float(values.mean()), 3),
        "n": len(samples),
    }


# --- the corpus as a git repository ----------------------------------------------------------------------------
def read_jsonl(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def doc_path(copy: int, doc_id: str) -> str:
    return f"docs/c{copy:03d}/{doc_id}.md"


def doc_text(copy: int, doc: dict[str, str]) -> str:
    return f"# {doc['title']}\n\nCopy {copy} of SciFact document {doc['_id']}.\n\n{doc['text']}\n"


def files_for_chunks(docs: list[dict[str, str]], target: int) -> tuple[int, int]:
    """How many cycled files make at least ``target`` chunks, and how many chunks they make."""
    from livemem.ingest.chunking import chunk_file

    per_doc = [len(chunk_file(doc_path(0, d["_id"]), doc_text(0, d), MAX_CHUNK_CHARS)) for d in docs]
    files = chunks = 0
    while chunks < target:
        chunks += per_doc[files % len(docs)]
        files += 1
    return files, chunks


def _git_env() -> dict[str, str]:
    """No user or system git configuration: generated repositories are the same on every machine."""
    return {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, input=stdin, capture_output=True, check=True, env=_git_env())
    return done.stdout.decode()


def _blob(content: str) -> bytes:
    return _data(content.encode("utf-8"))


def _data(data: bytes) -> bytes:
    return b"data %d\n" % len(data) + data + b"\n"


def _commit_header(message: str, when: int, parent: str | None, branch: str = BRANCH) -> bytes:
    head = f"commit refs/heads/{branch}\ncommitter {IDENTITY} {when} +0000\n".encode() + _blob(message)
    return head + (f"from {parent}\n".encode() if parent else b"")


PDF_PAGES = 3
PDF_LINE_CHARS = 95


def pdf_path(i: int) -> str:
    return f"docs/pdf/p{i:05d}.pdf"


def pdf_pages(i: int, docs: list[dict[str, str]], extra: str = "") -> list[str]:
    """Page texts of generated PDF ``i``: three SciFact abstracts (one a page), titled; ``extra`` ends the last."""
    pages = []
    for page in range(PDF_PAGES):
        doc = docs[(i * PDF_PAGES + page) % len(docs)]
        pages.append(f"{doc['title']}\nPDF {i}, page {page + 1}.\n{doc['text']}")
    if extra:
        pages[-1] += "\n" + extra
    return pages


def pdf_bytes(pages: list[str]) -> bytes:
    """A text-layer PDF of ``pages`` (reportlab, invariant: the same bytes on every machine)."""
    import textwrap

    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=letter, invariant=1, pageCompression=1)
    for text in pages:
        y = letter[1] - 72
        for paragraph in text.split("\n"):
            for line in textwrap.wrap(paragraph, PDF_LINE_CHARS) or [""]:
                pdf.setFont("Helvetica", 9)
                pdf.drawString(54, y, line)
                y -= 12
                if y < 54:
                    break
        pdf.showPage()
    pdf.save()
    return out.getvalue()


def ensure_repo(work: Path, docs: list[dict[str, str]], files: int, documents: int = 0) -> tuple[Path, bool]:
    """A bare repository of ``files`` cycled documents (and ``documents`` generated PDFs) in one commit tagged
    ``bench-base``, its branch reset to the tag; reused when it exists (returns whether it was created)."""
    repo = work / "repos" / (f"scifact-{files}-files" + (f"-{documents}-pdfs" if documents else "") + ".git")
    if repo.is_dir():
        try:
            base = git(repo, "rev-parse", f"refs/tags/{BASE_TAG}^{{commit}}").strip()
            git(repo, "update-ref", f"refs/heads/{BRANCH}", base)
            return repo, False
        except subprocess.CalledProcessError:
            shutil.rmtree(repo)  # an interrupted generation: make it again
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "--bare", "-b", BRANCH)
    # streamed file by file: the import of 400,000 files never holds the corpus in memory twice
    with subprocess.Popen(
        ["git", "fast-import", "--quiet", "--done"], cwd=repo, stdin=subprocess.PIPE, env=_git_env()
    ) as proc:
        proc.stdin.write(_commit_header(f"SciFact corpus cycled to {files} files", COMMIT_TIME, None))
        for i in range(files):
            copy, doc = divmod(i, len(docs))
            path = doc_path(copy, docs[doc]["_id"])
            proc.stdin.write(f"M 100644 inline {path}\n".encode() + _blob(doc_text(copy, docs[doc])))
        for i in range(documents):
            proc.stdin.write(f"M 100644 inline {pdf_path(i)}\n".encode() + _data(pdf_bytes(pdf_pages(i, docs))))
        proc.stdin.write(b"done\n")
        proc.stdin.close()
    if proc.returncode:
        raise RuntimeError(f"git fast-import failed with status {proc.returncode} in {repo}")
    git(repo, "tag", BASE_TAG, BRANCH)
    return repo, True


def commit_one_pdf_change(repo: Path, documents: int, docs: list[dict[str, str]]) -> str:
    """Add a sentence to the last page of one generated PDF (fixed seed) in a new commit; returns its path."""
    i = random.Random(SEED + 1).randrange(documents)
    path = pdf_path(i)
    parent = git(repo, "rev-parse", f"refs/heads/{BRANCH}").strip()
    raw = pdf_bytes(pdf_pages(i, docs, extra="Edited for the scale benchmark's one-PDF change."))
    stream = _commit_header(f"Edit {path}", COMMIT_TIME + 7200, parent)
    stream += f"M 100644 inline {path}\n".encode() + _data(raw) + b"done\n"
    git(repo, "fast-import", "--quiet", "--done", stdin=stream)
    return path


def commit_one_change(repo: Path, files: int, docs: list[dict[str, str]], branch: str = BRANCH) -> str:
    """Append a sentence to one file (chosen with a fixed seed) in a new commit on the branch; returns its path."""
    copy, doc = divmod(random.Random(SEED).randrange(files), len(docs))
    path = doc_path(copy, docs[doc]["_id"])
    parent = git(repo, "rev-parse", f"refs/heads/{branch}").strip()
    text = git(repo, "cat-file", "blob", f"{parent}:{path}") + "Edited for the scale benchmark's one-file change.\n"
    stream = _commit_header(f"Edit {path}", COMMIT_TIME + 3600, parent, branch)
    stream += f"M 100644 inline {path}\n".encode() + _blob(text) + b"done\n"
    git(repo, "fast-import", "--quiet", "--done", stdin=stream)
    return path


def sources_yaml(repo: Path, vector_store: str | None = None, documents: int = 0) -> str:
    """The sources file; ``index.vector_store`` is written only when asked (else the project's default holds)."""
    return (
        "# Written by bench/scale.py: the cycled SciFact corpus as one git source.\n"
        "version: 1\n"
        "index:\n"
        f"  max_chunk_chars: {MAX_CHUNK_CHARS}\n"
        f"  retention: {RETENTION}\n"
        + (f"  vector_store: {vector_store}\n" if vector_store else "")
        + "  governance: {max_chunks: 100000000, max_size_mb: 100000000}\n"
        "sources:\n"
        f"  - name: {SOURCE}\n"
        f"    repo: {json.dumps(str(repo))}\n"
        f"    ref: {BRANCH}\n"
        f"    collection: {COLLECTION}\n"
        "    access: public\n"
        + ('    include: ["docs/**/*.md", "docs/pdf/*.pdf"]\n' if documents else '    include: ["docs/**/*.md"]\n')
    )


# --- the phases of one size ------------------------------------------------------------------------------------
def build_and_publish(config, home, embedder, entry: dict[str, Any]) -> str:
    from livemem.ingest.build import build_version

    with phase(entry):
        t0 = time.perf_counter()
        from livemem.settings import BuildSettings

        # LIVEMEM_ANN_MIN_ROWS: a segment at least this large gets its approximate-search graph (in segment_s)
        result = build_version(config, home, embedder, settings=BuildSettings.from_env())
        t1 = time.perf_counter()
        if result.version_id is None:
            raise RuntimeError(f"nothing was built: {result.reason}")
        home.publish(result.version_id, result.base_version, config.retention)
        t2 = time.perf_counter()
    entry.update(
        {
            "build_s": round(t1 - t0, 3),
            "publish_s": round(t2 - t1, 3),
            "total_s": round(t2 - t0, 3),
            "timings": result.timings,
            "embeddings_computed": result.embeddings_computed,
            "embeddings_reused": result.embeddings_reused,
            "total_chunks": result.manifest["total_chunks"],
            "vector_store": result.manifest.get("vector_store", "chroma"),  # manifests before the option: chroma
            "version_id": result.version_id,
        }
    )
    return result.version_id


def write_attention_traces(home, version_id: str) -> int:
    """One day of usage (``ATTENTION_EVENTS`` events: retrievals in queries of 5 chunks, some judged useful)."""
    from livemem.version import connect

    con = connect(home.version_dir(version_id))
    try:
        ids = [c for (c,) in con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchall()]
    finally:
        con.close()
    rng = random.Random(SEED)
    day = ATTENTION_DAY.isoformat()
    lines: list[str] = []
    while len(lines) < ATTENTION_EVENTS:
        trace = str(uuid.UUID(int=rng.getrandbits(128)))
        chunks = rng.sample(ids, min(5, len(ids)))
        for rank, chunk in enumerate(chunks, 1):
            lines.append(_event(day, "retrieval", trace, chunk, rank=rank))
        lines.append(_event(day, "feedback", trace, chunks[0], useful=True))
    home.traces.mkdir(parents=True, exist_ok=True)
    (home.traces / f"{day}-bench.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)


def _event(day: str, kind: str, trace: str, chunk: str, rank: int | None = None, useful: bool | None = None) -> str:
    return json.dumps(
        {
            "timestamp": f"{day}T12:00:00Z",
            "event": kind,
            "trace_id": trace,
            "chunk_id": chunk,
            "query": "bench query" if kind == "retrieval" else None,
            "rank": rank,
            "breath_phase": "Δ3" if kind == "retrieval" else None,
            "agent": "bench",
            "role": "public",
            "useful": useful,
            "index_version": "bench",
            "context": {"related_chunks": []},
        }
    )


def attention_publish(home, version_id: str, entry: dict[str, Any]) -> str:
    from livemem.sources.breath import Breath
    from livemem.usage.attention import AttentionConfig, rollup_day

    entry["trace_events"] = write_attention_traces(home, version_id)
    with phase(entry):
        result = rollup_day(home, ATTENTION_DAY, AttentionConfig(), Breath("Δ3", "normal"))
        if not result.staged:
            raise RuntimeError(f"the attention rollup staged nothing: {result.reason}")
        t1 = time.perf_counter()
        home.publish(result.version_id, result.base_version, RETENTION)
        entry["publish_s"] = round(time.perf_counter() - t1, 3)
    entry.update({"timings": result.timings, "chunks_used": result.chunks_used, "version_id": result.version_id})
    entry["total_s"] = entry["wall_s"]
    return result.version_id


def start_worker(
    home: Path,
    versions: list[str],
    queries: int,
    queries_file: Path,
    kernel: str | None = None,
    embedder: tuple[str, float, Path] = ("hash", 0.0, DEFAULT_WORK),
) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "bench.scale", "worker", "--home", str(home), "--queries", str(queries)]
    cmd += ["--queries-file", str(queries_file), "--versions", *versions]
    cmd += ["--embedder", embedder[0], "--noise", str(embedder[1]), "--work", str(embedder[2])]
    env = dict(os.environ)
    if kernel:
        env[KERNEL_ENV] = kernel
    return subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def read_worker(proc: subprocess.Popen) -> dict[str, Any]:
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        raise RuntimeError(f"serving worker exited with status {proc.returncode} before reporting")
    return json.loads(line)


def serving(
    home_dir: Path,
    versions: list[str],
    queries: int,
    queries_file: Path,
    kernel: str | None = None,
    embedder: tuple[str, float, Path] = ("hash", 0.0, DEFAULT_WORK),
) -> dict[str, Any]:
    """One worker alone (loads, switches, queries, RSS), then a second beside it: PSS of both. The serving copies
    are removed first, so the first worker's first load includes writing them (the second maps them)."""
    shutil.rmtree(home_dir / "cache" / "serving", ignore_errors=True)
    first = start_worker(home_dir, versions, queries, queries_file, kernel, embedder)
    second = None
    try:
        one = read_worker(first)
        pss_alone = proc_kib(f"/proc/{first.pid}/smaps_rollup", "Pss") or 0
        second = start_worker(home_dir, versions, queries, queries_file, kernel, embedder)
        two = read_worker(second)
        pss = [proc_kib(f"/proc/{p.pid}/smaps_rollup", "Pss") for p in (first, second)]
        rss = [proc_kib(f"/proc/{p.pid}/status", "VmRSS") for p in (first, second)]
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.stdin.close()  # the worker exits when its stdin closes
                proc.wait(timeout=60)
    out = {"kernel": kernel or "default", "worker": one,
           "second_worker": {k: two[k] for k in ("loads", "queries", "vm_rss_kib")},
           "serving_copies_bytes": sum(f.stat().st_size for f in (home_dir / "cache" / "serving").rglob("*") if f.is_file())}  # fmt: skip
    out["two_workers"] = {
        "pss_kib": pss,
        "total_pss_kib": sum(p or 0 for p in pss),
        "rss_kib_now": rss,
        "one_worker_alone_pss_kib": pss_alone,
        "twice_one_worker_rss_kib": 2 * one["vm_rss_kib"],
    }
    total = out["two_workers"]["total_pss_kib"]
    out["two_workers"]["total_pss_over_twice_one_rss"] = round(total / max(1, 2 * one["vm_rss_kib"]), 3)
    out["two_workers"]["total_pss_over_twice_one_pss"] = round(total / max(1, 2 * pss_alone), 3)
    return out


def run_size(
    target: int,
    work: Path,
    docs: list[dict[str, str]],
    queries: int = 200,
    queries_file: Path = DEFAULT_QUERIES,
    vector_store: str | None = None,
    kernels: tuple[str, ...] = (),
    documents: int = 0,
    embedder_kind: tuple[str, float] = ("hash", 0.0),
) -> dict[str, Any]:
    """Every measurement of one size (a target number of chunks); the core the smoke test runs too."""
    from livemem.sources.config import load_sources
    from livemem.version.store import IndexHome

    files, expected_chunks = files_for_chunks(docs, target)
    out: dict[str, Any] = {"target_chunks": target, "files": files, "expected_chunks": expected_chunks}
    if documents:
        out["documents"] = documents
    with phase(out.setdefault("repo", {})) as entry:
        repo, created = ensure_repo(work, docs, files, documents)
        entry.update({"path": str(repo), "created": created, "head": git(repo, "rev-parse", BRANCH).strip()})
    size_dir = work / f"size-{target}"
    home_dir = size_dir / "index"
    shutil.rmtree(home_dir, ignore_errors=True)
    size_dir.mkdir(parents=True, exist_ok=True)
    sources = size_dir / "sources.yaml"
    sources.write_text(sources_yaml(repo, vector_store, documents), encoding="utf-8")
    config = load_sources(sources)
    home = IndexHome(home_dir)
    embedder = make_embedder(*embedder_kind, work)
    served_with = (*embedder_kind, work)

    full = out["full_build"] = {}
    v_full = build_and_publish(config, home, embedder, full)
    full["bytes_by_part"] = version_bytes_added(home, v_full)
    full["version_bytes"] = full["bytes_by_part"]["total"]
    full.update(disk_state(home))
    out["chunks"] = full["total_chunks"]
    out["vector_store"] = full["vector_store"]
    log.info("%d chunks: full build %.1f s, %.0f MB", out["chunks"], full["total_s"], full["version_bytes"] / 1e6)

    change = out["one_file_change"] = {}
    change["path"] = commit_one_change(repo, files, docs)
    v_change = build_and_publish(config, home, embedder, change)
    change["bytes_added_by_part"] = version_bytes_added(home, v_change)
    change["bytes_added"] = change["bytes_added_by_part"]["total"]
    change["bytes_added_fraction_of_first"] = round(change["bytes_added"] / full["version_bytes"], 4)
    change.update(disk_state(home))
    log.info("one-file change: %.2f s, %.0f MB added", change["total_s"], change["bytes_added"] / 1e6)
    if documents:
        pdf = out["one_pdf_change"] = {}
        pdf["path"] = commit_one_pdf_change(repo, documents, docs)
        v_change = build_and_publish(config, home, embedder, pdf)
        pdf["bytes_added"] = version_bytes_added(home, v_change)["total"]
        pdf["bytes_added_fraction_of_first"] = round(pdf["bytes_added"] / full["version_bytes"], 4)
        log.info("one-PDF change: %.2f s, %d embeddings computed", pdf["total_s"], pdf["embeddings_computed"])

    attention = out["attention_publish"] = {}
    v_attention = attention_publish(home, v_change, attention)
    attention["bytes_added_by_part"] = version_bytes_added(home, v_attention)
    attention["bytes_added"] = attention["bytes_added_by_part"]["total"]
    attention["bytes_added_fraction_of_first"] = round(attention["bytes_added"] / full["version_bytes"], 4)
    attention.update(disk_state(home))
    log.info("attention publish: %.2f s, %.0f MB added", attention["total_s"], attention["bytes_added"] / 1e6)

    with phase(out.setdefault("serving", {})) as entry:
        entry.update(
            serving(
                home_dir, [v_full, v_change, v_attention], queries, queries_file, (kernels or (None,))[0], served_with
            )
        )
    for kernel in kernels[1:]:  # the same versions served with another first-stage kernel
        with phase(out.setdefault("serving_by_kernel", {}).setdefault(kernel, {})) as entry:
            entry.update(serving(home_dir, [v_full, v_change, v_attention], queries, queries_file, kernel, served_with))
    worker = out["serving"]["worker"]
    log.info("serving: switch %.2f s, hybrid p50 %.2f ms", worker["loads"][1]["s"], worker["queries"]["p50_ms"])
    return out


# --- the serving worker (a separate process) -------------------------------------------------------------------
def hybrid_answers(snap, retriever, collections, texts, vectors) -> tuple[list, list, list[float]]:
    """The hybrid top 10 (rows, scores) of each query after the warm-up ones, the dense top 10 alone, and the
    hybrid queries' times (vector given)."""
    from livemem.query.types import Query

    hybrid, dense, times = [], [], []
    for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        t0 = time.perf_counter()
        result = retriever.search(snap, Query(text=text, top_k=10, mode="hybrid"), collections, vector=vector)
        if i >= WARMUP_QUERIES:
            times.append(time.perf_counter() - t0)
            hybrid.append(([h.row for h in result.chunks], [h.score for h in result.chunks]))
            rows, scores = snap.dense.top(vector, 10)
            dense.append((rows.tolist(), scores.tolist()))
    return hybrid, dense, times


def recall_at_10(found, truth) -> float:
    """The share of the exact top 10 found. The cycled corpus repeats chunks word for word (a copy differs only
    in its first chunk), so rows tie exactly: a found row scoring at least the exact 10th score counts."""
    shares = []
    for (rows, scores), (exact_rows, exact_scores) in zip(found, truth, strict=True):
        if not exact_rows:
            continue
        kth = exact_scores[-1]
        same = len(set(rows) & set(exact_rows))
        tied = sum(1 for r, x in zip(rows, scores, strict=True) if r not in exact_rows and x >= kth - 1e-6)
        shares.append(min(len(exact_rows), same + tied) / len(exact_rows))
    return round(float(np.mean(shares)), 4)


def _exact_comparison(snap, retriever, collections, texts, vectors) -> dict[str, Any]:
    """The same queries with every row scanned (``LIVEMEM_ANN=exact``), timed, and the recall@10 of the final
    top 10 with the graphs against it: of the hybrid answer (what a user gets) and of the dense ranking alone."""
    with_graph = hybrid_answers(snap, retriever, collections, texts, vectors)
    exact = hybrid_answers(snap.with_engine(snap.engine.replace(ann="exact")), retriever, collections, texts, vectors)

    def same_rows(found, truth) -> float:
        return round(float(np.mean([len(set(f[0]) & set(t[0])) / max(1, len(t[0]))
                                    for f, t in zip(found, truth, strict=True)])), 4)  # fmt: skip

    return {
        "queries": percentiles_ms(exact[2]),
        "recall_at_10_hybrid": recall_at_10(with_graph[0], exact[0]),
        "recall_at_10_dense": recall_at_10(with_graph[1], exact[1]),
        "same_rows_at_10_hybrid": same_rows(with_graph[0], exact[0]),  # ties counted as misses
        "same_rows_at_10_dense": same_rows(with_graph[1], exact[1]),
    }


def worker_main(argv: list[str]) -> None:
    """Load each version in turn (holding the previous one meanwhile, as ``IndexReader`` does), run the hybrid
    queries on the last, print one JSON line, then wait until stdin closes (so the parent can read its PSS)."""
    parser = argparse.ArgumentParser(prog="bench.scale worker")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--versions", nargs="+", required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--queries-file", type=Path, default=DEFAULT_QUERIES)
    parser.add_argument("--embedder", choices=("hash", "structured"), default="hash")
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    args = parser.parse_args(argv)

    from threadpoolctl import threadpool_limits

    from livemem.engine.snapshot import load_snapshot
    from livemem.query.retrieval import Retriever
    from livemem.query.types import Query
    from livemem.settings import EngineConfig
    from livemem.version.store import IndexHome

    # one BLAS thread, as the serving app sets (serving/state.py): several make the per-query product far slower
    threadpool_limits(1, user_api="blas")
    import torch

    torch.set_num_threads(1)  # the dense first stage runs on torch's kernels: one thread, as serving sets
    home = IndexHome(args.home, engine=EngineConfig.from_env())  # the kernel this worker was started with (KERNEL_ENV)
    embedder = make_embedder(args.embedder, args.noise, args.work)
    retriever = Retriever(embedder)
    loads = []
    snap = None
    for version in args.versions:
        t0 = time.perf_counter()
        fresh = load_snapshot(home, version)
        loads.append({"version": version, "s": round(time.perf_counter() - t0, 4), "chunks": fresh.size})
        if snap is not None:
            snap.close()
        snap = fresh
        gc.collect()
    texts = [q["text"] for q in read_jsonl(args.queries_file)]
    wanted = [texts[i % len(texts)] for i in range(args.queries + WARMUP_QUERIES)]
    vectors = embedder.encode_queries(wanted) if isinstance(embedder, StructuredStandIn) else embedder.encode(wanted)
    collections = snap.collections_for(frozenset({"public"}))
    samples: list[float] = []
    stages: list[dict[str, float]] = []
    for i, (text, vector) in enumerate(zip(wanted, vectors, strict=True)):
        t0 = time.perf_counter()
        result = retriever.search(snap, Query(text=text, top_k=10, mode="hybrid"), collections, vector=vector)
        elapsed = time.perf_counter() - t0
        if len(result.chunks) != min(10, snap.size):
            raise RuntimeError(f"hybrid query returned {len(result.chunks)} chunks")
        if i >= WARMUP_QUERIES:
            samples.append(elapsed)
            stages.append(result.timings_ms)
    graphs = sum(g is not None for g in snap.dense.graphs)
    exact = _exact_comparison(snap, retriever, collections, wanted, vectors) if graphs else None
    gc.collect()
    report = {
        "loads": loads,
        "queries": percentiles_ms(samples),
        "graphs": graphs,  # segments answered by their approximate-search graph (livemem.index.ann)
        **({"exact": exact} if exact else {}),
        # where a query's time goes (Retrieval.timings_ms: filter, dense, sparse, score, rank), median per stage
        "query_stage_p50_ms": {k: round(float(np.median([t.get(k, 0.0) for t in stages])), 3) for k in stages[0]},
        "first_stage_kernel": getattr(snap.dense.kernel(), "name", None),
        "vm_rss_kib": proc_kib("/proc/self/status", "VmRSS"),
        "vm_hwm_kib": proc_kib("/proc/self/status", "VmHWM"),
    }
    print(json.dumps(report), flush=True)
    sys.stdin.read()


# --- report ----------------------------------------------------------------------------------------------------
def project_line(project: dict[str, Any]) -> str:
    commit = f"commit `{project['commit'][:12]}`" if project["commit"] else f"tree `{project['root']}`"
    changed = project["livemem_modified"]
    return commit + (f" with livemem/ changes ({', '.join(changed)})" if changed else "")


def _mb(n: int | float) -> str:
    return f"{n / 1e6:,.1f} MB"


def report_md(results: dict[str, Any]) -> str:
    rows = []
    for r in results["sizes"]:
        if "error" in r:
            rows.append(f"| {r['target_chunks']:,} (target) | failed: {r['error'].splitlines()[-1]} |")
            continue
        full, change, att, srv = r["full_build"], r["one_file_change"], r["attention_publish"], r["serving"]
        w, two = srv["worker"], srv["two_workers"]
        chroma = f"{full['timings']['chroma_s']:.1f} s" if "chroma_s" in full["timings"] else "no Chroma store"
        rows.append(
            f"| {r['chunks']:,} | {r['files']:,} | {full['total_s']:.1f} s | {chroma} "
            f"| {change['total_s']:.2f} s | {_mb(full['version_bytes'])} | {_mb(change['bytes_added'])} "
            f"({100 * change['bytes_added_fraction_of_first']:.1f} %) | {_mb(change['versions_total_bytes'] + change.get('parts_bytes', 0))} "
            f"| {att['total_s']:.2f} s, {_mb(att['bytes_added'])} | {w['loads'][0]['s']:.2f} s "
            f"| {w['loads'][1]['s']:.2f} s | {w['vm_rss_kib'] / 1024:,.0f} MiB "
            f"| {two['total_pss_kib'] / 1024:,.0f} MiB ({two['total_pss_over_twice_one_pss']:.2f}) "
            f"| {w['queries']['p50_ms']:.2f} / {w['queries']['p99_ms']:.2f} ms |"
        )
    pdf_rows = [
        f"| {r['chunks']:,} | {r['documents']:,} | {r['one_file_change']['total_s']:.2f} s "
        f"({r['one_file_change']['embeddings_computed']} embedded) | {r['one_pdf_change']['total_s']:.2f} s "
        f"({r['one_pdf_change']['embeddings_computed']} embedded) | {_mb(r['one_pdf_change']['bytes_added'])} |"
        for r in results["sizes"]
        if "error" not in r and "one_pdf_change" in r
    ]
    timing_rows = []
    for r in results["sizes"]:
        if "error" in r:
            continue
        for name in ("full_build", "one_file_change", "one_pdf_change"):
            if name not in r:
                continue
            t = r[name]["timings"]
            timing_rows.append(
                f"| {r['chunks']:,} | {name} | "
                + ", ".join(f"{k} {v}" for k, v in t.items())
                + f" | publish {r[name]['publish_s']} s | {r[name]['cpu_s']} s CPU | {r[name]['loadavg_before']} |"
            )
    disk_rows = []
    for r in results["sizes"]:
        if "error" in r:
            continue
        for name, key in (
            ("full_build", "bytes_by_part"),
            ("one_file_change", "bytes_added_by_part"),
            ("attention_publish", "bytes_added_by_part"),
        ):
            parts = r[name][key]
            shown = ", ".join(f"{k} {_mb(v)}" for k, v in parts.items() if k != "total")
            disk_rows.append(f"| {r['chunks']:,} | {name} | {_mb(parts['total'])} | {shown} |")
    stage_rows = [
        f"| {r['chunks']:,} | " + ", ".join(f"{k} {v}" for k, v in r["serving"]["worker"]["query_stage_p50_ms"].items())
        for r in results["sizes"]
        if "error" not in r and "query_stage_p50_ms" in r["serving"]["worker"]
    ]
    stages = ["", "Hybrid query, median ms per stage (`Retrieval.timings_ms`):", "", "| chunks | stages |", "|---|---|"]
    kernel_rows = []
    for r in results["sizes"]:
        if "error" in r:
            continue
        for srv in [r["serving"], *r.get("serving_by_kernel", {}).values()]:
            w, two = srv["worker"], srv["two_workers"]
            kernel_rows.append(
                f"| {r['chunks']:,} | {srv.get('kernel', 'default')} | {w['loads'][0]['s']:.2f} s "
                f"| {srv['second_worker']['loads'][0]['s']:.2f} s | {w['loads'][1]['s']:.2f} s "
                f"| {w['vm_rss_kib'] / 1024:,.0f} MiB | {two['total_pss_kib'] / 1024:,.0f} MiB "
                f"({two['total_pss_over_twice_one_pss']:.2f}) | {_mb(srv.get('serving_copies_bytes', 0))} "
                f"| {w['queries']['p50_ms']:.2f} / {w['queries']['p99_ms']:.2f} ms "
                f"| {', '.join(f'{k} {v}' for k, v in w.get('query_stage_p50_ms', {}).items())} |"
            )
    kernels = [
        "",
        "Serving by dense first-stage kernel (`LIVEMEM_DENSE_KERNEL`; first load includes writing the serving copies, "
        "the second worker maps them):",
        "",
        "| chunks | kernel | first worker, first load | second worker, first load | switch | one worker RSS "
        "| 2 workers total PSS (÷ 2 × one alone) | serving copies on disk | hybrid p50 / p99 | stages (ms) |",
        "|" + "---|" * 10,
        *kernel_rows,
    ]
    warm_rows = [
        f"| {r['chunks']:,} | "
        + ", ".join(f"{run['total_s']:.2f} s" for run in r["one_file_change_warm"]["runs"])
        + f" | `{r['one_file_change_warm']['command']}` |"
        for r in results["sizes"]
        if "error" not in r and "one_file_change_warm" in r
    ]
    warm = [
        "",
        "One-file changes again on the same home, the embedder's model loaded first (`--changes-only`; build + "
        "publish each):",
        "",
        "| chunks | one-file changes | command |",
        "|---|---|---|",
        *warm_rows,
    ]
    ann_rows = []
    for r in results["sizes"]:
        if "error" in r:
            continue
        w = r["serving"]["worker"]
        if "exact" in w:
            e = w["exact"]
            ann_rows.append(
                f"| {r['chunks']:,} | {w['graphs']} | {w['queries']['p50_ms']:.2f} / {w['queries']['p99_ms']:.2f} ms "
                f"| {e['queries']['p50_ms']:.2f} / {e['queries']['p99_ms']:.2f} ms | {e['recall_at_10_hybrid']:.4f} "
                f"({e.get('same_rows_at_10_hybrid', float('nan')):.4f}) | {e['recall_at_10_dense']:.4f} "
                f"({e.get('same_rows_at_10_dense', float('nan')):.4f}) |"
            )
    ann = [
        "",
        "Approximate search (`livemem.index.ann`; segments of at least `LIVEMEM_ANN_MIN_ROWS` rows have a graph): the "
        "same worker, the same queries, with the graphs and with every row scanned (`LIVEMEM_ANN=exact`); recall@10 "
        "of the final top 10 against the exact one (a row tying the exact 10th score counts: the cycled corpus repeats "
        "chunks word for word; in brackets, the same rows only):",
        "",
        "| chunks | segments with a graph | hybrid p50 / p99, graphs | hybrid p50 / p99, exact | recall@10 hybrid "
        "| recall@10 dense |",
        "|---|---|---|---|---|---|",
        *ann_rows,
    ]
    m = results["machine"]
    e = results.get("embedder", {})
    embedding = (
        f"Embedding: **STAND-IN with real structure** (`bench.scale.StructuredStandIn`): each chunk the real "
        f"all-MiniLM-L6-v2 vector of its copy-0 text plus a per-copy hash-noise vector of norm {e.get('noise')}, "
        "renormalised; queries are the real model's vectors of the SciFact questions. Corpus: SciFact abstracts "
        "cycled into one markdown file each (a copy-number line makes every copy differ), one commit in a bare git "
        "repository."
        if e.get("class") == "bench.scale.StructuredStandIn"
        else "Embedding: **STAND-IN** (`bench.scale.StandInEmbedder`: SHAKE-256 of each text as 384 signed bytes, "
        "L2-normalised), so only the pipeline is timed. Corpus: SciFact abstracts cycled into one markdown file "
        "each (a copy-number line makes every copy differ), one commit in a bare git repository."
    )
    return "\n".join(
        [
            "# Scale benchmark (issue 13)",
            "",
            f"{results['label']}. Run {results['started_at']} on {m['cpu_model']} ({m['nproc']} cores, "
            f"{m['ram_gib']} GiB), Python {m['python']}; project {project_line(results['project'])}.",
            "",
            f"Command: `{results['command']}`",
            *(
                [
                    "",
                    "Serving measured again (`--serving-only`, the same versions): "
                    + "; ".join(
                        f"{run['at']}, commit `{run['project']['commit'][:12]}`, `{run['command']}`"
                        for r in results["sizes"]
                        for run in r.get("serving_runs", [])
                    ),
                ]
                if any(r.get("serving_runs") for r in results["sizes"])
                else []
            ),
            "",
            embedding,
            "",
            "| chunks | files | full build (no embedding) | of which Chroma | one-file change, build + publish "
            "| version size | disk added by the change | 2 versions | attention publish, disk added "
            "| worker first load | worker switch | one worker RSS | 2 workers total PSS (÷ 2 × one alone) "
            "| hybrid top-10 p50 / p99 (vector given) |",
            "|" + "---|" * 14,
            *rows,
            *(
                [
                    "",
                    "Mixed corpus (`--documents`: generated 3-page PDFs beside the markdown): a one-PDF change "
                    "(a sentence added on its last page) against a one-markdown-file change, build + publish:",
                    "",
                    "| chunks | PDFs | one-file change | one-PDF change | disk added by the PDF change |",
                    "|---|---|---|---|---|",
                    *pdf_rows,
                ]
                if pdf_rows
                else []
            ),
            "",
            "Builder timings (`BuildResult.timings`), publish, process CPU time, load average before:",
            "",
            "| chunks | phase | timings (s) | publish | CPU | load |",
            "|---|---|---|---|---|---|",
            *timing_rows,
            "",
            "Disk each version adds, by part of the version directory (inodes no other kept version uses):",
            "",
            "| chunks | version | added | by part |",
            "|---|---|---|---|",
            *disk_rows,
            *(stages + [row + " |" for row in stage_rows] if stage_rows else []),
            *(kernels if kernel_rows else []),
            *(ann if ann_rows else []),
            *(warm if warm_rows else []),
            "",
            "Disk added by a version: bytes of its files whose inode no other kept version uses. Worker switch: "
            "`load_snapshot` of the one-file change's version while holding the full build's. RSS: `VmRSS` of "
            "one worker after its switches and queries; PSS: `Pss` of `/proc/<pid>/smaps_rollup` with two workers alive, "
            "divided by twice one worker's PSS while it ran alone (1.0: the two share nothing).",
            "",
        ]
    )


def _embedder_of(results: dict[str, Any]) -> tuple[str, float]:
    """The stand-in (``--embedder``, ``--noise``) a result file's versions were built with."""
    facts = results.get("embedder", {})
    kind = "structured" if facts.get("class") == "bench.scale.StructuredStandIn" else "hash"
    return kind, float(facts.get("noise") or 0.0)


def _embedder_facts(kind: str, noise: float) -> dict[str, Any]:
    if kind == "structured":
        return {"class": "bench.scale.StructuredStandIn", "noise": noise,
                "model_id": f"bench/stand-in-scifact-minilm-plus-noise-{noise:g}"}  # fmt: skip
    return {"class": "bench.scale.StandInEmbedder", "model_id": StandInEmbedder.model_id}


def command_line(argv: list[str]) -> str:
    """The command as typed from the project root (the interpreter relative to it when it is the project's)."""
    python = Path(sys.executable)
    shown = python.relative_to(PROJECT_ROOT).as_posix() if python.is_relative_to(PROJECT_ROOT) else str(python)
    return shlex.join([shown, "-m", "bench.scale", *argv])


def project_state() -> dict[str, Any]:
    """The project commit benchmarked and the files of ``livemem/`` changed in its working tree (empty when the
    code is exactly the commit's; no commit when run from an exported tree)."""

    def run_git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    changed = [line[3:] for line in run_git("status", "--porcelain", "--", "livemem").splitlines() if line]
    return {"commit": run_git("rev-parse", "HEAD"), "livemem_modified": changed, "root": str(PROJECT_ROOT)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        worker_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2500,25000", help="target chunk counts, comma-separated")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="generated repositories and index homes")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--queries-file", type=Path, default=DEFAULT_QUERIES)
    parser.add_argument("--queries", type=int, default=200, help="timed hybrid queries per size")
    parser.add_argument("--label", default="noisy baseline", help="what the numbers are (shown in the report)")
    parser.add_argument(
        "--vector-store", choices=("none", "chroma"), help="index.vector_store in the sources file (default: unset)"
    )
    parser.add_argument(
        "--kernels",
        default="",
        help="dense first-stage kernels to serve with, comma-separated (int8, fbgemm, torch-half)",
    )
    parser.add_argument(
        "--documents", type=int, default=0, help="a mixed corpus: this many generated 3-page PDFs beside the markdown"
    )
    parser.add_argument(
        "--embedder",
        choices=("hash", "structured"),
        default="hash",
        help="hash: StandInEmbedder (noise vectors); structured: StructuredStandIn (real vectors + per-copy noise)",
    )
    parser.add_argument("--noise", type=float, default=1.0, help="structured: the per-copy noise vector's norm")
    parser.add_argument("--allow-huge", action="store_true", help=f"allow sizes of {HUGE:,} chunks and more")
    parser.add_argument("--report-only", action="store_true", help="rewrite the Markdown from --output's JSON")
    parser.add_argument(
        "--changes-only",
        type=int,
        default=0,
        help="N one-file changes again on the homes --output's JSON names, the embedder loaded first (as a build "
        "process holds it)",
    )
    parser.add_argument(
        "--serving-only",
        action="store_true",
        help="measure serving again over the versions --output's JSON names (their index homes under --work kept)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(message)s")
    log.setLevel(logging.INFO)
    if args.report_only:
        results = json.loads(args.output.read_text(encoding="utf-8"))
        args.output.with_suffix(".md").write_text(report_md(results), encoding="utf-8")
        return 0
    if args.serving_only:
        return serve_again(args)
    if args.changes_only:
        return change_again(args)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    kernels = tuple(k.strip() for k in args.kernels.split(",") if k.strip())
    if any(s >= HUGE for s in sizes) and not args.allow_huge:
        parser.error(f"sizes of {HUGE:,} chunks or more take hours and tens of GB: add --allow-huge")
    docs = read_jsonl(args.corpus)
    results: dict[str, Any] = {
        "label": args.label,
        "command": command_line(argv),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "project": project_state(),
        "embedder": {"stand_in": True, **_embedder_facts(args.embedder, args.noise)},
        "machine": {**machine_facts(), "loadavg_at_start": _load()},
        "sizes": [],
    }

    def measure(target: int) -> dict[str, Any]:
        return run_size(
            target, args.work, docs, args.queries, args.queries_file, args.vector_store, kernels, args.documents,
            (args.embedder, args.noise),
        )  # fmt: skip

    return measure_sizes(sizes, measure, results, args.output, report_md)


def serve_again(args: argparse.Namespace) -> int:
    """``--serving-only``: the serving measurements of each size in ``--output`` again (a change to serving
    measured without building the versions again); the build figures are kept, the run recorded."""
    results = json.loads(args.output.read_text(encoding="utf-8"))
    kind, noise = _embedder_of(results)
    for r in results["sizes"]:
        if "error" in r:
            continue
        versions = [r[p]["version_id"] for p in ("full_build", "one_file_change", "attention_publish")]
        home_dir = args.work / f"size-{r['target_chunks']}" / "index"
        with phase(r.setdefault("serving", {})) as entry:
            entry.update(
                serving(home_dir, versions, args.queries, args.queries_file, None,
                        (kind, noise, args.work))
            )  # fmt: skip
        r.setdefault("serving_runs", []).append(
            {"at": datetime.now(UTC).isoformat(timespec="seconds"), "project": project_state(), "command":
             command_line(sys.argv[1:]), "load": _load()}
        )  # fmt: skip
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    args.output.with_suffix(".md").write_text(report_md(results), encoding="utf-8")
    return 0


def change_again(args: argparse.Namespace) -> int:
    """``--changes-only N``: N more one-file changes (build + publish) on each size's home, the embedder's model
    loaded first: the full run's change can include the structured stand-in loading the real model for the new
    text, which a build process holds loaded."""
    from livemem.sources.config import load_sources
    from livemem.version.store import IndexHome

    results = json.loads(args.output.read_text(encoding="utf-8"))
    embedder = make_embedder(*_embedder_of(results), args.work)
    embedder.encode(["the model loaded before the changes are timed"])
    docs = read_jsonl(args.corpus)
    for r in results["sizes"]:
        if "error" in r:
            continue
        size_dir = args.work / f"size-{r['target_chunks']}"
        config, home = load_sources(size_dir / "sources.yaml"), IndexHome(size_dir / "index")
        repo = Path(r["repo"]["path"])
        runs = []
        for _ in range(args.changes_only):
            entry: dict[str, Any] = {"path": commit_one_change(repo, r["files"], docs)}
            build_and_publish(config, home, embedder, entry)
            runs.append({k: entry[k] for k in ("total_s", "timings", "loadavg_before", "embeddings_computed")})
        r["one_file_change_warm"] = {"runs": runs, "command": command_line(sys.argv[1:]),
                                     "project": project_state()}  # fmt: skip
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    args.output.with_suffix(".md").write_text(report_md(results), encoding="utf-8")
    return 0


def measure_sizes(
    sizes: list[int],
    measure: Callable[[int], dict[str, Any]],
    results: dict[str, Any],
    output: Path,
    report: Callable[[dict[str, Any]], str],
) -> int:
    """``measure(size)`` for each size into ``results["sizes"]`` (a failure is recorded with its traceback and the
    next size still measured), ``output`` (JSON) and its Markdown ``report`` rewritten after each size, so a long
    run keeps what it measured. Returns the exit status: 2 when a size failed."""
    status = 0
    for target in sizes:
        try:
            results["sizes"].append(measure(target))
        except Exception:
            status = 2
            results["sizes"].append({"target_chunks": target, "error": traceback.format_exc()})
            log.error("size %d failed:\n%s", target, results["sizes"][-1]["error"])
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        output.with_suffix(".md").write_text(report(results), encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())
