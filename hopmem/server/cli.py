"""``hopmem serve`` and ``hopmem keys``: the server's command-line subcommands.

``add_subcommands(subparsers)`` adds both to a parent parser (the main
``hopmem`` CLI calls it); ``python -m hopmem.server`` works on its own too.
Every flag of ``serve`` has a ``HOPMEM_*`` environment variable; a flag given
on the command line wins over the variable.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["add_subcommands", "main", "serve", "run_server"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6380


def _env(name: str, default: Any, cast: Callable[[str], Any] = str) -> Any:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return cast(raw)
    except ValueError:
        raise SystemExit(f"hopmem: environment variable {name}={raw!r} is not a valid "
                         f"{cast.__name__}") from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in [0, 65535], got {text}")
    return value


def add_subcommands(subparsers: Any) -> None:
    """Add ``serve`` and ``keys`` to an ``argparse`` subparsers object."""
    from .auth import AUTH_MODES
    from .limits import Limits

    d = Limits()
    serve_p = subparsers.add_parser(
        "serve", help="run the HTTP server (HeatherDB's API)",
        description="Serve a data directory over HTTP (HeatherDB's wire API). Binds "
                    "127.0.0.1 by default; binding any other address requires API keys.")
    serve_p.add_argument("--data-dir", default=_env("HOPMEM_DATA_DIR", None),
                         help="data directory (env HOPMEM_DATA_DIR; required)")
    serve_p.add_argument("--dimension", type=_positive_int,
                         default=_env("HOPMEM_DIMENSION", None, int),
                         help="dimension of the database 'default', created on first start "
                              "(env HOPMEM_DIMENSION; may be omitted once it exists)")
    serve_p.add_argument("--host", default=_env("HOPMEM_HOST", DEFAULT_HOST),
                         help=f"address to bind (env HOPMEM_HOST; default {DEFAULT_HOST})")
    serve_p.add_argument("--port", type=_port, default=_env("HOPMEM_PORT", DEFAULT_PORT, int),
                         help=f"port (env HOPMEM_PORT; default {DEFAULT_PORT})")
    serve_p.add_argument("--encoder", choices=("hashing", "minilm"),
                         default=_env("HOPMEM_ENCODER", None),
                         help="text encoder recorded in the database 'default' when it is "
                              "created, for the text routes (env HOPMEM_ENCODER; default none)")
    serve_p.add_argument("--auth", choices=AUTH_MODES, default=_env("HOPMEM_AUTH", "auto"),
                         help="auto: keys required off loopback, and on loopback once a key "
                              "exists; on: always; off: never (loopback only) "
                              "(env HOPMEM_AUTH; default auto)")
    serve_p.add_argument("--max-body-bytes", type=_positive_int,
                         default=_env("HOPMEM_MAX_BODY_BYTES", d.max_body_bytes, int),
                         help=f"largest request body, 413 above (env HOPMEM_MAX_BODY_BYTES; "
                              f"default {d.max_body_bytes})")
    serve_p.add_argument("--max-batch", type=_positive_int,
                         default=_env("HOPMEM_MAX_BATCH", d.max_batch, int),
                         help=f"most vectors, queries or texts per request, 400 above "
                              f"(env HOPMEM_MAX_BATCH; default {d.max_batch})")
    serve_p.add_argument("--request-timeout", type=_positive_float,
                         default=_env("HOPMEM_REQUEST_TIMEOUT", d.request_timeout, float),
                         help="seconds a request may take (reads answer 503 past it; a write "
                              "that started always finishes) (env HOPMEM_REQUEST_TIMEOUT; "
                              f"default {d.request_timeout:g})")
    serve_p.add_argument("--threads", type=_positive_int,
                         default=_env("HOPMEM_THREADS", 16, int),
                         help="worker threads for engine calls (env HOPMEM_THREADS; default 16)")
    serve_p.add_argument("--shutdown-timeout", type=_positive_float,
                         default=_env("HOPMEM_SHUTDOWN_TIMEOUT", 30.0, float),
                         help="seconds to wait for in-flight requests on SIGTERM "
                              "(env HOPMEM_SHUTDOWN_TIMEOUT; default 30)")
    serve_p.add_argument("--log-level", default=_env("HOPMEM_LOG_LEVEL", "info"),
                         choices=("critical", "error", "warning", "info", "debug"),
                         help="log level (env HOPMEM_LOG_LEVEL; default info)")
    serve_p.add_argument("--access-log", action="store_true",
                         default=_env("HOPMEM_ACCESS_LOG", False, _bool),
                         help="log every request (env HOPMEM_ACCESS_LOG; default off)")
    serve_p.add_argument("--ray", default=_env("HOPMEM_RAY", None), metavar="ADDRESS",
                         help="serve a hopmem cluster on Ray instead of the data directory: a "
                              "Ray address (e.g. auto, or HOST:6379), or 'local' to start a "
                              "local Ray cluster over --data-dir (env HOPMEM_RAY; needs "
                              "hopmem[cluster])")
    serve_p.add_argument("--hosts", type=_positive_int, default=_env("HOPMEM_RAY_HOSTS", 2, int),
                         help="shard hosts of --ray local (env HOPMEM_RAY_HOSTS; default 2)")
    serve_p.add_argument("--replicas", type=_positive_int,
                         default=_env("HOPMEM_RAY_REPLICAS", 1, int),
                         help="--ray: copies of each shard of the databases the server creates "
                              "(env HOPMEM_RAY_REPLICAS; default 1)")
    serve_p.add_argument("--read-from", choices=("leader", "any"),
                         default=_env("HOPMEM_RAY_READ_FROM", "leader"),
                         help="--ray: reads of replicated shards from their leader or any "
                              "in-sync copy (env HOPMEM_RAY_READ_FROM; default leader)")
    serve_p.set_defaults(func=serve)

    keys_p = subparsers.add_parser(
        "keys", help="manage API keys",
        description="API keys, stored hashed in <data dir>/keys.sqlite. A key is scoped to "
                    "one database (--db NAME) or to all of them (--all); a running server "
                    "picks up changes without a restart.")
    keys_p.add_argument("--data-dir", default=_env("HOPMEM_DATA_DIR", None),
                        help="data directory (env HOPMEM_DATA_DIR; required)")
    keys_sub = keys_p.add_subparsers(dest="keys_command", metavar="{create,list,revoke}")
    keys_sub.required = True
    create_p = keys_sub.add_parser("create", help="create a key and print it (shown once)")
    scope = create_p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--db", help="scope the key to this database")
    scope.add_argument("--all", action="store_true", help="a key for every database "
                       "(and for creating and dropping databases)")
    create_p.add_argument("--label", help="a note to recognise the key by")
    create_p.add_argument("--data-dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    create_p.set_defaults(func=keys_create)
    list_p = keys_sub.add_parser("list", help="list keys (never the secrets)")
    list_p.add_argument("--revoked", action="store_true", help="include revoked keys")
    list_p.add_argument("--json", action="store_true", help="print JSON")
    list_p.add_argument("--data-dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    list_p.set_defaults(func=keys_list)
    revoke_p = keys_sub.add_parser("revoke", help="revoke a key by its id (or the key itself)")
    revoke_p.add_argument("key_id")
    revoke_p.add_argument("--data-dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    revoke_p.set_defaults(func=keys_revoke)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(text)


def _data_dir(args: argparse.Namespace) -> str:
    if not args.data_dir:
        raise SystemExit("hopmem: --data-dir (or HOPMEM_DATA_DIR) is required")
    return args.data_dir


# -- serve ---------------------------------------------------------------------------------------

def run_server(app: Any, host: str, port: int, *, log_level: str = "info",
               access_log: bool = False, shutdown_timeout: float = 30.0) -> None:
    """Run ``app`` under uvicorn (httptools and uvloop when installed) until SIGTERM/SIGINT.

    Each response leaves in one socket write (see :mod:`.transport`).
    """
    import gc
    import importlib.util

    import uvicorn

    from .transport import coalescing

    protocol: type[asyncio.Protocol]
    if importlib.util.find_spec("httptools"):
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as protocol
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as protocol
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    # Requests in flight hold a few dozen containers each, vectors among them (a list
    # of d floats); at the default threshold (700) the cyclic collector runs every few
    # requests and walks all of that, about 18 us a request (measured at d = 384).
    # Requests leave almost nothing behind, so collect young objects less often.
    gc.set_threshold(10_000, *gc.get_threshold()[1:])
    config = uvicorn.Config(
        app, host=host, port=port, http=coalescing(protocol), loop=loop, lifespan="on",
        access_log=access_log, log_level=log_level, server_header=False,
        # uvicorn annotates this int | None but passes it to asyncio.wait_for: seconds as a float work
        timeout_graceful_shutdown=shutdown_timeout,  # type: ignore[arg-type]
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal that stopped it once shut down; a SIGTERM that led to a
    # clean, graceful shutdown should end the process with status 0, not -15.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve(args: argparse.Namespace) -> int:
    from hopmem.errors import HopmemError

    try:
        from .app import create_app
    except ImportError as exc:
        print(f"hopmem serve: the server needs its extra: pip install 'hopmem[server]' ({exc})",
              file=sys.stderr)
        return 2
    from .limits import Limits

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    data_dir = _data_dir(args)
    cluster = None
    try:
        if getattr(args, "ray", None):
            try:
                cluster = _open_cluster(args, data_dir)
            except (ImportError, HopmemError, OSError, RuntimeError, ValueError) as exc:
                print(f"hopmem serve --ray: {exc}", file=sys.stderr)
                return 2
        try:
            limits = Limits(max_body_bytes=args.max_body_bytes, max_batch=args.max_batch,
                            request_timeout=args.request_timeout)
            app = create_app(data_dir, args.dimension, limits=limits, auth=args.auth,
                             host=args.host, threads=args.threads,
                             shutdown_timeout=args.shutdown_timeout, encoder=args.encoder,
                             datadir=cluster)
        except (ValueError, RuntimeError, OSError, HopmemError) as exc:
            print(f"hopmem serve: {exc}", file=sys.stderr)
            return 2
        return _serve_app(app, args, data_dir, limits)
    finally:
        if cluster is not None:
            cluster.shutdown()


def _open_cluster(args: argparse.Namespace, data_dir: str) -> Any:
    """The cluster ``--ray`` names: a local one started over ``data_dir``, or one joined."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import hopmem.cluster as hc
    if args.ray == "local":
        cluster = hc.start_local(hosts=args.hosts, root=data_dir)
    else:
        cluster = hc.connect(args.ray, root=data_dir)
    cluster.root = os.path.abspath(data_dir)
    cluster.default_replicas = args.replicas
    cluster.read_from = args.read_from
    return cluster


