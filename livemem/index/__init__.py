"""The index's own data structures and formats, which builds write and readers and queries read: the chunk record
and its content-addressed identity (``records``), the dense vectors' int8 codes and the exact two-stage dense top-k
(``dense``), and BM25's tokens, per-segment postings and scorer (``sparse``). It imports no other step."""
