"""A LangGraph ``BaseStore`` on hopmem's agent memory: :class:`HopmemStore` (``pip install "hopmem[langgraph]"``).

LangGraph agents, and LangMem's memory tools (``create_manage_memory_tool``, ``create_search_memory_tool``),
read and write long-term memory through whatever ``BaseStore`` the graph is given. ``HopmemStore`` is one,
on one SQLite file::

    from hopmem.integrations.langgraph import HopmemStore

    with HopmemStore.open("memory.db", index={"fields": ["content"]}) as store:
        store.put(("memories", "alice"), "k1", {"content": "Alice's sister lives in Lyon."})
        store.search(("memories", "alice"), query="Where does her sister live?")

The mapping (docs/langgraph.md):

* an item's value, timestamps and TTL are rows of the file's ``lg_items`` table
  (:mod:`hopmem.integrations.items`): ``get``, ``put``, ``delete``, ``list_namespaces`` and a search without
  a query read and write those, with the semantics of LangGraph's own in-memory store;
* each LangGraph namespace (a tuple of labels) is one agent-memory namespace of the same file, named by the
  labels joined by ``.`` (a digest when that is longer than 256 characters). The text of each field the
  index names is an entry there (kind ``fact``, shared), whose metadata names the item as its source, so
  two items' texts never merge nor supersede each other; overwriting or deleting the item forgets the
  entries it no longer has;
* a search with a query is the agent memory's hybrid recall in each indexed namespace under the prefix,
  its hits mapped back to their items (an item's score is its best field's). A recall that abstains
  contributes nothing: a query nothing answers returns no items, where a vector store returns its
  nearest items whatever they are.

LangGraph is imported here only: ``import hopmem`` does not need it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidInput

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(f'hopmem.integrations.langgraph needs LangGraph: pip install "hopmem[langgraph]" ({exc})') \
        from exc

from ..agent import AgentMemory, RecallConfig
from ..agent.store import AgentStore, recorded_encoder
from ..text.encoders import Encoder, builtin_encoder, default_encoder, encoder_dim
from .items import ItemRow, ItemTable, matches, ns_text, ns_tuple

__all__ = ["HopmemStore", "RECALL_DEPTH", "agent_namespace"]

#: The most hits one recall returns (the agent memory's limit): a query search with a filter, or with
#: ``offset + limit`` beyond it, sees at most this many items per namespace.
RECALL_DEPTH = 100
#: Agent memories kept open at once (one per LangGraph namespace searched or written); the least recently
#: used beyond this are closed and reopened when needed.
OPEN_MEMORIES = 64
_PREFIX = "langgraph:"


def agent_namespace(namespace: tuple[str, ...]) -> str:
    """The agent-memory namespace that holds a LangGraph namespace's indexed texts."""
    name = _PREFIX + ns_text(namespace)
    if len(name) <= 256:
        return name
    return _PREFIX + "sha256:" + hashlib.sha256(ns_text(namespace).encode("utf-8")).hexdigest()


