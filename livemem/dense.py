"""Dense (vector) scoring over a snapshot's rows.

``DenseRows`` holds the vectors of the rows a snapshot holds, per segment (the segment arrays are shared with other
snapshots of the same process); ``rows @ vector`` scores every row, in snapshot row order.
"""

from __future__ import annotations

import numpy as np


class DenseRows:
    """The vectors of a snapshot's rows, kept per segment (shared with other snapshots): ``matrix @ vector``
    scores every row; ``materialize()`` is the whole matrix in row order (a copy)."""

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray]], dim: int) -> None:
        self.parts = parts  # (segment vectors, the segment rows this snapshot holds, in order)
        self.size = sum(int(rows.size) for _, rows in parts)
        self.shape = (self.size, dim)

    def __matmul__(self, vector: np.ndarray) -> np.ndarray:
        if not self.parts:
            return np.zeros(0, dtype=np.float32)
        # the whole segment, then the rows held: a product over a few deleted rows costs less than copying the rest
        out = [dense @ vector if rows.size == dense.shape[0] else (dense @ vector)[rows] for dense, rows in self.parts]
        return np.concatenate(out)

    def materialize(self) -> np.ndarray:
        if not self.parts:
            return np.zeros(self.shape, dtype=np.float32)
        return np.concatenate([dense[rows] for dense, rows in self.parts])
