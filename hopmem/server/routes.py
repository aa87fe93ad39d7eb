"""The routes of the HTTP API (docs/http.md), each in the scoped form ``/db/{db}/...`` and the legacy form.

Every handler follows the same steps: authenticate (401), check the database
name (400) and the key's scope (403), read and validate the body (413, 400),
then make one library call in a worker thread and shape its result. No
numerics here: the library computes, the server translates.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hopmem.engine.config import MemoryConfig
from hopmem.store import CollectionStats, Document, DocumentHit

from . import models as m
from .auth import ALL, token_from_headers
from .errors import HTTPError, error_response, json_response
from .state import DEFAULT_DB, DbHandle, ServerState
from .text_routes import ENCODER_CHOICES, make_encoder

__all__ = ["build_routes", "ROUTES", "RouteSpec", "HotRoutes", "HOT"]

logger = logging.getLogger("hopmem.server")

_JSON = "application/json"
_OK = b'{"status":"ok"}'
_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(MemoryConfig)) - {"dim"}


@dataclasses.dataclass(frozen=True)
class RouteSpec:
    """One route of the API: the legacy path, methods, handler name, access kind.

    ``access``: ``public`` (no key), ``any`` (any valid key), ``admin`` (a key
    for every database), ``db`` (a key covering the path's database).
    ``scoped``: also served under ``/db/{db}``.
    """

    name: str
    method: str
    path: str
    access: str
    scoped: bool = True


# The single route table; openapi.py documents exactly these.
ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("health", "GET", "/health", "public"),
    RouteSpec("health", "GET", "/healthz", "public"),
    RouteSpec("ready", "GET", "/ready", "public"),
    RouteSpec("ready", "GET", "/readyz", "public"),
    RouteSpec("openapi", "GET", "/openapi.json", "public", scoped=False),
    RouteSpec("list_databases", "GET", "/db", "any", scoped=False),
    RouteSpec("create_database", "POST", "/db", "admin", scoped=False),
    RouteSpec("get_database", "GET", "/db/{db}", "db", scoped=False),
    RouteSpec("drop_database", "DELETE", "/db/{db}", "admin", scoped=False),
    RouteSpec("list_collections", "GET", "/collections", "db"),
    RouteSpec("create_collection", "POST", "/collections", "db"),
    RouteSpec("drop_collection", "DELETE", "/collections/{c}", "db"),
    RouteSpec("write", "POST", "/collections/{c}/write", "db"),
    RouteSpec("read", "POST", "/collections/{c}/read", "db"),
    RouteSpec("analyze", "POST", "/collections/{c}/analyze", "db"),
    RouteSpec("batch_analyze", "POST", "/collections/{c}/batch_analyze", "db"),
    RouteSpec("attention", "POST", "/collections/{c}/attention", "db"),
    RouteSpec("stats", "GET", "/collections/{c}/stats", "db"),
    RouteSpec("config", "GET", "/collections/{c}/config", "db"),
    RouteSpec("fingerprint", "GET", "/collections/{c}/fingerprint", "db"),
    RouteSpec("locations", "GET", "/collections/{c}/locations", "db"),
    RouteSpec("compress", "POST", "/collections/{c}/compress", "db"),
    RouteSpec("list_documents", "GET", "/collections/{c}/documents", "db"),
    RouteSpec("query_documents", "POST", "/collections/{c}/documents/query", "db"),
    RouteSpec("get_document", "GET", "/collections/{c}/documents/{id}", "db"),
    RouteSpec("delete_document", "DELETE", "/collections/{c}/documents/{id}", "db"),
    RouteSpec("remember", "POST", "/collections/{c}/remember", "db"),
    RouteSpec("recall", "POST", "/collections/{c}/recall", "db"),
    RouteSpec("calibrate", "POST", "/collections/{c}/calibrate", "db"),
)


class Ctx:
    """What a handler knows about its request once the checks passed."""

    __slots__ = ("request", "db", "scope")

    def __init__(self, request: Request, db: str, scope: str | None) -> None:
        self.request = request
        self.db = db
        self.scope = scope  # the key's scope, None when auth is off

    @property
    def collection_name(self) -> str:
        return m.check_collection_name(self.request.path_params["c"])


Handler = Callable[[Ctx], Awaitable[Any]]


def _ids(values: Any) -> list[int]:
    return [int(v) for v in values]


def _activated(ids: Any, similarities: Any, weights: Any) -> list[dict[str, Any]]:
    return [{"id": int(i), "similarity": float(s), "weight": float(w)}
            for i, s, w in zip(ids, similarities, weights)]


def _trace(t: Any) -> dict[str, Any]:
    return {
        "iterations": int(t.iterations),
        "converged": bool(t.converged),
        "activated_locations": _activated(t.activated, t.similarities, t.weights),
        "result": t.result,
        "fidelity": float(t.fidelity),
        "first_contact": float(t.first_contact),
    }


def _document(doc: Document) -> dict[str, Any]:
    return {"id": int(doc.id), "metadata": doc.metadata}


def _hit(hit: DocumentHit) -> dict[str, Any]:
    return {"id": int(hit.id), "similarity": float(hit.similarity), "metadata": hit.metadata}


def _stats(stats: CollectionStats) -> dict[str, Any]:
    """HeatherDB's stats record: its field names (``total_writes`` is the total weight)."""
    s = stats.to_dict()
    return {
        "num_locations": int(s["num_locations"]),
        "total_writes": float(s["total_weight"]),
        "current_eta": float(s["current_eta"]),
        "avg_write_count": float(s["avg_write_weight"]),
        "max_write_count": float(s["max_write_weight"]),
        "writes": int(s["writes"]),
        "documents": int(s["documents"]),
    }


def _database_info(db: Any) -> dict[str, Any]:
    """``Database.info()``: already the wire's record (``dimension``, sorted ``collections``)."""
    return dict(db.info())


class Handlers:
    """The route handlers, bound to one server state."""

    def __init__(self, state: ServerState, openapi: dict[str, Any]) -> None:
        self.state = state
        self.limits = state.limits
        self._openapi_bytes = orjson.dumps(openapi)

    # -- plumbing ---------------------------------------------------------------------------------

    async def body(self, ctx: Ctx, *, required: bool = True) -> dict[str, Any]:
        """Read the body within the size and time limits, then parse it as a JSON object."""
        request = ctx.request
        limit = self.limits.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                raise HTTPError(400, "content-length: expected an integer") from None
            if declared > limit:
                raise HTTPError(413, f"request body too large: {declared} bytes, the limit is "
                                f"{limit}")
        # The ASGI messages themselves (Starlette's Request.stream() is an async
        # generator over the same calls, a few microseconds more per request).
        receive = request.receive
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.request_timeout):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":  # http.disconnect
                        raise HTTPError(400, "client disconnected before sending the whole "
                                        "body")
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise HTTPError(413, f"request body too large: more than {limit} bytes")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            raise HTTPError(408, "timed out reading the request body") from None
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return m.parse_body(raw, required=required)

    async def database(self, ctx: Ctx) -> DbHandle:
        return await self.state.database(ctx.db)

    async def collection(self, ctx: Ctx, *, create: bool) -> tuple[DbHandle, str, Any]:
        handle = await self.database(ctx)
        name = ctx.collection_name
        return handle, name, await self.state.collection(handle, name, create=create)

    # -- health and schema ---------------------------------------------------------------------

    async def health(self, ctx: Ctx) -> Response:
        if "db" in ctx.request.path_params:
            await self.database(ctx)
        return Response(_OK, media_type=_JSON)

    async def ready(self, ctx: Ctx) -> Response:
        state = self.state
        if state.draining or not state.started:
            return json_response({"error": "not ready: server is "
                                  + ("shutting down" if state.draining else "starting")}, 503)
        if "db" in ctx.request.path_params:
            await self.database(ctx)

        def probe() -> str | None:
            root = state.datadir.root
            if not os.access(root, os.W_OK):
                return f"data directory {str(root)!r} is not writable"
            state.datadir.list()
            return None

        try:
            problem = await state.run(probe)
        except HTTPError:
            raise
        except Exception as exc:  # noqa: BLE001 - storage unusable: that is what readiness reports
            problem = f"storage unusable: {type(exc).__name__}: {exc}"
        if problem:
            return json_response({"error": problem}, 503)
        return Response(_OK, media_type=_JSON)

    async def openapi(self, ctx: Ctx) -> Response:
        return Response(self._openapi_bytes, media_type=_JSON)

    # -- databases -----------------------------------------------------------------------------

    async def list_databases(self, ctx: Ctx) -> Any:
        state = self.state

        result = []
        for name in await state.run(state.datadir.list):
            if ctx.scope not in (None, ALL) and name != ctx.scope:
                continue
            try:
                handle = await state.database(name)
                result.append(await state.run(_database_info, handle.db))
            except HTTPError:
                raise
            except Exception as exc:  # noqa: BLE001 - dropped meanwhile, or unreadable: list the others
                logger.warning("listing database %r: %s", name, exc)
        return {"databases": result}

    async def create_database(self, ctx: Ctx) -> Any:
        body = await self.body(ctx)
        name = body.get("name")
        if not isinstance(name, str):
            raise HTTPError(400, "name: expected a database name (string), got "
                            + ("nothing" if name is None else m.kind_of(name)))
        m.check_db_name(name)
        dim = body.get("dimension", body.get("dim"))
        if type(dim) is float and dim.is_integer():
            dim = int(dim)
        if type(dim) is not int or not 1 <= dim <= m.MAX_DIMENSION:
            raise HTTPError(400, f"dimension: expected an integer in [1, {m.MAX_DIMENSION}], got "
                            + ("nothing" if dim is None else m.kind_of(dim)))
        config = {k: v for k, v in body.items() if k not in ("name", "dimension", "dim",
                                                             "encoder")}
        encoder = body.get("encoder")
        if encoder is not None and encoder not in ENCODER_CHOICES:
            raise HTTPError(400, f"encoder: expected one of {', '.join(ENCODER_CHOICES)} or "
                            f"null, got {encoder!r}")
        unknown = sorted(set(config) - _CONFIG_FIELDS)
        if unknown:
            raise HTTPError(400, f"unknown config field(s): {', '.join(unknown)}; expected "
                            f"some of {', '.join(sorted(_CONFIG_FIELDS))}")
        for key, cap in m.CONFIG_CAPS.items():  # bound the work one read can cost
            value: Any = config.get(key)  # a JSON value, of any type
            if type(value) in (int, float) and value > cap:
                raise HTTPError(400, f"config field {key!r}: at most {cap} on this server, "
                                f"got {value}")
        state = self.state

        def create() -> Any:
            MemoryConfig(dim=dim, **config)  # a bad config is 400 before anything touches disk
            if encoder is None:
                return state.datadir.create(name, dim, **config)
            return state.datadir.create(name, dim, encoder=make_encoder(encoder, dim), **config)

        async with state.open_lock:
            db = await state.run_to_end(create)
            state.dbs[name] = DbHandle(name, db, dim)
        return await state.run(_database_info, db)

    async def get_database(self, ctx: Ctx) -> Any:
        handle = await self.database(ctx)
        return await self.state.run(_database_info, handle.db)

    async def drop_database(self, ctx: Ctx) -> Any:
        if ctx.db == DEFAULT_DB:
            raise HTTPError(403, "the database 'default' cannot be dropped")
        state = self.state
        async with state.open_lock:
            handle = state.forget_database(ctx.db)
            if handle is not None:
                handle.collections.clear()
            dropped = await state.run_to_end(state.datadir.drop, ctx.db)
        return {"dropped": bool(dropped)}

    # -- collections -----------------------------------------------------------------------------

    async def list_collections(self, ctx: Ctx) -> Any:
        handle = await self.database(ctx)
        names = await self.state.run(handle.db.collections)
        return {"collections": sorted(names)}

    async def create_collection(self, ctx: Ctx) -> Any:
        body = await self.body(ctx)
        name = m.check_collection_name(m.field(body, "name"))
        partitions = m.partitions(body)
        state = self.state
        handle = await self.database(ctx)
        create = handle.db.collection
        if partitions is not None:
            if not hasattr(handle.db, "partitions_of"):
                raise m.bad(f"partitions: expected 1 on a single-node server (partitioned "
                            f"collections need hopmem serve --ray), got {partitions}")
            create = functools.partial(handle.db.collection, partitions=partitions)
        async with state.open_lock:
            existing = name in handle.collections or name in await state.run(handle.db.collections)
            coll = await state.run_to_end(create, name)
            handle.collections[name] = coll
        return {"name": name, "created": not existing}

    async def drop_collection(self, ctx: Ctx) -> Any:
        handle = await self.database(ctx)
        name = ctx.collection_name
        state = self.state
        async with state.mutating(ctx.db, name):
            state.forget_collection(handle, name)
            dropped = await state.run_to_end(handle.db.drop_collection, name)
        return {"dropped": bool(dropped)}

    # -- the memory ------------------------------------------------------------------------------

    async def write(self, ctx: Ctx) -> Any:
        body = await self.body(ctx)
        handle = await self.database(ctx)
        name = ctx.collection_name
        rows = m.vectors(body, "vectors", handle.dim, self.limits.max_batch)
        metadata = m.metadata_list(body, len(rows))
        coll = await self.state.collection(handle, name, create=True)
        write = functools.partial(coll.write, rows, metadata, write_id=body.get("write_id"))
        async with self.state.mutating(ctx.db, name):
            result = await self.state.run_to_end(write)
        ids = result.ids
        if ids is None:  # a write without metadata creates no document
            return {"count": int(result.count)}
        return {"count": int(result.count), "ids": _ids(ids)}

    async def _query(self, ctx: Ctx) -> tuple[Any, np.ndarray, str]:
        body = await self.body(ctx)
        handle = await self.database(ctx)
        name = ctx.collection_name
        query = m.vector(body, "query", handle.dim)
        strategy = m.strategy(body)
        coll = await self.state.collection(handle, name, create=True)
        return coll, query, strategy

    async def read(self, ctx: Ctx) -> Any:
        coll, query, strategy = await self._query(ctx)
        r = await self.state.read(coll, "read_scored", query, strategy)
        return {"result": r.result, "fidelity": r.fidelity, "first_contact": r.first_contact}

    async def analyze(self, ctx: Ctx) -> Any:
        coll, query, strategy = await self._query(ctx)
        return _trace(await self.state.read(coll, "analyze", query, strategy))

    async def batch_analyze(self, ctx: Ctx) -> Any:
        body = await self.body(ctx)
        handle = await self.database(ctx)
        name = ctx.collection_name
        queries = m.vectors(body, "queries", handle.dim, self.limits.max_batch)
        strategy = m.strategy(body)
        coll = await self.state.collection(handle, name, create=True)
        traces = await self.state.run(coll.analyze, queries, strategy)
        return {"results": [_trace(t) for t in traces]}

    async def attention(self, ctx: Ctx) -> Any:
        body = await self.body(ctx)
        handle = await self.database(ctx)
        name = ctx.collection_name
        query = m.vector(body, "query", handle.dim)
        scale = m.optional_number(body, "scale", None)
        coll = await self.state.collection(handle, name, create=True)
        if scale is None:
            scale = float(coll.config.beta)
        a = await self.state.run(coll.attention, query, scale)
        return {"result": a.result, "beta": float(a.scale),
                "contributors": _activated(a.activated, a.similarities, a.weights)}

    async def stats(self, ctx: Ctx) -> Any:
        _, _, coll = await self.collection(ctx, create=False)
        return _stats(await self.state.run(coll.stats))

    async def config(self, ctx: Ctx) -> Any:
        _, _, coll = await self.collection(ctx, create=False)
        return {"config": coll.config.to_dict()}

    async def fingerprint(self, ctx: Ctx) -> Any:
        _, _, coll = await self.collection(ctx, create=False)
        return {"fingerprint": await self.state.run(coll.fingerprint)}

    async def locations(self, ctx: Ctx) -> Any:
        full = m.query_bool(ctx.request.query_params, "full")
        _, _, coll = await self.collection(ctx, create=False)

        def collect() -> list[dict[str, Any]]:
            snap = coll.snapshot()  # one consistent copy, however writes interleave
            ids, weights, addresses, counters = snap.ids, snap.weights, snap.addresses, snap.counters
            if not full:
                return [{"id": int(i), "write_count": float(w)} for i, w in zip(ids, weights)]
            return [{"id": int(i), "write_count": float(w), "address": a, "counter": c}
                    for i, w, a, c in zip(ids, weights, addresses, counters)]

        return {"locations": await self.state.run(collect)}

    async def compress(self, ctx: Ctx) -> Any:
        body = await self.body(ctx, required=False)
        bound = m.optional_int(body, "max_locations", None, minimum=1)
        _, name, coll = await self.collection(ctx, create=False)
        compress = functools.partial(coll.compress, bound, write_id=body.get("write_id"))
        async with self.state.mutating(ctx.db, name):
            r = await self.state.run_to_end(compress)
        return {"locations_before": int(r.locations_before),
                "locations_after": int(r.locations_after), "merges": len(r.merges)}

    # -- documents -------------------------------------------------------------------------------

    async def list_documents(self, ctx: Ctx) -> Any:
        params = ctx.request.query_params
        offset = m.query_int(params, "offset", 0, minimum=0, maximum=2**62)
        limit = m.query_int(params, "limit", 100, minimum=1, maximum=self.limits.max_batch)
        _, _, coll = await self.collection(ctx, create=False)
        docs = await self.state.run(coll.documents.list, offset, limit)
        return {"documents": [_document(d) for d in docs]}

    async def get_document(self, ctx: Ctx) -> Any:
        doc_id = m.document_id(ctx.request.path_params["id"])
        _, _, coll = await self.collection(ctx, create=False)
        get = functools.partial(coll.documents.get, doc_id, vector=False)
        return _document(await self.state.run(get))

    async def delete_document(self, ctx: Ctx) -> Any:
        doc_id = m.document_id(ctx.request.path_params["id"])
        write_id = ctx.request.query_params.get("write_id")  # a DELETE has no body
        _, name, coll = await self.collection(ctx, create=False)
        delete = functools.partial(coll.documents.delete, doc_id, write_id=write_id)
        async with self.state.mutating(ctx.db, name):
            deleted = await self.state.run_to_end(delete)
        return {"deleted": bool(deleted)}

    async def query_documents(self, ctx: Ctx) -> Any:
        body = await self.body(ctx)
        handle = await self.database(ctx)
        name = ctx.collection_name
        query = m.vector(body, "query", handle.dim)
        n = m.optional_int(body, "n", 10, minimum=1, maximum=self.limits.max_batch)
        mode = m.field(body, "mode", "indexed")
        if mode not in m.DOCUMENT_MODES:
            raise HTTPError(400, f"mode: expected 'indexed' or 'exact', got {mode!r}")
        coll = await self.state.collection(handle, name, create=True)
        # Positional (vector, limit, mode): the wire's default mode is "indexed", the library's "exact".
        hits = await self.state.run(coll.resolve, query, n, mode)
        return {"results": [_hit(h) for h in hits]}

    # -- text (an extension) -------------------------------------------------------------------

    async def remember(self, ctx: Ctx) -> Any:
        from . import text_routes
        return await text_routes.remember(self, ctx)

    async def recall(self, ctx: Ctx) -> Any:
        from . import text_routes
        return await text_routes.recall(self, ctx)

    async def calibrate(self, ctx: Ctx) -> Any:
        from . import text_routes
        return await text_routes.calibrate(self, ctx)


