"""Full-activation reads side by side with the NumPy textbook, one thread.

    python -m benchmarks.hopfield_compare            # the table in docs/hopfield.md
    python -m benchmarks.hopfield_compare --quick    # fewer repetitions (a smoke run)

What a researcher compares first: the modern Hopfield update
``xi <- X^T softmax(beta X xi)`` in ten lines of float32 NumPy (two matrix-vector
products a step) against ``Memory(d, mode="plain", k=N)`` (every pattern
activated: the same update on the unit sphere) and :func:`hopmem.hopfield` (the
update on the raw array). d = 384, beta = 10, N random unit patterns, queries
near a stored pattern; fast = one step, iterative = 3 steps. Beside them the
floor: one float32 matrix-vector product ``X @ q`` a step (the least any
update must read).

Batches of 64: per-query time of a plain full-activation batch read against its
share of one GEMM (``Q @ X.T`` / 64), with float32 BLAS (``HOPMEM_AMX=0``) and,
where the CPU has AMX, on AMX bf16 tiles (the default there), and, at the engine's default settings
(competitive, about 2,000 locations, d = 384), a batch of 64 reads against 64
single reads.

Every contender of a table runs once per repetition, in an order that rotates,
so load on a shared machine falls on all of them alike; the report gives
medians and the 10th-90th percentile range of the thread's CPU time (--wall:
wall time). BLAS and hopmem are pinned to one thread. Every contender reads
the same bytes, the memory's own addresses (see shared_patterns).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import hopmem  # noqa: E402
from hopmem import Memory  # noqa: E402

D = 384
BETA = 10.0
STEPS = 3
BATCH = 64


def textbook(X: np.ndarray, xi: np.ndarray, beta: float, steps: int) -> np.ndarray:
    """The ten lines: two float32 matrix-vector products a step."""
    for _ in range(steps):
        s = beta * (X @ xi)
        p = np.exp(s - s.max())
        xi = X.T @ (p / p.sum())
    return xi


def textbook_batch(X: np.ndarray, Q: np.ndarray, beta: float) -> np.ndarray:
    """One step for a batch: two GEMMs."""
    S = beta * (Q @ X.T)
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return (P / P.sum(axis=1, keepdims=True)) @ X


CLOCK = time.thread_time  # --wall: time.perf_counter


def interleaved(contenders: dict[str, Callable[[], object]], reps: int) -> dict[str, np.ndarray]:
    """Seconds per call of each contender, one call each per repetition, rotating order.

    The clock is the thread's CPU time by default: on a small machine shared
    with other work, wall time mostly measures waiting for a core (everything
    here runs on the calling thread: BLAS and hopmem are pinned to one).
    """
    names = list(contenders)
    for f in contenders.values():  # warm
        f()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            f = contenders[name]
            t0 = CLOCK()
            f()
            times[name].append(CLOCK() - t0)
    return {n: np.asarray(v) for n, v in times.items()}


def _us(t: np.ndarray, per: int = 1) -> str:
    lo, med, hi = np.percentile(t, [10, 50, 90]) / per * 1e6
    return f"{med:,.0f} ({lo:,.0f}-{hi:,.0f})" if med >= 100 else f"{med:.1f} ({lo:.1f}-{hi:.1f})"


def _ratio(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.median(a) / np.median(b))


def unit_patterns(n: int, d: int, seed: int) -> np.ndarray:
    X = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def shared_patterns(mem: Memory, n: int) -> np.ndarray:
    """The memory's own addresses (its unit patterns), not a copy, read-only.

    Every contender reads these same bytes (hopmem.hopfield and NumPy in
    place). ``Memory.addresses`` returns a copy: with it, the memory and the
    others would stream two arrays, 3 MB together at N = 1,000, which do not
    share a 2 MB L2 cache, so each would evict the other's rows between
    calls: a measure of cache residency, not of the code. The textbook reads
    the same float32 array the memory does (the dtype a user's float32
    embeddings have); a float64 textbook would read twice the bytes.
    """
    X = mem._state.addresses[:n].view()  # benchmark only: the state's own rows
    X.flags.writeable = False
    return X


def single_reads(reps: int, sizes: tuple[int, ...]) -> list[str]:
    lines = ["| N | read | hopmem Memory.read | hopmem.hopfield | NumPy textbook | "
             "Memory / textbook | hopfield / textbook | one-matvec floor a step |",
             "|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        rng = np.random.default_rng(1)
        mem = Memory(D, mode="plain", k=n, beta=BETA, t_max=STEPS, epsilon=0.0)
        mem.write(unit_patterns(n, D, 0))
        X = shared_patterns(mem, n)
        q = X[7] + 0.5 * rng.standard_normal(D).astype(np.float32) / np.sqrt(D)
        q = (q / np.linalg.norm(q)).astype(np.float32)  # unit: a read's scores are the textbook's
        Q1 = q.reshape(1, D)
        for strategy, steps in (("fast", 1), ("iterative", STEPS)):
            # The same update: one step of a read is the textbook's up to its
            # normalization, and hopmem.hopfield is the textbook (a read keeps
            # its state on the sphere, so later steps differ from the raw update).
            want = textbook(X, q, BETA, steps)
            got = hopmem.hopfield(X, q, BETA, steps=steps)
            assert float(np.abs(got - want).max()) < 1e-5, (n, strategy)
            if steps == 1:
                got = mem.read(q, strategy)
                cos = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
                assert cos > 0.99999, (n, strategy, cos)
        t = interleaved({
            "mem fast": lambda: mem.read(q, "fast"),
            "mem iter": lambda: mem.read(q, "iterative"),
            "fn fast": lambda: hopmem.hopfield(X, Q1, BETA, steps=1),
            "fn iter": lambda: hopmem.hopfield(X, Q1, BETA, steps=STEPS),
            "np fast": lambda: textbook(X, q, BETA, 1),
            "np iter": lambda: textbook(X, q, BETA, STEPS),
            "matvec": lambda: X @ q,
        }, reps)
        for label, key in (("fast", "fast"), (f"iterative ({STEPS} steps)", "iter")):
            m, f, np_ = t[f"mem {key}"], t[f"fn {key}"], t[f"np {key}"]
            lines.append(f"| {n:,} | {label} | {_us(m)} | {_us(f)} | {_us(np_)} | "
                         f"{_ratio(m, np_):.2f}x | {_ratio(f, np_):.2f}x | {_us(t['matvec'])} |")
    return lines


def _amx(f: Callable[[], object]) -> Callable[[], object]:
    """``f`` with blocked batches on AMX bf16 tiles (the default where the CPU has them)."""
    from hopmem.engine import _batched

    def run() -> object:
        before = _batched.use_amx(True)
        try:
            return f()
        finally:
            _batched.use_amx(before)
    return run


def _from_float64(mem: Memory, X: np.ndarray, Q: np.ndarray, got: np.ndarray) -> float:
    """Largest |read - float64 textbook fast read| over the batch (unit read-outs)."""
    X64 = X.astype(np.float64)
    Q64 = Q.astype(np.float64)
    Q64 /= np.linalg.norm(Q64, axis=1, keepdims=True)
    S = BETA * (Q64 @ X64.T)
    V = np.exp(S - S.max(axis=1, keepdims=True)) @ X64
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    return float(np.linalg.norm(got.astype(np.float64) - V, axis=1).max())


def batch_reads(reps: int, n: int) -> list[str]:
    from hopmem.engine import _batched, _kernel

    rng = np.random.default_rng(2)
    mem = Memory(D, mode="plain", k=n, beta=BETA, t_max=STEPS, epsilon=0.0)
    mem.write(unit_patterns(n, D, 0))
    X = shared_patterns(mem, n)
    Q = (X[rng.integers(0, n, BATCH)] + 0.5 * rng.standard_normal((BATCH, D)).astype(np.float32)
         / np.sqrt(D)).astype(np.float32)
    amx = _kernel.amx_available()
    before = _batched.use_amx(False)  # the float32 BLAS rows (AMX rows: _amx)
    # A batch this size runs as blocked products (hopmem/engine/_batched.py): within the
    # documented bound of single reads, not their bits.
    diff = {s: float(np.abs(mem.read(Q, s) - np.stack([mem.read(q, s) for q in Q])).max())
            for s in ("fast", "iterative")}
    assert max(diff.values()) < 1e-5, diff
    contenders: dict[str, Callable[[], object]] = {
        "batch fast": lambda: mem.read(Q, "fast"),
        "batch iter": lambda: mem.read(Q, "iterative"),
        "single fast": lambda: [mem.read(q, "fast") for q in Q],
        "np batch": lambda: textbook_batch(X, Q, BETA),
        "gemm": lambda: Q @ X.T,
    }
    if amx:
        contenders["amx fast"] = _amx(contenders["batch fast"])
        contenders["amx iter"] = _amx(contenders["batch iter"])
        amx_diff = float(np.abs(np.asarray(contenders["amx fast"]())
                                - np.stack([mem.read(q, "fast") for q in Q])).max())
        assert amx_diff < 1e-5, amx_diff
    t = interleaved(contenders, reps)
    gemm = t["gemm"]
    f32 = ", float32 BLAS (HOPMEM_AMX=0)" if amx else ""
    lines = [f"Plain, full activation, N = {n:,}, d = {D}, batch of {BATCH} (per query, "
             "median (p10-p90) µs):", "",
             "| read | per query | / GEMM share | / 64 single reads |", "|---|---|---|---|",
             f"| GEMM floor `Q @ X.T` | {_us(gemm, BATCH)} | 1.00x | |",
             f"| NumPy textbook batch step (2 GEMMs + softmax) | {_us(t['np batch'], BATCH)} | "
             f"{_ratio(t['np batch'], gemm):.2f}x | |",
             f"| hopmem fast, batch{f32} | {_us(t['batch fast'], BATCH)} | "
             f"{_ratio(t['batch fast'], gemm):.2f}x | {_ratio(t['batch fast'], t['single fast']):.2f}x |",
             f"| hopmem iterative ({STEPS} steps), batch{f32} | {_us(t['batch iter'], BATCH)} | "
             f"{_ratio(t['batch iter'], gemm):.2f}x | |"]
    if amx:
        lines += [f"| hopmem fast, batch, AMX bf16 tiles (the default here) | {_us(t['amx fast'], BATCH)} | "
                  f"{_ratio(t['amx fast'], gemm):.2f}x | {_ratio(t['amx fast'], t['single fast']):.2f}x |",
                  f"| hopmem iterative ({STEPS} steps), batch, AMX bf16 tiles (the default here) | "
                  f"{_us(t['amx iter'], BATCH)} | {_ratio(t['amx iter'], gemm):.2f}x | |"]
    lines += [f"| hopmem fast, 64 single reads | {_us(t['single fast'], BATCH)} | "
              f"{_ratio(t['single fast'], gemm):.2f}x | 1.00x |", "",
              f"Largest difference from single reads: {diff['fast']:.1e} (fast), "
              f"{diff['iterative']:.1e} (iterative)" + (f"; AMX tiles {amx_diff:.1e} (fast)." if amx else ".")]
    Qu = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)  # as the memory reads
    np32 = textbook_batch(X, Qu, BETA)
    np32 /= np.linalg.norm(np32, axis=1, keepdims=True)
    err = [f"float32 BLAS {_from_float64(mem, X, Q, mem.read(Q, 'fast')):.1e}"]
    if amx:
        got = np.asarray(_amx(lambda: mem.read(Q, "fast"))())
        err.append(f"AMX bf16 tiles {_from_float64(mem, X, Q, got):.1e}")
    err.append(f"NumPy float32 textbook {_from_float64(mem, X, Q, np32):.1e}")
    lines.append("Largest distance of a fast batch read from a float64 textbook: " + ", ".join(err) + ".")
    _batched.use_amx(before)
    return lines


def default_batch(reps: int) -> list[str]:
    from benchmarks.asv import bench_engine as engine_bench

    w = engine_bench.workload(D, "competitive")
    mem = w.memory()
    Q = np.ascontiguousarray(w.probes[:BATCH], dtype=np.float32)
    mem.read(Q)  # builds the location index, as the first read does
    lines = [f"Default settings (competitive, {len(mem):,} locations, d = {D}), batch of "
             f"{BATCH} against {BATCH} single reads (per query, median (p10-p90) µs):", "",
             "| read | batch | single | gain |", "|---|---|---|---|"]
    for strategy in ("fast", "iterative"):
        t = interleaved({
            "batch": lambda: mem.read(Q, strategy),
            "single": lambda: [mem.read(q, strategy) for q in Q],
        }, reps)
        lines.append(f"| {strategy} | {_us(t['batch'], BATCH)} | {_us(t['single'], BATCH)} | "
                     f"{_ratio(t['single'], t['batch']):.2f}x |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hopfield_compare",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions, small sizes")
    parser.add_argument("--reps", type=int, help="repetitions (default 60, --quick 5)")
    parser.add_argument("--out", type=Path, help="also write the markdown to this file")
    parser.add_argument("--no-default", action="store_true",
                        help="skip the default-settings batch (its memory takes a while to fill)")
    parser.add_argument("--wall", action="store_true",
                        help="time wall-clock (default: the thread's CPU time)")
    args = parser.parse_args(argv)
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    reps = args.reps or (5 if args.quick else 60)
    hopmem.set_threads(1)
    sizes = (1000,) if args.quick else (1000, 10000)
    clock = "wall time" if args.wall else "thread CPU time"
    out = [f"hopmem {hopmem.__version__}, 1 thread, {reps} interleaved repetitions, "
           f"d = {D}, beta = {BETA:g}; {clock}, µs, median (10th-90th percentile)", ""]
    out += single_reads(reps, sizes)
    out += [""] + batch_reads(max(3, reps // 3), sizes[-1])
    if not args.no_default:
        out += [""] + default_batch(max(3, reps // 3))
    text = "\n".join(out)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
