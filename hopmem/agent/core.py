"""The state every agent-memory operation works on, and the helpers they share.

:class:`MemoryState` holds one namespace of one SQLite file: the store, the
encoder contract (name, dimension, fingerprint, centering mean), the in-memory
index (:mod:`hopmem.agent.index`), the calibrated gates and verdict models, the
clock, the lock, the event bus, the recall settings and the write and retention
policies. It loads the namespace, notices other controllers' commits, adds and
drops rows, encodes and centers text, and derives an entry's utility, retention
and visibility. Its public attributes and methods are the whole interface the
operations see: each is a small class holding the state (writes, recall,
calibration, feedback, maintenance), and :class:`~hopmem.agent.AgentMemory`
composes them.
"""

from __future__ import annotations

import bisect
import datetime
import json
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ..errors import IncompatibleStore, InvalidInput, NotFound
from ..text.centering import Centerer
from ..text.encoders import Encoder, encoder_dim
from ..text.gates import Gate
from . import english
from . import keyword as kw
from ._settings import RecallSettings
from .config import RECALL_MODES, RecallConfig
from .encoding import encode_batches, encoder_record, is_encoder, space_centerer
from .events import EventBus, MemoryEvent
from .index import Partition, Row, value_tokens
from .labels import Labeler, LabelPolicy
from .rerank import Reranker, shipped_reranker
from .results import Entry
from .retention import DEFAULT_KINDS, ForgettingPolicy, KindPolicy, retention, utility
from .store import AgentStore, blob_vector
from .tuning import Tuning, UnfittedSettings, unfitted_settings
from .validation import identity, now_checked, seconds, timestamp
from .verdict import MODE_FEATURES, VerdictModel
from .write_policy import WritePolicy

__all__ = ["MemoryState"]

logger = logging.getLogger("hopmem.agent")


def _is_reranker(obj: object) -> bool:
    depth = getattr(obj, "depth", None)
    return (callable(getattr(obj, "order", None)) and isinstance(depth, int) and not isinstance(depth, bool)
            and 1 <= depth <= 100)


