"""Approximate activation against exact activation, hnswlib and faiss.

    python -m benchmarks.ann [--n 100000] [--dataset clustered|diffuse|minilm]
                             [--queries 300] [--probes 2,4,8,16,32,64]
                             [--peers hnswlib,faiss-ivf,faiss-hnsw] [--build-threads N]
                             [--out FILE.json] [--plot FILE.png] [--smoke]

A plain memory (``Memory(384, mode="plain", k=10, activation="approximate")``)
is written the N patterns in batches of 50,000 (the time includes every fit
of its index and every row joining it), then read once per query at each
``probe`` of the sweep. For each probe: recall@10 of the activated set
against exact activation (the same memory read with a probe covering every
group, which is exact activation), the median cosine of the read against the
exact read, and p50/p99 latency of one read (iterative, the default, and
fast), one thread. Also: the bytes the memory holds against the raw float32
patterns, and the time a restored memory's first read takes to fit the index
anew ("rebuild on open").

The same unit patterns go to hnswlib (HNSW, inner product; ``ef`` sweep),
faiss ``IndexIVFFlat`` (inner product, nlist = 4 sqrt(N); ``nprobe`` sweep)
and faiss ``IndexHNSWFlat`` (``efSearch`` sweep); their recall@10 is against
the same exact activation (the memory's row r holds pattern r). Peers build
with ``--build-threads`` threads and answer on one, one query at a time.
Latencies are medians over the queries, the contenders taking turns query by
query so that load on a shared machine hits them alike.

Datasets (d = 384, unit rows): ``clustered`` (1,000 centers, cos ~0.74 to
the center, as ``benchmarks/peers.py``), ``diffuse`` (N / 100 centers,
cos ~0.64 to the center), ``minilm`` (all-MiniLM-L6-v2 embeddings of every
text in ``benchmarks/data/agent_eval`` and in the JSON files of each
``--texts`` folder, such as a LoCoMo download: tens of thousands at most, so
N is capped there). Queries are drawn from the same distribution, not stored patterns
(``minilm``: held-out texts).

``--smoke``: 6,000 patterns, a short sweep, every peer that is installed: the
harness end to end in seconds (``tests/test_bench_harness.py`` runs it).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from hopmem import Memory, set_threads

K = 10
DIM = 384
BATCH = 50_000


# -- data -----------------------------------------------------------------------------------------

def _unit(X: np.ndarray) -> np.ndarray:
    X = X.astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def _around(centers: int, n: int, d: int, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Unit rows around ``centers`` random unit centers, noise ``noise`` per component."""
    C = _unit(rng.standard_normal((centers, d)).astype(np.float32))
    out = np.empty((n, d), np.float32)
    for s in range(0, n, 100_000):
        m = min(100_000, n - s)
        rows = C[rng.integers(0, centers, m)] + noise * rng.standard_normal((m, d)).astype(np.float32)
        out[s:s + m] = _unit(rows)
    return out


def corpus_texts(roots: list[Path]) -> list[str]:
    """Every distinct string (12 characters or more) of the JSON files under ``roots``."""
    seen: dict[str, None] = {}

    def walk(x: Any) -> None:
        if isinstance(x, str):
            t = x.strip()
            if len(t) >= 12:
                seen.setdefault(t, None)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for root in roots:
        for path in sorted(root.rglob("*.json")):
            walk(json.loads(path.read_text(encoding="utf-8")))
    return list(seen)