# -- access control and error mapping around every handler ---------------------------------------

def _wrap(handlers: Handlers, spec: RouteSpec) -> Callable[[Request], Awaitable[Response]]:
    handler: Handler = getattr(handlers, spec.name)
    policy = handlers.state.policy
    access = spec.access

    async def endpoint(request: Request) -> Response:
        try:
            scope: str | None = None
            db = request.path_params.get("db", DEFAULT_DB)
            if access != "public" and policy.enabled():
                token = token_from_headers(request.headers)
                scope = policy.keys.verify(token) if token else None
                if scope is None:
                    raise HTTPError(401, "missing API key" if token is None else "invalid API key",
                                    {"WWW-Authenticate": 'Bearer realm="hopmem"'})
            if "db" in request.path_params:
                m.check_db_name(db)
            if scope is not None and scope != ALL:
                if access == "admin":
                    raise HTTPError(403, "this key is scoped to database "
                                    f"{scope!r}; managing databases needs a key for all databases")
                if access == "db" and db != scope:
                    raise HTTPError(403, f"this key is scoped to database {scope!r}, not {db!r}")
            result = await handler(Ctx(request, db, scope))
            if isinstance(result, Response):
                return result
            return Response(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY),
                            media_type=_JSON)
        except Exception as exc:  # noqa: BLE001 - every error becomes a status; error_response maps it
            return error_response(exc, request.method, request.scope.get("path", ""))

    endpoint.__name__ = spec.name
    return endpoint


