"""Exact top-n search and the plain-mode read against peer libraries.

    python -m benchmarks.peers [--quick] [--out FILE.md]

Part 1, exact top-n (n = 10) over N unit-normalized float32 documents of
d = 384, one query at a time:

* hopmem: ``hopmem.store.resolution.VectorIndex.search``, the exact resolution
  behind ``collection.resolve`` (a float16 scan with exact float32 re-scoring);
* faiss-cpu ``IndexFlatIP`` (exact);
* hnswlib, inner-product space (approximate: its recall@10 is reported;
  the graph is built with every core, queries run on one);
* sqlite-vec, a ``vec0`` virtual table with cosine distance (exact KNN),
  through apsw;
* NumPy: ``M @ q`` and ``argpartition``.

Every library is pinned to one thread (hopmem ``set_threads(1)``, faiss
``omp_set_num_threads(1)``, hnswlib ``set_num_threads(1)``, BLAS through
threadpoolctl). The contenders
take turns query by query (round robin, the starting one rotating), so a
burst of load on a shared machine hits all of them alike. Latency is the
median (and p90) over the queries; recall@10 is against an exact float64
scan.

Part 2, the plain-mode read (``Memory(mode="plain", k=N)``) against the
textbook modern Hopfield update in NumPy on the same stored patterns:
latency, and the largest absolute difference of the results.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hopmem import Memory, set_threads
from hopmem.store.resolution import VectorIndex

from .report import machine, markdown_table, write_csv
from .vectors import perturb, random_patterns, unit_rows

TOP_N = 10
DIM = 384


# -- data ----------------------------------------------------------------------------------

def make_documents(n: int, d: int, rng: np.random.Generator, clusters: int = 1000) -> np.ndarray:
    """Unit rows around ``clusters`` random centers (embedding-like, not uniform).

    Each row is at cos ~0.74 from its center, so rows of one cluster have
    cos ~0.55 with each other. Draw documents and queries in one call (then
    split) so that they share the centers.
    """
    centers = random_patterns(clusters, d, rng)
    labels = rng.integers(0, clusters, n)
    return unit_rows(centers[labels] + rng.standard_normal((n, d)).astype(np.float32) * (0.9 / math.sqrt(d)))


def exact_top(M: np.ndarray, Q: np.ndarray, n: int) -> np.ndarray:
    """Ground truth in float64, blockwise."""
    out = np.empty((len(Q), n), np.int64)
    M64 = M.astype(np.float64)
    for s in range(0, len(Q), 256):
        S = Q[s:s + 256].astype(np.float64) @ M64.T
        part = np.argpartition(-S, n, axis=1)[:, :n]
        order = np.argsort(-np.take_along_axis(S, part, 1), axis=1, kind="stable")
        out[s:s + 256] = np.take_along_axis(part, order, 1)
    return out


# -- contenders ----------------------------------------------------------------------------

class Contender:
    name = ""
    exact = True

    def build(self, M: np.ndarray) -> None: ...

    def search(self, q: np.ndarray) -> np.ndarray: ...

    def close(self) -> None: ...


class Hopmem(Contender):
    """hopmem's exact resolution, as ``collection.resolve`` runs it: a VectorIndex
    scanning its float16 copy, every candidate within the proven error bound
    re-scored exactly in float32 (the float32 answer at half the bytes)."""

    name = "hopmem resolution"

    def build(self, M):
        self.index = VectorIndex(M.shape[1], capacity=M.shape[0])
        self.index.add(np.arange(1, M.shape[0] + 1), M)

    def search(self, q):
        return self.index.search(q, TOP_N)[0] - 1


class NumPy(Contender):
    name = "NumPy argpartition"

    def build(self, M):
        self.M = np.ascontiguousarray(M, dtype=np.float32)

    def search(self, q):
        s = self.M @ q
        part = np.argpartition(-s, TOP_N)[:TOP_N]
        return part[np.argsort(-s[part], kind="stable")]


class Faiss(Contender):
    name = "faiss IndexFlatIP"

    def build(self, M):
        import faiss
        faiss.omp_set_num_threads(1)
        self.index = faiss.IndexFlatIP(M.shape[1])
        self.index.add(np.ascontiguousarray(M, dtype=np.float32))

    def search(self, q):
        return self.index.search(q[None, :], TOP_N)[1][0]


class Hnsw(Contender):
    exact = False

    def __init__(self, ef: int = 100, m: int = 16, ef_construction: int = 100, seed: int = 0):
        self.ef, self.m, self.efc, self.seed = ef, m, ef_construction, seed
        self.name = f"hnswlib (M={m}, ef={ef})"

    def build(self, M):
        import hnswlib
        self.index = hnswlib.Index(space="ip", dim=M.shape[1])
        self.index.init_index(max_elements=len(M), ef_construction=self.efc, M=self.m,
                              random_seed=self.seed)
        # The graph is built with every core (build time is not what is compared);
        # queries run on one thread.
        self.index.add_items(M, np.arange(len(M)), num_threads=os.cpu_count() or 1)
        self.index.set_num_threads(1)
        self.index.set_ef(self.ef)

    def search(self, q):
        return self.index.knn_query(q[None, :], k=TOP_N, num_threads=1)[0][0].astype(np.int64)


class SqliteVec(Contender):
    name = "sqlite-vec vec0"

    def build(self, M):
        import apsw
        import sqlite_vec
        self.con = apsw.Connection(":memory:")
        self.con.enable_load_extension(True)
        self.con.load_extension(sqlite_vec.loadable_path())
        self.con.enable_load_extension(False)
        self.con.execute(f"CREATE VIRTUAL TABLE docs USING vec0(embedding float[{M.shape[1]}] "
                         "distance_metric=cosine)")
        with self.con:
            self.con.executemany("INSERT INTO docs(rowid, embedding) VALUES (?, ?)",
                                 ((i, M[i].tobytes()) for i in range(len(M))))
        self.sql = "SELECT rowid FROM docs WHERE embedding MATCH ? AND k = ? ORDER BY distance"

    def search(self, q):
        return np.fromiter((r[0] for r in self.con.execute(self.sql, (q.tobytes(), TOP_N))),
                           dtype=np.int64, count=TOP_N)

    def close(self):
        self.con.close()


def default_contenders(seed: int = 0) -> list[Contender]:
    return [Hopmem(), Faiss(), NumPy(), SqliteVec(), Hnsw(seed=seed)]


# -- part 1 --------------------------------------------------------------------------------

def search_benchmark(n_docs: int, n_queries: int, d: int = DIM, seed: int = 0,
                     contenders: Sequence[Contender] | None = None, warmup: int = 5,
                     progress: bool = True) -> list[dict[str, Any]]:
    """Latency and recall@10 of each contender at one N; one row per contender."""
    from tqdm.auto import tqdm

    rng = np.random.default_rng([seed, n_docs])
    clusters = max(10, n_docs // 20)
    both = make_documents(n_docs + n_queries + warmup, d, rng, clusters)
    M, Q = both[:n_docs], both[n_docs:]
    truth = exact_top(M, Q, TOP_N)
    contenders = list(contenders or default_contenders(seed))
    build_s = {}
    for c in contenders:
        t0 = time.perf_counter()
        c.build(M)
        build_s[c.name] = time.perf_counter() - t0
    lat = {c.name: [] for c in contenders}
    hits = {c.name: 0 for c in contenders}
    for i in tqdm(range(len(Q)), desc=f"search N={n_docs}", disable=not progress):
        q = Q[i]
        for j in range(len(contenders)):
            c = contenders[(i + j) % len(contenders)]
            t0 = time.perf_counter_ns()
            ids = c.search(q)
            dt = time.perf_counter_ns() - t0
            if i >= warmup:
                lat[c.name].append(dt / 1e3)
                hits[c.name] += len(np.intersect1d(ids, truth[i]))
    for c in contenders:
        c.close()
    rows = []
    for c in contenders:
        t = np.asarray(lat[c.name])
        rows.append(dict(
            n_docs=n_docs, d=d, contender=c.name, exact=c.exact, queries=len(t),
            median_us=float(np.median(t)), p90_us=float(np.percentile(t, 90)),
            recall_at_10=hits[c.name] / (TOP_N * len(t)), build_s=build_s[c.name],
        ))
    return rows


def ratios(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """ours / faiss (target <= 1.5) and sqlite-vec / ours (target >= 5 at N = 100k)."""
    out = []
    for n in sorted({r["n_docs"] for r in rows}):
        med = {r["contender"]: r["median_us"] for r in rows if r["n_docs"] == n}
        ours = med.get(Hopmem.name)
        if ours is None:
            continue
        if Faiss.name in med:
            v = ours / med[Faiss.name]
            out.append(dict(n_docs=n, ratio="hopmem / faiss latency", value=v, target="<= 1.5",
                            met="yes" if v <= 1.5 else "no"))
        if SqliteVec.name in med:
            v = med[SqliteVec.name] / ours
            target = ">= 5" if n >= 100_000 else "(>= 5 at 100k)"
            met = ("yes" if v >= 5 else "no") if n >= 100_000 else "-"
            out.append(dict(n_docs=n, ratio="sqlite-vec / hopmem latency (speed-up)", value=v,
                            target=target, met=met))
        if NumPy.name in med:
            out.append(dict(n_docs=n, ratio="NumPy / hopmem latency (speed-up)",
                            value=med[NumPy.name] / ours, target="-", met="-"))
    return out


# -- part 2 --------------------------------------------------------------------------------

def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


def textbook_fast(X: np.ndarray, q: np.ndarray, beta: float) -> np.ndarray:
    """One modern Hopfield update xi' = X^T softmax(beta X xi), normalized (unit rows X)."""
    xi = q / np.linalg.norm(q)
    r = _softmax(beta * (X @ xi)) @ X
    return r / np.linalg.norm(r)


