"""Paired A/B of two builds of the kernel, in one process: is a kernel change faster?

    PYTHONPATH=. .venv/bin/python -m benchmarks.ab_kernel OLD_KERNEL_SO [--rounds N]

OLD_KERNEL_SO is another build of ``hopmem/engine/_kernel*.so`` (for instance built
from an earlier commit in a ``git worktree``). It is imported next to the
working tree's kernel under another package name, and both run the same
operations on the same memories, alternating call by call (the order flips
every other call), so a change of the shared host's speed hits both alike.
On a noisy 2-core VM where two consecutive runs of one build differ by 20%,
this resolves differences of 2-3%.

Reported per operation: the median of new/old time ratios over all pairs,
and each build's median time. The operations:

- batches of 100 competitive writes at d = 384 on the store benchmark's data
  (700 -> 1,400 locations), on two copies of one memory, which must end bit
  for bit equal;
- single iterative and fast reads and batches of 64 at d = 128 and 384, both
  modes, on the comparison's memories (``bench_engine.workload``), whose
  results must be bit for bit equal.

The two builds must share the state layout (``hopmem.engine._state.State``) and the
functions called here (``write``, ``read_one``, ``read_results``); a change
to those is not an A/B of the kernel.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.asv import bench_engine  # pins BLAS to one thread first
from benchmarks.store_bench import Data
from hopmem import Memory
from hopmem.engine import _kernel as new_kernel


def load_old(so_path: str) -> Any:
    """Import another build of the kernel as ``hopmem_ab_old._kernel``."""
    so = Path(so_path).resolve()
    if not so.is_file() or not so.name.startswith("_kernel"):
        raise SystemExit(f"{so_path}: expected a built _kernel*.so")
    root = Path(tempfile.mkdtemp(prefix="hopmem-ab-"))
    package = root / "hopmem_ab_old"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(so, package / so.name)
    sys.path.insert(0, str(root))
    module = importlib.import_module("hopmem_ab_old._kernel")
    if module is new_kernel:  # pragma: no cover - a path mix-up
        raise SystemExit("the old kernel resolved to the working tree's")
    return module


def paired(old_call: Callable[[], Any], new_call: Callable[[], Any], flip: bool
           ) -> tuple[float, float, Any, Any]:
    """Time one call of each, in the order ``flip`` says; returns (old s, new s, results)."""
    order = ((new_call, 1), (old_call, 0)) if flip else ((old_call, 0), (new_call, 1))
    seconds, results = [0.0, 0.0], [None, None]
    for call, slot in order:
        t = time.perf_counter()
        results[slot] = call()
        seconds[slot] = time.perf_counter() - t
    return seconds[0], seconds[1], results[0], results[1]


class Tally:
    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[float, float]]] = {}

    def add(self, what: str, old_s: float, new_s: float) -> None:
        self.rows.setdefault(what, []).append((old_s, new_s))

    def print(self) -> None:
        print(f"{'operation':<44} {'pairs':>6} {'new/old (median)':>17} {'old µs':>9} {'new µs':>9}")
        for what, pairs in self.rows.items():
            ratio = statistics.median(n / o for o, n in pairs)
            old_us = statistics.median(o for o, _ in pairs) * 1e6
            new_us = statistics.median(n for _, n in pairs) * 1e6
            print(f"{what:<44} {len(pairs):>6} {ratio:>17.3f} {old_us:>9.1f} {new_us:>9.1f}")


def ab_writes(old: Any, tally: Tally, rounds: int) -> None:
    data = Data(384)
    base = Memory(384)
    for _ in range(20):
        base.write(data(100))
    batches = [data(100) for _ in range(30)]
    snap = base.snapshot()
    for r in range(rounds):
        a = Memory.from_config(base.config, snap)
        b = Memory.from_config(base.config, snap)
        for i, X in enumerate(batches):
            old_s, new_s, _, _ = paired(lambda: old.write(a._state, base.config, X),
                                        lambda: new_kernel.write(b._state, base.config, X),
                                        (i + r) % 2 == 1)
            tally.add("write, batch of 100 (d 384, competitive)", old_s, new_s)
        if a.snapshot() != b.snapshot():
            raise SystemExit("the two kernels' writes differ: not an A/B of the same computation")


def ab_reads(old: Any, tally: Tally, rounds: int) -> None:
    for d in bench_engine.DIMS:
        for mode in bench_engine.MODES:
            w = bench_engine.workload(d, mode, n_probes=256, n_inputs=16, n_noisy=1, n_auc=1)
            mem = w.memory("native")
            mem.read(w.probes[0])  # builds the location index where one is due
            state, cfg = mem._state, mem.config
            probes = np.ascontiguousarray(w.probes, dtype=np.float32)
            blocks = [probes[i:i + 64] for i in range(0, len(probes) - 63, 64)]

            def same_reads(what: str, call: Callable[[Any], Any], flip: bool) -> None:
                old_s, new_s, ro, rn = paired(lambda: call(old), lambda: call(new_kernel), flip)
                if not np.array_equal(ro, rn):
                    raise SystemExit(f"{what} differs between the builds")
                tally.add(what, old_s, new_s)

            for r in range(rounds):
                for fast, name in ((False, "iterative"), (True, "fast")):
                    for i, q in enumerate(probes):
                        same_reads(f"read {name} (d {d}, {mode})",
                                   lambda k: k.read_one(state, cfg, q, fast), (i + r) % 2 == 1)
                for i, Q in enumerate(blocks):
                    same_reads(f"read, batch of 64 per call (d {d}, {mode})",
                               lambda k: k.read_results(state, cfg, Q, False), (i + r) % 2 == 1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="the other build's _kernel*.so")
    ap.add_argument("--rounds", type=int, default=6, help="passes over the inputs (default 6)")
    ap.add_argument("--only", choices=("writes", "reads"), default=None)
    ap.add_argument("--threads", type=int, nargs=2, metavar=("OLD", "NEW"), default=None,
                    help="scan threads for each build (builds with set_threads only)")
    args = ap.parse_args(argv)
    old = load_old(args.old)
    if args.threads:
        for kernel, n in zip((old, new_kernel), args.threads):
            if hasattr(kernel, "set_threads"):
                kernel.set_threads(n)
            elif n != 1:
                raise SystemExit("--threads: the old build has no helper threads (use 1)")
    tally = Tally()
    if args.only in (None, "writes"):
        ab_writes(old, tally, args.rounds)
    if args.only in (None, "reads"):
        ab_reads(old, tally, args.rounds)
    tally.print()


if __name__ == "__main__":
    main()
