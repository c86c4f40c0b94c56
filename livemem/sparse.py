"""The sparse (BM25) side of retrieval, built by the platform when a version is staged, never per request.

bm25s with Lucene scoring over English-stopworded, Snowball-stemmed tokens of each chunk's embedded text
(the chunk with its enclosing headings). ``scores`` returns a score for every chunk, aligned with the version's
retrieval ids, so callers apply metadata filters as a mask before ranking.

BM25 scores depend on term statistics (document frequencies, average length) of the whole indexed corpus, so an
index over every chunk would let a role's scores reveal the words of chunks it may not read. A version therefore
holds one index over all chunks (``bm25/``) and one per access level (``bm25-<level>/``, only that level's
chunks); a role searching collections of one level is scored with that level's statistics only.

Indexes are read into memory, never memory-mapped: a file changed or truncated on disk after loading must not
crash the serving process (a truncated memory-mapped file is SIGBUS on the next access).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

FULL_INDEX = "bm25"


def level_index(level: str) -> str:
    """The directory (under ``retrieval/``) of the index over the chunks of one access level."""
    return f"{FULL_INDEX}-{level}"


@cache
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


def _tokenizer():
    from bm25s.tokenization import Tokenizer

    return Tokenizer(stopwords="en", stemmer=_stemmer())


def _index(texts: list[str]):
    import bm25s

    tokenizer = _tokenizer()
    tokens = tokenizer.tokenize(texts, return_as="tuple", show_progress=False)
    retriever = bm25s.BM25(method="lucene")
    retriever.index(tokens, show_progress=False)
    return retriever, tokenizer


def build_sparse(texts: list[str], path: Path) -> None:
    """Index ``texts`` (in retrieval-id order) and save the index and its vocabulary under ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    retriever, tokenizer = _index(texts)
    retriever.save(str(path))
    tokenizer.save_vocab(str(path))


def build_sparse_per_level(texts: list[str], levels: list[str], retrieval: Path) -> None:
    """``bm25/`` over every text and, when the texts span several access levels, ``bm25-<level>/`` over each
    level's texts (in the same relative order)."""
    build_sparse(texts, retrieval / FULL_INDEX)
    present = sorted(set(levels))
    if len(present) > 1:
        for level in present:
            build_sparse(
                [t for t, lv in zip(texts, levels, strict=True) if lv == level], retrieval / level_index(level)
            )


class SparseIndex:
    """A BM25 index held in memory. ``rows`` maps its documents to the version's rows when it covers only some
    of them (an access level's index); ``scores`` always answers for all ``size`` rows (zero elsewhere)."""

    def __init__(self, retriever, tokenizer, rows: np.ndarray | None = None, size: int | None = None) -> None:
        self.retriever = retriever
        self.tokenizer = tokenizer
        self.documents = int(retriever.scores["num_docs"])
        self.rows = rows
        self.size = self.documents if size is None else size
        # Built once: bm25s would rebuild this reverse vocabulary on every query for return_as="string".
        id_to_word = {i: w for w, i in tokenizer.get_vocab_dict().items()}
        index_ids = retriever.vocab_dict
        self._to_index_id = {i: index_ids[w] for i, w in id_to_word.items() if w and w in index_ids}

    @classmethod
    def load(cls, path: Path, rows: np.ndarray | None = None, size: int | None = None) -> SparseIndex:
        import bm25s

        retriever = bm25s.BM25.load(str(path), mmap=False)
        tokenizer = _tokenizer()
        tokenizer.load_vocab(str(path))
        return cls(retriever, tokenizer, rows, size)

    @classmethod
    def from_texts(cls, texts: list[str], rows: np.ndarray | None = None, size: int | None = None) -> SparseIndex:
        """Indexed now, in memory (a version built before per-level indexes existed)."""
        retriever, tokenizer = _index(texts)
        return cls(retriever, tokenizer, rows, size)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every row for ``query`` (zeros when no query term is in the vocabulary)."""
        ids = self.tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        known = [self._to_index_id[i] for i in ids if i in self._to_index_id]
        if not known:
            return np.zeros(self.size, dtype=np.float32)
        found = np.asarray(self.retriever.get_scores_from_ids(known), dtype=np.float32)
        if self.rows is None:
            return found
        out = np.zeros(self.size, dtype=np.float32)
        out[self.rows] = found
        return out
