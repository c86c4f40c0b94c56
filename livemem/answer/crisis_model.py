"""The crisis detector's classifier (docs/crisis.md, "The classifier"): linear models over the message's MiniLM
vector and hashed character and word n-grams of its normalised, masked text, fitted on labelled messages.

The lexicon and the exemplars (``livemem.answer.crisis.rules``) catch the plain statements; three models do the rest:

- **detect**: P(crisis) of every message, with the rules' verdict as one more feature. A message the rules did not
  find is a crisis when it reaches its language's threshold ("been looking up how many tylenol it takes",
  "quiero acabar con mi sufrimiento": ``matched_by: classifier``).
- **veto**: P(crisis) of a message the rules found, fitted on such messages only, so it learns the lexicon's false
  alarms ("my mom will kill me if im late", "left my abusive ex 5 years ago", "narcan training"). A find is
  dropped when it is below its language's veto, and only in a message of ``VETO_MIN_WORDS`` words or more (a short
  message has no context to rebut "suicidal. need help now").
- **kind**: the five kinds (fitted on crisis messages only): the most likely, and every other with
  ``KIND_SHARE`` of the probability.

Two feature blocks, so no model hangs on one of them:

- the message's vector (the one retrieval already computed: no second encoding), scaled by ``DENSE_SCALE``: what
  MiniLM knows of English paraphrase;
- ``HASH_BUCKETS`` hashed n-grams of the text the lexicon sees (lower case, accents folded, common misspellings
  spelled out, idioms and negations masked): character 3–5-grams within words and word 1–2-grams, l2-normalised.
  They carry Spanish, for which MiniLM (an English model) has little, and misspellings.

Fitted and shipped by ``python -m bench.crisis --train`` (scikit-learn's ``LogisticRegression``, offline) into
``crisis_model.npz`` beside this module; at query time each decision is a sparse dot product and a logistic, with
no scikit-learn. The thresholds and vetoes were chosen on out-of-fold predictions of the training data by the rule
written in the file's ``info`` (and docs/crisis.md); the training data never includes the reported suite or a
held-out set. Without a vector of this model's embedder, the rules alone decide.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np

SHIPPED = Path(__file__).with_name("crisis_model.npz")
KINDS = ("suicide_self_harm", "overdose_poisoning", "violence_abuse", "medical_emergency", "child_in_danger")
HASH_BUCKETS = 1 << 18
DENSE_SCALE = 0.5  # the weight of the vector block beside the n-grams (chosen out of fold, round 4: 0.5 of 0.5/1/2/4)
VETO_MIN_WORDS = 5  # a find of the rules in a shorter message always stands: too few words to rebut it
CHAR_NGRAMS = (3, 5)
KIND_SHARE = 0.2  # a second kind whose probability reaches this is named too (its lines are given as well)


def _bucket(gram: str) -> int:
    return zlib.crc32(gram.encode("utf-8")) & (HASH_BUCKETS - 1)


@functools.lru_cache(maxsize=256)
def ngrams(text: str) -> tuple[np.ndarray, np.ndarray]:
    """The hashed n-gram features of ``text`` (already normalised and masked): bucket indices and l2-normalised
    values (counts; a bucket hit twice counts twice). Cached: one message is scored by the detect and the kind
    models (or the veto) in turn; the arrays are read-only to callers."""
    words = [w for w in "".join(ch if ch.isalnum() or ch == "'" else " " for ch in text).split() if w != "_"]
    counts: dict[int, float] = {}
    low, high = CHAR_NGRAMS
    for word in words:
        padded = f" {word} "
        for n in range(low, high + 1):
            for i in range(len(padded) - n + 1):
                b = _bucket(padded[i : i + n])
                counts[b] = counts.get(b, 0.0) + 1.0
        b = _bucket("w:" + word)
        counts[b] = counts.get(b, 0.0) + 1.0
    for a, c in itertools.pairwise(words):
        b = _bucket(f"b:{a} {c}")
        counts[b] = counts.get(b, 0.0) + 1.0
    if not counts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    index = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
    values = np.sqrt(np.fromiter(counts.values(), dtype=np.float32, count=len(counts)))  # sublinear counts
    return index, values / np.linalg.norm(values)


class CrisisModel:
    """The fitted weights: the crisis-or-not model over [scaled vector, n-grams, the rules' verdict] and the kind
    model over [scaled vector, n-grams] (fitted on crisis messages only)."""

    def __init__(self, arrays: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.model_id = str(arrays["model_id"])
        self.info = info
        # A crisis the rules missed: P(crisis) >= the threshold of the message's language.
        self.thresholds = {lang: float(t) for lang, t in zip(arrays["languages"], arrays["thresholds"], strict=True)}
        # A find of the rules (lexicon or exemplars) stands unless the veto model's P(crisis) is below the veto of
        # the message's language (and the message has VETO_MIN_WORDS words or more).
        self.vetoes = {lang: float(t) for lang, t in zip(arrays["languages"], arrays["vetoes"], strict=True)}
        self.dims = int(arrays["detect_dense"].shape[0])
        self.detect_dense = arrays["detect_dense"].astype(np.float32)
        self.detect_sparse = _dense_rows(arrays, "detect", 1)[:, 0]
        self.detect_rules = float(arrays["detect_rules"])
        self.detect_bias = float(arrays["detect_bias"])
        self.kind_dense = arrays["kind_dense"].astype(np.float32)  # (dims, kinds)
        self.kind_sparse = _dense_rows(arrays, "kind", len(KINDS))
        self.kind_bias = arrays["kind_bias"].astype(np.float32)
        self.veto_dense = arrays["veto_dense"].astype(np.float32)
        self.veto_sparse = _dense_rows(arrays, "veto", 1)[:, 0]
        self.veto_bias = float(arrays["veto_bias"])

    def threshold(self, language: str) -> float:
        return self.thresholds.get(language, max(self.thresholds.values()))

    def applies(self, vector: np.ndarray | None, model_id: str | None) -> bool:
        """Whether ``vector`` is of this model's embedder (same model, any precision: the int8 query vectors are the
        float ones to 0.99 cosine) and so may be scored."""
        same = model_id is not None and model_id.split(":")[0] == self.model_id.split(":")[0]
        return vector is not None and same and np.shape(vector)[-1] == self.dims

    def probability(self, text: str, vector: np.ndarray, rules: bool) -> float:
        """P(crisis) of a message the rules did not find: ``text`` is its masked text (``crisis.model_text``),
        ``vector`` its embedding, ``rules`` whether the lexicon or the exemplars found a crisis in it."""
        index, values = ngrams(text)
        dense = DENSE_SCALE * np.asarray(vector, dtype=np.float32)
        z = self.detect_bias + float(values @ self.detect_sparse[index]) + float(dense @ self.detect_dense)
        z += self.detect_rules * float(rules)
        return round(float(1.0 / (1.0 + np.exp(-z))), 4)

    def veto_probability(self, text: str, vector: np.ndarray) -> float:
        """P(crisis) of a message the rules found, by the model fitted on such messages only: the lexicon's false
        alarms ("my mom will kill me if im late", "left my abusive ex 5 years ago") are what it tells apart."""
        index, values = ngrams(text)
        dense = DENSE_SCALE * np.asarray(vector, dtype=np.float32)
        z = self.veto_bias + float(values @ self.veto_sparse[index]) + float(dense @ self.veto_dense)
        return round(float(1.0 / (1.0 + np.exp(-z))), 4)

    def vetoes_find(self, message: str, text: str, vector: np.ndarray, language: str) -> bool:
        """Whether a find of the rules is dropped: a message of ``VETO_MIN_WORDS`` words or more whose veto
        probability is below its language's veto."""
        if len(message.split()) < VETO_MIN_WORDS:
            return False
        return self.veto_probability(text, vector) < self.vetoes.get(language, min(self.vetoes.values()))

    def kinds(self, text: str, vector: np.ndarray) -> tuple[str, ...]:
        """The likely kinds of a crisis message, the most likely first: every kind with at least ``KIND_SHARE`` of
        the probability ("locked herself in the bathroom with a razor" may be self-harm or an injury: the lines of
        both)."""
        index, values = ngrams(text)
        logits = (
            self.kind_bias + values @ self.kind_sparse[index] + (DENSE_SCALE * np.asarray(vector)) @ self.kind_dense
        )
        p = np.exp(logits - logits.max())
        p /= p.sum()
        order = np.argsort(-p)
        return tuple(KINDS[i] for i in order if i == order[0] or p[i] >= KIND_SHARE)


