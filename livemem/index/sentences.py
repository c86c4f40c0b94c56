"""Sentence vectors: a second dense signal from the same model, each sentence of a chunk embedded on its own after
the chunk's headings.

A chunk's own vector averages everything it says; a question about one finding matches the one sentence stating
it better. Measured on SciFact train (``docs/decisions/0002-sentence-vectors.md``): each sentence embedded after its
document's title, the best sentence's cosine blended into the chunk's dense score, lifts hybrid nDCG@10 where no
fusion of the chunk cosine and BM25 did.

- **Texts** (``sentence_texts``): prose only (``markdown`` and ``text`` files; code has no sentences). Markdown
  loses its heading lines (the headings are the prefix) and fenced code; the rest is split at blank lines, then
  after ``.``, ``!`` or ``?`` followed by a capital, a digit or a bracket (common abbreviations re-joined), and each
  sentence is embedded as ``heading > path\\nsentence``. A chunk with fewer than two sentences gets none: its own
  vector is that sentence already.
- **Storage** (``Sentences``): per segment, the sentence vectors in chunk order and ``starts`` (chunk row ``r``'s
  sentences are rows ``starts[r]:starts[r + 1]``), in the segment's ``sentences.npz`` (``livemem.version.segments``)
  and its serving copy. A segment written without it holds no sentences: its chunks score as they did. The vectors
  are kept as **int8 codes with a float32 scale per sentence** (``quantize_int8``, as the dense first stage's):
  there are about 4.6 per chunk, and float32 would make them 3 times the rest of a segment (SciFact: 68 MB, int8
  17 MB). A cosine from the codes differs from float32's by about 5e-4 (SciFact train: the same nDCG@10).
- **Scoring** (``Sentences.best``): the best sentence's cosine per chunk, NaN for a chunk without sentences, in one
  compiled pass over those chunks' codes (no gather, no conversion; a fixed order per sentence, so a sentence scores
  the same float in any segment layout). Retrieval uses it for the first fused
  chunks only (``livemem.query.fusion``: ``sentence_weight``, ``sentence_depth``), and in dense mode for the first
  chunks by cosine (``dense_with_sentences``), so a query scores a few hundred sentences, never all of them.

The splitting rule is part of the chunker's version (``CHUNKER_VERSION``): changing it re-chunks every source.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from livemem.index.kernels import EXACT_MATH, quantize_int8

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
        joined = rejoin(" ".join(piece.split()) for piece in SENTENCE_END.split(paragraph.strip()))
        out += [s for s in joined if WORD.search(s)]
    return out


def rejoin(pieces: Iterable[str]) -> list[str]:
    """Pieces split at sentence ends, empty ones dropped, a piece that ends in an abbreviation (``e.g.``, ``Fig.``)
    joined with the next."""
    joined: list[str] = []
    for piece in pieces:
        if not piece:
            continue
        # the piece's last 9 characters hold any abbreviation with the character before it (\b): the same
        # matches as searching the whole piece, without scanning it (5x faster splitting on SciFact)
        if joined and ABBREVIATION.search(joined[-1][-9:]):
            joined[-1] += " " + piece
        else:
            joined.append(piece)
    return joined


def sentence_texts(content: str, heading_path: list[str], kind: str) -> list[str]:
    """What is embedded for a chunk's sentences (``kind``: the file type, ``livemem.ingest.chunking.file_type``):
    ``heading > path\\nsentence`` each, or nothing when the chunk is code or holds fewer than two sentences."""
    if kind not in PROSE_TYPES:
        return []
    if kind == "markdown":
        if "```" in content or "~~~" in content:  # (the patterns cannot match without: skipped, half the time)
            content = FENCED.sub("", content)
        if "#" in content:
            content = HEADING_LINE.sub("", content)
    found = split_sentences(content)
    if len(found) < 2:
        return []
    prefix = " > ".join(h.strip() for h in heading_path if h.strip())
    return [f"{prefix}\n{s}" if prefix else s for s in found]


@dataclass(frozen=True)
class Sentences:
    """The sentence vectors of a segment's chunk rows, as int8 codes with a scale per sentence: row ``r``'s sentences
    are ``starts[r]:starts[r + 1]``, sentence ``i`` stands for ``scales[i] · codes[i]``."""

    codes: np.ndarray  # int8, (sentences, dim)
    scales: np.ndarray  # float32, (sentences,)
    starts: np.ndarray  # int64, (chunk rows + 1,), starts[0] == 0, non-decreasing

    @classmethod
    def from_counts(cls, vectors: np.ndarray, counts: list[int] | np.ndarray, dim: int) -> Sentences:
        """Quantize float32 ``vectors`` (``counts[r]`` of them for row ``r``, in order)."""
        starts = starts_of(counts)
        quantized = quantize_int8(np.asarray(vectors, dtype=np.float32).reshape(int(starts[-1]), dim))
        return cls(quantized.codes, quantized.scales, starts)

    @classmethod
    def from_packed(cls, packed: np.ndarray, counts: list[int] | np.ndarray, dim: int) -> Sentences:
        """The sentences of rows with ``counts[r]`` each, from ``pack_codes``' blobs read as rows of bytes."""
        packed = np.ascontiguousarray(packed, dtype=np.uint8).reshape(-1, 4 + dim)
        scales = np.ascontiguousarray(packed[:, :4]).view(np.float32).reshape(-1)
        return cls(np.ascontiguousarray(packed[:, 4:]).view(np.int8), scales, starts_of(counts))

    @classmethod
    def empty(cls, rows: int, dim: int) -> Sentences:
        return cls(np.zeros((0, dim), np.int8), np.zeros(0, np.float32), np.zeros(rows + 1, dtype=np.int64))

    @property
    def rows(self) -> int:
        return self.starts.size - 1

    @property
    def count(self) -> int:
        return int(self.starts[-1])

    def check(self, rows: int, dim: int) -> None:
        """Raise ValueError unless these are the sentences of ``rows`` chunk rows of ``dim``-dimensional vectors."""
        starts, codes = self.starts, self.codes
        if starts.ndim != 1 or starts.size != rows + 1 or (starts.size and starts[0] != 0):
            raise ValueError(f"sentence starts for {starts.size - 1} rows, expected {rows}")
        if np.any(np.diff(starts) < 0) or codes.ndim != 2 or codes.shape[0] != starts[-1]:
            raise ValueError(f"{codes.shape[0]} sentence vectors do not match their starts ({starts[-1]})")
        if codes.dtype != np.int8 or self.scales.dtype != np.float32 or self.scales.shape != (codes.shape[0],):
            raise ValueError(f"sentence codes {codes.dtype} and scales {self.scales.dtype} {self.scales.shape}")
        if self.count and codes.shape[1] != dim:
            raise ValueError(f"sentence vectors of {codes.shape[1]} dimensions, chunk vectors of {dim}")

    def of(self, row: int) -> np.ndarray:
        """Row ``row``'s sentence vectors as float32 (``scale · codes``)."""
        a, b = self.starts[row], self.starts[row + 1]
        return self.codes[a:b].astype(np.float32) * self.scales[a:b, None]

    def take(self, rows: np.ndarray) -> Sentences:
        """The sentences of chunk ``rows``, in that order, as the sentences of rows 0.. (a merge keeps the rows a
        version holds): codes and scales copied as they are."""
        rows = np.asarray(rows, dtype=np.int64)
        counts = self.starts[rows + 1] - self.starts[rows]
        picked = _ranges(self.starts[rows], counts)
        return Sentences(self.codes[picked], self.scales[picked], starts_of(counts))

    def best(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Each chunk row's best sentence cosine to ``query`` (float32), NaN for a row without sentences: one
        compiled pass over those rows' codes, nothing gathered (``_best_of_rows``)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(rows.size, np.nan, dtype=np.float32)
        if rows.size and self.count:
            _best_of_rows(self.codes, self.scales, self.starts, rows, np.ascontiguousarray(query, np.float32), out)
        return out

    def save(self, path: Path) -> None:
        with open(path, "wb") as fh:
            np.savez(fh, codes=self.codes, scales=self.scales, starts=self.starts)

    @classmethod
    def load(cls, path: Path) -> Sentences:
        with np.load(path, allow_pickle=False) as data:
            return cls(data["codes"], data["scales"], data["starts"])


def starts_of(counts: list[int] | np.ndarray) -> np.ndarray:
    """``starts`` for rows with ``counts[r]`` sentences each: 0, then their running sum."""
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=starts[1:])
    return starts


