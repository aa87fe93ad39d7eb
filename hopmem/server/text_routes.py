"""Text routes (an extension): remember, recall, calibrate with the database's encoder.

A database records the encoder its vectors come from (name, dimension,
fingerprint) when it is created with one (``POST /db {"encoder": "hashing"}``
or ``hopmem serve --encoder``). These routes rebuild that encoder here, check
its fingerprint against the record, and hand the work to
:class:`hopmem.text.TextCollection`, which owns the centering mean (learned
from the first ``remember`` batch, then frozen) and the calibrated gate.
A database without an encoder answers 400.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from hopmem.errors import IncompatibleStore, InvalidInput
from hopmem.store import EncoderInfo
from hopmem.text.encoders import Encoder

from . import models as m
from .errors import HTTPError

__all__ = ["remember", "recall", "calibrate", "ENCODER_CHOICES", "make_encoder",
           "encoder_for"]

#: Values of ``encoder`` in ``POST /db`` and of ``serve --encoder``.
ENCODER_CHOICES = ("hashing", "minilm")

_cache: dict[tuple[str, int], Encoder] = {}
_cache_lock = threading.Lock()


def make_encoder(choice: str, dim: int) -> Encoder:
    """The encoder named ``choice`` for vectors of length ``dim``.

    "hashing" is ``HashingEncoder(dim)``; "minilm" is all-MiniLM-L6-v2 through
    :func:`hopmem.text.encoders.default_encoder` (ONNX Runtime where installed,
    else torch).
    """
    from hopmem.text import encoders

    if choice == "hashing":
        return encoders.HashingEncoder(dim)
    if choice in ("minilm", encoders.DEFAULT_MODEL_NAME):
        key = ("minilm", 0)
        with _cache_lock:
            enc = _cache.get(key)
            if enc is None:
                enc = _cache[key] = encoders.default_encoder()
        if enc.dim != dim:
            raise HTTPError(400, f"encoder 'minilm' produces dimension {enc.dim}, "
                            f"the database has dimension {dim}")
        return enc
    raise HTTPError(400, f"encoder: expected one of {', '.join(ENCODER_CHOICES)}, got "
                         f"{choice!r}")


def encoder_for(db_name: str, info: EncoderInfo | None) -> Encoder:
    """An encoder object matching a database's recorded encoder (name and fingerprint)."""
    from hopmem.text import encoders

    if info is None:
        raise HTTPError(400, f"database {db_name!r} has no encoder: the text routes (remember, "
                             "recall, calibrate) need a database created with one, e.g. "
                             'POST /db {"name": ..., "dimension": ..., "encoder": "hashing"}')
    name, dim = str(info.name), int(info.dim)
    key = (name, dim)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is None:
        enc: Encoder
        if name == f"hashing-{dim}":
            enc = encoders.HashingEncoder(dim)
        else:
            try:
                enc = encoders.builtin_encoder(name)
            except InvalidInput:
                raise HTTPError(400, f"database {db_name!r} records encoder {name!r}, which this "
                                     "server cannot load (it knows hashing-<dim> and "
                                     f"{encoders.DEFAULT_MODEL_NAME} on torch or ONNX)") from None
        with _cache_lock:
            enc = _cache.setdefault(key, enc)
    else:
        enc = cached
    recorded = info.fingerprint
    if recorded is not None and enc.fingerprint != recorded:
        raise IncompatibleStore(f"database {db_name!r} was written with encoder {name!r} "
                                f"fingerprint {recorded}; this server's {name!r} has "
                                f"{enc.fingerprint}")
    return enc


async def _text_collection(h: Any, ctx: Any, *, create: bool) -> tuple[str, Any]:
    handle = await h.database(ctx)
    name = ctx.collection_name
    state = h.state
    tc = handle.text.get(name)
    if tc is not None:
        return name, tc
    info = handle.db.encoder
    if info is None:
        encoder_for(ctx.db, None)  # raises the 400
    coll = await state.collection(handle, name, create=create)

    def build() -> Any:
        from hopmem.text.collection import TextCollection
        return TextCollection(coll, encoder_for(ctx.db, info))

    tc = await state.run_to_end(build)
    if state.dbs.get(ctx.db) is handle and handle.collections.get(name) is coll:
        handle.text[name] = tc
    return name, tc


async def remember(h: Any, ctx: Any) -> Any:
    body = await h.body(ctx)
    texts = m.texts(body, "texts", h.limits.max_batch)
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, list):
        raise HTTPError(400, "metadata: expected an array with one object (or null) per text, "
                             f"got {m.kind_of(metadata)}")
    name, tc = await _text_collection(h, ctx, create=True)
    remember = functools.partial(tc.remember, texts, metadata, write_id=body.get("write_id"))
    async with h.state.mutating(ctx.db, name):
        ids = await h.state.run_to_end(remember)
    return {"ids": [int(i) for i in ids]}


async def recall(h: Any, ctx: Any) -> Any:
    body = await h.body(ctx)
    question = m.text(body, "text")
    limit = m.optional_int(body, "n", 5, minimum=1, maximum=h.limits.max_batch)  # the wire says "n"
    _, tc = await _text_collection(h, ctx, create=True)
    result = await h.state.run(functools.partial(tc.recall, question, limit=limit))
    return result.to_dict()


async def calibrate(h: Any, ctx: Any) -> Any:
    body = await h.body(ctx)
    related = m.texts(body, "related", h.limits.max_batch)
    unrelated = m.texts(body, "unrelated", h.limits.max_batch)
    budget = m.optional_number(body, "error_budget", 0.0)
    name, tc = await _text_collection(h, ctx, create=False)
    async with h.state.mutating(ctx.db, name):
        gate = await h.state.run_to_end(functools.partial(tc.calibrate, related, unrelated,
                                                          error_budget=budget))
    return gate.to_dict()
