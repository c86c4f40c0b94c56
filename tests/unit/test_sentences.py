"""Sentence vectors (``livemem.index.sentences``): which texts a chunk's sentences are, how a segment stores their
vectors, the best sentence per chunk, and how hybrid fusion blends it into the first fused chunks' scores."""

from __future__ import annotations

import numpy as np
import pytest

from livemem.index.sentences import Sentences, concat, sentence_texts, split_sentences
from livemem.query.fusion import FusionSettings, sentence_order, with_sentences


def test_prose_is_split_into_sentences_after_its_headings() -> None:
    text = (
        "# Heat help\n\nLIEAP pays heating bills in winter, e.g. gas and oil. Apply at the county office.\n\n"
        "```\nNot. Prose. Here.\n```\n\n## Hours\n\nOpen 9-5 (weekdays). Closed on 4 July!"
    )
    assert sentence_texts(text, ["Heat help", "Hours"], "markdown") == [
        "Heat help > Hours\nLIEAP pays heating bills in winter, e.g. gas and oil.",
        "Heat help > Hours\nApply at the county office.",
        "Heat help > Hours\nOpen 9-5 (weekdays).",
        "Heat help > Hours\nClosed on 4 July!",
    ]
    # plain text: paragraphs and sentences, no prefix without headings; abbreviations do not end a sentence
    assert sentence_texts("Smith et al. Found it. Twice.\n\nA second\nparagraph", [], "text") == [
        "Smith et al. Found it.",
        "Twice.",
        "A second paragraph",
    ]


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        ("def f():\n    return 1. Two. Three.", "code"),  # code has no sentences
        ("# Title\n\nOnly one sentence here.", "markdown"),  # the chunk's own vector is that sentence
        ("", "text"),
        ("...\n\n---", "text"),  # no words: nothing to embed
    ],
)
def test_chunks_without_two_sentences_get_none(content: str, kind: str) -> None:
    assert sentence_texts(content, ["Title"], kind) == []


def test_split_keeps_every_word_of_the_prose() -> None:
    text = "First one. Second (two) here? Shown in Fig. 2 and 3! [1] cites it. vs. the rest."
    found = split_sentences(text)
    assert " ".join(found).split() == text.split()
    assert found == ["First one.", "Second (two) here?", "Shown in Fig. 2 and 3!", "[1] cites it. vs. the rest."]


def sentences_of(counts: list[int], dim: int = 8, seed: int = 0) -> tuple[Sentences, np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(sum(counts), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    found = Sentences.from_counts(vectors, counts, dim)
    assert found.codes.dtype == np.int8 and found.scales.dtype == np.float32  # a quarter of float32's bytes
    stored = found.codes.astype(np.float32) * found.scales[:, None]
    np.testing.assert_allclose(stored, vectors, atol=0.01)  # half a step of a scale ≈ max |v| / 127
    return found, stored


def test_best_sentence_is_the_best_cosine_of_each_rows_sentences() -> None:
    counts = [2, 0, 3, 1, 0, 4]
    found, vectors = sentences_of(counts)
    query = np.random.default_rng(1).normal(size=8).astype(np.float32)
    starts = np.concatenate([[0], np.cumsum(counts)])
    rows = np.array([5, 1, 0, 3, 2, 4, 0])  # any order, repeats allowed
    best = found.best(query, rows)
    for row, got in zip(rows, best, strict=True):
        mine = vectors[starts[row] : starts[row + 1]]
        if mine.size:
            assert got == pytest.approx(float((mine @ query).max()), abs=1e-5)
        else:
            assert np.isnan(got)


def test_rows_taken_and_concatenated_keep_their_sentences() -> None:
    found, _ = sentences_of([2, 0, 3, 1])
    other, _ = sentences_of([1, 1], seed=3)
    merged = concat([found.take(np.array([3, 0, 1])), other.take(np.array([1]))], 8)
    merged.check(4, 8)
    assert merged.starts.tolist() == [0, 1, 3, 3, 4]
    np.testing.assert_array_equal(merged.of(0), found.of(3))
    np.testing.assert_array_equal(merged.of(1), found.of(0))
    np.testing.assert_array_equal(merged.of(3), other.of(1))


def test_saved_sentences_load_the_same(tmp_path) -> None:
    found, _ = sentences_of([3, 0, 2])
    found.save(tmp_path / "s.npz")
    loaded = Sentences.load(tmp_path / "s.npz")
    for name in ("codes", "scales", "starts"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(found, name))


def test_inconsistent_sentences_are_refused() -> None:
    found, _ = sentences_of([2, 1])
    with pytest.raises(ValueError, match="starts for 2 rows, expected 3"):
        found.check(3, 8)
    with pytest.raises(ValueError, match="do not match"):
        Sentences(found.codes[:2], found.scales[:2], found.starts).check(2, 8)
    with pytest.raises(ValueError, match="scales"):
        Sentences(found.codes, found.scales.astype(np.float64), found.starts).check(2, 8)
    with pytest.raises(ValueError, match="dimensions"):
        found.check(2, 16)


def test_the_blend_lifts_a_chunk_whose_sentence_matches_and_keeps_the_rest() -> None:
    fusion = FusionSettings()  # linear, dense 1, BM25 0.5
    assert fusion.sentences and 0 < fusion.sentence_weight < 1
    w = fusion.sentence_weight
    fused = np.array([0.9, 0.8, 0.6, 0.5])
    cosines = np.array([0.6, 0.5, -np.inf, 0.3])  # the third chunk was on the BM25 list only
    best = np.array([0.55, 0.9, 0.7, np.nan])  # the fourth has no sentence vectors
    got = with_sentences(fused, cosines, best, fusion)
    np.testing.assert_allclose(got, [0.9 + w * (0.55 - 0.6), 0.8 + w * (0.9 - 0.5), 0.6 + w * 0.7, 0.5])
    assert got[1] > got[0]  # the chunk one sentence of which states the answer rises
    # the most a chunk can score stays what it was: a cosine and a sentence of 1, the best BM25 hit
    assert with_sentences(np.array([1.5]), np.array([1.0]), np.array([1.0]), fusion)[0] == fusion.best_score
    off = FusionSettings(sentence_weight=0.0)
    assert not off.sentences
    np.testing.assert_array_equal(with_sentences(fused, cosines, best, off), fused)
    assert FusionSettings(method="rrf").sentence_weight == 0.0  # tuned for linear only
    # on an index with sentence vectors BM25 weighs 0.3, unless a weight was chosen explicitly
    assert fusion.for_sentences().sparse_weight == 0.3 and fusion.for_sentences().best_score == 1.3
    assert FusionSettings(sparse_weight=0.6).for_sentences().sparse_weight == 0.6


def test_only_the_first_fused_chunks_are_rescored() -> None:
    fusion = FusionSettings(sentence_depth=2)
    order = sentence_order(np.array([0.2, 0.9, 0.5, 0.9]), fusion)
    assert order.tolist() == [1, 3]  # ties: the lower position
    with pytest.raises(ValueError, match="sentence_weight"):
        FusionSettings(sentence_weight=1.5)
