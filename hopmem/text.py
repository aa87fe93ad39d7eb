"""Text in, answers out: an encoder and a centering mean bound to a collection.

:class:`TextCollection` wraps a store collection (``db.collection(name)``)
and an :class:`~hopmem.encoders.Encoder`:

* :meth:`TextCollection.remember` encodes texts, centres them, and writes them
  with metadata ``{"text": text, **your metadata}``, so each one is also a
  document; it returns the document ids.
* :meth:`TextCollection.recall` prepares a question the same way and returns a
  :class:`~hopmem.recall.RecallResult` (see :mod:`hopmem.recall`).
* :meth:`TextCollection.calibrate` measures held-out related and unrelated
  questions and stores a :class:`~hopmem.recall.RecallGate` in the
  collection's ``gate`` slot; later recalls abstain below it and band hits.

Centering: one mean per collection, fixed for its lifetime
---------------------------------------------------------
Vectors are ``(x - mean) / ||x - mean||``, on write and on query alike, with
the mean stored in the collection's ``centering`` slot (with the encoder's
fingerprint). The mean is learned once and then frozen:

* by default from the first :meth:`~TextCollection.remember` batch, which must
  then hold at least ``min_fit`` texts (16; measured in docs/recall.md: means
  of fewer statements cost accuracy and AUC);
* or explicitly with :meth:`~TextCollection.fit_centering` on a sample of
  representative texts (an agent that writes one turn at a time does this
  first, e.g. with earlier conversations), allowed only while the collection
  holds nothing.

It never changes afterwards: vectors already stored were prepared with it
and the superposed locations cannot be re-centred in place. To change it,
build a new collection and remember the texts again (document ids change).
A collection refuses vectors prepared under another mean or another encoder
(:class:`~hopmem.errors.IncompatibleStore`), and refuses text recall on a
collection that already holds vectors written without a centering record.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import recall as _recall
from .centering import Centerer
from .errors import IncompatibleStore, InvalidInput, NotFound
from .recall import RecallGate, RecallResult

__all__ = ["CENTERING_FORMAT", "MIN_FIT", "PreparedVectors", "TextCollection"]

CENTERING_FORMAT = "hopmem.text-centering"
_CENTERING_VERSION = 1
#: Texts the first remember() batch must hold to learn the centering mean from.
MIN_FIT = 16

# One lock per underlying collection object, shared by every TextCollection
# that wraps it, so learning the mean and the first write are one step in a
# process. (Across processes the store's own locking applies.)
_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _lock_for(collection: Any) -> threading.RLock:
    with _LOCKS_GUARD:
        try:
            lock = _LOCKS.get(collection)
        except TypeError:  # not weak-referenceable: a lock per wrapper
            return threading.RLock()
        if lock is None:
            lock = threading.RLock()
            _LOCKS[collection] = lock
        return lock


@dataclass(frozen=True)
class PreparedVectors:
    """Vectors encoded and centred for one collection, with what prepared them.

    A collection accepts them (:meth:`TextCollection.write_prepared`,
    :meth:`TextCollection.recall_prepared`) only when both fingerprints match
    its own.
    """

    vectors: np.ndarray  # float32 (n, d), unit rows (or zero)
    encoder: str         # encoder fingerprint
    centering: str       # centering-mean fingerprint


def _check_texts(texts: Any, name: str = "texts") -> list[str]:
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
        if not text.strip():
            raise InvalidInput(f"{name}[{i}]: expected a non-blank text, got {text!r}")
    return batch


def _check_text(text: Any, name: str = "text") -> str:
    if not isinstance(text, str):
        raise InvalidInput(f"{name}: expected a str, got {type(text).__name__}")
    if not text.strip():
        raise InvalidInput(f"{name}: expected a non-blank text, got {text!r}")
    return text


class TextCollection:
    """A collection that takes and answers text.

    Parameters
    ----------
    collection
        A store collection (``db.collection(name)``): ``write(vectors,
        metadata)`` returning ``.ids``, ``analyze``, ``stats``,
        ``documents.query/get`` and the ``centering`` and ``gate`` slots.
    encoder : Encoder
        The encoder the database records; its dimension must be the
        collection's.
    text_key : str, optional
        The metadata key the text is stored under.
    min_fit : int, optional
        Texts the first remember() batch needs to learn the mean from.
    resolution : str, optional
        ``"exact"`` (default) or ``"indexed"`` candidate search.
    """

    def __init__(self, collection: Any, encoder: Any, *, text_key: str = "text",
                 min_fit: int = MIN_FIT, resolution: str = "exact") -> None:
        if encoder is None or not hasattr(encoder, "encode"):
            raise InvalidInput(f"encoder: expected an Encoder, got {type(encoder).__name__}")
        if not isinstance(text_key, str) or not text_key:
            raise InvalidInput(f"text_key: expected a non-empty str, got {text_key!r}")
        if isinstance(min_fit, bool) or not isinstance(min_fit, int) or min_fit < 2:
            raise InvalidInput(f"min_fit: expected an int >= 2, got {min_fit!r}")
        if resolution not in ("exact", "indexed"):
            raise InvalidInput(f"resolution: expected 'exact' or 'indexed', got {resolution!r}")
        dim = _collection_dim(collection)
        if dim is not None and int(encoder.dimension) != dim:
            raise IncompatibleStore(
                f"encoder {getattr(encoder, 'name', encoder)!r} makes {encoder.dimension}-d vectors, "
                f"the collection holds {dim}-d vectors")
        recorded = _database_encoder(collection)
        recorded_fp = getattr(recorded, "fingerprint", None)
        if recorded_fp is not None and recorded_fp != encoder.fingerprint:
            raise IncompatibleStore(
                f"the database records encoder {getattr(recorded, 'name', '?')!r} (fingerprint "
                f"{recorded_fp}); this encoder {getattr(encoder, 'name', '?')!r} has fingerprint "
                f"{encoder.fingerprint}")
        self._collection = collection
        self._encoder = encoder
        self._text_key = text_key
        self._min_fit = min_fit
        self._resolution = resolution
        self._lock = _lock_for(collection)
        self._centerer_cache: tuple[str | None, Centerer] | None = None  # (fingerprint, centerer)
        self._source = _CollectionSource(collection, resolution)

    # -- properties ------------------------------------------------------------------

    @property
    def collection(self) -> Any:
        return self._collection

    @property
    def encoder(self) -> Any:
        return self._encoder

    @property
    def centerer(self) -> Centerer | None:
        """The collection's frozen centering mean, or ``None`` before the first write."""
        return self._load_centerer()

    @property
    def gate(self) -> RecallGate | None:
        """The calibrated gate stored with the collection, or ``None``."""
        data = _slot_get(self._collection, "gate")
        if data is None:
            return None
        gate = RecallGate.from_dict(data)
        centerer = self._load_centerer()
        if centerer is not None and gate.centering not in (None, centerer.fingerprint):
            raise IncompatibleStore(
                f"the stored gate was calibrated under centering {gate.centering!r}, the collection "
                f"uses {centerer.fingerprint!r}: calibrate again")
        if gate.encoder not in (None, self._encoder.fingerprint):
            raise IncompatibleStore(
                f"the stored gate was calibrated with encoder {gate.encoder!r}, this one is "
                f"{self._encoder.fingerprint!r}: calibrate again")
        return gate

    def clear_gate(self) -> None:
        """Remove the stored gate: recalls answer ungated, without bands."""
        _slot_set(self._collection, "gate", None)

    # -- centering ---------------------------------------------------------------------

    def _load_centerer(self) -> Centerer | None:
        data = _slot_get(self._collection, "centering")
        if data is None:
            return None
        if not isinstance(data, Mapping) or data.get("format") != CENTERING_FORMAT:
            raise IncompatibleStore(
                f"the collection's centering slot is not {CENTERING_FORMAT!r}: {data!r:.80}")
        if data.get("version") != _CENTERING_VERSION:
            raise IncompatibleStore(f"centering slot version {data.get('version')!r} is not supported")
        encoder = data.get("encoder") or {}
        if encoder.get("fingerprint") != self._encoder.fingerprint:
            raise IncompatibleStore(
                f"the collection was written with encoder {encoder.get('name')!r} (fingerprint "
                f"{encoder.get('fingerprint')!r}); this encoder {getattr(self._encoder, 'name', '?')!r} "
                f"has fingerprint {self._encoder.fingerprint!r}")
        fingerprint = data["centerer"].get("fingerprint")
        if self._centerer_cache is not None and self._centerer_cache[0] == fingerprint:
            return self._centerer_cache[1]
        centerer = Centerer.from_dict(data["centerer"])
        self._centerer_cache = (centerer.fingerprint, centerer)
        return centerer

    def _store_centerer(self, centerer: Centerer) -> None:
        _slot_set(self._collection, "centering", {
            "format": CENTERING_FORMAT,
            "version": _CENTERING_VERSION,
            "encoder": {"name": getattr(self._encoder, "name", None),
                        "dimension": int(self._encoder.dimension),
                        "fingerprint": self._encoder.fingerprint},
            "centerer": centerer.to_dict(),
        })
        self._centerer_cache = (centerer.fingerprint, centerer)

    def _written(self) -> int:
        return int(self._collection.stats().writes)

    def fit_centering(self, texts: Sequence[str]) -> Centerer:
        """Learn and freeze the collection's centering mean from sample texts.

        Only while the collection holds nothing: once a vector is stored
        under a mean, the mean is fixed. The texts are not written.

        Raises
        ------
        InvalidInput
            Fewer than ``min_fit`` texts.
        IncompatibleStore
            The collection already has a mean or holds vectors.
        """
        batch = _check_texts(texts)
        if len(batch) < self._min_fit:
            raise InvalidInput(f"texts: need at least {self._min_fit} texts to learn a centering mean "
                               f"from, got {len(batch)}")
        with self._lock:
            if self._load_centerer() is not None:
                raise IncompatibleStore("the collection already has a centering mean; it is fixed "
                                        "for its lifetime (build a new collection to change it)")
            self._refuse_uncentred_contents()
            centerer = Centerer(int(self._encoder.dimension)).fit(self._encode(batch)).freeze()
            self._store_centerer(centerer)
            return centerer

    def _refuse_uncentred_contents(self) -> None:
        written = self._written()
        if written:
            raise IncompatibleStore(
                f"the collection holds {written} vectors written without a centering record; text "
                "recall needs every vector prepared by remember() (use a new collection)")

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = np.asarray(self._encoder.encode(texts), dtype=np.float32)
        if vectors.shape != (len(texts), int(self._encoder.dimension)):
            raise InvalidInput(f"encoder returned shape {vectors.shape} for {len(texts)} texts")
        return vectors

    def prepare(self, texts: Sequence[str]) -> PreparedVectors:
        """Encode and centre texts under the collection's mean (which must exist)."""
        batch = _check_texts(texts)
        centerer = self._load_centerer()
        if centerer is None:
            raise InvalidInput("the collection has no centering mean yet: remember() a first batch of "
                               f"at least {self._min_fit} texts, or call fit_centering()")
        return self._prepare_with(batch, centerer)

    def _prepare_with(self, batch: list[str], centerer: Centerer) -> PreparedVectors:
        vectors = centerer.transform(self._encode(batch)) if batch else np.zeros(
            (0, int(self._encoder.dimension)), np.float32)
        fingerprint = centerer.fingerprint
        if fingerprint is None:  # as transform() says for a non-empty batch
            raise InvalidInput("this Centerer is not fitted: call fit() or partial_fit() first")
        return PreparedVectors(vectors, self._encoder.fingerprint, fingerprint)

    def _check_prepared(self, prepared: PreparedVectors, centerer: Centerer | None) -> None:
        if not isinstance(prepared, PreparedVectors):
            raise InvalidInput(f"prepared: expected PreparedVectors, got {type(prepared).__name__}")
        if prepared.encoder != self._encoder.fingerprint:
            raise IncompatibleStore(f"vectors were encoded by encoder {prepared.encoder!r}, the collection "
                                    f"uses {self._encoder.fingerprint!r}")
        if centerer is None or prepared.centering != centerer.fingerprint:
            raise IncompatibleStore(
                f"vectors were prepared under centering mean {prepared.centering!r}, the collection's is "
                f"{None if centerer is None else centerer.fingerprint!r}")

    # -- writes -------------------------------------------------------------------------

    def _metadata(self, batch: list[str], metadata: Any) -> list[dict[str, Any]]:
        if metadata is None:
            extra: list[Any] = [None] * len(batch)
        elif isinstance(metadata, Mapping):
            raise InvalidInput("metadata: expected a list with one dict (or None) per text, got a single "
                               "dict")
        else:
            extra = list(metadata)
            if len(extra) != len(batch):
                raise InvalidInput(
                    f"metadata: expected {len(batch)} entries (one per text), got {len(extra)}")
        out = []
        for i, (text, item) in enumerate(zip(batch, extra)):
            if item is None:
                out.append({self._text_key: text})
                continue
            if not isinstance(item, Mapping):
                raise InvalidInput(f"metadata[{i}]: expected a dict or None, got {type(item).__name__}")
            if self._text_key in item:
                raise InvalidInput(f"metadata[{i}]: the key {self._text_key!r} is reserved for the text")
            out.append({self._text_key: text, **item})
        try:  # refuse before anything (the centering mean included) is stored
            json.dumps(out, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"metadata: expected JSON values ({exc})") from None
        return out

    def remember(self, texts: Sequence[str], metadata: Sequence[Mapping[str, Any] | None] | None = None
                 ) -> list[int]:
        """Write texts as documents; returns their document ids, in order.

        Each text is encoded, centred and written with metadata
        ``{"text": text, **metadata[i]}``. The first batch of a collection
        without a mean learns it (at least ``min_fit`` texts) and freezes it.

        Raises
        ------
        InvalidInput
            Blank or non-str texts, misaligned metadata, a reserved key, or a
            first batch too small to learn the mean from.
        IncompatibleStore
            Another encoder, or a collection holding vectors written without
            a centering record.
        """
        batch = _check_texts(texts)
        meta = self._metadata(batch, metadata)
        if not batch:
            return []
        with self._lock:
            centerer = self._load_centerer()
            if centerer is None:
                self._refuse_uncentred_contents()
                if len(batch) < self._min_fit:
                    raise InvalidInput(
                        f"texts: the first remember() learns the collection's centering mean and needs "
                        f"at least {self._min_fit} texts, got {len(batch)}; call fit_centering(sample_texts) "
                        "first to remember fewer")
                raw = self._encode(batch)
                centerer = Centerer(int(self._encoder.dimension)).fit(raw).freeze()
                self._store_centerer(centerer)  # before the write: no vector without its mean
                vectors = centerer.transform(raw)
            else:
                vectors = self._prepare_with(batch, centerer).vectors
            return _write_ids(self._collection, vectors, meta)

    def write_prepared(self, prepared: PreparedVectors,
                       metadata: Sequence[Mapping[str, Any] | None]) -> list[int]:
        """Write vectors from :meth:`prepare` with their metadata (texts already inside it).

        Refuses vectors prepared under another mean or encoder.
        """
        with self._lock:
            self._check_prepared(prepared, self._load_centerer())
            meta = list(metadata)
            if len(meta) != prepared.vectors.shape[0]:
                raise InvalidInput(f"metadata: expected {prepared.vectors.shape[0]} entries, got {len(meta)}")
            return _write_ids(self._collection, prepared.vectors, meta)

    # -- reads ---------------------------------------------------------------------------

    def recall(self, text: str, n: int = 5, *, fusion: str = _recall.DEFAULT_FUSION,
               pool: int | None = None) -> RecallResult:
        """Recall what the collection holds about ``text``.

        Returns a :class:`~hopmem.recall.RecallResult`: fidelity,
        first_contact, banded hits, and whether (and why) it abstained.
        Abstention is a value: an empty collection abstains with
        ``"empty memory"``, a question below the stored gate with
        ``"below gate (...)"``.
        """
        question = _check_text(text)
        centerer = self._load_centerer()
        if centerer is None:
            self._refuse_uncentred_contents()
            return RecallResult(None, None, [], True, "empty memory")
        prepared = self._prepare_with([question], centerer)
        return self._recall(prepared.vectors[0], n, fusion, pool)

    def recall_prepared(self, prepared: PreparedVectors, n: int = 5, *,
                        fusion: str = _recall.DEFAULT_FUSION, pool: int | None = None) -> RecallResult:
        """:meth:`recall` for one vector from :meth:`prepare` (refuses another mean)."""
        self._check_prepared(prepared, self._load_centerer())
        if prepared.vectors.shape[0] != 1:
            raise InvalidInput(f"prepared: expected one vector, got {prepared.vectors.shape[0]}")
        return self._recall(prepared.vectors[0], n, fusion, pool)

    def _recall(self, vector: np.ndarray, n: int, fusion: str, pool: int | None) -> RecallResult:
        return _recall.recall_vector(self._source, vector, n, gate=self.gate, fusion=fusion, pool=pool,
                                     text_key=self._text_key)

    def calibrate(self, related_texts: Sequence[str], unrelated_texts: Sequence[str],
                  error_budget: float = 0.0, *, statistic: str = "confidence",
                  holdout_fraction: float = 0.3, seed: int = 0) -> RecallGate:
        """Calibrate and store the gate later recalls use.

        ``related_texts`` are held-out questions this collection should answer
        (not the remembered texts themselves), ``unrelated_texts`` questions
        it should abstain on; at least two of each. See
        :func:`hopmem.recall.calibrate_gate` for the rule and the held-out
        figures on the returned gate.
        """
        related = _check_texts(related_texts, "related_texts")
        unrelated = _check_texts(unrelated_texts, "unrelated_texts")
        centerer = self._load_centerer()
        if centerer is None:
            raise InvalidInput("cannot calibrate an empty collection: remember() its texts first")
        rel = self._prepare_with(related, centerer).vectors
        irr = self._prepare_with(unrelated, centerer).vectors
        gate = _recall.calibrate_gate(
            self._source, rel, irr, error_budget, statistic=statistic, holdout_fraction=holdout_fraction,
            seed=seed, encoder=self._encoder.fingerprint, centering=centerer.fingerprint)
        _slot_set(self._collection, "gate", gate.to_dict())
        return gate

    def __repr__(self) -> str:
        return (f"TextCollection({self._collection!r}, encoder={getattr(self._encoder, 'name', '?')!r})")


