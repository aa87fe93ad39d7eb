"""Text in, answers out: an encoder and a centering mean bound to a collection.

:class:`TextCollection` wraps a store collection (``db.collection(name)``)
and an :class:`~hopmem.text.encoders.Encoder`:

* :meth:`TextCollection.remember` encodes texts, centers them, and writes them
  with metadata ``{"text": text, **your metadata}``, so each one is also a
  document; it returns the document ids.
* :meth:`TextCollection.recall` prepares a question the same way and returns a
  :class:`~hopmem.text.recall.RecallResult` (see :mod:`hopmem.text.recall`).
* :meth:`TextCollection.calibrate` measures held-out related and unrelated
  questions and stores a :class:`~hopmem.text.recall.RecallGate` in the
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
and the superposed locations cannot be re-centered in place. To change it,
build a new collection and remember the texts again (document ids change).
A collection refuses vectors prepared under another mean or another encoder
(:class:`~hopmem.errors.IncompatibleStore`), and refuses text recall on a
collection that already holds vectors written without a centering record.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._arguments import deprecated_arguments
from ..errors import IncompatibleStore, InvalidInput, NotFound
from . import recall as _recall
from .centering import Centerer
from .encoders import Encoder, check_texts, encoder_dim
from .recall import RecallGate, RecallResult

__all__ = ["CENTERING_FORMAT", "MIN_FIT", "PreparedVectors", "StoreCollection", "TextCollection"]

CENTERING_FORMAT = "hopmem.text-centering"
_CENTERING_VERSION = 1
#: Texts the first remember() batch must hold to learn the centering mean from.
MIN_FIT = 16


# -- what TextCollection needs from a store collection ------------------------------------------


class _Document(Protocol):
    """A stored document: :class:`hopmem.store.Document`."""

    @property
    def id(self) -> int: ...

    @property
    def vector(self) -> Any: ...

    @property
    def metadata(self) -> Any: ...


class _Documents(Protocol):
    def get(self, doc_id: int, /) -> _Document: ...


class _EncoderRecord(Protocol):
    """The encoder a database records: :class:`hopmem.store.EncoderInfo`."""

    @property
    def name(self) -> str: ...

    @property
    def fingerprint(self) -> str | None: ...


class _Database(Protocol):
    @property
    def encoder(self) -> _EncoderRecord | None: ...


class _WriteResult(Protocol):
    @property
    def ids(self) -> Any: ...


@runtime_checkable
class StoreCollection(Protocol):
    """What :class:`TextCollection` uses of a store collection, and nothing more.

    :class:`hopmem.store.Collection` (``db.collection(name)``) is one.
    ``dim`` is the vectors' length; ``database.encoder`` the encoder record
    (name, fingerprint) the database was created with, or ``None``;
    ``centering`` and ``gate`` are persisted JSON slots the text layer owns
    (read and assigned); ``write(vectors, metadata=...)`` returns an object
    with the new document ``ids``; ``analyze(vector)`` runs the memory's
    iterative read (a :class:`hopmem.Trace`); ``stats()`` gives its load
    (``writes``, ``num_locations``); ``resolve(vector, limit, mode)`` returns
    up to ``limit`` document hits (with ``id``), best first; and
    ``documents.get(id)`` returns a stored document (``id``, ``vector``,
    ``metadata``) or raises :class:`~hopmem.errors.NotFound`.
    """

    centering: Any
    gate: Any

    @property
    def dim(self) -> int: ...

    @property
    def database(self) -> _Database: ...

    @property
    def documents(self) -> _Documents: ...

    def write(self, vectors: Any, metadata: Any = None, *,
              write_id: str | None = None) -> _WriteResult: ...

    def analyze(self, query: Any, /) -> Any: ...

    def stats(self) -> Any: ...

    def resolve(self, vector: Any, limit: int, mode: Any, /) -> Sequence[Any]: ...


@dataclass(frozen=True)
class PreparedVectors:
    """Vectors encoded and centered for one collection, with what prepared them.

    A collection accepts them (:meth:`TextCollection.write_prepared`,
    :meth:`TextCollection.recall_prepared`) only when both fingerprints match
    its own.
    """

    vectors: np.ndarray  # float32 (n, d), unit rows (or zero)
    encoder: str         # encoder fingerprint
    centering: str       # centering-mean fingerprint


def _check_texts(texts: Any, name: str = "texts") -> list[str]:
    """:func:`hopmem.text.encoders.check_texts`, refusing blank texts (nothing to remember or ask)."""
    return check_texts(texts, name, allow_blank=False)


def _check_text(text: Any, name: str = "text") -> str:
    if not isinstance(text, str):
        raise InvalidInput(f"{name}: expected a str, got {type(text).__name__}")
    if not text.strip():
        raise InvalidInput(f"{name}: expected a non-blank text, got {text!r}")
    return text


class TextCollection:
    """A collection that takes and answers text.

    Make one per collection and share it: it holds the lock that makes
    learning the centering mean and the first write one step, so two threads
    remembering a first batch through it agree on one mean. The store's
    ``Collection.remember``, ``recall`` and ``calibrate`` use one it creates
    and keeps.

    Parameters
    ----------
    collection : StoreCollection
        A store collection (``db.collection(name)``); :class:`StoreCollection`
        lists what is used of it.
    encoder : Encoder
        The encoder the database records; its ``dim`` must be the
        collection's. (One with only ``dimension``, hopmem 0.1's protocol, is
        taken with a ``DeprecationWarning``.)
    text_key : str, optional
        The metadata key the text is stored under.
    min_fit : int, optional
        Texts the first remember() batch needs to learn the mean from.
    resolution : str, optional
        ``"exact"`` (default) or ``"indexed"`` candidate search.
    """

    def __init__(self, collection: StoreCollection, encoder: Encoder, *, text_key: str = "text",
                 min_fit: int = MIN_FIT, resolution: str = "exact") -> None:
        if not isinstance(collection, StoreCollection):
            raise InvalidInput(f"collection: expected a store collection (db.collection(name)), got "
                               f"{type(collection).__name__}")
        if encoder is None or not callable(getattr(encoder, "encode", None)):
            raise InvalidInput(f"encoder: expected an Encoder, got {type(encoder).__name__}")
        if not isinstance(text_key, str) or not text_key:
            raise InvalidInput(f"text_key: expected a non-empty str, got {text_key!r}")
        if isinstance(min_fit, bool) or not isinstance(min_fit, int) or min_fit < 2:
            raise InvalidInput(f"min_fit: expected an int >= 2, got {min_fit!r}")
        if resolution not in ("exact", "indexed"):
            raise InvalidInput(f"resolution: expected 'exact' or 'indexed', got {resolution!r}")
        dim = encoder_dim(encoder)
        if dim != collection.dim:
            raise IncompatibleStore(
                f"encoder: expected one making {collection.dim}-d vectors (the collection's), got "
                f"{encoder.name!r} making {dim}-d vectors")
        recorded = collection.database.encoder
        if recorded is not None and recorded.fingerprint is not None \
                and recorded.fingerprint != encoder.fingerprint:
            raise IncompatibleStore(
                f"the database records encoder {recorded.name!r} (fingerprint "
                f"{recorded.fingerprint}); this encoder {encoder.name!r} has fingerprint "
                f"{encoder.fingerprint}")
        self._collection = collection
        self._encoder = encoder
        self._dim = dim
        self._text_key = text_key
        self._min_fit = min_fit
        self._resolution = resolution
        # Learning the mean and the first write are one step for everyone using this object.
        self._lock = threading.RLock()
        self._centerer_cache: tuple[str | None, Centerer] | None = None  # (fingerprint, centerer)
        self._source = _CollectionSource(collection, resolution)

    # -- properties ------------------------------------------------------------------

    @property
    def collection(self) -> StoreCollection:
        return self._collection

    @property
    def encoder(self) -> Encoder:
        return self._encoder

    @property
    def centerer(self) -> Centerer | None:
        """The collection's frozen centering mean, or ``None`` before the first write."""
        return self._load_centerer()

    @property
    def gate(self) -> RecallGate | None:
        """The calibrated gate stored with the collection, or ``None``."""
        data = self._collection.gate
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
        self._collection.gate = None

    # -- centering ---------------------------------------------------------------------

    def _load_centerer(self) -> Centerer | None:
        data = self._collection.centering
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
                f"{encoder.get('fingerprint')!r}); this encoder {self._encoder.name!r} "
                f"has fingerprint {self._encoder.fingerprint!r}")
        fingerprint = data["centerer"].get("fingerprint")
        if self._centerer_cache is not None and self._centerer_cache[0] == fingerprint:
            return self._centerer_cache[1]
        centerer = Centerer.from_dict(data["centerer"])
        self._centerer_cache = (centerer.fingerprint, centerer)
        return centerer

    def _store_centerer(self, centerer: Centerer) -> None:
        self._collection.centering = {
            "format": CENTERING_FORMAT,
            "version": _CENTERING_VERSION,
            "encoder": {"name": self._encoder.name,
                        "dimension": self._dim,  # the stored format's key
                        "fingerprint": self._encoder.fingerprint},
            "centerer": centerer.to_dict(),
        }
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
            raise InvalidInput(f"texts: expected at least {self._min_fit} texts to learn a centering "
                               f"mean from, got {len(batch)}")
        with self._lock:
            if self._load_centerer() is not None:
                raise IncompatibleStore("the collection already has a centering mean; it is fixed "
                                        "for its lifetime (build a new collection to change it)")
            self._refuse_uncentered_contents()
            centerer = Centerer(self._dim).fit(self._encode(batch)).freeze()
            self._store_centerer(centerer)
            return centerer

    def _refuse_uncentered_contents(self) -> None:
        written = self._written()
        if written:
            raise IncompatibleStore(
                f"the collection holds {written} vectors written without a centering record; text "
                "recall needs every vector prepared by remember() (use a new collection)")

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = np.asarray(self._encoder.encode(texts), dtype=np.float32)
        if vectors.shape != (len(texts), self._dim):
            raise InvalidInput(f"encoder.encode: expected shape {(len(texts), self._dim)}, got "
                               f"{vectors.shape}")
        return vectors

    def prepare(self, texts: Sequence[str]) -> PreparedVectors:
        """Encode and center texts under the collection's mean (which must exist)."""
        batch = _check_texts(texts)
        centerer = self._load_centerer()
        if centerer is None:
            raise InvalidInput("collection: expected a centering mean, got a collection with no centering "
                               f"mean yet (remember() a first batch of at least {self._min_fit} texts, or "
                               "call fit_centering())")
        return self._prepare_with(batch, centerer)

    def _prepare_with(self, batch: list[str], centerer: Centerer) -> PreparedVectors:
        vectors = centerer.transform(self._encode(batch)) if batch else np.zeros(
            (0, self._dim), np.float32)
        fingerprint = centerer.fingerprint
        if fingerprint is None:  # as transform() says for a non-empty batch
            raise InvalidInput("centerer: expected a fitted Centerer, got an unfitted one (call fit() first)")
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
                raise InvalidInput(f"metadata[{i}]: expected a dict without the key {self._text_key!r} "
                                   "(reserved for the text), got one with it")
            out.append({self._text_key: text, **item})
        try:  # refuse before anything (the centering mean included) is stored
            json.dumps(out, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"metadata: expected JSON values, got {exc}") from None
        return out

    def remember(self, texts: Sequence[str], metadata: Sequence[Mapping[str, Any] | None] | None = None,
                 *, write_id: str | None = None) -> list[int]:
        """Write texts as documents; returns their document ids, in order.

        Each text is encoded, centered and written with metadata
        ``{"text": text, **metadata[i]}``. The first batch of a collection
        without a mean learns it (at least ``min_fit`` texts) and freezes it.
        ``write_id`` goes to the collection's ``write`` (see
        :meth:`hopmem.store.Collection.write`): a repeat returns the same ids.

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
                self._refuse_uncentered_contents()
                if len(batch) < self._min_fit:
                    raise InvalidInput(
                        f"texts: the first remember() learns the collection's centering mean and needs "
                        f"at least {self._min_fit} texts, got {len(batch)}; call fit_centering(sample_texts) "
                        "first to remember fewer")
                raw = self._encode(batch)
                centerer = Centerer(self._dim).fit(raw).freeze()
                self._store_centerer(centerer)  # before the write: no vector without its mean
                vectors = centerer.transform(raw)
            else:
                vectors = self._prepare_with(batch, centerer).vectors
            return self._write(vectors, meta, write_id)

    def write_prepared(self, prepared: PreparedVectors,
                       metadata: Sequence[Mapping[str, Any] | None], *,
                       write_id: str | None = None) -> list[int]:
        """Write vectors from :meth:`prepare` with their metadata (texts already inside it).

        Refuses vectors prepared under another mean or encoder. ``write_id``:
        as for :meth:`remember`.
        """
        with self._lock:
            self._check_prepared(prepared, self._load_centerer())
            meta = list(metadata)
            if len(meta) != prepared.vectors.shape[0]:
                raise InvalidInput(f"metadata: expected {prepared.vectors.shape[0]} entries, got {len(meta)}")
            return self._write(prepared.vectors, meta, write_id)

    # -- reads ---------------------------------------------------------------------------

    def _write(self, vectors: np.ndarray, metadata: list[Any], write_id: str | None = None) -> list[int]:
        if write_id is None:  # a collection without write ids works as before
            result = self._collection.write(vectors, metadata=metadata)
        else:
            result = self._collection.write(vectors, metadata=metadata, write_id=write_id)
        return [int(i) for i in result.ids]

    @deprecated_arguments("TextCollection.recall", {"n": "limit"})
    def recall(self, text: str, limit: int = 5, *, fusion: str = _recall.DEFAULT_FUSION,
               pool: int | None = None) -> RecallResult:
        """Recall what the collection holds about ``text``: at most ``limit`` hits.

        Returns a :class:`~hopmem.text.recall.RecallResult`: fidelity,
        first_contact, banded hits, and whether (and why) it abstained.
        ``n=`` is the deprecated name of ``limit`` (until hopmem 0.3).
        Abstention is a value: an empty collection abstains with
        ``"empty memory"``, a question below the stored gate with
        ``"below gate (...)"``.
        """
        question = _check_text(text)
        centerer = self._load_centerer()
        if centerer is None:
            self._refuse_uncentered_contents()
            return RecallResult(None, None, [], True, "empty memory")
        prepared = self._prepare_with([question], centerer)
        return self._recall(prepared.vectors[0], limit, fusion, pool)

    @deprecated_arguments("TextCollection.recall_prepared", {"n": "limit"})
    def recall_prepared(self, prepared: PreparedVectors, limit: int = 5, *,
                        fusion: str = _recall.DEFAULT_FUSION, pool: int | None = None) -> RecallResult:
        """:meth:`recall` for one vector from :meth:`prepare` (refuses another mean)."""
        self._check_prepared(prepared, self._load_centerer())
        if prepared.vectors.shape[0] != 1:
            raise InvalidInput(f"prepared: expected one vector, got {prepared.vectors.shape[0]}")
        return self._recall(prepared.vectors[0], limit, fusion, pool)

    def _recall(self, vector: np.ndarray, limit: int, fusion: str, pool: int | None) -> RecallResult:
        return _recall.recall_vector(self._source, vector, limit=limit, gate=self.gate, fusion=fusion,
                                     pool=pool, text_key=self._text_key)

    @deprecated_arguments("TextCollection.calibrate",
                          {"related_texts": "related", "unrelated_texts": "unrelated",
                           "holdout_fraction": "holdout"}, positional=("error_budget",))
    def calibrate(self, related: Sequence[str], unrelated: Sequence[str], *, error_budget: float = 0.0,
                  holdout: float = 0.3, seed: int = 0, statistic: str = "confidence") -> RecallGate:
        """Calibrate and store the gate later recalls use.

        ``related`` are held-out questions this collection should answer
        (not the remembered texts themselves), ``unrelated`` questions it
        should abstain on; at least two of each. ``error_budget``,
        ``holdout`` and ``seed`` are those of :func:`hopmem.text.gates.calibrate`;
        ``statistic`` is the score the gate compares (:data:`hopmem.text.recall.STATISTICS`).
        See :func:`hopmem.text.recall.calibrate_gate` for the rule and the held-out
        figures on the returned gate. The names of the previous signature
        (``related_texts``, ``unrelated_texts``, ``holdout_fraction``, and
        ``error_budget`` by position) still work, with a
        ``DeprecationWarning``, until hopmem 0.3.
        """
        related_batch = _check_texts(related, "related")
        unrelated_batch = _check_texts(unrelated, "unrelated")
        centerer = self._load_centerer()
        if centerer is None:
            raise InvalidInput("collection: expected remembered texts to calibrate against, got an empty "
                               "collection (remember() its texts first)")
        rel = self._prepare_with(related_batch, centerer).vectors
        irr = self._prepare_with(unrelated_batch, centerer).vectors
        gate = _recall.calibrate_gate(
            self._source, rel, irr, error_budget=error_budget, holdout=holdout, seed=seed,
            statistic=statistic, encoder=self._encoder.fingerprint, centering=centerer.fingerprint)
        self._collection.gate = gate.to_dict()
        return gate

    def __repr__(self) -> str:
        return f"TextCollection({self._collection!r}, encoder={self._encoder.name!r})"


class _CollectionSource:
    """A store collection seen as a :class:`hopmem.text.recall.RecallSource`."""

    def __init__(self, collection: StoreCollection, resolution: str) -> None:
        self._collection = collection
        self._resolution = resolution

    def analyze(self, vector: np.ndarray) -> Any:
        return self._collection.analyze(vector)

    def stats(self) -> Any:
        return self._collection.stats()

    def nearest_documents(self, vector: np.ndarray, limit: int) -> list[int]:
        found = self._collection.resolve(vector, limit, self._resolution)
        return [int(hit.id) for hit in found]

    def fetch_documents(self, ids: Sequence[int]) -> tuple[list[int], np.ndarray, list[Any]]:
        docs: list[_Document] = []
        for doc_id in ids:
            try:
                docs.append(self._collection.documents.get(int(doc_id)))
            except NotFound:  # deleted since the query: not a candidate any more
                continue
        vectors = np.stack([np.asarray(doc.vector, dtype=np.float32) for doc in docs]) if docs else \
            np.zeros((0, self._collection.dim), np.float32)
        return [int(doc.id) for doc in docs], vectors, [doc.metadata for doc in docs]
