"""Sentence vectors: a second dense signal from the same model, each sentence of a chunk embedded on its own after
the chunk's headings.

A chunk's own vector averages everything it says; a question about one finding matches the one sentence stating
it better. Measured on SciFact train (``docs/serving.md``, Round 9 and 10): each sentence embedded after its
document's title, the best sentence's cosine blended into the chunk's dense score, lifts hybrid nDCG@10 where no
fusion of the chunk cosine and BM25 did.

- **Texts** (``sentence_texts``): prose only (``markdown`` and ``text`` files; code has no sentences). Markdown
  loses its heading lines (the headings are the prefix) and fenced code; the rest is split at blank lines, then
  after ``.``, ``!`` or ``?`` followed by a capital, a digit or a bracket (common abbreviations re-joined), and each
  sentence is embedded as ``heading > path\\nsentence``. A chunk with fewer than two sentences gets none: its own
  vector is that sentence already.
- **Storage** (``Sentences``): per segment, the sentence vectors in chunk order and ``starts`` (chunk row ``r``'s
  sentences are rows ``starts[r]:starts[r + 1]``), in the segment's ``sentences.npz`` (``livemem.version.segments``)
  and its serving copy. A segment written without it holds no sentences: its chunks score as they did.
- **Scoring** (``Sentences.best``): the best sentence's exact cosine per chunk (the same compiled dot product as the
  chunk vectors, ``livemem.index.dense``), NaN for a chunk without sentences. Retrieval uses it for the first fused
  chunks only (``livemem.query.fusion``: ``sentence_weight``, ``sentence_depth``), so a query scores a few hundred
  sentences, never all of them.

The splitting rule is part of the chunker's version (``CHUNKER_VERSION``): changing it re-chunks every source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from livemem.index.dense import _gathered_scores

ABBREVIATION = re.compile(r"(\bet al|\be\.g|\bi\.e|\bvs|\bFig|\bFigs|\bapprox|\bca|\bNo|\bref|\bDr|\bcf)\.$", re.I)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")
PARAGRAPH = re.compile(r"\n[ \t]*\n")
HEADING_LINE = re.compile(r"^ {0,3}#{1,6}(?:[ \t].*)?$", re.M)
FENCED = re.compile(r"^ {0,3}(```|~~~).*?(?:^ {0,3}\1[^\n]*$|\Z)", re.M | re.S)
WORD = re.compile(r"\w")
PROSE_TYPES = ("markdown", "text")
SENTENCES_FILE = "sentences.npz"  # a segment's sentence vectors, when it has any (livemem.version.segments)


def split_sentences(text: str) -> list[str]:
    """The sentences of a paragraph-structured text, whitespace-normalised, in order."""
    out: list[str] = []
    for paragraph in PARAGRAPH.split(text):
        joined: list[str] = []
        for piece in SENTENCE_END.split(paragraph.strip()):
            piece = " ".join(piece.split())
            if not piece:
                continue
            if joined and ABBREVIATION.search(joined[-1]):
                joined[-1] += " " + piece
            else:
                joined.append(piece)
        out += [s for s in joined if WORD.search(s)]
    return out


def sentence_texts(content: str, heading_path: list[str], kind: str) -> list[str]:
    """What is embedded for a chunk's sentences (``kind``: the file type, ``livemem.ingest.chunking.file_type``):
    ``heading > path\\nsentence`` each, or nothing when the chunk is code or holds fewer than two sentences."""
    if kind not in PROSE_TYPES:
        return []
    if kind == "markdown":
        content = HEADING_LINE.sub("", FENCED.sub("", content))
    found = split_sentences(content)
    if len(found) < 2:
        return []
    prefix = " > ".join(h.strip() for h in heading_path if h.strip())
    return [f"{prefix}\n{s}" if prefix else s for s in found]


@dataclass(frozen=True)
class Sentences:
    """The sentence vectors of a segment's chunk rows: row ``r``'s are ``vectors[starts[r]:starts[r + 1]]``."""

    vectors: np.ndarray  # float32, (sentences, dim), L2-normalised
    starts: np.ndarray  # int64, (chunk rows + 1,), starts[0] == 0, non-decreasing

    @classmethod
    def from_counts(cls, vectors: np.ndarray, counts: list[int] | np.ndarray, dim: int) -> Sentences:
        starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(np.asarray(counts, dtype=np.int64), out=starts[1:])
        return cls(np.ascontiguousarray(vectors, dtype=np.float32).reshape(int(starts[-1]), dim), starts)

    @classmethod
    def empty(cls, rows: int, dim: int) -> Sentences:
        return cls(np.zeros((0, dim), dtype=np.float32), np.zeros(rows + 1, dtype=np.int64))

    @property
    def rows(self) -> int:
        return self.starts.size - 1

    @property
    def count(self) -> int:
        return int(self.starts[-1])

    def check(self, rows: int, dim: int) -> None:
        """Raise ValueError unless these are the sentences of ``rows`` chunk rows of ``dim``-dimensional vectors."""
        starts = self.starts
        if starts.ndim != 1 or starts.size != rows + 1 or (starts.size and starts[0] != 0):
            raise ValueError(f"sentence starts for {starts.size - 1} rows, expected {rows}")
        if np.any(np.diff(starts) < 0) or self.vectors.ndim != 2 or self.vectors.shape[0] != starts[-1]:
            raise ValueError(f"{self.vectors.shape[0]} sentence vectors do not match their starts ({starts[-1]})")
        if self.count and self.vectors.shape[1] != dim:
            raise ValueError(f"sentence vectors of {self.vectors.shape[1]} dimensions, chunk vectors of {dim}")

    def of(self, row: int) -> np.ndarray:
        return self.vectors[self.starts[row] : self.starts[row + 1]]

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(vectors, counts)`` of chunk ``rows`` in that order (a merge keeps the rows a version holds)."""
        rows = np.asarray(rows, dtype=np.int64)
        counts = self.starts[rows + 1] - self.starts[rows]
        return self.vectors[_ranges(self.starts[rows], counts)], counts

    def best(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Each chunk row's best sentence cosine to ``query`` (float32), NaN for a row without sentences."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(rows.size, np.nan, dtype=np.float32)
        counts = self.starts[rows + 1] - self.starts[rows]
        has = counts > 0
        if not has.any():
            return out
        firsts, counts = self.starts[rows][has], counts[has]
        scores = _gathered_scores(self.vectors, _ranges(firsts, counts), query)
        offsets = np.zeros(counts.size, dtype=np.int64)
        np.cumsum(counts[:-1], out=offsets[1:])
        out[has] = np.maximum.reduceat(scores, offsets)
        return out

    def save(self, path: Path) -> None:
        with open(path, "wb") as fh:
            np.savez(fh, vectors=self.vectors, starts=self.starts)

    @classmethod
    def load(cls, path: Path) -> Sentences:
        with np.load(path, allow_pickle=False) as data:
            return cls(np.ascontiguousarray(data["vectors"], dtype=np.float32), data["starts"].astype(np.int64))


def concat(parts: list[tuple[np.ndarray, np.ndarray]], dim: int) -> Sentences:
    """One ``Sentences`` from ``(vectors, counts)`` pieces, in order."""
    if not parts:
        return Sentences.empty(0, dim)
    vectors = np.concatenate([np.asarray(v, dtype=np.float32).reshape(-1, dim) for v, _ in parts])
    return Sentences.from_counts(vectors, np.concatenate([np.asarray(c, dtype=np.int64) for _, c in parts]), dim)


def _ranges(firsts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(f, f + c) for f, c in zip(firsts, counts)])`` without a Python loop."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    out = np.ones(total, dtype=np.int64)
    nonzero = counts > 0
    starts_at = (ends - counts)[nonzero]
    f, c = firsts[nonzero], counts[nonzero]
    out[starts_at[0]] = f[0]
    if f.size > 1:
        out[starts_at[1:]] = f[1:] - (f[:-1] + c[:-1] - 1)
    return np.cumsum(out)
