"""Side by side: hopmem native vs the NumPy reference vs the one-pass floor.

    python -m benchmarks.compare [--quick | --smoke] [--out FILE.md] [--strict]

On the same memories (d = 128 and 384, competitive and plain, about 2,000
locations; built by :func:`benchmarks.asv.bench_engine.workload`, the data the asv
suite uses), it times, in one run:

* ``native``: ``Memory`` with the compiled kernel;
* ``reference``: ``Memory(backend="reference")``, the pure-NumPy oracle;
* ``floor``: one single-thread float32 pass over the same address matrix,
  ``addresses @ q`` (for a batch, ``Q @ addresses.T``): no engine can activate
  locations in less than one pass over them;
* ``scan`` (for context): the kernel's own exact top-k scan over that matrix,
  ``hopmem.engine.memory.top_k_dot(addresses, q, k)``, i.e. the activation step alone.

for a single write into the filled memory, an iterative read, a fast read and a
batch of 64 iterative reads. Each operation is measured in a pass of its own,
its contenders interleaved round-robin (the order rotates every repetition) so
that machine noise hits all alike; the reference has passes of its own (its
cache traffic would otherwise be charged to whichever contender followed it);
the report gives
medians with p10/p90, the ratios, and PASS/FAIL against the targets in
``TARGETS``. BLAS is pinned to one thread (threadpoolctl) for every contender.
Nothing in the environment is changed; the report says whether
OPENBLAS_CORETYPE is set.

``--smoke`` runs every code path of this script and of the asv suite on tiny
memories with a few repetitions (CI: seconds; its timings mean nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import gc
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits
from tqdm import tqdm

if __package__ in (None, ""):  # run as a file: python benchmarks/compare.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.asv import bench_engine as engine_bench  # noqa: E402
else:
    from .asv import bench_engine as engine_bench

import hopmem  # noqa: E402
from hopmem import Memory  # noqa: E402
from hopmem.engine.memory import top_k_dot  # noqa: E402

CONTENDERS = ("native", "compact", "reference", "scan", "floor")
OPS = ("write", "read_iterative", "read_fast", "read_batch64")
BATCH = 64

OP_LABELS = {
    "write": "write, 1 vector",
    "read_iterative": "read, iterative",
    "read_fast": "read, fast",
    "read_batch64": "read, batch of 64 (per query)",
}

# name -> (description, comparison, threshold)
TARGETS = {
    "write_speedup": ("write: reference / native (target: competitive only)", ">=", 10.0),
    "iterative_speedup": ("iterative read: reference / native", ">=", 3.0),
    "iterative_vs_floor": ("iterative read: native / floor", "<=", 1.5),
    "batch_throughput": ("batch-64 throughput vs single reads (native)", ">=", 4.0),
}

AGREE_TOL = 1e-4  # native vs reference vs floor: beyond float rounding above this

PRESETS = {
    #          dims        locations  reps
    "full": ((128, 384), 2000, 400),
    "quick": ((128, 384), 2000, 60),
    "smoke": ((32,), 60, 3),
}

# Environment variables that change what BLAS does; reported, never changed.
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS", "BLIS_NUM_THREADS",
            "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


# -- measurement ----------------------------------------------------------------------------

@dataclass
class Case:
    """One contender on one operation: ``run(rep)`` is timed, ``prepare(rep)`` is not."""

    d: int
    mode: str
    op: str
    contender: str
    run: Callable[[int], Any]
    prepare: Callable[[int], Any] | None = None
    per_call: int = 1                       # queries per call (a batch divides by this)
    samples: list[float] = field(default_factory=list)  # seconds per query

    def stats(self) -> tuple[float, float, float]:
        """(median, p10, p90) in seconds per query."""
        s = np.asarray(self.samples)
        return float(np.median(s)), float(np.percentile(s, 10)), float(np.percentile(s, 90))


@dataclass
class Setup:
    """The memories and arrays for one (d, mode), and its cases."""

    w: engine_bench.Workload
    addresses: np.ndarray
    cases: dict[tuple[str, str], Case]
    agreement: dict[str, float]


def _cos_gap(a: np.ndarray, b: np.ndarray) -> float:
    """max over rows of 1 - cos(a_i, b_i)."""
    return float(np.max(1.0 - engine_bench.cosines(np.atleast_2d(a), np.atleast_2d(b))))


def build(d: int, mode: str, locations: int, n_probes: int) -> Setup:
    """Fill the memory, make the contenders, and check that they agree (untimed)."""
    w = engine_bench.workload(d, mode, locations=locations, n_probes=n_probes,
                              n_inputs=n_probes, n_noisy=1, n_auc=1)
    readers = {b: w.memory(b) for b in ("native", "reference")}
    # The same memory with compact activation (a float16 copy of the addresses
    # scanned, candidates within the proven error bound re-scored exactly).
    compact = Memory.from_config(dataclasses.replace(w.config, activation="compact"), w.snapshot)
    writers = {b: w.memory(b) for b in ("native", "reference")}
    rewinders = {b: engine_bench.Rewinder(writers[b], w.snapshot) for b in writers}
    # The floor scans the very matrix the engine activates on (C-contiguous float32).
    A = np.ascontiguousarray(readers["native"].addresses, dtype=np.float32)
    probes, inputs = w.probes, w.inputs
    batches = [probes[i:i + BATCH] for i in range(0, len(probes) - BATCH + 1, BATCH)]
    n_p, n_i, n_b = len(probes), len(inputs), len(batches)

    cases: dict[tuple[str, str], Case] = {}

    def add(op: str, contender: str, run, prepare=None, per_call: int = 1) -> None:
        cases[(op, contender)] = Case(d, mode, op, contender, run, prepare, per_call)

    for b in ("native", "reference"):
        rw, mem_r = rewinders[b], readers[b]
        add("write", b, lambda r, rw=rw: rw.write(inputs[r % n_i]),
            prepare=lambda r, rw=rw: rw.rewind())
        add("read_iterative", b, lambda r, m=mem_r: m.read(probes[r % n_p], "iterative"))
        add("read_fast", b, lambda r, m=mem_r: m.read(probes[r % n_p], "fast"))
    add("read_iterative", "compact", lambda r: compact.read(probes[r % n_p], "iterative"))
    add("read_fast", "compact", lambda r: compact.read(probes[r % n_p], "fast"))
    # The reference reads a batch one query at a time (its per-query time is its
    # single read), and 64 of them per repetition would dominate the run: not timed.
    add("read_batch64", "native",
        lambda r, m=readers["native"]: m.read(batches[r % n_b], "iterative"), per_call=BATCH)
    k = w.config.k
    singles = {"write": inputs[:, None, :], "read_iterative": probes[:, None, :],
               "read_fast": probes[:, None, :]}
    for op, rows in singles.items():
        add(op, "scan", lambda r, x=rows, n=len(rows): top_k_dot(A, x[r % n], k))  # noqa: B008 - bind now
    add("read_batch64", "scan", lambda r: top_k_dot(A, batches[r % n_b], k), per_call=BATCH)
    add("write", "floor", lambda r: A @ inputs[r % n_i])
    add("read_iterative", "floor", lambda r: A @ probes[r % n_p])
    add("read_fast", "floor", lambda r: A @ probes[r % n_p])
    add("read_batch64", "floor", lambda r: batches[r % n_b] @ A.T, per_call=BATCH)

    # Agreement, untimed: the contenders must compute the same thing.
    agreement = {}
    q = probes[:16]
    for strategy in ("iterative", "fast"):
        agreement[f"read {strategy}: max 1-cos(native, reference)"] = _cos_gap(
            readers["native"].read(q, strategy), readers["reference"].read(q, strategy))
    exact_t, compact_t = (m.analyze(probes, "iterative") for m in (readers["native"], compact))
    agreement["compact activation: share of probes whose activated set differs from exact"] = (
        float(np.mean([not np.array_equal(a.activated, b.activated)
                       for a, b in zip(exact_t, compact_t)])))
    agreement["compact vs exact iterative read: max abs diff"] = float(
        max(np.max(np.abs(a.result - b.result)) for a, b in zip(exact_t, compact_t)))
    single = np.stack([readers["native"].read(x, "iterative") for x in batches[0]])
    agreement["batch-64 vs single reads (native): max abs diff"] = float(
        np.max(np.abs(readers["native"].read(batches[0], "iterative") - single)))
    for rw in rewinders.values():
        rw.write(inputs[0])
    an, ar = writers["native"].addresses, writers["reference"].addresses
    agreement["write: locations after (native - reference)"] = float(len(an) - len(ar))
    if an.shape == ar.shape:
        agreement["write: max abs address diff (native, reference)"] = float(
            np.max(np.abs(an - ar)))
    # The timed writes start from the snapshot, rewound after each: check that.
    for b, rw in rewinders.items():
        for x in inputs[1:9]:
            rw.rewind()
            rw.write(x)
        rw.rewind()
        agreement[f"write, then rewind ({b}): 1 if not the snapshot again"] = float(
            not rw.matches_snapshot())
    _, top = top_k_dot(A, probes[:1], k)
    floor_top = np.sort(A @ probes[0])[::-1][: top.shape[1]]
    agreement["top-k scores, scan vs floor: max abs diff"] = float(
        np.max(np.abs(top[0] - floor_top)))
    return Setup(w, A, cases, agreement)


def measure(setups: list[Setup], reps: int, progress: bool) -> None:
    """One pass per (memory, operation): within it, every round times each
    contender once, the order rotating, so machine noise hits all alike.

    Passes, not one big round-robin, because the cases disturb each other's
    caches: restoring the writers' state before a timed write and one
    reference read each move megabytes, and the contender timed next found its
    addresses evicted (still 1.5-2x slow after one untimed call). So each
    operation's contenders run together, and the reference has passes of its
    own (it is 10-20x slower; its ratio does not need the interleaving)."""
    groups = [[s.cases[(op, c)] for c in CONTENDERS
               if (op, c) in s.cases and (c == "reference") == ref]
              for s in setups for op in OPS for ref in (False, True)]
    groups = [g for g in groups if g]
    clock = time.perf_counter_ns
    gc_was_enabled = gc.isenabled()
    bar = tqdm(total=len(groups) * reps, desc="measuring", unit="round", file=sys.stderr,
               disable=not progress, dynamic_ncols=True)
    try:
        for group in groups:
            # Warm-up: one untimed call of each case (first-touch, lazy imports, caches).
            for case in group:
                if case.prepare:
                    case.prepare(0)
                case.run(0)
            gc.disable()
            for rep in range(reps):
                k = rep % len(group)
                for case in group[k:] + group[:k]:
                    if case.prepare:
                        case.prepare(rep)  # restores the state: its arrays are warm too
                    else:
                        # Untimed first, with the next query: each contender is
                        # timed with its own matrix warm in cache, not with whatever
                        # the previous contender left there, but not with this
                        # query's own rows in L1/L2 (a read that touches a few
                        # percent of the rows, through the location index, would
                        # otherwise be timed on a repeat of the same query).
                        case.run(rep + 1)
                    t0 = clock()
                    case.run(rep)
                    t1 = clock()
                    case.samples.append((t1 - t0) * 1e-9 / case.per_call)
                if rep % 16 == 15:
                    gc.collect()
                bar.update(1)
            if gc_was_enabled:
                gc.enable()
            gc.collect()
    finally:
        bar.close()
        if gc_was_enabled:
            gc.enable()


# -- evaluation ------------------------------------------------------------------------------

def _median(s: Setup, op: str, contender: str) -> float:
    return s.cases[(op, contender)].stats()[0]


def evaluate(setups: list[Setup]) -> list[dict[str, Any]]:
    """One row per (memory, target): value, target, PASS/FAIL (or info)."""
    rows = []
    for s in setups:
        d, mode = s.w.d, s.w.mode
        values = {
            "write_speedup": _median(s, "write", "reference") / _median(s, "write", "native"),
            "iterative_speedup": (_median(s, "read_iterative", "reference")
                                  / _median(s, "read_iterative", "native")),
            "iterative_vs_floor": (_median(s, "read_iterative", "native")
                                   / _median(s, "read_iterative", "floor")),
            "batch_throughput": (_median(s, "read_iterative", "native")
                                 / _median(s, "read_batch64", "native")),
        }
        for name, value in values.items():
            desc, cmp, threshold = TARGETS[name]
            applies = not (name == "write_speedup" and mode != "competitive")
            ok = value >= threshold if cmp == ">=" else value <= threshold
            rows.append({
                "d": d, "mode": mode, "name": name, "check": desc, "value": value,
                "target": f"{cmp} {threshold:g}x",
                "result": ("PASS" if ok else "FAIL") if applies else "info",
            })
    return rows


# -- report ------------------------------------------------------------------------------------

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _git_commit() -> str:
    """The commit checked out (read-only: rev-parse touches nothing)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=5, cwd=Path(__file__).resolve().parents[1])
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_info(original_threads: dict) -> list[str]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    lines = [
        f"- CPU: {_cpu_model()}; {os.cpu_count()} logical CPUs, {usable} usable by this process",
        f"- Python {platform.python_version()} ({platform.platform()}), NumPy {np.__version__},"
        f" hopmem {getattr(hopmem, '__version__', '?')} at commit {_git_commit()}"
        " (plus any uncommitted changes)",
    ]
    blas = [i for i in threadpool_info()]
    if not blas:
        lines.append("- BLAS: threadpoolctl found no BLAS/OpenMP library")
    for info in blas:
        api = info.get("user_api")
        default = original_threads.get(api)
        lines.append(
            f"- {api}: {info.get('internal_api')} {info.get('version') or ''}"
            f" ({info.get('architecture') or 'arch ?'},"
            f" threading {info.get('threading_layer', '?')}),"
            f" {info.get('num_threads')} thread(s) during the run"
            + (f", {default} by default" if default is not None else "")
            + f"; {Path(info.get('filepath', '')).name}")
    kernel_threads = hopmem.get_threads()
    lines.append(f"- hopmem kernel threads: {kernel_threads}"
                 + (" (no helper threads)" if kernel_threads == 1 else ""))
    core = os.environ.get("OPENBLAS_CORETYPE")
    lines.append("- OPENBLAS_CORETYPE: " + (f"set, {core!r}" if core is not None else "not set"))
    others = [f"{k}={os.environ[k]}" for k in BLAS_ENV[1:] if k in os.environ]
    lines.append("- other BLAS/OpenMP variables: " + (", ".join(others) if others else "none set"))
    return lines


