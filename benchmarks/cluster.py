"""What a hopmem cluster on Ray costs and gives, against single-node hopmem, in one run.

    python -m benchmarks.cluster                      # d = 384, medians of 3 runs
    python -m benchmarks.cluster --docs 200000 --json out.json
    python -m benchmarks.cluster --smoke              # tiny sizes: checks the script runs
    python -m benchmarks.cluster --smoke --skip-http  # the library part only (make bench-smoke)
    python -m benchmarks.cluster --skip-http --pin-hosts   # one core per shard host

Figures (each the median of ``--runs`` runs; the same for single-node hopmem):

* HTTP (``hopmem serve --ray local --hosts 2`` vs ``hopmem serve``), d = 384,
  a collection of 2,000 vectors: read p50 with one client; reads/s with 16
  clients; durable writes/s with 16 clients (one vector with metadata per
  request, each client its own collection).
* Exact top-10 over ``--docs`` documents: one collection holding all of them,
  vs a partitioned collection of ``--partitions`` parts
  (``db.collection(name, partitions=P)``: parts on consecutive shards, so on
  different hosts, queried at once and merged). Single node: one local
  collection. The collections use ``mode="plain", k=1`` so filling them
  costs little: exact resolution reads the documents, not the memory.
* Heavy write batches (1,000 vectors of d = 384 with metadata, the default
  competitive memory): vectors/s of 2 writers into 2 collections on ONE host,
  vs on 2 hosts; single node: 2 threads into 2 collections of one file.

* Replication (``--skip-replication`` to leave out), hosts pinned to a core
  each: durable writes/s and write p50 of 16 client threads (one vector with
  metadata per call, each thread its own collection) into a database with
  R = 2 copies of each shard against R = 1; reads/s of 16 threads (exact
  top-10 over ``--docs`` / 2 documents) from one collection of R = 2 with
  ``read_from="any"`` (both copies) against ``read_from="leader"`` (one
  copy) and against R = 1. With each phase, the CPU time per call that the
  shard hosts and the client process spent (``host_cpu_ms_*``,
  ``client_cpu_ms_*``, from ``/proc``), the mutations per replication
  journal entry at R = 2 (one forwarded call each), and the load average
  (``load_*``): on a machine the hosts share with the client and other work,
  these say where the time went.

Starting Ray takes 5-10 s per cluster; the script starts one for the library
figures and one per HTTP run (inside the server).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import http_load  # noqa: E402

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def clustered(n: int, d: int, seed: int, centers: int = 16, noise: float = 0.3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    points = np.random.default_rng(99).standard_normal((centers, d)).astype(np.float32)
    return (points[rng.integers(0, centers, n)] + noise * rng.standard_normal((n, d))).astype(np.float32)


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


# -- HTTP ------------------------------------------------------------------------------------------


def http_run(ray: bool, args: argparse.Namespace) -> dict[str, float]:
    d = args.dim
    tmp = tempfile.mkdtemp(prefix="hopmem-bench-")
    port = http_load.free_port()
    host = "127.0.0.1"
    cmd = [sys.executable, "-m", "hopmem.server", "serve", "--data-dir", tmp, "--dimension",
           str(d), "--port", str(port), "--log-level", "warning"]
    if ray:
        cmd += ["--ray", "local", "--hosts", "2"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, env=env)
    try:
        http_load.wait_healthy(host, port, 120.0, proc)
        client = http_load.Client(host, port, None)
        X = clustered(args.stored, d, 0)
        for i in range(0, len(X), 100):  # 100 rows of d = 384 stay under the 2 MiB body limit
            status, answer = client.call("POST", "/collections/bench/write",
                                         json.dumps({"vectors": X[i:i + 100].tolist()}).encode())
            if status != 200:
                raise SystemExit(f"filling the collection failed: {status} {answer[:200]!r}")
        queries = clustered(256, d, 1)
        bodies = [json.dumps({"query": q.tolist()}).encode() for q in queries]
        one = http_load.run_phase_raw(host, port, None, "POST", "/collections/bench/read", bodies,
                                      1, args.requests, args.duration)
        many = http_load.run_phase_raw(host, port, None, "POST", "/collections/bench/read", bodies,
                                       16, args.requests * 4, args.duration)
        W = clustered(16, d, 2)
        writes = [http_load.request_bytes(
            "POST", f"/collections/w{i}/write", host, port,
            json.dumps({"vectors": [W[i].tolist()], "metadata": [{"i": i}]}).encode(), None)
            for i in range(16)]
        wr = http_load.run_requests_raw(host, port, writes, 16, args.requests * 2, args.duration, "writes")
        return {"read_p50_ms_1_client": one["p50_ms"], "reads_per_s_16_clients": many["rps"],
                "durable_writes_per_s_16_clients": wr["rps"], "write_p50_ms_16_clients": wr["p50_ms"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


# -- library: exact top-10 and heavy batches ----------------------------------------------------------


def _names_on(db: Any, hosts: list[str], prefix: str) -> list[str]:
    """One collection name per wanted host (in order), placed on that host."""
    out: list[str] = []
    i = 0
    while len(out) < len(hosts):
        name = f"{prefix}{i}"
        if db.placement[db.shard_of(name)] == hosts[len(out)] and name not in out:
            out.append(name)
        i += 1
    return out


def _fill(coll: Any, X: np.ndarray, first_id: int, batch: int = 10_000) -> None:
    for i in range(0, len(X), batch):
        coll.write(X[i:i + batch], metadata=list(range(first_id + i, first_id + i + len(X[i:i + batch]))))


def _time_queries(fn: Callable[[np.ndarray], Any], queries: np.ndarray) -> float:
    fn(queries[0])  # loads the index
    times = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def _heavy(colls: list[Any], batches: int, batch: int, d: int) -> float:
    """Vectors/s of one writer thread per collection, ``batches`` batches each."""
    data = [clustered(batches * batch, d, 10 + i) for i in range(len(colls))]

    def work(i: int) -> None:
        for b in range(batches):
            rows = data[i][b * batch:(b + 1) * batch]
            colls[i].write(rows, metadata=list(range(len(rows))))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(colls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(colls) * batches * batch / (time.perf_counter() - t0)


def pin_hosts(cluster: Any) -> dict[str, int]:
    """Pin each shard host's process (every thread) to one core of its own, round robin:
    on one machine, a host then has the CPU one machine of its own would give it."""
    cpus = sorted(os.sched_getaffinity(0))
    pinned = {}
    for i, host in enumerate(h["host_id"] for h in cluster.hosts()):
        ok, pid = cluster.transport.host(host, "pid", (), True)
        cpu = cpus[i % len(cpus)]
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setaffinity(int(tid), {cpu})
            except OSError:  # a thread that ended meanwhile
                pass
        pinned[host] = cpu
    return pinned


def library_runs(args: argparse.Namespace) -> dict[str, Any]:
    import hopmem
    from hopmem.cluster import start_local

    d, n, parts = args.dim, args.docs, args.partitions
    root = tempfile.mkdtemp(prefix="hopmem-bench-cluster-")
    local_dir = tempfile.mkdtemp(prefix="hopmem-bench-local-")
    X = clustered(n, d, 3)
    queries = clustered(args.queries, d, 4)
    cluster = start_local(hosts=2, root=root)
    results: dict[str, list[dict[str, float]]] = {"cluster": [], "single": []}
    try:
        plain = {"mode": "plain", "k": 1}
        db = cluster.create("topk", d, shards=4, **plain)
        hosts = [h["host_id"] for h in cluster.hosts()]
        whole = db.collection(_names_on(db, hosts[:1], "whole")[0])
        split = db.collection("split", partitions=parts)
        _fill(whole, X, 0)
        _fill(split, X, 0)
        q0 = queries[0]
        if split.resolve(q0, 10, "exact") != whole.resolve(q0, limit=10, mode="exact"):
            raise SystemExit("the partitioned top-10 differs from one collection's")
        local = hopmem.open(os.path.join(local_dir, "topk.hopmem"), d, **plain)
        lcoll = local.collection("whole")
        _fill(lcoll, X, 0)
        heavy_db = cluster.create("heavy", d, shards=4)
        same = [heavy_db.collection(c) for c in _names_on(heavy_db, [hosts[0], hosts[0]], "one")]
        spread = [heavy_db.collection(c) for c in _names_on(heavy_db, hosts[:2], "two")]
        heavy_local = hopmem.open(os.path.join(local_dir, "heavy.hopmem"), d)
        for run in range(args.runs):
            if args.pin_hosts:
                pin_hosts(cluster)
            one = _time_queries(lambda q: whole.resolve(q, limit=10, mode="exact"), queries)
            scattered = _time_queries(lambda q: split.resolve(q, limit=10, mode="exact"), queries)
            single = _time_queries(lambda q: lcoll.resolve(q, limit=10, mode="exact"), queries)
            h1 = _heavy(same, args.batches, args.batch, d)
            h2 = _heavy(spread, args.batches, args.batch, d)
            hl = _heavy([heavy_local.collection(f"r{run}a"), heavy_local.collection(f"r{run}b")],
                        args.batches, args.batch, d)
            results["cluster"].append({
                "top10_ms_1_partition": one, f"top10_ms_{parts}_partitions": scattered,
                "top10_ratio": scattered / one, "heavy_vec_per_s_1_host": h1,
                "heavy_vec_per_s_2_hosts": h2, "heavy_ratio": h2 / h1})
            results["single"].append({"top10_ms": single, "heavy_vec_per_s_2_threads": hl})
        local.close()
        heavy_local.close()
    finally:
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(local_dir, ignore_errors=True)
    return {k: median_of(v) for k, v in results.items()}


def _clients(fn: Callable[[int, int], Any], clients: int, seconds: float) -> tuple[float, float]:
    """Calls/s and p50 (ms) of ``clients`` threads calling ``fn(client, i)`` for ``seconds``."""
    stop = threading.Event()
    times: list[list[float]] = [[] for _ in range(clients)]

    def work(c: int) -> None:
        i = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            fn(c, i)
            times[c].append(time.perf_counter() - t0)
            i += 1

    threads = [threading.Thread(target=work, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    flat = [x for ts in times for x in ts]
    return len(flat) / elapsed, 1e3 * statistics.median(flat)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measured(fn: Callable[[int, int], Any], clients: int, seconds: float, host_pids: list[int],
              label: str, fig: dict[str, float]) -> None:
    """:func:`_clients`, recording calls/s, p50 and the CPU per call of hosts and client."""
    hosts0 = sum(_cpu_seconds(p) for p in host_pids)
    client0 = sum(os.times()[:2])
    rate, p50 = _clients(fn, clients, seconds)
    calls = max(rate * seconds, 1.0)
    fig[f"{label}_per_s"], fig[f"{label}_p50_ms"] = rate, p50
    fig[f"host_cpu_ms_{label}"] = 1e3 * (sum(_cpu_seconds(p) for p in host_pids) - hosts0) / calls
    fig[f"client_cpu_ms_{label}"] = 1e3 * (sum(os.times()[:2]) - client0) / calls


def _journal_entries(cluster: Any, db: Any) -> int:
    """Replication journal entries (forwarded batches) of ``db``'s shards, at their leaders."""
    total = 0
    for state in db.replication:
        ok, position = cluster.transport.host(state["leader"], "log_position",
                                              (db.name, state["shard"]), True)
        total += int(position[1]) if ok and position else 0
    return total