# -- the store interface, in one place ---------------------------------------------------


def _collection_dim(collection: Any) -> int | None:
    for name in ("dim", "dimension"):
        value = getattr(collection, name, None)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)
    return None


def _slot_get(collection: Any, name: str) -> Any:
    """A persisted opaque JSON slot (``collection.centering`` / ``collection.gate``)."""
    return getattr(collection, name)


def _slot_set(collection: Any, name: str, value: Any) -> None:
    setattr(collection, name, value)


def _database_encoder(collection: Any) -> Any:
    """The encoder record of the collection's database (name, dimension, fingerprint), if any."""
    database = getattr(collection, "database", None)
    return getattr(database, "encoder", None) if database is not None else None


def _write_ids(collection: Any, vectors: np.ndarray, metadata: list[Any]) -> list[int]:
    result = collection.write(vectors, metadata=metadata)
    return [int(i) for i in result.ids]


class _CollectionSource:
    """A store collection seen as a :class:`hopmem.recall.RecallSource`."""

    def __init__(self, collection: Any, resolution: str) -> None:
        self._collection = collection
        self._resolution = resolution

    def analyze(self, vector: np.ndarray) -> Any:
        return self._collection.analyze(vector)

    def stats(self) -> Any:
        return self._collection.stats()

    def nearest_documents(self, vector: np.ndarray, n: int) -> list[int]:
        found = self._collection.documents.query(vector, n, mode=self._resolution)
        return [int(hit.id) for hit in found]

    def fetch_documents(self, ids: Sequence[int]) -> tuple[list[int], np.ndarray, list[Any]]:
        docs = []
        for doc_id in ids:
            try:
                docs.append(self._collection.documents.get(int(doc_id)))
            except NotFound:  # deleted since the query: not a candidate any more
                continue
        vectors = np.stack([np.asarray(doc.vector, dtype=np.float32) for doc in docs]) if docs else \
            np.zeros((0, _collection_dim(self._collection) or 0), np.float32)
        return [int(doc.id) for doc in docs], vectors, [doc.metadata for doc in docs]
