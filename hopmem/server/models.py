"""Request validation: JSON bodies, names, query parameters, limits.

Everything a client sends is checked here before it reaches the library, and
every rejection is an :class:`HTTPError` 400 whose message names the field,
says what was expected and what came. orjson does the parsing: it already
refuses ``NaN``, ``Infinity`` and numbers that overflow a double (``1e999``).
Values that overflow float32 are refused by the engine's own validation.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import numpy as np
import orjson

from hopmem.store.names import COLLECTION_NAME_MAX, DATABASE_NAME
from hopmem.store.names import check_collection_name as _store_check

from .errors import HTTPError
from .limits import Limits

__all__ = [
    "Limits", "DB_NAME", "check_db_name", "check_collection_name", "parse_body",
    "field", "vector", "vectors", "metadata_list", "strategy", "optional_int",
    "optional_number", "query_int", "query_bool", "document_id", "STRATEGIES",
    "DOCUMENT_MODES", "text", "texts", "partitions",
]

STRATEGIES = ("iterative", "fast")
DOCUMENT_MODES = ("indexed", "exact")

#: The store's rule for database names (:data:`hopmem.store.names.DATABASE_NAME`).
DB_NAME = DATABASE_NAME
#: Largest database dimension the server creates (a collection allocates dimension-wide rows).
MAX_DIMENSION = 65536
#: Caps on config fields that multiply the cost of every read.
CONFIG_CAPS = {"t_max": 1000, "k": 100_000}
#: Longest collection name, in characters (the store's rule).
MAX_COLLECTION_NAME = COLLECTION_NAME_MAX
_NUMBER_TYPES = (float, int)


def bad(message: str) -> HTTPError:
    return HTTPError(400, message)


# -- names -------------------------------------------------------------------------------

def check_db_name(name: str) -> str:
    if not DB_NAME.fullmatch(name):
        raise bad(f"database name: expected {DB_NAME.pattern}, got {name[:80]!r}")
    return name


def check_collection_name(name: Any) -> str:
    """The store's own rule (one rule for every entry point), as a 400."""
    try:
        return _valid_collection_name(name) if type(name) is str else _store_check(name)
    except ValueError as exc:  # InvalidInput
        raise bad(str(exc)) from None


def partitions(body: Any) -> int | None:
    """The optional ``partitions`` of a new collection: None for absent or 1 (a plain collection)."""
    value = body.get("partitions") if isinstance(body, dict) else None
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise bad(f"partitions: expected an integer >= 1, got {value!r}")
    return None if value == 1 else value


@functools.lru_cache(maxsize=4096)
def _valid_collection_name(name: str) -> str:
    # Remembers the names that passed: a hot route checks the same few on every
    # request. A name that fails raises, and is not remembered.
    return _store_check(name)


# -- bodies --------------------------------------------------------------------------------