def replication_runs(args: argparse.Namespace) -> dict[str, float]:
    """Writes at R = 2 against R = 1, and reads from both copies against one (see module)."""
    from hopmem.cluster import start_local

    d, clients = args.dim, 16
    root = tempfile.mkdtemp(prefix="hopmem-bench-replicas-")
    cluster = start_local(hosts=2, root=root)
    runs: list[dict[str, float]] = []
    try:
        pin_hosts(cluster)
        host_pids = [int(cluster.transport.host(h["host_id"], "pid", (), True)[1])
                     for h in cluster.hosts()]
        dbs = {r: cluster.create(f"r{r}", d, shards=4, replicas=r) for r in (1, 2)}
        rows = clustered(4096, d, 7)
        # Reads: exact top-10 over docs / 2 documents, so that the hosts' work (which two
        # copies share) and not the client process's per-call cost is what is measured.
        stored = clustered(max(args.docs // 2, 1000), d, 8)
        queries = clustered(256, d, 9)
        readers = {}
        for r in (1, 2):
            readers[r] = cluster.create(f"reads{r}", d, shards=1, replicas=r, mode="plain",
                                        k=1).collection("reads")
            _fill(readers[r], stored, 0)
        for run in range(args.runs):
            fig: dict[str, float] = {"load_at_start": os.getloadavg()[0]}
            for r, db in dbs.items():
                colls = [db.collection(f"w{run}-{c}") for c in range(clients)]
                entries = _journal_entries(cluster, db) if r > 1 else 0
                _measured(lambda c, i, colls=colls: colls[c].write(
                    rows[(c * 256 + i) % len(rows)], metadata=[i]), clients, args.seconds,
                    host_pids, f"writes_r{r}", fig)
                if r > 1:
                    fig["mutations_per_journal_entry"] = fig["writes_r2_per_s"] * args.seconds \
                        / max(_journal_entries(cluster, db) - entries, 1)
            fig["writes_ratio_r2_r1"] = fig["writes_r2_per_s"] / fig["writes_r1_per_s"]
            for label, coll, mode in (("r1", readers[1], "leader"), ("r2_leader", readers[2],
                                                                    "leader"),
                                      ("r2_any", readers[2], "any")):
                _measured(lambda c, i, coll=coll, mode=mode: coll.resolve(
                    queries[(c * 16 + i) % len(queries)], limit=10, read_from=mode), clients,
                    args.seconds, host_pids, f"reads_{label}", fig)
            fig["reads_ratio_any_leader"] = fig["reads_r2_any_per_s"] / fig["reads_r2_leader_per_s"]
            fig["load_at_end"] = os.getloadavg()[0]
            runs.append(fig)
            print("replication run", run, json.dumps({k: round(v, 3) for k, v in fig.items()}),
                  flush=True)
    finally:
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    out = median_of(runs)
    loads = [r[k] for r in runs for k in ("load_at_start", "load_at_end")]
    out["load_min"], out["load_max"] = min(loads), max(loads)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--runs", type=int, default=3, help="runs per figure (the median is reported)")
    p.add_argument("--stored", type=int, default=2000, help="vectors in the HTTP read collection")
    p.add_argument("--requests", type=int, default=2000, help="requests per 1-client HTTP phase")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per HTTP phase, at most")
    p.add_argument("--docs", type=int, default=200_000, help="documents for the exact top-10")
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--queries", type=int, default=30, help="top-10 queries per run")
    p.add_argument("--batches", type=int, default=4, help="heavy batches per writer per run")
    p.add_argument("--batch", type=int, default=1000, help="vectors per heavy batch")
    p.add_argument("--pin-hosts", action="store_true",
                   help="library figures: pin each shard host to a core of its own (one "
                        "machine's worth of CPU per host, as on separate machines)")
    p.add_argument("--skip-http", action="store_true")
    p.add_argument("--skip-library", action="store_true")
    p.add_argument("--skip-replication", action="store_true")
    p.add_argument("--seconds", type=float, default=5.0,
                   help="seconds per replication phase (16 client threads)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, one run")
    p.add_argument("--json", help="write the figures to this file")
    args = p.parse_args(argv)
    if args.smoke:
        args.dim, args.runs, args.stored, args.requests, args.duration = 32, 1, 200, 100, 3.0
        args.docs, args.queries, args.batches, args.batch = 2000, 5, 1, 100
        args.seconds = 0.5
    try:
        import ray  # noqa: F401
    except ImportError:
        print("benchmarks.cluster: Ray is not installed (pip install 'hopmem[cluster]'); skipped")
        return 0
    out: dict[str, Any] = {"dim": args.dim, "runs": args.runs, "docs": args.docs,
                           "pin_hosts": args.pin_hosts,
                           "partitions": args.partitions, "cpus": os.cpu_count(),
                           "load_before": os.getloadavg()[0]}
    if not args.skip_http:
        for label, ray in (("http_single_node", False), ("http_ray_local_2_hosts", True)):
            out[label] = median_of([http_run(ray, args) for _ in range(args.runs)])
            print(label, json.dumps(out[label]), flush=True)
    if not args.skip_library:
        lib = library_runs(args)
        out["library_cluster"], out["library_single_node"] = lib["cluster"], lib["single"]
        print("library_cluster", json.dumps(lib["cluster"]), flush=True)
        print("library_single_node", json.dumps(lib["single"]), flush=True)
    if not args.skip_replication:
        out["replication"] = replication_runs(args)
        print("replication", json.dumps(out["replication"]), flush=True)
    out["load_after"] = os.getloadavg()[0]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
