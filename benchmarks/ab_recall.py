"""A/B of agent recall latency: another source tree's hopmem against this one's, on the same memory file.

Usage::

    python -m benchmarks.ab_recall OTHER_TREE [--entries 10000] [--rounds 5] [--repeats 3]

``OTHER_TREE`` is a checkout of hopmem with its kernel built in place (e.g.
``git worktree add ../base BASE && (cd ../base && python setup.py build_ext
--inplace)``). One memory file of ``--entries`` template statements (the
evaluation's latency filler, hashing encoder: encoder time is not what is
compared) is written once; then each round runs one process per tree,
alternating which goes first, and each process opens the file, warms up and
times ``recall(record=False)`` (``retrieve_ms``: encoder excluded) of the
project's development questions and the asv suite's queries in every mode,
``--repeats`` times. Reported: per tree and mode the median over rounds of
each process's median, and the paired ratio (this tree / other) per round;
the same for the CPU time per recall (``time.process_time``, encoder
included), which the other programs on a shared machine disturb less than
the wall time. Alternating cancels the host's drift; on a shared machine read
the ratio, not the absolute figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
MODES = ("hybrid", "associative", "keyword")


def _memory(path: str):
    from hopmem.agent import AgentMemory

    try:
        from hopmem.text.encoders import HashingEncoder
    except ImportError:  # a tree from before the layout in layers (hopmem.text)
        from hopmem.encoders import HashingEncoder  # type: ignore[no-redef]

    return AgentMemory.open(path, encoder=HashingEncoder(384), namespace="ab", clock=lambda: 1_000_000.0)


def build(path: str, entries: int) -> None:
    from benchmarks.agent_eval.run import filler_texts, load

    mem = _memory(path)
    turns = [t["text"] for s in load("dev")["sessions"] for t in s["turns"]]
    mem.remember_many(turns + filler_texts(max(0, entries - len(turns))), progress=False)
    mem.close()


def measure(path: str, repeats: int) -> dict[str, float]:
    from benchmarks.agent_eval.run import load
    from benchmarks.asv.bench_agent import QUERIES

    questions = [q["question"] for q in load("dev")["questions"]] + list(QUERIES)
    mem = _memory(path)
    for q in questions[:5]:
        mem.recall(q, record=False)
    out = {}
    for mode in MODES:
        cpu = time.process_time()
        samples = [mem.recall(q, mode=mode, record=False).timings["retrieve_ms"]
                   for _ in range(repeats) for q in questions]
        out[mode] = statistics.median(samples)
        out[f"{mode} cpu"] = (time.process_time() - cpu) * 1e3 / len(samples)
    mem.close()
    return out


def _run(tree: Path, path: str, repeats: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    # this file's measure(), with hopmem (and the evaluation's questions) imported from ``tree``
    code = (f"import json, runpy; measure = runpy.run_path({__file__!r}, run_name='ab')['measure']; "
            f"print(json.dumps(measure({path!r}, {repeats})))")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", type=Path)
    parser.add_argument("--entries", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    trees = {"other": args.other.resolve(), "this": HERE}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ab.db")
        t0 = time.perf_counter()
        build(path, args.entries)
        print(f"memory of {args.entries} entries written in {time.perf_counter() - t0:.0f} s", flush=True)
        runs: dict[str, list[dict[str, float]]] = {"other": [], "this": []}
        for r in range(args.rounds):
            for name in (("other", "this") if r % 2 == 0 else ("this", "other")):
                runs[name].append(_run(trees[name], path, args.repeats))
            print(f"round {r + 1}: " + ", ".join(f"{m} {runs['this'][-1][m] / runs['other'][-1][m]:.3f}"
                                                 for m in MODES) + " (this / other)", flush=True)
    print(f"\n{args.rounds} rounds, {args.entries} entries, load {' / '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          "recall_ms: median of the processes' median retrieve_ms; cpu_ms: CPU time per recall (encoder "
          "included), the median over processes")
    print("| mode | other | this | this / other, paired (median [min, max]) |\n|---|---|---|---|")
    for m in (*MODES, *(f"{m} cpu" for m in MODES)):
        ratios = [t[m] / o[m] for t, o in zip(runs["this"], runs["other"])]
        print(f"| {m.replace(' cpu', ' (cpu_ms)') if m.endswith('cpu') else m + ' (recall_ms)'} | "
              f"{statistics.median(o[m] for o in runs['other']):.3f} | "
              f"{statistics.median(t[m] for t in runs['this']):.3f} | {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}, {max(ratios):.3f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