def kind_of(value: Any) -> str:
    """How ``value`` reads in an error message: its JSON type, or the number itself."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def parse_body(raw: bytes, *, required: bool = True) -> dict[str, Any]:
    """The request body as a JSON object (an empty body is ``{}`` when not required)."""
    if not raw.strip():
        if required:
            raise bad("request body: expected a JSON object, got an empty body")
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad(f"request body: invalid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise bad(f"request body: expected a JSON object, got {kind_of(data)}")
    return data


_MISSING = object()


def field(body: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    value = body.get(name, _MISSING)
    if value is _MISSING or (value is None and default is not _MISSING):
        if default is _MISSING:
            raise bad(f"{name}: required field is missing")
        return default
    return value


def _check_numbers(row: Any, name: str) -> list:
    if not isinstance(row, list):
        raise bad(f"{name}: expected an array of numbers, got {kind_of(row)}")
    if not row:
        raise bad(f"{name}: expected a non-empty array of numbers")
    # One pass over the element types; bool is an int subclass and must not pass.
    types = set(map(type, row))
    if not types.issubset(_NUMBER_TYPES):
        for i, x in enumerate(row):
            if type(x) not in _NUMBER_TYPES:
                raise bad(f"{name}[{i}]: expected a number, got {kind_of(x)}")
    return row


def _check_dim(row: list | np.ndarray, dim: int, name: str) -> None:
    if len(row) != dim:
        raise HTTPError(400, f"dimension mismatch: expected {dim}, got {len(row)}")


_ZERO = struct.pack("d", 0.0)  # native byte order, as _packer packs
_ONE = struct.pack("d", 1.0)


def _as_floats(row: Any) -> np.ndarray | None:
    """A list of numbers as float64 in one C pass, or None when it may hold anything else.

    ``struct`` packing takes ints and floats and refuses strings, nulls, arrays
    and objects, but it also takes booleans (as 1.0 and 0.0): a row holding
    either value goes to the element-by-element check instead.
    """
    if type(row) is not list or not row:
        return None
    try:  # orjson gives 64-bit ints at most (larger numbers are floats): none overflows
        raw = _packer(len(row)).pack(*row)
    except struct.error:
        return None
    # A boolean became 0.0 or 1.0: look for either one's bytes in the packed row
    # (a byte search; a match that straddles two values only sends the row to
    # the slow check, and no 0.0 or 1.0 is missed).
    if _ZERO in raw or _ONE in raw:
        return None
    return np.frombuffer(raw, dtype=np.float64)


@functools.lru_cache(maxsize=64)
def _packer(n: int) -> struct.Struct:
    """Packs n numbers as native doubles: five times faster than ``array('d', row)``."""
    return struct.Struct(f"{n}d")


def vector(body: dict[str, Any], name: str, dim: int) -> np.ndarray:
    """One vector: a non-empty array of numbers of the database's dimension.

    Converted once, here: the library then takes the array as it is instead of
    parsing a list of Python numbers again in a worker thread (where it holds the
    GIL). float32, the library's own type, when every value is finite in it (the
    library's lean read path takes it as it is); float64 otherwise, which keeps
    what float32 cannot hold (1e39), so the library's own check reports the value
    the client sent.
    """
    row = field(body, name)
    values = _as_floats(row)
    if values is None:
        values = np.fromiter(_check_numbers(row, name), dtype=np.float64, count=len(row))
    _check_dim(values, dim, name)
    with np.errstate(over="ignore"):
        narrow = values.astype(np.float32)
    return narrow if np.isfinite(narrow).all() else values


def vectors(body: dict[str, Any], name: str, dim: int, max_batch: int) -> list[list]:
    """A batch: a non-empty array of vectors, at most ``max_batch`` of them."""
    rows = field(body, name)
    if not isinstance(rows, list):
        raise bad(f"{name}: expected an array of vectors, got {kind_of(rows)}")
    if not rows:
        raise bad(f"{name}: expected at least one vector")
    if len(rows) > max_batch:
        raise bad(f"{name}: at most {max_batch} per request (the batch cap), got {len(rows)}")
    for i, row in enumerate(rows):
        _check_numbers(row, f"{name}[{i}]")
        _check_dim(row, dim, f"{name}[{i}]")
    return rows


def metadata_list(body: dict[str, Any], count: int) -> list | None:
    meta = body.get("metadata")
    if meta is None:
        return None
    if not isinstance(meta, list):
        raise bad(f"metadata: expected an array with one JSON value per vector, got {kind_of(meta)}")
    if len(meta) != count:
        raise bad(f"metadata: expected {count} item(s), one per vector, got {len(meta)}")
    return meta


def strategy(body: dict[str, Any]) -> str:
    value = field(body, "strategy", "iterative")
    if value not in STRATEGIES:
        raise bad(f"unknown strategy: expected 'iterative' or 'fast', got {value!r}"
                  if isinstance(value, str) else
                  f"strategy: expected 'iterative' or 'fast', got {kind_of(value)}")
    return value


def optional_int(body: dict[str, Any], name: str, default: int | None, *, minimum: int = 1,
                 maximum: int | None = None) -> int | None:
    value = field(body, name, default)
    if value is None:
        return None
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise bad(f"{name}: expected an integer, got {kind_of(value)}")
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and <= {maximum}" if maximum is not None else ""
        raise bad(f"{name}: expected an integer >= {minimum}{upper}, got {value}")
    return value


def optional_number(body: dict[str, Any], name: str, default: float | None) -> float | None:
    value = field(body, name, default)
    if value is None:
        return None
    if type(value) not in _NUMBER_TYPES:
        raise bad(f"{name}: expected a number, got {kind_of(value)}")
    return float(value)


def text(body: dict[str, Any], name: str) -> str:
    value = field(body, name)
    if not isinstance(value, str):
        raise bad(f"{name}: expected a string, got {kind_of(value)}")
    return value


def texts(body: dict[str, Any], name: str, max_batch: int, *, allow_empty: bool = False) -> list[str]:
    value = field(body, name)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise bad(f"{name}: expected an array of strings, got {kind_of(value)}")
    if not value and not allow_empty:
        raise bad(f"{name}: expected at least one string")
    if len(value) > max_batch:
        raise bad(f"{name}: at most {max_batch} per request (the batch cap), got {len(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise bad(f"{name}[{i}]: expected a string, got {kind_of(item)}")
    return value


# -- query strings and path ids ------------------------------------------------------------

def query_int(params: Any, name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw, 10)
    except ValueError:
        raise bad(f"{name}: expected an integer, got {raw[:40]!r}") from None
    if not minimum <= value <= maximum:
        raise bad(f"{name}: expected an integer in [{minimum}, {maximum}], got {value}")
    return value


_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no", "")


def query_bool(params: Any, name: str) -> bool:
    raw = params.get(name)
    if raw is None:
        return False
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise bad(f"{name}: expected true or false, got {raw[:40]!r}")


def document_id(raw: str) -> int:
    try:
        value = int(raw, 10)
    except ValueError:
        raise bad(f"document id: expected an integer, got {raw[:40]!r}") from None
    if not -(2**63) <= value < 2**63:
        raise HTTPError(404, f"document {value} not found")
    return value