def _micros(dt_us: int) -> datetime:
    return datetime.fromtimestamp(dt_us // 1_000_000, tz=UTC).replace(microsecond=dt_us % 1_000_000)


def _fields(index: Any) -> list[tuple[str, Any]]:
    fields = index.get("fields") or ["$"]
    if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
        raise InvalidInput(f"index['fields']: expected a list of field paths, got {fields!r}")
    return [(f, f if f == "$" else tokenize_path(f)) for f in fields]


class HopmemStore(BaseStore):
    """A LangGraph ``BaseStore`` on one hopmem agent-memory file. Open with :meth:`open`.

    Safe to share between threads and asyncio tasks (one lock serialises operations; ``abatch`` runs
    ``batch`` in a worker thread), and between processes on the same file (SQLite WAL: each operation
    reads the file's current state). Supports TTL (``ttl`` minutes on ``put``, refreshed by reads unless
    ``refresh_ttl=False``); expired items are never returned and are deleted by the next operation.
    """

    supports_ttl = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("use HopmemStore.open(path, index=...)")

    @classmethod
    def open(cls, path: str | os.PathLike[str], index: IndexConfig | None = None, *, encoder: Encoder | None = None,
             ttl: TTLConfig | None = None, config: RecallConfig | None = None,
             clock: Callable[[], float] | None = None) -> HopmemStore:
        """Open (or create) the store in the SQLite file ``path``.

        Parameters
        ----------
        path : path-like
            The file (an agent memory; created if missing). Reopening it finds every item.
        index : LangGraph ``IndexConfig`` or None
            ``{"fields": [...]}``: the value paths whose text is indexed for query search (LangGraph's
            path syntax; default ``["$"]``, the whole value as JSON). ``embed`` may be a hopmem
            :class:`~hopmem.text.encoders.Encoder`; ``dims``, if given, must be its dimension. None: nothing is
            indexed and a query is ignored, as in LangGraph's stores.
        encoder : Encoder, optional
            The text encoder, when ``index`` is given: by default the one the file was written with, or
            hopmem's default (all-MiniLM-L6-v2, ``hopmem[text]``) for a new file.
        ttl : LangGraph ``TTLConfig``, optional
            ``default_ttl`` (minutes) for puts that give none, ``refresh_on_read`` (default True).
        config : RecallConfig, optional
            The agent memory's recall configuration. By default :class:`RecallConfig` with
            ``conversation=False``: items are not turns of one conversation, so no item is brought in
            because it was stored next to a hit.
        clock : callable returning seconds, optional
            The time source (timestamps, TTLs); by default ``time.time``.
        """
        self = cls.__new__(cls)
        self._init(path, index, encoder=encoder, ttl=ttl, config=config, clock=clock)
        return self

    def _init(self, path: str | os.PathLike[str], index: IndexConfig | None, *, encoder: Encoder | None,
              ttl: TTLConfig | None, config: RecallConfig | None, clock: Callable[[], float] | None) -> None:
        self._clock = clock or time.time
        self._path = os.fspath(path)
        if self._path == ":memory:":  # each namespace's agent memory would be a database of its own
            raise InvalidInput("path: HopmemStore needs a file (for a throwaway store, one in a temporary "
                               "directory), got ':memory:'")
        self._lock = threading.RLock()
        self._closed = False
        self._memories: dict[str, AgentMemory] = {}
        self.ttl_config = dict(ttl) if ttl else None  # type: ignore[assignment]
        self._config = config if config is not None else RecallConfig(conversation=False)
        self._index: dict[str, Any] | None = None
        self._fields: list[tuple[str, Any]] = []
        self._encoder: Encoder | None = None
        if index:
            self._index = dict(index)
            self._fields = _fields(self._index)
            embed = self._index.get("embed")
            if embed is not None and not isinstance(embed, str) and hasattr(embed, "encode") and encoder is None:
                encoder = embed
            elif embed is not None and encoder is None:
                raise InvalidInput("index['embed']: HopmemStore encodes with a hopmem Encoder; pass encoder=... "
                                   f"(or leave both out for the default), got {embed!r}")
            if encoder is None:
                recorded = recorded_encoder(self._path)
                encoder = builtin_encoder(recorded["name"]) if recorded is not None else default_encoder()
            self._encoder = encoder
            dims = self._index.get("dims")
            if dims is not None and int(dims) != encoder_dim(encoder):
                raise InvalidInput(f"index['dims']: the encoder {encoder.name!r} gives vectors of "
                                   f"{encoder_dim(encoder)} dimensions, got dims={dims}")
        # the file is an agent memory first (a foreign SQLite file is refused), then holds the items' tables
        self._file = AgentStore(self._path, now=self._clock())
        try:
            self._items = ItemTable(self._file.conn)
        except BaseException:
            self._file.close()
            raise

    # -- lifecycle -----------------------------------------------------------------------------------------------

    @property
    def index_config(self) -> dict[str, Any] | None:
        """The index configuration the store was opened with (None: no query search)."""
        return self._index

    def close(self) -> None:
        """Close the file and the agent memories opened on it. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for memory in self._memories.values():
                memory.close()
            self._memories.clear()
            self._file.close()

    def __enter__(self) -> HopmemStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HopmemStore({self._path!r}{', closed' if self._closed else ''})"

    def memory(self, namespace: tuple[str, ...]) -> AgentMemory:
        """The agent memory that indexes ``namespace``'s texts (opened once, kept open; needs an index).

        Its recall is what a query search runs; use it for what the store does not expose (calibration,
        statistics). Do not write to it: the store keeps its entries in step with the items.
        """
        if self._encoder is None:
            raise InvalidInput("HopmemStore: opened without an index, so no namespace has an agent memory")
        name = agent_namespace(tuple(namespace))
        with self._lock:
            self._check_open()
            memory = self._memories.pop(name, None)
            if memory is None:
                memory = AgentMemory.open(self._path, encoder=self._encoder, namespace=name, config=self._config,
                                          clock=self._clock)
            self._memories[name] = memory  # most recently used last
            while len(self._memories) > OPEN_MEMORIES:
                self._memories.pop(next(iter(self._memories))).close()
            return memory

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInput("HopmemStore: the store is closed")

    def _now(self) -> int:
        return int(round(self._clock() * 1e6))

    # -- BaseStore ---------------------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run operations: reads see the store as it was before the batch, then its writes apply in order
        (the last write to a key wins), as in LangGraph's in-memory store."""
        ops = list(ops)
        for op in ops:
            if not isinstance(op, (GetOp, SearchOp, ListNamespacesOp, PutOp)):
                raise InvalidInput(f"HopmemStore: unknown operation {type(op).__name__}")
            validate_op_namespace(op)
        with self._lock:
            self._check_open()
            now = self._now()
            self._sweep(now)
            results: list[Result] = []
            refreshed: list[ItemRow] = []
            puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
            for op in ops:
                if isinstance(op, GetOp):
                    row = self._items.get(ns_text(op.namespace), str(op.key), now)
                    if row is not None and op.refresh_ttl and row.ttl is not None:
                        refreshed.append(row)
                    results.append(None if row is None else _item(row))
                elif isinstance(op, SearchOp):
                    found = self._search(op, now)
                    if op.refresh_ttl:
                        refreshed.extend(row for row, _ in found if row.ttl is not None)
                    results.append([_search_item(row, score) for row, score in found])
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                else:
                    puts[(tuple(op.namespace), str(op.key))] = op
                    results.append(None)
            if refreshed:
                with self._items.transaction():
                    self._items.refresh(refreshed, now)
            if puts:
                self._apply(list(puts.values()), now)
            return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread, so the event loop runs on while SQLite and the encoder work."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- reads -----------------------------------------------------------------------------------------------------

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        spaces = [ns_tuple(ns) for ns in self._items.namespaces()]
        for condition in op.match_conditions or ():
            spaces = [ns for ns in spaces if _matches_path(condition, ns)]
        if op.max_depth is not None:
            spaces = sorted({ns[:op.max_depth] for ns in spaces})
        else:
            spaces = sorted(spaces)
        return spaces[op.offset:op.offset + op.limit]

    def _search(self, op: SearchOp, now: int) -> list[tuple[ItemRow, float | None]]:
        prefix = ns_text(op.namespace_prefix)
        if op.query and self._encoder is not None:
            return self._recall(op, prefix, now)
        rows = self._items.under(prefix, now)
        if op.filter:
            rows = [row for row in rows if matches(row.decoded(), op.filter)]
        return [(row, None) for row in rows[op.offset:op.offset + op.limit]]

    def _recall(self, op: SearchOp, prefix: str, now: int) -> list[tuple[ItemRow, float | None]]:
        """Hybrid recall in each indexed namespace under ``prefix``; hits mapped to their items, best first."""
        assert op.query is not None
        wanted = op.offset + op.limit
        if wanted <= 0:
            return []
        depth = RECALL_DEPTH if op.filter else min(RECALL_DEPTH, wanted)
        scored: list[tuple[float, str, str, int]] = []  # score, namespace, key, entry
        for ns in self._items.indexed_namespaces(prefix):
            selection = self.memory(ns_tuple(ns)).recall(op.query, limit=depth, record=False)
            for hit in selection.hits:
                source = hit.metadata.get("source") if isinstance(hit.metadata, dict) else None
                if isinstance(source, list) and len(source) == 4 and source[0] == "langgraph":
                    scored.append((hit.score, ns, str(source[1]), hit.entry_id))
        rows = self._items.get_many([(ns, key) for _, ns, key, _ in scored], now)
        scored.sort(key=lambda s: -s[0])
        out: list[tuple[ItemRow, float | None]] = []
        seen: set[tuple[str, str]] = set()
        for score, ns, key, entry in scored:
            row = rows.get((ns, key))
            # an entry the item no longer lists (a write interrupted between the two) is not the item's
            if row is None or (ns, key) in seen or entry not in row.entries:
                continue
            if op.filter and not matches(row.decoded(), op.filter):
                continue
            seen.add((ns, key))
            out.append((row, float(score)))
        return out[op.offset:op.offset + op.limit]

    # -- writes ----------------------------------------------------------------------------------------------------

    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """The (field path, text) pairs ``op``'s value gives the index."""
        if self._encoder is None or op.value is None or op.index is False:
            return []
        paths = self._fields if op.index is None else _fields({"fields": op.index})
        out: list[tuple[str, str]] = []
        for path, tokens in paths:
            texts = [t for t in get_text_at_path(op.value, tokens) if isinstance(t, str) and t.strip()]
            if len(texts) == 1:
                out.append((path, texts[0]))
            else:
                out.extend((f"{path}.{i}", text) for i, text in enumerate(texts))
        return out

    def _apply(self, puts: list[PutOp], now: int) -> None:
        values: dict[int, str] = {}
        for i, op in enumerate(puts):
            if op.value is not None:
                if not isinstance(op.value, Mapping):
                    raise InvalidInput(f"value: expected a mapping, got {type(op.value).__name__}")
                try:
                    values[i] = json.dumps(dict(op.value), ensure_ascii=False)
                except (TypeError, ValueError) as exc:
                    raise InvalidInput(f"value: expected JSON data (dict, list, str, int, float, bool, None): "
                                       f"{exc}") from None
        # index first: the entries exist before an item names them (an interrupted write leaves
        # entries no item names, which a query search ignores, never an item naming missing entries).
        # Each put's texts name the put as their source, so they merge with nothing stored before
        # (an overwrite's new wording is indexed as it is, not kept as a variant of the old one).
        entries: dict[int, list[int]] = {}
        by_namespace: dict[tuple[str, ...], list[tuple[int, str, str]]] = {}
        for i, op in enumerate(puts):
            for path, text in self._texts(op):
                by_namespace.setdefault(tuple(op.namespace), []).append((i, path, text))
        for namespace, texts in by_namespace.items():
            made = self.memory(namespace).remember_many(
                [{"text": text, "metadata": {"source": ["langgraph", str(puts[i].key), now, i], "field": path}}
                 for i, path, text in texts], progress=False)
            for (i, _, _), entry in zip(texts, made):
                if entry.id not in entries.setdefault(i, []):
                    entries[i].append(entry.id)
        stale: dict[tuple[str, ...], set[int]] = {}
        with self._items.transaction():
            for i, op in enumerate(puts):
                ns, key = ns_text(op.namespace), str(op.key)
                if op.value is None:
                    old = self._items.delete(ns, key)
                else:
                    ttl = None if op.ttl is None else float(op.ttl)
                    old = self._items.put(ns, key, values[i], now, ttl, entries.get(i, []))
                gone = set(old) - set(entries.get(i, []))
                if gone:
                    stale.setdefault(tuple(op.namespace), set()).update(gone)
        self._forget(stale)

    def _forget(self, stale: Mapping[tuple[str, ...], Iterable[int]]) -> None:
        if self._encoder is None:
            return
        for namespace, ids in stale.items():
            memory = self.memory(namespace)
            for entry_id in sorted(ids):
                memory.forget(entry_id)

    def _sweep(self, now: int) -> None:
        """Delete the items whose TTL has run out, with their entries."""
        expired = self._items.expired(now)
        if not expired:
            return
        stale: dict[tuple[str, ...], set[int]] = {}
        with self._items.transaction():
            for row in expired:
                stale.setdefault(row.namespace, set()).update(self._items.delete(row.ns, row.key))
        self._forget(stale)


def _item(row: ItemRow) -> Item:
    return Item(value=row.decoded(), key=row.key, namespace=row.namespace, created_at=_micros(row.created_at),
                updated_at=_micros(row.updated_at))


def _search_item(row: ItemRow, score: float | None) -> SearchItem:
    return SearchItem(row.namespace, row.key, row.decoded(), _micros(row.created_at), _micros(row.updated_at),
                      score=score)


def _matches_path(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's namespace match: a prefix or suffix of labels, ``*`` matching any one label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path))
    else:
        raise InvalidInput(f"match_type: expected 'prefix' or 'suffix', got {condition.match_type!r}")
    return all(p == "*" or n == p for n, p in pairs)