def textbook_iterative(X: np.ndarray, q: np.ndarray, beta: float, t_max: int = 10,
                       epsilon: float = 1e-6) -> np.ndarray:
    """Repeat the update until cos(xi, xi') > 1 - epsilon or t_max steps."""
    xi = q / np.linalg.norm(q)
    for _ in range(t_max):
        nxt = _softmax(beta * (X @ xi)) @ X
        nxt /= np.linalg.norm(nxt)
        done = float(xi @ nxt) > 1.0 - epsilon
        xi = nxt
        if done:
            break
    return xi


def hopfield_benchmark(n_patterns: int, n_queries: int, d: int = DIM, beta: float = 10.0,
                       seed: int = 0, progress: bool = True) -> list[dict[str, Any]]:
    """Plain-mode read (k = N: full softmax) vs the NumPy textbook update, fast and iterative."""
    from tqdm.auto import tqdm

    rng = np.random.default_rng([seed, n_patterns, 2])
    X = make_documents(n_patterns, d, rng)
    mem = Memory(d, mode="plain", k=n_patterns, beta=beta, seed=seed)
    mem.write(X)
    Q = perturb(X[rng.choice(n_patterns, n_queries)], math.radians(40.0), rng)
    X64 = X.astype(np.float64)
    pairs: list[tuple[str, str, Callable[[np.ndarray], np.ndarray]]] = [
        ("fast", "hopmem", lambda q: mem.read(q, "fast")),
        ("fast", "NumPy textbook", lambda q: textbook_fast(X, q, beta)),
        ("iterative", "hopmem", lambda q: mem.read(q, "iterative")),
        ("iterative", "NumPy textbook", lambda q: textbook_iterative(X, q, beta)),
    ]
    lat = {(s, w): [] for s, w, _ in pairs}
    diff = {"fast": 0.0, "iterative": 0.0}
    for i in tqdm(range(n_queries), desc=f"hopfield N={n_patterns}", disable=not progress):
        q = Q[i]
        results = {}
        for j in range(len(pairs)):
            s, who, fn = pairs[(i + j) % len(pairs)]
            t0 = time.perf_counter_ns()
            results[(s, who)] = fn(q)
            lat[(s, who)].append((time.perf_counter_ns() - t0) / 1e3)
        for s in diff:
            ref64 = (textbook_fast if s == "fast" else textbook_iterative)(X64, q.astype(np.float64), beta)
            diff[s] = max(diff[s], float(np.max(np.abs(results[(s, "hopmem")] - ref64))))
    rows = []
    for s in ("fast", "iterative"):
        ours = float(np.median(lat[(s, "hopmem")]))
        theirs = float(np.median(lat[(s, "NumPy textbook")]))
        rows.append(dict(n_patterns=n_patterns, d=d, beta=beta, strategy=s, queries=n_queries,
                         hopmem_median_us=ours, numpy_median_us=theirs, speedup=theirs / ours,
                         max_abs_diff_vs_float64_textbook=diff[s]))
    return rows


