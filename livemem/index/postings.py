"""The format half of BM25: a segment's postings (``Postings``, its ``postings.npz``) and the tokenizer that they
and the queries share (``tokens``). Scoring them is ``livemem.index.sparse``'s.

Tokens are what bm25s produces (lower-cased ``\\w\\w+`` words, English stopwords removed, Snowball-stemmed); each
distinct word is stemmed once per process (a bounded memo, ``_STEMS``), by a stemmer per thread. ``heading_text`` is
the text of a chunk's second field, its heading path, whose postings are made the same way.

A version is made of immutable segments (``livemem.version``): each holds the postings of its own chunks only
(``Postings``: per term, the rows holding it and how often; per row, its number of tokens), written when the segment
is written and shared by every later version that keeps those chunks. A build tokenizes its batches apart (in worker
processes, ``Postings.tokenize``) and ``merge``s them into exactly the postings one ``build`` over all the texts gives.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import cast

import numpy as np

_WORDS = re.compile(r"(?u)\b\w\w+\b")


@cache
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


_LOCAL = threading.local()


def _stemmer():
    """This thread's stemmer: a PyStemmer object must not be used by two threads at once (queries are served
    from a thread pool)."""
    found = getattr(_LOCAL, "stemmer", None)
    if found is None:
        import Stemmer

        found = _LOCAL.stemmer = Stemmer.Stemmer("english")
    return found


TermIds = tuple[list[str], np.ndarray, np.ndarray]  # Postings.tokenize: stems, stem ids, ids per text
_STEMS: dict[str, str] = {}  # word -> stem, shared by threads; only ever read with .get, so a clear() is harmless
_STEMS_MAX = 2_000_000  # a bounded memo: words are few, but hostile queries are not


def _stems(words: Iterable[str]) -> dict[str, str]:
    """The stem of each distinct word: remembered ones from the bounded memo (``_STEMS``), the others stemmed in one
    call and remembered."""
    found = {w: _STEMS.get(w) for w in set(words)}
    unknown = [w for w, stem in found.items() if stem is None]
    if unknown:
        new = dict(zip(unknown, _stemmer().stemWords(unknown), strict=True))
        found.update(new)
        if len(_STEMS) > _STEMS_MAX:
            _STEMS.clear()
        _STEMS.update(new)
    return cast(dict[str, str], found)  # every word has its stem now


def heading_text(heading_path: Sequence[str]) -> str:
    """The text of a chunk's heading-path field: its headings, outermost first."""
    return " > ".join(heading_path)


def tokens(text: str) -> list[str]:
    """The BM25 tokens of ``text``, in order (repeats kept)."""
    stop = _stopwords()
    words = [w for w in _WORDS.findall(text.lower()) if w not in stop]
    stems = _stems(words)
    return [stems[w] for w in words]


@dataclass(frozen=True)
class Postings:
    """The postings of one segment: for term ``terms[t]``, rows ``rows[starts[t]:starts[t+1]]`` hold it
    ``tf[...]`` times; ``lengths[r]`` is the number of tokens of row ``r``."""

    terms: np.ndarray  # str, sorted
    starts: np.ndarray  # int64, len(terms) + 1
    rows: np.ndarray  # int32
    tf: np.ndarray  # float32
    lengths: np.ndarray  # float32, one per row of the segment

    @classmethod
    def build(cls, texts: Iterable[str]) -> Postings:
        """Tokenize ``texts`` (row ``i`` is text ``i``) and collect their postings."""
        return cls.merge([cls.tokenize(texts)])

    @staticmethod
    def tokenize(texts: Iterable[str]) -> TermIds:
        """The BM25 tokens of ``texts`` as (stems, the stem ids of every text one after another, ids per text); each
        distinct word is stemmed once. Batches of texts tokenized apart (in a build's worker processes) ``merge``
        into exactly the postings ``build`` gives for all their texts."""
        stop = _stopwords()
        word_term: dict[str, int] = {}  # word -> local term id; -1 for a stopword
        stem_term: dict[str, int] = {}
        per_text: list[np.ndarray] = []
        for text in texts:
            words = _WORDS.findall(text.lower())
            try:  # most texts hold no word unseen by the earlier ones
                ids = np.fromiter(map(word_term.__getitem__, words), dtype=np.int32, count=len(words))
            except KeyError:
                # stems of words this process stemmed before (earlier batches of a build's worker) are remembered
                for word, stem in _stems(set(words).difference(word_term)).items():
                    word_term[word] = -1 if word in stop else stem_term.setdefault(stem, len(stem_term))
                ids = np.fromiter(map(word_term.__getitem__, words), dtype=np.int32, count=len(words))
            per_text.append(ids[ids >= 0])
        counts = np.fromiter((a.size for a in per_text), dtype=np.int64, count=len(per_text))
        flat = np.concatenate(per_text) if per_text else np.zeros(0, dtype=np.int32)
        return list(stem_term), flat, counts

    @classmethod
    def merge(cls, batches: Sequence[TermIds]) -> Postings:
        """The postings of the texts of ``batches`` (``tokenize``), rows numbered across the batches in order,
        vectorised: (term, row) counts come from one ``np.unique`` over all tokens."""
        stem_term: dict[str, int] = {}
        flats: list[np.ndarray] = []
        per_batch: list[np.ndarray] = []
        for stems, ids, counts in batches:
            local = np.fromiter((stem_term.setdefault(s, len(stem_term)) for s in stems), np.int64, len(stems))
            flats.append(local[ids])
            per_batch.append(counts)
        counts = np.concatenate(per_batch) if per_batch else np.zeros(0, dtype=np.int64)
        n = counts.size
        all_stems = np.asarray(list(stem_term), dtype=str)
        order = np.argsort(all_stems, kind="stable")
        rank = np.empty(order.size, dtype=np.int64)
        rank[order] = np.arange(order.size)
        flat = np.concatenate(flats) if flats else np.zeros(0, dtype=np.int64)
        docs = np.repeat(np.arange(n, dtype=np.int64), counts)
        keys, tf = np.unique(rank[flat] * max(n, 1) + docs, return_counts=True)  # sorted by term, then row
        terms_of = keys // max(n, 1)
        starts = np.zeros(order.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(terms_of, minlength=order.size), out=starts[1:])
        return cls(
            terms=all_stems[order],
            starts=starts,
            rows=(keys % max(n, 1)).astype(np.int32),
            tf=tf.astype(np.float32),
            lengths=np.maximum(counts, 1).astype(np.float32),
        )

    def save(self, path: Path) -> None:
        with open(path, "wb") as fh:
            np.savez(fh, terms=self.terms, starts=self.starts, rows=self.rows, tf=self.tf, lengths=self.lengths)

    @classmethod
    def load(cls, path: Path) -> Postings:
        with np.load(path, allow_pickle=False) as data:
            return cls(**{k: data[k] for k in ("terms", "starts", "rows", "tf", "lengths")})

    @property
    def size(self) -> int:
        return int(self.lengths.size)

    def lookup(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(rows, tf) of ``term`` in this segment, or None."""
        i = self.index(term)
        if i < 0:
            return None
        a, b = self.starts[i], self.starts[i + 1]
        return self.rows[a:b], self.tf[a:b]

    def index(self, term: str) -> int:
        """The position of ``term`` in ``terms``, or -1."""
        i = int(np.searchsorted(self.terms, term))
        return i if i < self.terms.size and self.terms[i] == term else -1
