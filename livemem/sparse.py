"""The sparse (BM25) side of retrieval, built by the platform when a version is staged, never per request.

bm25s with Lucene scoring over English-stopworded, Snowball-stemmed tokens of each chunk's embedded text
(the chunk with its enclosing headings). ``scores`` returns a score for every chunk, aligned with the version's
retrieval ids, so callers apply metadata filters as a mask before ranking.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np


@cache
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


def _tokenizer():
    from bm25s.tokenization import Tokenizer

    return Tokenizer(stopwords="en", stemmer=_stemmer())


def build_sparse(texts: list[str], path: Path) -> None:
    """Index ``texts`` (in retrieval-id order) and save the index and its vocabulary under ``path``."""
    import bm25s

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    tokens = tokenizer.tokenize(texts, return_as="tuple", show_progress=False)
    retriever = bm25s.BM25(method="lucene")
    retriever.index(tokens, show_progress=False)
    retriever.save(str(path))
    tokenizer.save_vocab(str(path))


class SparseIndex:
    """A saved BM25 index, memory-mapped read-only."""

    def __init__(self, path: Path) -> None:
        import bm25s

        self.retriever = bm25s.BM25.load(str(path), mmap=True)
        self.tokenizer = _tokenizer()
        self.tokenizer.load_vocab(str(path))
        # Built once: bm25s would rebuild this reverse vocabulary on every query for return_as="string".
        id_to_word = {i: w for w, i in self.tokenizer.get_vocab_dict().items()}
        index_ids = self.retriever.vocab_dict
        self._to_index_id = {i: index_ids[w] for i, w in id_to_word.items() if w and w in index_ids}
        self.size = int(self.retriever.scores["num_docs"])

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (zeros when no query term is in the vocabulary)."""
        ids = self.tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        known = [self._to_index_id[i] for i in ids if i in self._to_index_id]
        if not known:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self.retriever.get_scores_from_ids(known), dtype=np.float32)
