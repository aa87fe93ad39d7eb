"""A BERT sentence encoder as an ONNX graph, built from its safetensors weights without torch.

:class:`hopmem.text.encoders.OnnxEncoder` runs all-MiniLM-L6-v2 on ONNX Runtime. Its
graph is written here, node by node with :mod:`onnx.helper`, from the model's
``config.json`` and ``model.safetensors``: the embeddings (word + position +
token type 0) and their LayerNorm, then per layer a 12-head self-attention
with the padding mask, the output projection, a residual LayerNorm, the GELU
(erf) feed-forward block and a second residual LayerNorm: the computation of
``transformers.BertModel``'s ``last_hidden_state``. Attention is ONNX
Runtime's fused operator (``com.microsoft`` ``Attention`` with the packed QKV
weights), so the graph runs on ONNX Runtime only; the rest is standard ONNX
(opset 20). The residual LayerNorms are two ``Add`` and a standard
``LayerNormalization``, not ONNX Runtime's fused ``SkipLayerNormalization``:
on the short rows of chat turns the fused operator measured about 3x slower
than the three (a fifth of the int8 graph's time), for the same values.
Pooling and normalization are done by the encoder on the graph's output.

The graph is built once and kept in a cache file (:func:`cached_model`), named
by the weights' sha256, :data:`EXPORT_VERSION` and the quantisation, and
written atomically (a temporary file renamed into place), so a later open only
loads it.

The int8 graph (``quantize="int8"``) is written by the same builder. A layer's
projections (packed QKV, attention output, feed-forward in and out) quantise
their input one token row at a time: a symmetric scale
``max|row| / 127`` computed in the graph (``ReduceMax``/``ReduceMin``, then a
blocked ``QuantizeLinear`` whose block is the whole row, as uint8 around 128);
its weights are int8 with one symmetric scale per output channel; the product
is ONNX Runtime's ``MatMulIntegerToFloat`` (the u8 x s8 integer GEMM, with the
channel scales applied) times the row scales, then the bias. Attention is
``com.microsoft`` ``MultiHeadAttention`` in float32 on the QKV projection. The
packed QKV projections of the second half of the layers stay float32: they are
the most sensitive to quantisation (per projection, the largest loss of cosine
with float32), and keeping them moves the vectors from a mean cosine of 0.9969
to 0.9982 with float32's for 10% of the speed. A token's scale depends on that
token alone, so a text's vector does not depend on the texts it is batched
with (ONNX Runtime's dynamic quantisation takes one scale for the whole batch,
padding included); and one scale per row rather than per batch keeps the
vectors nearer float32's. Embeddings, LayerNorms, GELU and softmax stay
float32; the int8 graph is opset 21 (blocked ``QuantizeLinear``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["EXPORT_VERSION", "QUANTIZATIONS", "QUANTIZATION_RECIPES", "RETIRED_QUANTIZATION_RECIPES",
           "build_bert_graph", "cached_model",
           "default_cache_dir", "file_sha256", "read_safetensors"]

logger = logging.getLogger(__name__)

#: Version of the graphs this module writes: part of the cache files' names, so a change to
#: :func:`build_bert_graph` never loads a graph an older version wrote.
EXPORT_VERSION = 4

#: Accepted ``quantize`` values: ``None`` (float32) or ``"int8"`` (per-token int8 projections).
QUANTIZATIONS: tuple[str | None, ...] = (None, "int8")

#: What each quantisation does, as the encoder's fingerprint names it: a change of recipe is another encoder.
QUANTIZATION_RECIPES: dict[str | None, str] = {
    None: "float32",
    "int8": "int8: per-token symmetric u8 activations, per-channel symmetric s8 weights, "
            "MatMulIntegerToFloat for output/FF and first-half QKV, float32 second-half QKV, "
            "float32 MultiHeadAttention, residual LayerNormalization over Add",
}

#: The int8 recipe hopmem's development builds used before (ONNX Runtime's ``quantize_dynamic``: one
#: activation scale per batch): no longer built; named so that a store written with it can be told apart.
RETIRED_QUANTIZATION_RECIPES: tuple[str, ...] = (
    "int8: onnxruntime quantize_dynamic, QInt8 weights, per channel, MatMul and Attention",
)

_OPSET = 20  # LayerNormalization (17) and Gelu (20) are standard ops from here
_INT8_OPSET = 21  # QuantizeLinear with blocks (one block: a whole token row)
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def default_cache_dir() -> Path:
    """Where exported graphs are kept: ``$HOPMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/hopmem``, else
    ``~/.cache/hopmem``."""
    explicit = os.environ.get("HOPMEM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hopmem"


_digests: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path, cache_dir: Path | None = None) -> str:
    """The sha256 (hex) of a file, remembered by (path, size, mtime): for the process, and in
    ``<cache_dir>/sha256.json`` (``cache_dir`` defaults to :func:`default_cache_dir`) so that a new process
    does not read the 90 MB of weights again only to name them."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    digest = _digests.get(key)
    if digest is not None:
        return digest
    record = (default_cache_dir() if cache_dir is None else Path(cache_dir)) / "sha256.json"
    text_key = "|".join(map(str, key))
    known: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(record.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            known = {str(k): str(v) for k, v in loaded.items()}
    digest = known.get(text_key)
    if digest is None or len(digest) != 64:
        sha = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
        digest = sha.hexdigest()
        known[text_key] = digest
        with contextlib.suppress(OSError):  # a read-only cache only costs the next process a re-read
            _atomic_write(record, json.dumps(known, indent=0, sort_keys=True).encode())
    _digests[key] = digest
    return digest


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file as NumPy arrays (the format: an 8-byte little-endian header
    length, a JSON header of name -> dtype, shape, byte offsets, then the raw little-endian data)."""
    data = path.read_bytes()
    (length,) = np.frombuffer(data[:8], dtype="<u8")
    header = json.loads(data[8:8 + int(length)])
    body = memoryview(data)[8 + int(length):]
    tensors: dict[str, np.ndarray] = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(spec["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name!r} has dtype {spec['dtype']}, which this reader does not know")
        start, end = spec["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=np.dtype(dtype).newbyteorder("<"))
        tensors[name] = array.reshape(spec["shape"]).astype(dtype)
    return tensors


def int8_weight(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A ``(in, out)`` float weight as int8 with one symmetric scale per output column:
    ``(q, scale)`` with ``weight ~= q * scale``, ``|q| <= 127``."""
    scale = np.maximum(np.abs(weight).max(axis=0) / 127.0, np.float32(1e-12)).astype(np.float32)
    return np.clip(np.rint(weight / scale), -127, 127).astype(np.int8), scale


def build_bert_graph(weights: dict[str, np.ndarray], config: dict[str, Any], quantize: str | None = None) -> Any:
    """The ``onnx.ModelProto`` of a BERT encoder: inputs ``input_ids`` and ``attention_mask`` (int64,
    ``(batch, tokens)``), output ``last_hidden_state`` (float32, ``(batch, tokens, hidden)``).

    ``weights`` are the safetensors tensors by their ``transformers`` names (``embeddings.*``,
    ``encoder.layer.<i>.*``); ``config`` is the model's ``config.json`` (hidden size, heads, layers,
    LayerNorm epsilon, activation). ``quantize="int8"`` writes the per-token int8 graph the module
    docstring describes; ``None`` the float32 one.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    if config.get("hidden_act", "gelu") != "gelu" or hidden % heads:
        raise ValueError(f"build_bert_graph: expected a BERT with GELU and hidden % heads == 0, got "
                         f"hidden_act={config.get('hidden_act')!r}, hidden {hidden}, heads {heads}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("build_bert_graph: expected absolute position embeddings, got "
                         f"{config.get('position_embedding_type')!r}")
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize: expected one of {QUANTIZATIONS}, got {quantize!r}")
    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def w(name: str) -> np.ndarray:
        return np.asarray(weights[name], dtype=np.float32)

    def node_ms(op: str, inputs: list[str], outputs: list[str], name: str, **attrs: Any) -> None:
        nodes.append(helper.make_node(op, inputs, outputs, name=name, domain="com.microsoft", **attrs))

    def linear(x: str, prefix: str, out: str) -> str:
        # torch's Linear computes x @ W.T + b: the transposed weight is the MatMul's initializer
        bias = const(f"{prefix}.bias", w(f"{prefix}.bias"))
        return node("Add", [matmul(x, w(f"{prefix}.weight").T, prefix), bias], out)

    if quantize is not None:
        const("q8_last_axis", np.array([-1], np.int64))
        const("q8_tiny", np.array(1e-30, np.float32))  # an all-zero row: scale > 0, quantised to zeros
        const("q8_inv127", np.array(1.0 / 127.0, np.float32))
        const("q8_zero_point", np.array(128, np.uint8))
        const("q8_one", np.array(1.0, np.float32))

    quantized_rows: dict[str, tuple[str, str]] = {}

    def quantize_rows(x: str, width: int) -> tuple[str, str]:
        """``x`` (float, last axis ``width``) as uint8 around 128 with one symmetric scale per token row:
        (the uint8 tensor, the scales with a trailing axis of 1)."""
        if x not in quantized_rows:
            high = node("ReduceMax", [x, "q8_last_axis"], f"{x}_rowmax", keepdims=1)
            low = node("ReduceMin", [x, "q8_last_axis"], f"{x}_rowmin", keepdims=1)
            absmax = node("Max", [high, node("Neg", [low], f"{x}_rowmin_neg"), "q8_tiny"], f"{x}_rowabsmax")
            scale = node("Mul", [absmax, "q8_inv127"], f"{x}_rowscale")
            zero_points = node("Expand", ["q8_zero_point", node("Shape", [scale], f"{x}_rowscale_shape")],
                               f"{x}_rowzero")
            quantized = node("QuantizeLinear", [x, scale, zero_points], f"{x}_u8", axis=-1, block_size=width)
            quantized_rows[x] = (quantized, scale)
        return quantized_rows[x]

    def matmul(x: str, weight_t: np.ndarray, name: str, *, exact: bool = False) -> str:
        """``x @ weight_t``: a float MatMul (``exact``, or the float32 graph), else the per-token int8 product."""
        if quantize is None or exact:
            return node("MatMul", [x, const(f"{name}.weight_t", weight_t)], f"{name}_mm")
        quantized, row_scale = quantize_rows(x, weight_t.shape[0])
        weight_q, column_scale = int8_weight(weight_t)
        product = node("MatMulIntegerToFloat", [quantized, const(f"{name}.weight_q", weight_q), "q8_one",
                                                const(f"{name}.weight_scale", column_scale), "q8_zero_point"],
                       f"{name}_mmf", domain="com.microsoft")
        return node("Mul", [product, row_scale], f"{name}_mm")

    def layer_norm(x: str, prefix: str, out: str) -> str:
        scale = const(f"{prefix}.weight", w(f"{prefix}.weight"))
        bias = const(f"{prefix}.bias", w(f"{prefix}.bias"))
        return node("LayerNormalization", [x, scale, bias], out, axis=-1, epsilon=eps)

    # embeddings: word + position[:tokens] + token type 0 (hopmem encodes single texts only)
    words = node("Gather", [const("embeddings.word", w("embeddings.word_embeddings.weight")), "input_ids"],
                 "emb_words", axis=0)
    tokens = node("Shape", ["input_ids"], "tokens", start=1, end=2)
    positions = node("Slice", [const("embeddings.position", w("embeddings.position_embeddings.weight")),
                               const("zero1", np.array([0], np.int64)), tokens,
                               const("axis0", np.array([0], np.int64))], "emb_positions")
    type0 = const("embeddings.type0", w("embeddings.token_type_embeddings.weight")[0])
    summed = node("Add", [node("Add", [words, positions], "emb_wp"), type0], "emb_sum")
    h = layer_norm(summed, "embeddings.LayerNorm", "emb_out")

    # ONNX Runtime's fused contrib ops (domain com.microsoft): Attention computes the packed QKV
    # projection, the 12 heads with the padding mask, softmax(QK^T / sqrt(d)) V and the head merge in one
    # kernel. The residual LayerNorm(x + bias + skip) is Add, Add, LayerNormalization (see the docstring).
    mask = node("Cast", ["attention_mask"], "mask_i32", to=TensorProto.INT32)

    def skip_layer_norm(x: str, skip: str, bias: str, prefix: str, out: str) -> str:
        scale = const(f"{prefix}.weight", w(f"{prefix}.weight"))
        beta = const(f"{prefix}.bias", w(f"{prefix}.bias"))
        summed = node("Add", [node("Add", [x, bias], f"{out}_bias"), skip], f"{out}_skip")
        return node("LayerNormalization", [summed, scale, beta], out, axis=-1, epsilon=eps)

    for i in range(layers):
        p = f"encoder.layer.{i}"
        qkv = [f"{p}.attention.self.{part}" for part in ("query", "key", "value")]
        qkv_weight = np.concatenate([w(f"{n}.weight").T for n in qkv], axis=1)
        qkv_bias = const(f"{p}.attention.qkv_bias", np.concatenate([w(f"{n}.bias") for n in qkv]))
        attended = f"l{i}_attn"
        if quantize is None:
            node_ms("Attention", [h, const(f"{p}.attention.qkv_weight", qkv_weight), qkv_bias, mask], [attended],
                    attended, num_heads=heads)
        else:  # the packed QKV projection (int8 in the first half of the layers), attention in float32
            parts = [f"l{i}_q", f"l{i}_k", f"l{i}_v"]
            projected_qkv = matmul(h, qkv_weight, f"{p}.attention.qkv", exact=i >= layers // 2)
            nodes.append(helper.make_node("Split", [projected_qkv,
                                                    const(f"l{i}_qkv_split", np.array([hidden] * 3, np.int64))],
                                          parts, name=f"l{i}_qkv_split", axis=-1))
            node_ms("MultiHeadAttention", [*parts, qkv_bias, mask], [attended], attended, num_heads=heads)
        dense = f"{p}.attention.output.dense"
        projected = matmul(attended, w(f"{dense}.weight").T, dense)
        h1 = skip_layer_norm(projected, h, const(f"{dense}.bias", w(f"{dense}.bias")),
                             f"{p}.attention.output.LayerNorm", f"l{i}_h1")
        inner = node("Gelu", [linear(h1, f"{p}.intermediate.dense", f"l{i}_ff1")], f"l{i}_gelu")
        dense = f"{p}.output.dense"
        out = matmul(inner, w(f"{dense}.weight").T, dense)
        h = skip_layer_norm(out, h1, const(f"{dense}.bias", w(f"{dense}.bias")), f"{p}.output.LayerNorm",
                            f"l{i}_out")
    nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"], name="last_hidden_state"))

    graph = helper.make_graph(
        nodes, "bert_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", hidden])],
        initializer=inits,
    )
    opset = _OPSET if quantize is None else _INT8_OPSET
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                             helper.make_opsetid("com.microsoft", 1)],
                              producer_name="hopmem", producer_version=str(EXPORT_VERSION))
    model.ir_version = min(model.ir_version, 10)  # what ONNX Runtime releases of the last years read
    onnx.checker.check_model(model)
    return model


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would hide a shared cache from other users
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def cached_model(model_dir: Path, weights_sha256: str, quantize: str | None, cache_dir: Path | None = None) -> Path:
    """The ONNX file of the BERT in ``model_dir`` (its ``config.json`` and ``model.safetensors``, whose sha256
    is ``weights_sha256``), built and written on first use, then loaded from the cache.

    The file is ``<cache_dir>/bert-<sha256[:16]>-v<EXPORT_VERSION>-f32.onnx``, or for int8
    ``...-int8-<recipe>.onnx`` where ``<recipe>`` is 8 hex characters of the sha256 of
    :data:`QUANTIZATION_RECIPES`' text (another recipe, another file); ``cache_dir`` defaults to
    :func:`default_cache_dir`. Files are written to a temporary name and renamed, so a reader never sees a
    partial one and two processes exporting at once both end with a whole file.
    """
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize: expected one of {QUANTIZATIONS}, got {quantize!r}")
    directory = default_cache_dir() if cache_dir is None else Path(cache_dir)
    if quantize is None:
        suffix = "f32"
    else:
        suffix = f"{quantize}-{hashlib.sha256(QUANTIZATION_RECIPES[quantize].encode()).hexdigest()[:8]}"
    path = directory / f"bert-{weights_sha256[:16]}-v{EXPORT_VERSION}-{suffix}.onnx"
    if not path.is_file():
        logger.info("building the %s ONNX graph of %s into %s", quantize or "float32", model_dir, path)
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        model = build_bert_graph(read_safetensors(model_dir / "model.safetensors"), config, quantize)
        _atomic_write(path, model.SerializeToString())
    return path
