"""The one place that maps errors to HTTP statuses.

Handlers raise; this module decides the status and the ``{"error": ...}``
body. Library errors map by type (most specific first); :class:`HTTPError` is
the server's own (bad body, auth, limits). Anything else is a bug: 500 with a
generic message, and the traceback goes to the log, never to the client.
"""

from __future__ import annotations

import logging

import orjson
from starlette.responses import Response

from hopmem.errors import (
    AlreadyExists,
    DimensionMismatch,
    EmptyMemory,
    HopmemError,
    IncompatibleStore,
    InvalidInput,
    NotFound,
    StoreError,
)
from hopmem.text.encoders import EncoderUnavailable

__all__ = ["HTTPError", "error_response", "status_and_message", "json_response"]

logger = logging.getLogger("hopmem.server")

_JSON = "application/json"


class HTTPError(Exception):
    """An error the server itself detects: a status, a message, optional headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.headers = headers


# Most specific first: IncompatibleStore is a StoreError. (DimensionMismatch, an InvalidInput,
# gets its own message in status_and_message before this table is consulted.)
_BY_TYPE: tuple[tuple[type[BaseException], int], ...] = (
    (EmptyMemory, 400),
    (InvalidInput, 400),          # includes InvalidConfig
    (NotFound, 404),
    (AlreadyExists, 409),
    (IncompatibleStore, 409),     # opened with a different dimension/config/encoder
    (EncoderUnavailable, 503),    # the database's encoder cannot be loaded here
    (StoreError, 503),            # disk full, I/O failure, corrupt file: not a bug of ours
)


def status_and_message(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and the client-facing message for an exception."""
    if isinstance(exc, HTTPError):
        return exc.status, exc.message
    if isinstance(exc, DimensionMismatch):
        # HeatherDB's exact wording; the engine's message adds which argument.
        return 400, f"dimension mismatch: expected {exc.expected}, got {exc.got}"
    if isinstance(exc, HopmemError):
        for kind, status in _BY_TYPE:
            if isinstance(exc, kind):
                return status, str(exc) or kind.__name__
        return 400, str(exc) or type(exc).__name__
    return 500, "internal server error"


def json_response(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status,
                    headers=headers, media_type=_JSON)


def error_response(exc: BaseException, method: str = "", path: str = "") -> Response:
    """The response for ``exc``; logs a traceback when it is a bug (500)."""
    status, message = status_and_message(exc)
    if status >= 500 and not isinstance(exc, (HTTPError, HopmemError)):
        logger.error("unhandled error on %s %s", method, path, exc_info=exc)
    elif status >= 500:
        logger.warning("%s %s -> %d: %s", method, path, status, message)
    headers = exc.headers if isinstance(exc, HTTPError) else None
    return Response(orjson.dumps({"error": message}), status_code=status, headers=headers,
                    media_type=_JSON)
