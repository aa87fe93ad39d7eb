"""A BERT sentence encoder as an ONNX graph, built from its safetensors weights without torch.

:class:`hopmem.encoders.OnnxEncoder` runs all-MiniLM-L6-v2 on ONNX Runtime. Its
graph is written here, node by node with :mod:`onnx.helper`, from the model's
``config.json`` and ``model.safetensors``: the embeddings (word + position +
token type 0) and their LayerNorm, then per layer a 12-head self-attention
with the padding mask, the output projection, a residual LayerNorm, the GELU
(erf) feed-forward block and a second residual LayerNorm: the computation of
``transformers.BertModel``'s ``last_hidden_state``. Attention and the
residual LayerNorms are ONNX Runtime's fused operators (``com.microsoft``
``Attention`` with the packed QKV weights, ``SkipLayerNormalization``), so the
graph runs on ONNX Runtime only; the rest is standard ONNX (opset 20).
Pooling and normalisation are done by the encoder on the graph's output.

The graph is built once and kept in a cache file (:func:`cached_model`), named
by the weights' sha256, :data:`EXPORT_VERSION` and the quantisation, and
written atomically (a temporary file renamed into place), so a later open only
loads it. The int8 variant is ONNX Runtime's dynamic quantisation of the
float32 graph's MatMul and Attention weights, one scale per output channel.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["EXPORT_VERSION", "QUANTIZATIONS", "QUANTIZATION_RECIPES", "build_bert_graph", "cached_model",
           "default_cache_dir", "file_sha256", "read_safetensors"]

logger = logging.getLogger(__name__)

#: Version of the graph this module writes: part of the cache file's name, so a change to
#: :func:`build_bert_graph` never loads a graph an older version wrote.
EXPORT_VERSION = 2

#: Accepted ``quantize`` values: ``None`` (float32) or ``"int8"`` (dynamic int8 MatMul weights).
QUANTIZATIONS: tuple[str | None, ...] = (None, "int8")

#: What each quantisation does, as the encoder's fingerprint names it: a change of recipe is another encoder.
#: Per-channel weight scales keep the vectors at a mean cosine of 0.99 with float32's (one scale per
#: tensor: 0.95); the word embeddings stay float32 (quantising them costs the worst texts' cosine).
QUANTIZATION_RECIPES: dict[str | None, str] = {
    None: "float32",
    "int8": "int8: onnxruntime quantize_dynamic, QInt8 weights, per channel, MatMul and Attention",
}

_OPSET = 20  # LayerNormalization (17) and Gelu (20) are standard ops from here
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


def build_bert_graph(weights: dict[str, np.ndarray], config: dict[str, Any]) -> Any:
    """The ``onnx.ModelProto`` of a BERT encoder: inputs ``input_ids`` and ``attention_mask`` (int64,
    ``(batch, tokens)``), output ``last_hidden_state`` (float32, ``(batch, tokens, hidden)``).

    ``weights`` are the safetensors tensors by their ``transformers`` names (``embeddings.*``,
    ``encoder.layer.<i>.*``); ``config`` is the model's ``config.json`` (hidden size, heads, layers,
    LayerNorm epsilon, activation).
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

    def linear(x: str, prefix: str, out: str) -> str:
        # torch's Linear computes x @ W.T + b: the transposed weight is the MatMul's initializer
        weight = const(f"{prefix}.weight_t", w(f"{prefix}.weight").T)
        bias = const(f"{prefix}.bias", w(f"{prefix}.bias"))
        return node("Add", [node("MatMul", [x, weight], f"{out}_mm"), bias], out)

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
    # kernel; SkipLayerNormalization is LayerNorm(x + skip + bias).
    mask = node("Cast", ["attention_mask"], "mask_i32", to=TensorProto.INT32)

    def skip_layer_norm(x: str, skip: str, bias: str, prefix: str, out: str) -> str:
        scale = const(f"{prefix}.weight", w(f"{prefix}.weight"))
        beta = const(f"{prefix}.bias", w(f"{prefix}.bias"))
        nodes.append(helper.make_node("SkipLayerNormalization", [x, skip, scale, beta, bias], [out], name=out,
                                      domain="com.microsoft", epsilon=eps))
        return out

    for i in range(layers):
        p = f"encoder.layer.{i}"
        qkv = [f"{p}.attention.self.{part}" for part in ("query", "key", "value")]
        qkv_weight = const(f"{p}.attention.qkv_weight", np.concatenate([w(f"{n}.weight").T for n in qkv], axis=1))
        qkv_bias = const(f"{p}.attention.qkv_bias", np.concatenate([w(f"{n}.bias") for n in qkv]))
        attended = f"l{i}_attn"
        nodes.append(helper.make_node("Attention", [h, qkv_weight, qkv_bias, mask], [attended], name=attended,
                                      domain="com.microsoft", num_heads=heads))
        dense = f"{p}.attention.output.dense"
        projected = node("MatMul", [attended, const(f"{dense}.weight_t", w(f"{dense}.weight").T)], f"l{i}_proj")
        h1 = skip_layer_norm(projected, h, const(f"{dense}.bias", w(f"{dense}.bias")),
                             f"{p}.attention.output.LayerNorm", f"l{i}_h1")
        inner = node("Gelu", [linear(h1, f"{p}.intermediate.dense", f"l{i}_ff1")], f"l{i}_gelu")
        dense = f"{p}.output.dense"
        out = node("MatMul", [inner, const(f"{dense}.weight_t", w(f"{dense}.weight").T)], f"l{i}_ff2")
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
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET),
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


class _DropRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """onnxruntime.quantization logs advice to the root logger (which, unconfigured, prints it): drop it."""
    root = logging.getLogger()
    drop = _DropRecords()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def cached_model(model_dir: Path, weights_sha256: str, quantize: str | None, cache_dir: Path | None = None) -> Path:
    """The ONNX file of the BERT in ``model_dir`` (its ``config.json`` and ``model.safetensors``, whose sha256
    is ``weights_sha256``), built and written on first use, then loaded from the cache.

    The file is ``<cache_dir>/bert-<sha256[:16]>-v<EXPORT_VERSION>-<f32|int8>.onnx``; ``cache_dir`` defaults to
    :func:`default_cache_dir`. Files are written to a temporary name and renamed, so a reader never sees a
    partial one and two processes exporting at once both end with a whole file.
    """
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize: expected one of {QUANTIZATIONS}, got {quantize!r}")
    directory = default_cache_dir() if cache_dir is None else Path(cache_dir)
    stem = f"bert-{weights_sha256[:16]}-v{EXPORT_VERSION}"
    float_path = directory / f"{stem}-f32.onnx"
    if not float_path.is_file():
        logger.info("building the ONNX graph of %s into %s", model_dir, float_path)
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        model = build_bert_graph(read_safetensors(model_dir / "model.safetensors"), config)
        _atomic_write(float_path, model.SerializeToString())
    if quantize is None:
        return float_path
    quant_path = directory / f"{stem}-{quantize}.onnx"
    if not quant_path.is_file():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        logger.info("quantising %s to %s", float_path, quant_path)
        with tempfile.TemporaryDirectory(dir=directory) as tmp, _quiet_root_logger():
            out = Path(tmp) / quant_path.name
            # the contrib ops' outputs have no inferred type: they are float32
            quantize_dynamic(str(float_path), str(out), weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul", "Attention"],
                             extra_options={"DefaultTensorType": 1})  # onnx.TensorProto.FLOAT
            _atomic_write(quant_path, out.read_bytes())
    return quant_path
