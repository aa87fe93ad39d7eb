"""The ``hopmem`` command: thin argument handling over the library.

Subcommands: ``stats PATH``, ``export PATH COLLECTION OUT``, ``import PATH IN``,
``demo``, ``mcp`` (the agent memory as an MCP server), ``shard list|move|repair`` (a
cluster's shards, see :mod:`hopmem.cluster`), and (when the server is installed)
``serve`` and ``keys``. Errors are printed as ``hopmem: error: ...``
with exit status 1 (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "build_parser"]


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm
    # Only worth a bar on long work; tqdm writes to stderr, so --json output stays clean.
    return tqdm(total=total, desc=desc, unit="vec", disable=not enabled or total < 10_000,
                file=sys.stderr)


def _cmd_stats(args: argparse.Namespace) -> int:
    from .store import open as open_db

    with open_db(args.path, readonly=True) as db:
        names = [args.collection] if args.collection else db.collections()
        out: dict[str, Any] = dict(db.info())
        out["path"] = db.path
        out["schema_version"] = db.schema_version
        out["encoder"] = None if db.encoder is None else db.encoder.to_dict()
        out["stats"] = {name: db.get_collection(name).stats().to_dict() for name in names}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"database   {out['name']}  ({out['path']})")
    print(f"dimension  {out['dimension']}    schema {out['schema_version']}    "
          f"created {out['created_at']}")
    if out["encoder"]:
        enc = out["encoder"]
        print(f"encoder    {enc['name']} (dimension {enc['dimension']}, "
              f"fingerprint {enc['fingerprint']})")
    print(f"collections {len(out['collections'])}")
    for name, st in out["stats"].items():
        print(f"  {name}: {st['num_locations']} locations, {st['writes']} writes, "
              f"{st['documents']} documents, total weight {st['total_weight']:.1f}, "
              f"eta {st['current_eta']:.6g}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from .store import open as open_db

    with open_db(args.path, readonly=True) as db:
        total = db.get_collection(args.collection).stats().writes
        with _progress(total, f"export {args.collection}", not args.quiet) as bar:
            manifest = db.export_collection(args.collection, args.out, progress=bar.update)
    print(f"exported {args.collection!r}: {manifest['vectors']} vectors, "
          f"{manifest['documents']} documents -> {args.out}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from .store import open as open_db
    from .store.portable import read_manifest

    manifest = read_manifest(args.input)
    with open_db(args.path, dim=int(manifest["dim"])) as db:
        with _progress(int(manifest["vectors"]), f"import {manifest['name']}",
                       not args.quiet) as bar:
            coll = db.import_collection(args.input, args.name, progress=bar.update)
        st = coll.stats()
        name = coll.name
    print(f"imported {name!r}: {st.writes} vectors, {st.documents} documents, "
          f"{st.num_locations} locations -> {args.path}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from . import demo  # written separately; imported only when asked for

    result = demo.main(list(args.extra))
    return int(result) if isinstance(result, int) else 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    from .server import mcp as mcp_server  # imports the mcp package only when the server is built

    return mcp_server.main(args)


def _shard_line(database: str, state: dict[str, Any]) -> str:
    lag = state.get("lag") or {}
    lags = " ".join(f"{h}={'lost' if v is None else v}" for h, v in lag.items())
    caught = " ".join(
        f"{h}={'journal ' + str(r['entries']) + ' entries' if r['how'] == 'journal' else 'full copy'}"
        for h, r in (state.get("caught_up") or {}).items() if r)
    return (f"{database} shard {state['shard']}: leader {state['leader']}, epoch {state['epoch']}, "
            f"replicas {','.join(state['replicas'])}, in sync {','.join(state['isr'])}"
            + (f", lag {lags}" if lags else "") + (f", last catch-up {caught}" if caught else ""))


def _cmd_shard(args: argparse.Namespace) -> int:
    from . import cluster

    hopmem_cluster = cluster.connect(args.ray)
    try:
        if args.shard_command == "move":
            out: Any = hopmem_cluster.move_shard(args.database, args.shard, args.host)
            text = (f"moved shard {out['shard']} of {out['database']!r} from {out['from']} to "
                    f"{out['to']} ({out['bytes']} bytes, {out['seconds']} s)" if out["moved"] else
                    f"shard {out['shard']} of {out['database']!r} is already on {out['to']}")
        elif args.shard_command == "repair":
            out = hopmem_cluster.repair()
            text = "\n".join(_shard_line(r["database"], r) + (
                f", copied to {','.join(r['copied'])}" if r["copied"] else "") for r in out) \
                or "no replicated database"
        else:
            names = [args.database] if args.database else hopmem_cluster.list()
            out = {"hosts": hopmem_cluster.hosts(),
                   "databases": {n: hopmem_cluster.placement(n) for n in names},
                   "replication": {n: hopmem_cluster.shard_states(n, lag=True) for n in names}}
            lines = [f"host {h['host_id']}: {h['shards']} shard(s) led in {h['root']}"
                     for h in out["hosts"]]
            lines += [_shard_line(n, state) for n, states in out["replication"].items()
                      for state in states]
            text = "\n".join(lines)
    finally:
        hopmem_cluster.shutdown()
    print(json.dumps(out, indent=2) if args.json else text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hopmem", description="hopmem: a Hopfield-style associative memory.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("stats", help="show a database's collections and their statistics")
    p.add_argument("path", metavar="PATH", help="the database file")
    p.add_argument("--collection", "-c", metavar="C", help="only this collection")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("export", help="write a collection to a portable file")
    p.add_argument("path", metavar="PATH", help="the database file")
    p.add_argument("collection", metavar="COLLECTION")
    p.add_argument("out", metavar="OUT", help="the file to write")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("import", help="create a collection from a portable file")
    p.add_argument("path", metavar="PATH", help="the database file (created if missing)")
    p.add_argument("input", metavar="IN", help="the exported file")
    p.add_argument("--name", metavar="NAME", help="collection name (default: the exported one)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_import)

    from .server.mcp import add_arguments as add_mcp_arguments

    p = sub.add_parser("mcp", help="serve an agent memory over the Model Context Protocol (needs hopmem[mcp])",
                       description="Serve the agent memory of one file and namespace as an MCP server, over "
                                   "stdio (default) or streamable HTTP (--http).")
    add_mcp_arguments(p)
    p.set_defaults(func=_cmd_mcp)

    p = sub.add_parser("shard", help="list, move or repair the shards of a hopmem cluster on "
                                     "Ray (needs hopmem[cluster])",
                       description="The shards of a cluster's databases: where each one is, "
                                   "with its leader, replicas, epoch, in-sync copies and their "
                                   "lag (list); moving one to another host (move: checkpoint, "
                                   "backup, copy, reopen there, update the catalog); restoring "
                                   "R in-sync copies of every replicated shard (repair).")
    p.add_argument("--ray", metavar="ADDRESS", default="auto",
                   help="the Ray cluster's address (default auto)")
    p.add_argument("--json", action="store_true", help="print JSON")
    shard_sub = p.add_subparsers(dest="shard_command", metavar="{list,move,repair}")
    shard_sub.required = True
    q = shard_sub.add_parser("list", help="hosts, and each shard's leader, replicas, epoch, "
                                          "in-sync copies and lag")
    q.add_argument("database", nargs="?", help="only this database")
    q = shard_sub.add_parser("move", help="move one shard to another host")
    q.add_argument("database", metavar="DATABASE")
    q.add_argument("shard", metavar="SHARD", type=int)
    q.add_argument("host", metavar="HOST", help="the target host's id (see shard list)")
    shard_sub.add_parser("repair", help="start hosts on live nodes without one and restore R "
                                        "in-sync copies of every replicated shard")
    p.set_defaults(func=_cmd_shard)

    p = sub.add_parser("demo", help="run the demonstration (its options: hopmem demo --help)",
                       add_help=False)
    p.set_defaults(func=_cmd_demo, pass_extra=True)  # every argument goes to the demo

    try:
        from .server.cli import add_subcommands
    except ImportError:
        pass
    else:
        add_subcommands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hopmem`` command; returns the exit status."""
    from .errors import HopmemError

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "pass_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    try:
        return int(args.func(args) or 0)
    except HopmemError as exc:
        print(f"hopmem: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hopmem: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