def _serve_app(app: Any, args: argparse.Namespace, data_dir: str, limits: Any) -> int:
    policy = app.state.hopmem.policy
    if policy.always and not policy.keys.has_active_keys():
        print(f"hopmem serve: binding {args.host} requires API keys and none exists: create "
              f"one with `hopmem keys --data-dir {data_dir} create --all` (or --db NAME)",
              file=sys.stderr)
        return 2
    auth_note = ("off" if not policy.enabled() and policy.mode == "off" else
                 "required" if policy.enabled() else "not required until a key is created")
    logging.getLogger("hopmem.server").info(
        "serving %s on http://%s:%d (auth %s; body <= %d bytes, batch <= %d, timeout %g s)",
        data_dir, f"[{args.host}]" if ":" in args.host else args.host, args.port, auth_note,
        limits.max_body_bytes, limits.max_batch, limits.request_timeout)
    run_server(app, args.host, args.port, log_level=args.log_level,
               access_log=args.access_log, shutdown_timeout=args.shutdown_timeout)
    return 0


# -- keys ------------------------------------------------------------------------------------------

def keys_create(args: argparse.Namespace) -> int:
    from .auth import ALL, KeyStore
    from .errors import HTTPError
    from .models import check_db_name

    scope = ALL if args.all else args.db
    if scope != ALL:
        try:
            check_db_name(scope)
        except HTTPError as exc:
            print(f"hopmem keys create: {exc.message}", file=sys.stderr)
            return 2
    info, token = KeyStore(_data_dir(args)).create(scope, args.label)
    print(token)
    print(f"key id {info.key_id}, scope {'all databases' if scope == ALL else scope}; "
          "this is the only time the key is shown", file=sys.stderr)
    return 0


def keys_list(args: argparse.Namespace) -> int:
    import json
    import time

    from .auth import KeyStore

    rows = KeyStore(_data_dir(args)).list(include_revoked=args.revoked)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
        return 0
    if not rows:
        print("no keys")
        return 0
    for r in rows:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at))
        state = "" if r.revoked_at is None else "  (revoked)"
        label = f"  {r.label}" if r.label else ""
        print(f"{r.key_id}  {r.scope:<20} {created}{label}{state}")
    return 0


def keys_revoke(args: argparse.Namespace) -> int:
    from .auth import KeyStore

    if KeyStore(_data_dir(args)).revoke(args.key_id):
        print(f"revoked {args.key_id}")
        return 0
    print(f"hopmem keys revoke: no active key {args.key_id!r}", file=sys.stderr)
    return 1


# -- python -m hopmem.server -----------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hopmem.server",
                                     description="hopmem's HTTP server and its API keys")
    sub = parser.add_subparsers(dest="command", metavar="{serve,keys}")
    sub.required = True
    add_subcommands(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)
