"""The embedding model: all-MiniLM-L6-v2 from the packaged weights, its two backends (``embedding``: torch via
sentence-transformers, or ONNX Runtime on the fused export in ``onnx_encoder``) and the embedding cache keyed by
model id and text (``embed_cache``); builds embed chunks and entities with it, queries embed the question. It
imports no other step."""