# -- report --------------------------------------------------------------------------------

def report(search_rows, ratio_rows, hopfield_rows, command: str, elapsed: float) -> str:
    lines = [
        "# hopmem against peer libraries", "",
        f"Command: `{command}`  ",
        f"Machine: {machine()}  ",
        f"Run time: {elapsed:.0f} s. Every library pinned to one thread for the queries (the "
        "hnswlib graph is built with all cores); contenders interleaved query by query. "
        "Documents: unit rows around N/20 random centers (cos ~0.55 within a cluster); queries "
        "drawn from the same clusters.", "",
        f"## Exact top-{TOP_N} search, d = {DIM}, unit-normalized float32 documents", "",
        markdown_table([{**r, "exact": "yes" if r["exact"] else "no (approximate)"} for r in search_rows],
                         ["n_docs", "contender", "exact", "queries", "median_us", "p90_us",
                          "recall_at_10", "build_s"]), "",
        "## Ratios (median latencies)", "",
        markdown_table(ratio_rows, ["n_docs", "ratio", "value", "target", "met"]), "",
        "## Plain-mode read vs the textbook modern Hopfield update (NumPy)", "",
        "hopmem `Memory(mode=\"plain\", k=N)` (every pattern activated: exactly the textbook "
        "update) against `X.T @ softmax(beta * X @ xi)`, normalized, in NumPy float32; the "
        "difference is measured against the same update in float64.", "",
        markdown_table(hopfield_rows, ["n_patterns", "beta", "strategy", "queries",
                                         "hopmem_median_us", "numpy_median_us", "speedup",
                                         "max_abs_diff_vs_float64_textbook"]), "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers",
                                     description="hopmem against faiss, hnswlib, sqlite-vec, NumPy")
    parser.add_argument("--quick", action="store_true", help="N = 10,000 only, fewer queries")
    parser.add_argument("--out", type=Path, default=Path("results/peers.md"),
                        help="markdown report (default results/peers.md); a .csv lies beside it")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    set_threads(1)  # like every contender: one thread
    sizes = [(10_000, 300)] if args.quick else [(10_000, 1000), (100_000, 300)]
    hop_sizes = [(1_000, 100)] if args.quick else [(1_000, 300), (10_000, 100)]
    start = time.perf_counter()
    with threadpool_limits(1):
        search_rows = []
        for n, nq in sizes:
            search_rows += search_benchmark(n, nq, seed=args.seed, progress=not args.no_progress)
        hop_rows = []
        for n, nq in hop_sizes:
            hop_rows += hopfield_benchmark(n, nq, seed=args.seed, progress=not args.no_progress)
    ratio_rows = ratios(search_rows)
    command = " ".join(["python -m benchmarks.peers", *(sys.argv[1:] if argv is None else argv)])
    text = report(search_rows, ratio_rows, hop_rows, command, time.perf_counter() - start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    write_csv(args.out.with_suffix(".csv"), search_rows + ratio_rows + hop_rows)
    print(text)
    print(f"wrote {args.out} and {args.out.with_suffix('.csv')}", file=sys.stderr)


if __name__ == "__main__":
    main()
