"""The ASGI application: ``create_app(data_dir, dim)``.

A Starlette app with one route per entry of :data:`routes.ROUTES` in both
forms, JSON errors everywhere (unknown routes included), API-key auth, body,
batch and time limits, and a lifespan that drains in-flight writes and closes
the databases on shutdown. Serve it with ``hopmem serve`` (uvicorn).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from hopmem import __version__
from hopmem._arguments import deprecated_arguments
from hopmem.store import DataDir

from .auth import AuthPolicy, KeyStore, is_loopback
from .errors import HTTPError, error_response
from .models import Limits
from .openapi import build_openapi
from .routes import Handlers, HotRoutes, build_routes
from .state import ServerState

__all__ = ["create_app", "open_datadir"]

logger = logging.getLogger("hopmem.server")


def open_datadir(root: str | os.PathLike[str]) -> DataDir:
    """The store's ``DataDir`` over ``root`` (created if missing)."""
    Path(root).mkdir(parents=True, exist_ok=True)
    return DataDir(root)


class _App(Starlette):
    """Starlette with :class:`HotRoutes` in front of its whole middleware stack.

    The hot routes' endpoints turn every exception into a response themselves,
    so they need none of Starlette's error layers (the outermost of which wraps
    every ``send``); everything else goes through them as usual.
    """

    def build_middleware_stack(self) -> Any:
        return HotRoutes(super().build_middleware_stack(), self.routes)


@deprecated_arguments("create_app", {"dimension": "dim"})
def create_app(
    data_dir: str | os.PathLike[str],
    dim: int | None = None,
    *,
    limits: Limits | None = None,
    auth: str = "auto",
    host: str = "127.0.0.1",
    threads: int = 16,
    shutdown_timeout: float = 30.0,
    encoder: str | None = None,
    datadir: Any = None,
) -> Starlette:
    """The server for the data directory ``data_dir``.

    ``dim`` (``dimension`` before 0.2, deprecated) creates the database
    ``default`` on first start (and must match it afterwards). ``auth`` is ``"auto"`` (keys required off loopback,
    and on loopback once any key exists), ``"on"`` or ``"off"`` (loopback
    only); ``host`` is the address the server will bind, which decides what
    ``auto`` means. ``datadir`` substitutes the store object (tests).
    """
    if dim is not None and (isinstance(dim, bool) or int(dim) != dim or dim < 1):
        raise ValueError(f"dim: expected an integer >= 1, got {dim!r}")
    if threads < 1:
        raise ValueError(f"threads: expected an integer >= 1, got {threads!r}")
    limits = limits or Limits()
    root = Path(data_dir)
    keys = KeyStore(root)
    policy = AuthPolicy(keys, auth, is_loopback(host))
    if datadir is None:
        datadir = open_datadir(root)
    state = ServerState(datadir, limits=limits, policy=policy,
                        default_dim=None if dim is None else int(dim),
                        default_encoder=encoder,
                        threads=threads, shutdown_timeout=shutdown_timeout)
    state.ensure_default()
    state.started = True

    handlers = Handlers(state, build_openapi(limits, __version__))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.draining = False
        try:
            yield
        finally:
            await state.drain()
            state.close_all()
            logger.info("hopmem server stopped")

    async def http_exception(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.scope['path']}"
        elif exc.status_code == 405:
            message = f"method {request.method} not allowed on {request.scope['path']}"
        else:
            message = str(exc.detail)
        return error_response(HTTPError(exc.status_code, message, dict(exc.headers or {})))

    async def server_error(request: Request, exc: Exception) -> Response:
        return error_response(exc, request.method, request.scope["path"])

    routes = build_routes(handlers)
    app = _App(
        routes=routes,
        exception_handlers={HTTPException: http_exception, Exception: server_error},
        lifespan=lifespan,
    )
    app.state.hopmem = state
    return app