def _dense_rows(arrays: dict[str, np.ndarray], name: str, width: int) -> np.ndarray:
    out = np.zeros((HASH_BUCKETS, width), dtype=np.float32)
    out[arrays[f"{name}_rows"], arrays[f"{name}_cols"].astype(np.int64)] = arrays[f"{name}_values"].astype(np.float32)
    return out


def _sparse_arrays(name: str, weights: np.ndarray) -> dict[str, np.ndarray]:
    weights = weights.reshape(HASH_BUCKETS, -1)
    rows, cols = np.nonzero(weights)
    return {f"{name}_rows": rows.astype(np.int32), f"{name}_cols": cols.astype(np.int8),
            f"{name}_values": weights[rows, cols].astype(np.float16)}  # fmt: skip


def save(
    path: Path, model_id: str, detect: dict[str, Any], kind: dict[str, Any], veto: dict[str, Any], info: dict[str, Any]
) -> Path:
    """Write fitted weights (``python -m bench.crisis --train``). ``detect``: dense (dims,), sparse (HASH_BUCKETS,),
    rules, bias, threshold (by language); ``kind``: dense (dims, kinds), sparse (HASH_BUCKETS, kinds), bias;
    ``veto``: dense, sparse, bias, below (by language). Only the non-zero n-gram weights are stored."""
    languages = sorted(detect["threshold"])
    arrays: dict[str, Any] = {
        "model_id": np.array(model_id), "info": np.array(json.dumps(info, ensure_ascii=False)),
        "languages": np.array(languages),
        "thresholds": np.array([float(detect["threshold"][k]) for k in languages]),
        "vetoes": np.array([float(veto["below"][k]) for k in languages]),
        "veto_dense": np.asarray(veto["dense"], dtype=np.float32), "veto_bias": np.array(float(veto["bias"])),
        **_sparse_arrays("veto", np.asarray(veto["sparse"])),
        "detect_dense": np.asarray(detect["dense"], dtype=np.float32), "detect_rules": np.array(float(detect["rules"])),
        "detect_bias": np.array(float(detect["bias"])), **_sparse_arrays("detect", np.asarray(detect["sparse"])),
        "kind_dense": np.asarray(kind["dense"], dtype=np.float32), "kind_bias": np.asarray(kind["bias"], np.float32),
        **_sparse_arrays("kind", np.asarray(kind["sparse"])),
    }  # fmt: skip
    np.savez_compressed(path, **arrays)
    return path


def load(path: Path = SHIPPED) -> CrisisModel | None:
    """The shipped model, or None when there is none (or it is unreadable): the lexicon and the exemplars decide."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
        return CrisisModel(arrays, json.loads(str(arrays["info"])))
    except (OSError, KeyError, ValueError):
        return None


_MODEL: list[CrisisModel | None] = []
_LOCK = threading.Lock()


def shipped() -> CrisisModel | None:
    """The shipped model, loaded once per process."""
    if not _MODEL:
        with _LOCK:
            if not _MODEL:
                _MODEL.append(load())
    return _MODEL[0]
