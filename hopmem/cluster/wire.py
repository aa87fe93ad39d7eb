"""What crosses the actor boundary: results and errors as plain values.

An exception raised inside an actor would reach the caller wrapped in Ray's
``RayTaskError`` with Ray's message around it. The actors therefore never let
one escape: every call answers ``(True, value)`` or ``(False, packed error)``,
and the client raises the packed error again as the same class with the same
arguments, so callers see exactly the error a local store would raise.
"""

from __future__ import annotations

import importlib
import pickle
from typing import Any

from ..errors import StoreError

__all__ = ["pack_error", "unpack_error", "NotHere", "NotOpen", "NotLeader", "StaleEpoch", "HostLost",
           "OutOfSync", "Envelope", "answer"]

Envelope = tuple[bool, Any]


class NotHere(Exception):
    """A host was asked for a shard it does not hold (moved away, or never placed there)."""


class NotLeader(Exception):
    """A host was asked to lead a replicated shard it does not lead (at that epoch): the
    client reads the catalog again and follows the leader."""


class HostLost(StoreError):
    """A shard host's node is gone (the client fails over to an in-sync replica)."""

    def __init__(self, host_id: str) -> None:
        self.host_id = host_id
        super().__init__(f"host {host_id}: its node is gone")


class StaleEpoch(Exception):
    """A message or a catalog change from an older epoch (a deposed leader): refused."""


class OutOfSync(Exception):
    """A follower was sent replication journal entries that do not follow its last one (it
    missed entries, restarted, or holds another history): it must be caught up first."""


class NotOpen(Exception):
    """A host was asked for an agent memory it has not opened (it restarted since)."""


def pack_error(exc: BaseException) -> tuple[str, str, tuple[Any, ...], dict[str, Any]]:
    """``(module, qualname, args, attributes)`` of an exception, all picklable."""
    cls = type(exc)
    args = tuple(exc.args)
    attrs = dict(getattr(exc, "__dict__", {}))
    try:
        pickle.dumps((args, attrs))
    except Exception:  # noqa: BLE001 - an unpicklable argument: keep the message only
        args, attrs = (str(exc),), {}
    return cls.__module__, cls.__qualname__, args, attrs


def unpack_error(packed: tuple[str, str, tuple[Any, ...], dict[str, Any]]) -> BaseException:
    """The exception :func:`pack_error` described: same class, same args (so the same message).

    The class's ``__init__`` is not called (a class such as ``DimensionMismatch``
    takes other arguments than the ones it stores); ``args`` and the attributes
    are restored as they were. An unknown class becomes a ``RuntimeError`` naming it.
    """
    module, qualname, args, attrs = packed
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise TypeError(qualname)
    except Exception:  # noqa: BLE001 - a class this process cannot import
        return RuntimeError(f"{module}.{qualname}: {args[0] if args else ''}")
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(attrs)
    return exc


def answer(fn: Any, *args: Any, **kwargs: Any) -> Envelope:
    """``(True, fn(*args, **kwargs))``, or ``(False, pack_error(exc))`` if it raised."""
    try:
        return True, fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every error travels back as a value
        return False, pack_error(exc)
