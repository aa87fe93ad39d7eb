"""hopmem's HTTP server: HeatherDB's wire API over the embedded store.

``create_app(data_dir, dim)`` returns the ASGI application;
``hopmem serve`` (or ``python -m hopmem.server serve``) runs it under uvicorn.
The server holds no numerics: it validates requests, calls the library in
worker threads, and maps errors to statuses (``errors.py``). See docs/http.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "Limits", "KeyStore", "add_subcommands"]


def __getattr__(name: str) -> Any:  # lazy: importing hopmem.server does not pull in Starlette
    if name == "create_app":
        from .app import create_app
        return create_app
    if name == "Limits":
        from .models import Limits
        return Limits
    if name == "KeyStore":
        from .auth import KeyStore
        return KeyStore
    if name == "add_subcommands":
        from .cli import add_subcommands
        return add_subcommands
    raise AttributeError(f"module 'hopmem.server' has no attribute {name!r}")