def build_routes(handlers: Handlers) -> list[Route]:
    routes: list[Route] = []
    for spec in ROUTES:
        ep = _wrap(handlers, spec)
        routes.append(Route(spec.path, ep, methods=[spec.method], name=spec.name))
        if spec.scoped:
            routes.append(Route("/db/{db}" + spec.path, ep, methods=[spec.method],
                                name="db_" + spec.name))
    return routes


# The routes that carry the traffic: HotRoutes serves them.
HOT = ("read", "write", "analyze", "query_documents", "batch_analyze", "attention")


class HotRoutes:
    """ASGI middleware: requests for the :data:`HOT` routes go straight to their endpoint.

    Starlette would take them through its exception layers, its router and two
    ``Request`` objects, about 10 us a request (measured), a few percent of a
    read. These are Starlette's own ``Route`` objects (the same path patterns and
    method check) and their endpoints turn every exception into a response
    themselves, so nothing changes but the cost. A request they do not match
    fully (another path, a wrong method) goes on to the application.
    """

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        # Candidates by the path's last segment ("read", "query", ...): one dict lookup.
        self._by_action: dict[str, list[Route]] = {}
        for route in routes:
            if isinstance(route, Route) and route.name.removeprefix("db_") in HOT:
                self._by_action.setdefault(route.path.rsplit("/", 1)[1], []).append(route)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for route in self._by_action.get(scope["path"].rpartition("/")[2], ()):
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child_scope)
                    response = await route.endpoint(Request(scope, receive, send))
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)