class MemoryState:
    """One namespace of one agent-memory file, in memory: what :class:`~hopmem.agent.AgentMemory`'s parts share.

    Built from :meth:`~hopmem.agent.AgentMemory.open`'s arguments (see there), checked; it
    opens the file (and closes it again if the file's encoder or centering mean does not match).
    """

    def __init__(self, path: str | os.PathLike[str], *, encoder: Encoder, namespace: str,
                 reinforcement: bool = False, forgetting: ForgettingPolicy | float | None = None,
                 clock: Callable[[], float] | None = None, label_policy: LabelPolicy | None = None,
                 labeler: Labeler | None = None, kinds: Mapping[str, KindPolicy] | None = None,
                 capacity: int | None = None, session_ttl: float | datetime.timedelta | None = None,
                 centerer: Centerer | None = None, config: RecallConfig | None = None,
                 day_zero: float | None = None, receipt_ttl: float | datetime.timedelta = 3600.0,
                 max_receipts: int = 1000, reranker: Reranker | Literal[False] | None = None,
                 write_policy: WritePolicy | None = None, tuning: Tuning | None = None) -> None:
        self.namespace = identity(namespace, "namespace", required=True)
        if not is_encoder(encoder):
            raise InvalidInput(f"encoder: expected an Encoder (with encode, name, dim, fingerprint), got {encoder!r}")
        self.clock = clock if clock is not None else time.time
        if not callable(self.clock):
            raise InvalidInput(f"clock: expected a callable returning seconds, got {type(clock).__name__}")
        if isinstance(forgetting, (int, float)) and not isinstance(forgetting, bool):
            forgetting = ForgettingPolicy(half_life=float(forgetting))
        if forgetting is not None and not isinstance(forgetting, ForgettingPolicy):
            raise InvalidInput(f"forgetting: expected a ForgettingPolicy, seconds or None, got {forgetting!r}")
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
            raise InvalidInput(f"capacity: expected an int >= 1 or None, got {capacity!r}")
        if isinstance(max_receipts, bool) or not isinstance(max_receipts, int) or max_receipts < 1:
            raise InvalidInput(f"max_receipts: expected an int >= 1, got {max_receipts!r}")
        if label_policy is not None and not isinstance(label_policy, LabelPolicy):
            raise InvalidInput(f"label_policy: expected a LabelPolicy, got {type(label_policy).__name__}")
        if labeler is not None and not callable(labeler):
            raise InvalidInput("labeler: expected a callable text -> labels")
        if reranker is not None and reranker is not False and not _is_reranker(reranker):
            raise InvalidInput("reranker: expected a Reranker (an int depth in [1, 100] and order()), False or "
                               f"None, got {reranker!r}")
        self._reranker_choice = reranker
        self.encoder = encoder
        self.dim = encoder_dim(encoder)
        self.reinforcement = bool(reinforcement)
        self.forgetting = forgetting
        self.label_policy = label_policy or LabelPolicy()
        self.labeler = labeler
        self.kinds: dict[str, KindPolicy] = dict(DEFAULT_KINDS)
        if kinds:
            for name, policy in kinds.items():
                if not isinstance(policy, KindPolicy):
                    raise InvalidInput(f"kinds[{name!r}]: expected a KindPolicy, got {type(policy).__name__}")
                self.kinds[str(name)] = policy
        self.capacity = capacity
        self.session_ttl = seconds(session_ttl, "session_ttl")
        self.config = config if config is not None else RecallConfig()
        if not isinstance(self.config, RecallConfig):
            raise InvalidInput(f"config: expected a RecallConfig, got {type(self.config).__name__}")
        self.write_policy = write_policy if write_policy is not None else WritePolicy()
        if not isinstance(self.write_policy, WritePolicy):
            raise InvalidInput(f"write_policy: expected a WritePolicy, got {type(self.write_policy).__name__}")
        self.tuning = tuning if tuning is not None else Tuning()
        if not isinstance(self.tuning, Tuning):
            raise InvalidInput(f"tuning: expected a Tuning, got {type(self.tuning).__name__}")
        self.settings = RecallSettings.resolve(self.config, self.tuning)
        unfitted = unfitted_settings(self.tuning)
        if unfitted:
            named = ", ".join(f"{name} {fitted!r}, given {given!r}" for name, (fitted, given) in unfitted.items())
            warnings.warn(f"tuning: the default verdict models were fitted under other settings ({named}): until "
                          "calibrate() is called, their abstentions are not what docs/tuning.md reports",
                          UnfittedSettings, stacklevel=3)
        english.preload()  # here, not in the first recall's latency
        self.day_zero = timestamp(day_zero, "day_zero")
        receipt_seconds = seconds(receipt_ttl, "receipt_ttl")
        if receipt_seconds is None:  # receipts must expire: None would fail at the first recorded recall
            raise InvalidInput(f"receipt_ttl: expected seconds > 0 (or a timedelta), got {receipt_ttl!r}")
        self.receipt_ttl = receipt_seconds
        self.max_receipts = max_receipts
        self.events = EventBus()
        self.lock = threading.RLock()
        self.closed = False
        now = self.now()
        self.store = AgentStore(os.fspath(path), now=now)
        try:
            self._check_contract(centerer, now)
            self.reranker = self.resolve_reranker()
            self.load()
        except BaseException:
            self.store.close()
            raise

    def now(self) -> float:
        """The clock's time, checked."""
        return now_checked(self.clock)

    def resolve_reranker(self) -> Reranker | None:
        """The reranker recall uses: the one given to :meth:`open`, none (``False``), or (``None``) the one
        shipped for this file's encoder and centering mean (:func:`~hopmem.agent.rerank.shipped_reranker`)."""
        choice = self._reranker_choice
        if choice is False:
            return None
        if choice is not None:
            return choice
        centerer = self.centerer.fingerprint
        return shipped_reranker(self.encoder_info["fingerprint"], self.dim, centerer) if centerer else None

    def _check_contract(self, centerer: Centerer | None, now: float) -> None:
        """Record or verify the encoder and the centering mean: never mix vector spaces."""
        store = self.store
        info = encoder_record(self.encoder)
        name, fingerprint = info["name"], info["fingerprint"]
        recorded = store.get_json("encoder")
        if recorded is None:
            centerer = space_centerer(self.encoder, self.dim, centerer)
            with store.transaction():
                store.set_json("encoder", info)
                store.set_json("centerer", centerer.to_dict())
                store.set_meta("created_at", repr(now))
        else:
            if recorded["dimension"] != self.dim or recorded["fingerprint"] != fingerprint:
                raise IncompatibleStore(
                    f"{store.path} was written with encoder {recorded['name']!r} (dimension "
                    f"{recorded['dimension']}, fingerprint {recorded['fingerprint']}); got {name!r} (dimension "
                    f"{self.dim}, fingerprint {fingerprint}). Open it with that encoder, or migrate with "
                    f"AgentMemory.reembed().")
            stored = Centerer.from_dict(store.get_json("centerer"))
            if centerer is not None and centerer.fingerprint != stored.fingerprint:
                raise IncompatibleStore(
                    f"{store.path} was centered with mean {stored.fingerprint}; the centerer given has "
                    f"{centerer.fingerprint}")
            centerer = stored
        self.centerer = centerer
        self.encoder_info = info

    # -- the in-memory index --------------------------------------------------------------

    def load(self) -> None:
        """(Re)build the in-memory index, counters, gates and models of the namespace from the file."""
        recorded = self.store.get_json("encoder")
        if recorded is not None and recorded.get("fingerprint") != self.encoder_info["fingerprint"]:
            raise IncompatibleStore(
                f"{self.store.path} now holds vectors of encoder {recorded.get('name')!r} (fingerprint "
                f"{recorded.get('fingerprint')}); this controller uses {self.encoder_info['name']!r}: reopen it "
                "with that encoder")
        self.rows: dict[int, Row] = {}
        self.by_time: list[tuple[float, int]] = []  # (created_at, id), sorted: time windows
        self.partitions: dict[str | None, Partition] = {}
        self.fts: dict[str | None, str] = self.store.fts_tables(self.namespace)
        self._ingest(self.store.load_entries(self.namespace))
        self.data_version = self.store.data_version()
        self.receipts = self.store.count_receipts(self.namespace)
        self.recalls = 0
        self.gates: dict[str, Gate] = {}
        self.band_gates: dict[str, Gate] = {}
        self.models: dict[str, VerdictModel] = {}  # a gate stored without one is on the grounding statistic
        for mode in RECALL_MODES:
            raw = self.store.get_json(f"gate:{self.namespace}:{mode}")
            if raw is not None:
                self.gates[mode] = Gate.from_dict(raw)
            raw = self.store.get_json(f"bands:{self.namespace}:{mode}")
            if raw is not None:
                self.band_gates[mode] = Gate.from_dict(raw)
            raw = self.store.get_json(f"verdict:{self.namespace}:{mode}")
            if raw is not None:
                model = VerdictModel.from_dict(raw)
                if set(model.features) <= MODE_FEATURES[mode]:
                    self.models[mode] = model
                else:  # fitted on features recall no longer computes: back to the defaults until recalibrated
                    logger.warning("hopmem.agent: the stored %s verdict model of namespace %r reads features %s "
                                   "that are no longer computed; using the default model and gate: call calibrate()",
                                   mode, self.namespace, list(model.features))
                    self.gates.pop(mode, None)
                    self.band_gates.pop(mode, None)

    def _ingest(self, rows: Iterable[Any]) -> None:
        for rec in rows:
            row = Row(
                id=int(rec["id"]), session_id=rec["session_id"], durability=rec["durability"], kind=rec["kind"],
                text=rec["text"], norm_text=rec["norm_text"], vector=blob_vector(rec["vector"], self.dim),
                importance=float(rec["importance"]), labels=json.loads(rec["labels"]),
                inferred_labels=json.loads(rec["inferred_labels"]),
                metadata=None if rec["metadata"] is None else json.loads(rec["metadata"]),
                created_at=float(rec["created_at"]), updated_at=float(rec["updated_at"]),
                reinforced_at=float(rec["reinforced_at"]),
                expires_at=None if rec["expires_at"] is None else float(rec["expires_at"]),
                merged_count=int(rec["merged_count"]),
                superseded_by=None if rec["superseded_by"] is None else int(rec["superseded_by"]),
                eval_sum=float(rec["eval_sum"]), eval_weight=float(rec["eval_weight"]),
                manual_feedback=None if rec["manual_feedback"] is None else float(rec["manual_feedback"]),
                exposures=int(rec["exposures"]), expired_notified=bool(rec["expired_notified"]),
            )
            self.add_row(row)
        for row in self.rows.values():
            row.supersedes = []
        for row in self.rows.values():
            if row.superseded_by is not None and row.superseded_by in self.rows:
                self.rows[row.superseded_by].supersedes.append(row.id)

    def add_row(self, row: Row) -> None:
        """Index a row just stored (its partition, tokens, vector and word counts)."""
        row.partition = row.session_id if row.durability == "session" else None
        row.value_tokens = value_tokens(row.text)
        row.stems = frozenset(kw.stem(t) for t in kw.query_terms(row.text))
        if row.supersedes is None:
            row.supersedes = []
        self.rows[row.id] = row
        bisect.insort(self.by_time, (row.created_at, row.id))
        partition = self.partitions.get(row.partition)
        if partition is None:
            partition = self.partitions[row.partition] = Partition(self.dim)
        partition.append(row.id, row.vector)
        partition.engine_append(row.id)
        partition.count_terms(row.stems, +1)

    def drop_rows(self, ids: Iterable[int]) -> None:
        """Take rows just deleted out of the index, and unlink their supersession."""
        for entry_id in ids:
            row = self.rows.pop(entry_id, None)
            if row is None:
                continue
            at = bisect.bisect_left(self.by_time, (row.created_at, row.id))
            if at < len(self.by_time) and self.by_time[at] == (row.created_at, row.id):
                del self.by_time[at]
            partition = self.partitions.get(row.partition)
            if partition is not None:
                partition.kill(entry_id)
                partition.count_terms(row.stems, -1)
                partition.compact_if_needed(self.settings.rebuild_dead_fraction)
            newer = self.rows.get(row.superseded_by) if row.superseded_by is not None else None
            if newer is not None and entry_id in newer.supersedes:
                newer.supersedes.remove(entry_id)
            for older_id in row.supersedes:
                older = self.rows.get(older_id)
                if older is not None and older.superseded_by == entry_id:
                    older.superseded_by = None

    def sync(self) -> None:
        """Reload when another connection has committed to the file since we last looked."""
        version = self.store.data_version()
        if version != self.data_version:
            logger.debug("hopmem.agent: %s changed on disk; reloading namespace %r", self.store.path, self.namespace)
            self.load()

    def close(self) -> None:
        """Release the file. Idempotent."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.store.close()

    def mark_synced(self) -> None:
        """Note the file's version after this controller's own commit (so :meth:`sync` does not reload)."""
        self.data_version = self.store.data_version()

    def check_open(self) -> None:
        """Refuse to work once closed."""
        if self.closed:
            raise InvalidInput("this AgentMemory is closed")

    def fts_for(self, part_key: str | None) -> str:
        """The FTS5 table of a partition (None: the shared one), created when it has none yet."""
        name = self.fts.get(part_key)
        if name is None:
            name = self.fts[part_key] = self.store.create_fts(self.namespace, part_key, now=self.now())
            self.mark_synced()
        return name

    def delete(self, rows: Iterable[Row]) -> None:
        """Delete rows from the file (inside the caller's transaction), grouped by FTS table."""
        by_fts: dict[str, list[int]] = {}
        for row in rows:
            by_fts.setdefault(self.fts_for(row.partition), []).append(row.id)
        if by_fts:
            self.store.delete_entries(self.namespace, by_fts)

    # -- encoding -------------------------------------------------------------------------------

    def encode(self, texts: Sequence[str], progress: bool | None = False) -> np.ndarray:
        """Checked, centered vectors for ``texts`` with this memory's encoder (in batches; see ``encoding``)."""
        return encode_batches(self.encoder, self.centerer, self.dim, texts, progress=progress)

    # -- derived per-row values ------------------------------------------------------------------------

    def utility(self, row: Row) -> float:
        return utility(row.eval_sum, row.eval_weight, row.manual_feedback)

    def retention(self, row: Row, now: float) -> float:
        kind = self.kinds.get(row.kind)
        return retention(self.forgetting, now=now, reinforced_at=row.reinforced_at, importance=row.importance,
                         utility_value=self.utility(row) if self.reinforcement else 0.0,
                         manual=row.manual_feedback, kind_factor=kind.half_life_factor if kind else 1.0)

    def expired(self, row: Row, now: float) -> bool:
        return row.expires_at is not None and row.expires_at <= now

    def suppressed(self, row: Row, now: float) -> bool:
        return self.forgetting is not None and self.retention(row, now) < self.forgetting.threshold

    def entry(self, row: Row, now: float, merged: bool = False) -> Entry:
        """The public :class:`~hopmem.agent.Entry` of a row at ``now``."""
        return Entry(
            id=row.id, text=row.text, namespace=self.namespace, session_id=row.session_id,
            durability=row.durability, kind=row.kind, importance=row.importance,
            labels={k: list(v) for k, v in row.labels.items()},
            inferred_labels={k: list(v) for k, v in row.inferred_labels.items()},
            metadata=row.metadata, created_at=row.created_at, updated_at=row.updated_at,
            reinforced_at=row.reinforced_at, expires_at=row.expires_at, merged_count=row.merged_count,
            superseded_by=row.superseded_by, utility=self.utility(row), manual_feedback=row.manual_feedback,
            exposures=row.exposures, retention=self.retention(row, now), expired=self.expired(row, now),
            suppressed=self.suppressed(row, now), merged=merged,
        )

    def emit(self, type_: str, session_id: str | None, now: float, **data: Any) -> None:
        """Send an event to the subscribers (if any)."""
        if self.events.has_subscribers():
            self.events.emit(MemoryEvent(type_, self.namespace, session_id, now, data))

    def row(self, entry_id: Any) -> Row:
        """The row of ``entry_id`` (checked), or NotFound."""
        if isinstance(entry_id, bool) or not isinstance(entry_id, (int, np.integer)):
            raise InvalidInput(f"entry_id: expected an int, got {entry_id!r}")
        row = self.rows.get(int(entry_id))
        if row is None:
            raise NotFound(f"no entry {entry_id} in namespace {self.namespace!r}")
        return row
