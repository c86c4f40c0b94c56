"""A build's embedding step says how it goes at least every 10 s whatever the batch shape (issue 49: one encode
call of 152 long chunks said nothing for 88 s): the texts are encoded in sub-batches sized by time."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from livemem.ingest.progress import Progress
from livemem.model.embed_cache import EmbeddingCache, SubBatches

DIM = 8


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowEncoder:
    """``seconds_per_text`` of fake time for each text; vectors from the text's length."""

    model_id = "fake-slow-encoder"
    dim = DIM

    def __init__(self, clock: FakeClock, seconds_per_text: float) -> None:
        self.clock, self.seconds_per_text, self.calls = clock, seconds_per_text, []

    def encode(self, texts) -> np.ndarray:
        self.calls.append(len(texts))
        self.clock.now += self.seconds_per_text * len(texts)
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        out[:, 0] = 1.0
        out[:, 1] = [len(t) for t in texts]
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_a_slow_embedding_says_progress_with_rate_and_time_left_every_10_s(tmp_path: Path) -> None:
    clock = FakeClock()
    said: list[tuple[float, str]] = []
    progress = Progress(lambda line: said.append((clock.now, line)), interval_s=10.0, clock=clock)
    encoder = SlowEncoder(clock, seconds_per_text=88 / 152)  # the 152 chunks in 88 s
    texts = [f"chunk {i} " + "word " * (200 - i) for i in range(152)]
    with EmbeddingCache(tmp_path, DIM) as cache:
        vectors, computed, reused = cache.embed(
            texts, encoder, lambda done, todo: progress("chunks", done, todo), clock=clock
        )
    assert (computed, reused) == (152, 0) and vectors.shape == (152, DIM)
    assert np.allclose(vectors[:, 1] / vectors[:, 0], [len(t) for t in texts], rtol=1e-5)  # each row its own text
    assert sum(encoder.calls) == 152 and len(encoder.calls) > 1

    times = [at for at, _ in said]
    lines = [line for _, line in said]
    assert lines[0] == "embedding 152 new chunks" and times[0] == 0.0
    assert re.fullmatch(r"embedded 152/152 chunks in 88\.0 s, 2/s", lines[-1]), lines
    middle = lines[1:-1]
    assert len(middle) >= 7, said  # 88 s: a line at ~10, 20, ... 80 s
    for line in middle:
        assert re.fullmatch(r"embedded \d+/152 chunks, 2/s, about \d+ s left", line), line
    gaps = np.diff(times)
    assert gaps.max() <= 10.0 + 2.5, said  # each line within a sub-batch (about 2 s) of the 10 s mark


def test_sub_batches_follow_the_rate_and_stay_within_bounds() -> None:
    sizes = SubBatches(target_s=2.0, first=8, most=512)
    assert sizes.next() == 8
    sizes.took(8, 16.0)  # 0.5 texts/s: a call of 2 s holds one text
    assert sizes.next() == 1
    for _ in range(20):  # a fast encoder: up to the most, powers of two
        sizes.took(512, 0.1)
    assert sizes.next() == 512
    sizes.took(4, 40.0)  # one very slow call (long texts, a loaded machine): the next is small again
    assert sizes.next() <= 64


def test_a_fast_encoder_is_called_with_big_batches(tmp_path: Path) -> None:
    clock = FakeClock()
    encoder = SlowEncoder(clock, seconds_per_text=0.0005)
    texts = [f"text {i}" for i in range(3000)]
    with EmbeddingCache(tmp_path, DIM) as cache:
        cache.embed(texts, encoder, clock=clock)
    assert max(encoder.calls) == 512 and len(encoder.calls) < 15