def pack_codes(vectors: np.ndarray) -> list[bytes]:
    """Each float32 vector as one blob: its scale (float32), then its int8 codes (``quantize_int8``, row by row: a
    vector's codes do not depend on the others). ``Sentences.from_packed`` reads them back."""
    quantized = quantize_int8(np.asarray(vectors, dtype=np.float32))
    return [scale.tobytes() + codes.tobytes() for scale, codes in zip(quantized.scales, quantized.codes, strict=True)]


def concat(parts: list[Sentences], dim: int) -> Sentences:
    """The sentences of several pieces' rows, one after the other."""
    if not parts:
        return Sentences.empty(0, dim)
    starts = [np.zeros(1, dtype=np.int64)]
    offset = 0
    for part in parts:
        starts.append(part.starts[1:] + offset)
        offset += part.count
    codes = np.concatenate([p.codes.reshape(-1, dim) for p in parts])
    return Sentences(codes, np.concatenate([p.scales for p in parts]).astype(np.float32), np.concatenate(starts))


@numba.njit(nogil=True, cache=True, fastmath=EXACT_MATH)
def _best_of_rows(codes, scales, starts, rows, query, out):  # pragma: no cover - compiled
    """For each of ``rows``, the best ``scale · (codes · query)`` of its sentences (left NaN when it has none):
    each sentence's sum runs in one order, so a sentence scores the same float wherever it is stored."""
    for k in range(rows.size):
        first, end = starts[rows[k]], starts[rows[k] + 1]
        for s in range(first, end):
            row = codes[s]
            total = np.float32(0)
            for i in range(query.size):
                total += np.float32(row[i]) * query[i]
            score = total * scales[s]
            if s == first or score > out[k]:
                out[k] = score


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