def dataset(name: str, n: int, nq: int, seed: int, texts: list[Path] | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if name == "clustered":
        X = _around(1000, n + nq, DIM, 0.9 / math.sqrt(DIM), rng)
    elif name == "diffuse":
        X = _around(max(n // 100, 1), n + nq, DIM, 1.2 / math.sqrt(DIM), rng)
    elif name == "minilm":
        from hopmem.text.encoders import default_encoder
        corpus = corpus_texts([Path(__file__).parent / "data" / "agent_eval", *(texts or [])])
        order = rng.permutation(len(corpus))[: n + nq]
        X = _unit(default_encoder().encode([corpus[i] for i in order]))
    else:
        raise SystemExit(f"unknown dataset {name!r}")
    return np.ascontiguousarray(X[nq:]), np.ascontiguousarray(X[:nq])


# -- hopmem -------------------------------------------------------------------------------------

def memory_bytes(mem: Memory) -> int:
    """Bytes of the arrays a memory holds (state, spare capacity and index included)."""
    state = mem._state
    arrays = [state.ids, state.addresses, state.held_counters, state.weights, state.norms,
              state.addresses16]
    ix = state.index
    if ix is not None:
        arrays += [ix.centroids, ix.radius, ix.group_of, ix.members, ix.start]
    return sum(a.nbytes for a in arrays if a is not None)


def probe_view(mem: Memory, probe: int) -> Memory:
    """A memory reading ``mem``'s state with another probe (no copy: benchmark only)."""
    view = Memory.from_config(dataclasses.replace(mem.config, probe=probe))
    view._state = mem._state
    return view


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


# -- peers --------------------------------------------------------------------------------------

class Peer:
    name = ""
    knob = ""

    def build(self, X: np.ndarray, threads: int) -> None: ...
    def set(self, value: int) -> None: ...
    def search(self, q: np.ndarray) -> np.ndarray: ...
    def nbytes(self) -> int: return 0


class Hnswlib(Peer):
    name, knob = "hnswlib HNSW (M=16, efC=100)", "ef"

    def build(self, X, threads):
        import hnswlib
        self.index = hnswlib.Index(space="ip", dim=X.shape[1])
        self.index.init_index(max_elements=X.shape[0], M=16, ef_construction=100, random_seed=0)
        self.index.set_num_threads(threads)
        self.index.add_items(X, np.arange(X.shape[0]))
        self.index.set_num_threads(1)

    def set(self, value):
        self.index.set_ef(max(value, K))

    def search(self, q):
        return self.index.knn_query(q, k=K)[0][0]


class FaissIVF(Peer):
    knob = "nprobe"

    def build(self, X, threads):
        import faiss
        faiss.omp_set_num_threads(threads)
        nlist = int(4 * math.sqrt(X.shape[0]))
        self.name = f"faiss IVF-Flat (nlist={nlist})"
        quant = faiss.IndexFlatIP(X.shape[1])
        self.index = faiss.IndexIVFFlat(quant, X.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
        train = X[np.random.default_rng(0).choice(X.shape[0], min(X.shape[0], 64 * nlist), replace=False)]
        self.index.train(train)
        self.index.add(X)
        faiss.omp_set_num_threads(1)

    def set(self, value):
        self.index.nprobe = value

    def search(self, q):
        return self.index.search(q[None, :], K)[1][0]


class FaissHNSW(Peer):
    name, knob = "faiss HNSW-Flat (M=32, efC=40)", "efSearch"

    def build(self, X, threads):
        import faiss
        faiss.omp_set_num_threads(threads)
        self.index = faiss.IndexHNSWFlat(X.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        self.index.add(X)
        faiss.omp_set_num_threads(1)

    def set(self, value):
        self.index.hnsw.efSearch = max(value, K)

    def search(self, q):
        return self.index.search(q[None, :], K)[1][0]


PEERS = {"hnswlib": (Hnswlib, [10, 20, 40, 80, 160, 320]),
         "faiss-ivf": (FaissIVF, [1, 2, 4, 8, 16, 32, 64, 128]),
         "faiss-hnsw": (FaissHNSW, [10, 20, 40, 80, 160, 320])}


def installed(name: str) -> bool:
    try:
        __import__("hnswlib" if name == "hnswlib" else "faiss")
    except ImportError:
        return False
    return True


# -- the run ------------------------------------------------------------------------------------

def recall(got: np.ndarray, want: np.ndarray) -> float:
    return len(set(got.tolist()) & set(want.tolist())) / len(want)


def run(args: argparse.Namespace, log: Any = print) -> dict[str, Any]:
    set_threads(1)
    if getattr(args, "index_fit", ""):
        from hopmem.engine import _kernel
        per_root, sample, rounds = args.index_fit.split(",")
        _kernel.APPROX_GROUPS_PER_ROOT = float(per_root)
        _kernel.APPROX_INDEX_SAMPLE, _kernel.APPROX_INDEX_ITERATIONS = int(sample), int(rounds)
    X, Q = dataset(args.dataset, args.n, args.queries, args.seed, args.texts)
    n, nq = X.shape[0], Q.shape[0]
    out: dict[str, Any] = {"dataset": args.dataset, "n": n, "queries": nq, "dim": DIM, "k": K,
                           "machine": args.machine, "index_fit": getattr(args, "index_fit", "")}
    log(f"# {args.dataset}: {n} patterns, {nq} queries")

    mem = Memory(DIM, mode="plain", k=K, activation="approximate", probe=args.probes[0])
    t = time.perf_counter()
    for s in range(0, n, BATCH):
        mem.write(X[s:s + BATCH])
    out["write_s"] = time.perf_counter() - t
    out["load_after_write"] = list(os.getloadavg())  # 1, 5, 15 min: the machine may be shared
    ix = mem._state.index
    out["groups"] = ix.groups if ix is not None else 0
    out["memory_bytes"] = memory_bytes(mem)
    out["raw_bytes"] = X.nbytes
    log(f"write {out['write_s']:.1f} s ({n / out['write_s']:.0f} patterns/s), "
        f"groups {out['groups']}, memory {out['memory_bytes'] / X.nbytes:.2f}x raw float32")

    if args.refit:  # rebuild on open: a restored memory fits its index at its first read
        snap = mem.snapshot()
        restored = Memory.from_config(mem.config, snap)
        out["refit_s"], _ = timed(restored.read, Q[0])
        del restored, snap
        gc.collect()
        log(f"restore + first read (the index fitted anew): {out['refit_s']:.1f} s")
    if not args.peers:
        del X  # only the peers need the patterns again
        gc.collect()

    # Exact activation and the exact read: the same memory probing every group.
    exact = probe_view(mem, max(out["groups"], 1) + 1)
    truth = [t.activated - 1 for t in exact.analyze(Q, "fast")]  # rows (ids are rows + 1)
    exact_reads = exact.read(Q)
    exact_lat = []
    for q in Q[: min(nq, 50)]:
        dt, _ = timed(exact.read, q)
        exact_lat.append(dt)
    out["exact_read_p50_ms"] = 1e3 * float(np.median(exact_lat))
    log(f"exact read p50 {out['exact_read_p50_ms']:.2f} ms")

    contenders: list[tuple[str, Any, list[int]]] = []
    for p in args.probes:
        contenders.append(("hopmem approximate", probe_view(mem, p), [p]))
    peers = [name for name in args.peers if installed(name)]
    built: list[tuple[Peer, list[int]]] = []
    for name in peers:
        cls, sweep = PEERS[name]
        peer = cls()
        dt, _ = timed(peer.build, X, args.build_threads)  # noqa: F821 (kept when there are peers)
        log(f"{peer.name}: built in {dt:.1f} s ({args.build_threads} threads)")
        out.setdefault("peer_build_s", {})[peer.name] = dt
        built.append((peer, sweep if not args.smoke else sweep[:3]))

    curves: dict[str, list[dict[str, float]]] = {}
    # hopmem: each probe, reads timed query by query (iterative and fast)
    for _, view, (p,) in contenders:
        lat_it, lat_fast, rec, cos = [], [], [], []
        traces = view.analyze(Q, "fast")
        view.read(Q[0])  # warm: the first read of a config prepares it
        for i, q in enumerate(Q):
            dt, r = timed(view.read, q)
            lat_it.append(dt)
            dt, _ = timed(view.read, q, "fast")
            lat_fast.append(dt)
            rec.append(recall(traces[i].activated - 1, truth[i]))
            e = exact_reads[i]
            cos.append(float(r @ e / (np.linalg.norm(r) * np.linalg.norm(e))))
        # the queries as one batch (grouped by the groups they probe): per query, median of 3
        batch = [timed(view.read, Q)[0] / nq for _ in range(3)]
        point = {"probe": p, "recall": float(np.mean(rec)),
                 "p50_ms": 1e3 * float(np.median(lat_it)), "p99_ms": 1e3 * float(np.quantile(lat_it, 0.99)),
                 "fast_p50_ms": 1e3 * float(np.median(lat_fast)),
                 "batch_ms_per_query": 1e3 * float(np.median(batch)),
                 "mean_ms": 1e3 * float(np.mean(lat_it)),
                 "cos_median": float(np.median(cos)), "cos_min": float(np.min(cos))}
        curves.setdefault("hopmem approximate", []).append(point)
        log(f"hopmem probe={p}: recall@10 {point['recall']:.4f}, read p50 {point['p50_ms']:.3f} ms "
            f"(p99 {point['p99_ms']:.3f}, mean {point['mean_ms']:.3f}, batched "
            f"{point['batch_ms_per_query']:.3f} a query), fast p50 {point['fast_p50_ms']:.3f} ms, "
            f"cos median {point['cos_median']:.6f}")
    # peers: each setting, queries one at a time, taking turns with the others
    for peer, sweep in built:
        for value in sweep:
            peer.set(value)
            peer.search(Q[0])
            lat, rec = [], []
            for i, q in enumerate(Q):
                dt, ids = timed(peer.search, q)
                lat.append(dt)
                rec.append(recall(np.asarray(ids), truth[i]))
            point = {peer.knob: value, "recall": float(np.mean(rec)),
                     "p50_ms": 1e3 * float(np.median(lat)), "p99_ms": 1e3 * float(np.quantile(lat, 0.99))}
            curves.setdefault(peer.name, []).append(point)
            log(f"{peer.name} {peer.knob}={value}: recall@10 {point['recall']:.4f}, "
                f"p50 {point['p50_ms']:.3f} ms")
    out["curves"] = curves
    out["load_at_end"] = list(os.getloadavg())
    out["at_recall"] = at_recall(curves)
    for target, row in out["at_recall"].items():
        log(f"recall >= {target}: " + ", ".join(f"{k} {v:.3f} ms" if v is not None else f"{k} -"
                                              for k, v in row.items()))
    return out


def at_recall(curves: dict[str, list[dict[str, float]]], key: str = "fast_p50_ms"
              ) -> dict[str, dict[str, float | None]]:
    """Per recall target, each contender's lowest p50 among settings reaching it
    (hopmem: its fast read, the peers' like: a search and a weighted sum of k rows)."""
    table: dict[str, dict[str, float | None]] = {}
    for target in (0.9, 0.95, 0.99):
        row: dict[str, float | None] = {}
        for name, points in curves.items():
            ok = [p.get(key, p["p50_ms"]) for p in points if p["recall"] >= target]
            row[name] = min(ok) if ok else None
        table[str(target)] = row
    return table


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, res in zip(axes[0], results):
        for name, points in res["curves"].items():
            xs = [p["recall"] for p in points]
            ys = [p.get("fast_p50_ms", p["p50_ms"]) for p in points]
            ax.plot(xs, ys, marker="o", label=name)
        ax.set_yscale("log")
        ax.set_xlabel("recall@10 of exact activation")
        ax.set_ylabel("p50 latency, ms (one thread)")
        ax.set_title(f"{res['dataset']}, N = {res['n']:,}, d = {res['dim']}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dataset", action="append", choices=["clustered", "diffuse", "minilm"])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--probes", default="2,4,8,16,32,64")
    ap.add_argument("--peers", default="hnswlib,faiss-ivf,faiss-hnsw")
    ap.add_argument("--build-threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--texts", type=Path, action="append",
                    help="minilm: a folder of JSON files whose strings join the agent-eval texts")
    ap.add_argument("--index-fit", default="",
                    help="GROUPS_PER_ROOT,SAMPLE,ROUNDS: fit the approximate index with these "
                         "instead of the kernel's defaults (an experiment: 4,16,5 for more groups)")
    ap.add_argument("--machine", default="")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--no-refit", dest="refit", action="store_false",
                    help="skip the restore + refit timing (it holds two more copies of the memory)")
    args = ap.parse_args(argv)
    args.probes = [int(p) for p in args.probes.split(",")]
    args.peers = [p for p in args.peers.split(",") if p]
    if args.smoke:
        args.n, args.queries, args.probes = 6000, 40, args.probes[:3]
    results = []
    for name in args.dataset or ["clustered"]:
        args.dataset = name
        res = run(args, log=lambda s: print(s, flush=True))
        results.append(res)
        if args.out:
            args.out.write_text(json.dumps(results, indent=1))
        gc.collect()
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