def _us(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:.0f}" if us >= 100 else f"{us:.1f}" if us >= 10 else f"{us:.2f}"


def _cell(case: Case | None) -> str:
    if case is None:
        return "—"
    med, p10, p90 = case.stats()
    return f"{_us(med)} [{_us(p10)}–{_us(p90)}]"


def report(setups: list[Setup], rows: list[dict[str, Any]], *, preset: str, reps: int,
           load_before: tuple, load_after: tuple, elapsed: float, original_threads: dict) -> str:
    out = ["# hopmem engine: native vs reference vs one-pass floor", ""]
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out += [f"{now}; preset `{preset}`: {reps} timed repetitions per contender and operation,"
            f" round-robin within one pass per operation; {elapsed:.0f} s in all.", ""]
    out += ["## Machine", ""] + machine_info(original_threads)
    out += [f"- load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in load_before)} before,"
            f" {', '.join(f'{x:.2f}' for x in load_after)} after"
            + ("  **(busy machine: timings are noisy)**"
               if max(load_before[0], load_after[0]) > 0.5 * (os.cpu_count() or 1) else ""), ""]

    out += ["## Memories", "",
            "Clustered unit vectors (`benchmarks/asv/bench_engine.py`: 400 topics under 40"
            " parents, samples from half the topics of each parent). Competitive: chunks of"
            " 250 written until the memory holds at least the target count; plain: exactly"
            " that many vectors.", "",
            "| d | mode | locations | vectors written |", "|---:|---|---:|---:|"]
    out += [f"| {s.w.d} | {s.w.mode} | {s.w.locations} | {s.w.writes} |" for s in setups]

    out += ["", "## Timings", "",
            "Microseconds per call (per query for the batch): median [p10–p90].", "",
            "| d | mode | operation | native | reference | kernel scan | floor"
            " | native / floor | reference / native |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in setups:
        for op in OPS:
            nat = s.cases.get((op, "native"))
            ref = s.cases.get((op, "reference"))
            scan = s.cases.get((op, "scan"))
            flo = s.cases.get((op, "floor"))
            r_floor = f"{nat.stats()[0] / flo.stats()[0]:.2f}x" if nat and flo else "—"
            r_ref = f"{ref.stats()[0] / nat.stats()[0]:.1f}x" if nat and ref else "—"
            out.append(f"| {s.w.d} | {s.w.mode} | {OP_LABELS[op]} | {_cell(nat)} | {_cell(ref)}"
                       f" | {_cell(scan)} | {_cell(flo)} | {r_floor} | {r_ref} |")

    out += ["", "## Batched reads (native, iterative)", "",
            "The last column is the same ratio for the floors alone (`A @ q` per query vs"
            " `Q @ A.T` per query): what a matrix product gains over a matrix-vector"
            " product on this machine, before any per-query work. An exact read scores"
            " every location, so its batch gain cannot exceed the floors' by much: the"
            " single read can only be a little slower than its floor, and the batch"
            " read cannot be faster than its own.", "",
            "| d | mode | single read (µs) | batch-64 per query (µs) | single (queries/s)"
            " | batch-64 (queries/s) | gain | floors' gain |",
            "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for s in setups:
        single, batch = _median(s, "read_iterative", "native"), _median(s, "read_batch64", "native")
        floors = _median(s, "read_iterative", "floor") / _median(s, "read_batch64", "floor")
        out.append(f"| {s.w.d} | {s.w.mode} | {_us(single)} | {_us(batch)} | {1 / single:,.0f}"
                   f" | {1 / batch:,.0f} | {single / batch:.2f}x | {floors:.2f}x |")

    out += ["", "## Stretch: compact activation", "",
            "The same memory with `activation=\"compact\"`: reads scan a float16 copy of the"
            " addresses and re-score exactly every location whose half-precision score is"
            " within the proven error bound of the k-th best, so the activated set is the exact"
            " one by construction (the agreement table counts the probes where it is not)."
            " The stretch asks for a single read faster than the float32 floor with the"
            " activated set exact on at least 99% of queries. Compact activation keeps no"
            " location index, so the indexed exact read (native) can be the faster of the two.",
            "", "| d | mode | read | compact (µs) | native (µs) | floor (µs) | compact / floor"
            " | activated set exact | reached |", "|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for s in setups:
        differs = s.agreement[
            "compact activation: share of probes whose activated set differs from exact"]
        for op in ("read_iterative", "read_fast"):
            c, n, f = (_median(s, op, x) for x in ("compact", "native", "floor"))
            reached = c < f and differs <= 0.01
            out.append(f"| {s.w.d} | {s.w.mode} | {OP_LABELS[op].split(', ')[1]} | {_us(c)}"
                       f" | {_us(n)} | {_us(f)} | {c / f:.2f}x | {100 * (1 - differs):.1f}%"
                       f" | {'yes' if reached else 'no'} |")

    n_pass = sum(r["result"] == "PASS" for r in rows)
    n_fail = sum(r["result"] == "FAIL" for r in rows)
    out += ["", "## Targets", "", "| d | mode | check | value | target | result |",
            "|---:|---|---|---:|---|---|"]
    out += [f"| {r['d']} | {r['mode']} | {r['check']} | {r['value']:.2f}x | {r['target']}"
            f" | {'**FAIL**' if r['result'] == 'FAIL' else r['result']} |" for r in rows]
    out += ["", f"{n_pass} PASS, {n_fail} FAIL"
            + (" (smoke run: tiny memories, the verdicts mean nothing)"
               if preset == "smoke" else ""),
            ""]

    out += ["## Agreement (untimed)", "",
            f"The contenders must compute the same thing: differences up to {AGREE_TOL:g}"
            " (float rounding) are ok.", "",
            "| d | mode | check | value | |", "|---:|---|---|---:|---|"]
    for s in setups:
        out += [f"| {s.w.d} | {s.w.mode} | {k} | {v:.3g} |"
                f" {'ok' if abs(v) <= AGREE_TOL else '**differs**'} |"
                for k, v in s.agreement.items()]

    out += ["", "## How it was measured", "",
            "- Writes: before every timed write (untimed) both memories are put back to the"
            " same snapshot of the filled memory, with spare capacity reserved, so every write"
            " lands in the same state (no growth across repetitions) and none pays a one-off"
            " array doubling. Only what the previous write changed is copied back (its rows,"
            " the scalars; a full restore if it merged), so the arrays stay in place and warm;"
            " the agreement table checks that this gives the snapshot back bit for bit. The"
            " vector written cycles through fresh samples of written topics.",
            "- Reads cycle through fresh samples of written topics; the memories are not"
            " changed by reads. The batch cycles through fixed blocks of 64 of those queries.",
            "- Floor: `addresses @ q` (batch: `Q @ addresses.T`, per query) on the engine's own"
            " float32 address matrix, NumPy/BLAS pinned to one thread; it computes the"
            " activation scores only.",
            "- Kernel scan: `hopmem.engine.memory.top_k_dot(addresses, q, k)`, the kernel's exact"
            " top-k scan alone (activation without the read-out), for context.",
            "- The reference's batch read is not timed: it reads one query at a time, so its"
            " per-query time is its single read.",
            "- Every timed read follows an untimed call of the same case with the next query,"
            " so each contender is timed with its own matrix warm in cache but not on a"
            " repeat of the same query; garbage collection is off while"
            " timing and runs between rounds. Each operation is a pass of its own, its"
            " contenders alternating round-robin (the order rotates every round); the"
            " reference has passes of its own. Interleaved, a reference read or a"
            " writer's state restore evicted the next contender's addresses from cache"
            " and charged it for that.",
            ""]
    return "\n".join(out)


# -- command line --------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare",
                                     description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true",
                       help=f"{PRESETS['quick'][2]} repetitions instead of {PRESETS['full'][2]}")
    group.add_argument("--smoke", action="store_true",
                       help="every code path on tiny memories, a few repetitions (CI)")
    parser.add_argument("--out", type=Path, help="also write the markdown report to this file")
    parser.add_argument("--reps", type=int, help="timed repetitions (overrides the preset)")
    parser.add_argument("--dims", type=lambda s: tuple(int(x) for x in s.split(",")),
                        help="comma-separated dimensions (overrides the preset)")
    parser.add_argument("--locations", type=int, help="locations per memory (overrides the preset)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target FAILs")
    args = parser.parse_args(argv)

    preset = "smoke" if args.smoke else "quick" if args.quick else "full"
    dims, locations, reps = PRESETS[preset]
    dims = args.dims or dims
    locations = args.locations or locations
    reps = args.reps or reps
    if reps < 1 or locations < 1 or any(d < 1 for d in dims):
        parser.error("--reps, --locations and --dims must be positive")

    started = time.perf_counter()
    load_before = os.getloadavg()
    if args.smoke:
        tracked = engine_bench.smoke()
        print(f"asv suite smoke: {len(tracked)} tracked values, all finite", file=sys.stderr)

    # Pin every BLAS pool to one thread for the whole comparison (the reference
    # and the floor use BLAS; the kernel does not).
    with threadpool_limits(limits=1):
        # The thread counts from before any pinning (bench_engine pins at import).
        original_threads = engine_bench.BLAS_LIMITS.get_original_num_threads()
        setups = []
        for d in dims:
            for mode in engine_bench.MODES:
                print(f"building d={d} {mode} ...", file=sys.stderr, flush=True)
                setups.append(build(d, mode, locations, n_probes=2 * BATCH))
        measure(setups, reps, progress=not args.no_progress)
        rows = evaluate(setups)
        text = report(setups, rows, preset=preset, reps=reps, load_before=load_before,
                      load_after=os.getloadavg(), elapsed=time.perf_counter() - started,
                      original_threads=original_threads)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
        print(f"report written to {args.out}", file=sys.stderr)

    if args.smoke:
        expected = {(s.w.d, s.w.mode, op) for s in setups for op in OPS}
        timed = {(s.w.d, s.w.mode, c.op) for s in setups for c in s.cases.values()
                 if len(c.samples) == reps and np.all(np.isfinite(c.samples))}
        missing = expected - timed
        if missing or not all(np.isfinite(r["value"]) for r in rows):
            print(f"smoke FAILED: untimed or non-finite {sorted(missing)}", file=sys.stderr)
            return 1
        differ = [f"d={s.w.d} {s.w.mode}: {k} = {v:.3g}" for s in setups
                  for k, v in s.agreement.items() if not abs(v) <= AGREE_TOL]
        if differ:
            print("smoke FAILED: native and reference disagree: " + "; ".join(differ),
                  file=sys.stderr)
            return 1
        print(f"smoke ok in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        return 0
    if args.strict and any(r["result"] == "FAIL" for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
