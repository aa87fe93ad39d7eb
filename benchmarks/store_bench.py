"""Benchmark of the durable store (hopmem.store): prints one table of medians.

    PYTHONPATH=. .venv/bin/python benchmarks/store_bench.py [--quick] [--reopen-writes N]

Rows:

- single durable write (one vector per ``write``, committed) at d = 384 and
  d = 128, without and with metadata, and with ``synchronous="full"``;
- batches of 100 vectors (vectors per second from the median batch), and
  at d = 384 a sustained run of batches (total vectors over total time,
  location checkpoints included) and batches with the kernel on one thread
  against its default thread count, interleaved pair by pair;
- reopening a collection of N written vectors (default 100,000; open +
  ``db.collection``), after a clean close and after a simulated crash (the
  files copied while open, so the journal tail since the last checkpoint must
  be replayed), plus the first document query after a reopen, which loads the
  document indexes; and the same in fresh processes (nothing of the file in
  memory yet, as after a restart);
- disk bytes per written vector, with a breakdown;
- the design choice: in bare SQLite, a journal insert per write against
  updating the k touched location rows per write (``--design-only``).

Each timing row shows the wall-clock median and the CPU-time median of the
process (all threads: the kernel's helper threads, which score a batch
write's blocks, spin while the write holds them, so a batch's CPU time can
exceed its wall time), and for writes the in-memory engine's own wall-clock
median on the same vectors (run just before, from the same state). The
header gives the kernel's thread count (``HOPMEM_THREADS``). The host's
speed can move by 15% or more between those two phases, so batch rows also
note, per durable write, the engine's own time inside it and the rest
(SQLite, CRC, validation): the store's overhead measured at the same moment.
HeatherDB's published figures (d = 128) are shown as a reference row; they
were measured on other hardware.

Data: unit vectors around 200 random centers (cosine to the center ~0.9),
the collection's default config, pre-filled with 2,000 vectors before timing
writes. The engine's cost grows with the number of locations (shown).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

_BLAS = threadpool_limits(limits=1)  # no BLAS pool on single-query paths

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import hopmem  # noqa: E402
from hopmem import Memory  # noqa: E402

HEATHERDB = {"single_ms": 3.7, "batch_ms_per_vector": 0.12, "dim": 128}


class Data:
    """Clustered unit vectors: normalize(center + noise), cos(x, center) ~ 0.9."""

    def __init__(self, dim: int, seed: int = 0, centers: int = 200) -> None:
        rng = np.random.default_rng(seed)
        C = rng.standard_normal((centers, dim))
        self.centers = (C / np.linalg.norm(C, axis=1, keepdims=True)).astype(np.float32)
        self.rng = np.random.default_rng(seed + 1)
        self.dim = dim

    def __call__(self, n: int) -> np.ndarray:
        C = self.centers[self.rng.integers(0, len(self.centers), n)]
        X = C + 0.5 * self.rng.standard_normal((n, self.dim)) / np.sqrt(self.dim)
        return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@dataclass
class Row:
    what: str
    dim: int | str
    locations: int | str
    wall: str
    cpu: str
    engine: str
    note: str = ""


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def engine_times(state_of, batches: list[np.ndarray]) -> list[float]:
    """Wall time of the in-memory engine alone on the same batches, from the same state.

    Wall, not CPU: the kernel's helper threads spin while a batch write holds
    them, so the process's CPU time counts them busy for the whole write.
    """
    mem = Memory.from_config(state_of.config, state_of.snapshot())
    out = []
    for X in batches:
        w = time.perf_counter()
        with mem.exclusive():  # as the store applies a write: under the lock, no rollback copy
            mem.write_exclusive(X)
        out.append(time.perf_counter() - w)
    return out


def bench_writes(tmp: str, dim: int, singles: int, batches: int, sync: str = "normal",
                 with_full: bool = False) -> list[Row]:
    rows = []
    data = Data(dim)
    path = os.path.join(tmp, f"w{dim}-{sync}.hopmem")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    with hopmem.open(path, dim=dim, synchronous=sync) as db:
        coll = db.collection("bench")
        for _ in range(20):
            coll.write(data(100))
        for meta in (False, True):
            if sync == "full" and meta:
                continue
            xs = [data(1)[0] for _ in range(singles)]
            eng = engine_times(coll, [x[None] for x in xs])
            walls, cpus = [], []
            for i, x in enumerate(xs):
                w, c = timed(lambda: coll.write(x, metadata={"i": i} if meta else None))
                walls.append(w)
                cpus.append(c)
            rows.append(Row(
                f"single durable write{', metadata' if meta else ''}"
                f"{', synchronous=full' if sync == 'full' else ''}",
                dim, len(coll), f"{med(walls) * 1e3:.3f} ms", f"{med(cpus) * 1e3:.3f} ms",
                f"{med(eng) * 1e3:.3f} ms",
                f"p90 wall {np.percentile(walls, 90) * 1e3:.2f} ms"))
            if sync == "full":
                continue
            Xs = [data(100) for _ in range(batches)]
            eng = engine_times(coll, Xs)
            walls, cpus, inside = [], [], []
            for X in Xs:
                md = [{"i": j} for j in range(100)] if meta else None
                before = coll._replay_s  # the engine's wall time inside each write, as the store records it
                w, c = timed(lambda: coll.write(X, metadata=md))
                walls.append(w)
                cpus.append(c)
                inside.append(coll._replay_s - before)
            rest = med([w - e for w, e in zip(walls, inside)])
            rows.append(Row(
                f"batch of 100{', metadata' if meta else ''}", dim, len(coll),
                f"{100 / med(walls):,.0f} vec/s", f"{100 / med(cpus):,.0f} vec/s",
                f"{100 / med(eng):,.0f} vec/s",
                f"{med(walls) * 1e3 / 100:.3f} ms/vec wall; in the write: engine "
                f"{med(inside) * 1e3:.2f} ms, the rest {rest * 1e3:.2f} ms"))
    if with_full:
        rows += bench_writes(tmp, dim, singles, 0, sync="full")
    return rows


def bench_threads(tmp: str, dim: int, batches: int) -> Row | None:
    """Durable batches of 100 with the kernel on one thread and on its default, interleaved.

    One collection, prefilled like the batch rows'; each pair of batches is
    written once with ``set_threads(1)`` and once with the default, the order
    flipping every pair, so the host's speed changes hit both alike (the
    state is the same bits either way). None when the default is one thread.
    """
    default = hopmem.get_threads()
    if default == 1:
        return None
    data = Data(dim, seed=2)
    path = os.path.join(tmp, f"threads{dim}.hopmem")
    one, many = [], []
    with hopmem.open(path, dim=dim) as db:
        coll = db.collection("bench")
        for _ in range(20):
            coll.write(data(100))
        try:
            for i in range(batches):
                for n in ((1, default) if i % 2 else (default, 1)):
                    hopmem.set_threads(n)
                    X = data(100)
                    w = time.perf_counter()
                    coll.write(X)
                    (one if n == 1 else many).append(time.perf_counter() - w)
        finally:
            hopmem.set_threads(default)
        locations = len(coll)
    ratio = med([m / o for o, m in zip(one, many)])
    return Row(f"batch of 100, 1 kernel thread / {default} (interleaved)", dim,
               f"{locations}", f"{100 / med(one):,.0f} vec/s", "", "",
               f"{default} threads: {100 / med(many):,.0f} vec/s; paired time ratio "
               f"{default}/1 = {ratio:.2f}")


def bench_sustained(tmp: str, dim: int, batches: int) -> Row:
    """Batches of 100 back to back for a while: total vectors over total time.

    The batch rows above are medians, so they leave out the location
    checkpoints the store writes now and then (the default policy: when
    replaying the journal since the last one would take longer than
    max(0.25 s, 2x a checkpoint)) and the WAL's own checkpoints; this row
    includes everything, as a long import would see it.
    """
    data = Data(dim, seed=1)
    path = os.path.join(tmp, f"sustained{dim}.hopmem")
    with hopmem.open(path, dim=dim) as db:
        coll = db.collection("bench")
        for _ in range(20):
            coll.write(data(100))
        before = len(coll)
        Xs = [data(100) for _ in range(batches)]
        eng = engine_times(coll, Xs)
        taken = 0
        checkpoint = coll._checkpoint

        def counted() -> None:
            nonlocal taken
            taken += 1
            checkpoint()

        coll._checkpoint = counted  # type: ignore[method-assign]
        w0, c0 = time.perf_counter(), time.process_time()
        for X in Xs:
            coll.write(X)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        n = 100 * batches
        return Row(f"batches of 100, sustained ({batches} in a row)", dim,
                   f"{before:,} -> {len(coll):,}", f"{n / wall:,.0f} vec/s",
                   f"{n / cpu:,.0f} vec/s", f"{n / sum(eng):,.0f} vec/s",
                   f"{taken} location checkpoint(s) included")


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))


# Run by a fresh interpreter (see fresh_reopen): nothing of the file is in this
# process's memory yet, as after a restart. Prints the timings as JSON.
_FRESH_REOPEN = """
import json, sys, time
import numpy as np
import hopmem
path, name, dim = sys.argv[1], sys.argv[2], int(sys.argv[3])
q = np.random.default_rng(7).standard_normal(dim).astype(np.float32)
t0 = time.perf_counter()
db = hopmem.open(path)
coll = db.collection(name)
t1 = time.perf_counter()
coll.read(q)
t2 = time.perf_counter()
coll.resolve(q, limit=10, mode="indexed")
t3 = time.perf_counter()
print(json.dumps({"reopen": t1 - t0, "read": t2 - t1, "query": t3 - t2}))
db.close()
"""


def drop_page_cache() -> bool:
    """Empty the OS page cache (Linux, as root), as after a reboot; False if not allowed."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def fresh_reopen(path: str, name: str, dim: int, runs: int = 3,
                 cold: bool = False) -> dict[str, float]:
    """Medians over ``runs`` fresh processes: open + collection(), then the first
    engine read, then the first indexed document query (which loads the documents'
    vectors and posting lists). ``cold``: empty the OS page cache before each."""
    out: dict[str, list[float]] = {}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))
    for _ in range(runs):
        if cold:
            drop_page_cache()
        done = subprocess.run([sys.executable, "-c", _FRESH_REOPEN, path, name, str(dim)],
                              capture_output=True, text=True, check=True, env=env)
        for key, value in json.loads(done.stdout.strip().splitlines()[-1]).items():
            out.setdefault(key, []).append(value)
    return {key: med(values) for key, values in out.items()}


def bench_reopen(tmp: str, dim: int, writes: int, batch: int = 1000,
                 reuse: bool = False) -> tuple[list[Row], list[str]]:
    data = Data(dim, seed=5)
    path = os.path.join(tmp, f"reopen-{writes}.hopmem")
    crash = os.path.join(tmp, "crash.hopmem")
    notes = []
    if not (reuse and os.path.exists(path)):
        if os.path.exists(path):
            os.unlink(path)
        t0 = time.perf_counter()
        checkpoints = 0
        with hopmem.open(path, dim=dim) as db:
            coll = db.collection("big")
            done = 0
            while done < writes:
                n = min(batch, writes - done)
                coll.write(data(n), metadata=[{"n": done + j} for j in range(n)])
                done += n
                checkpoints += coll._vectors_since == 0
        notes.append(f"build: {writes:,} vectors in batches of {batch} with metadata took "
                     f"{time.perf_counter() - t0:.1f} s wall, {checkpoints} checkpoints taken")
    with hopmem.open(path) as db:
        coll = db.collection("big")
        state = coll.snapshot()
        locations = len(coll)
        writes = coll.stats().writes

    rows = []
    walls, cpus = [], []
    for _ in range(3):
        # time only open + collection(), not the equality check or close
        w, c = time.perf_counter(), time.process_time()
        db = hopmem.open(path)
        coll = db.collection("big")
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
        assert coll.snapshot() == state
        w1, c1 = timed(lambda: coll.resolve(data(1)[0], limit=10, mode="indexed"))
        w2, c2 = timed(lambda: coll.resolve(data(1)[0], limit=10, mode="indexed"))
        w0, c0 = timed(lambda: coll.resolve(data(1)[0], limit=10, mode="exact"))
        w3, c3 = timed(lambda: coll.resolve(data(1)[0], limit=10, mode="exact"))
        db.close()
    rows.append(Row(f"reopen after {writes:,} writes (clean close)", dim, locations,
                    f"{med(walls):.3f} s", f"{med(cpus):.3f} s", "",
                    "open + collection(): checkpoint load, nothing to replay"))
    rows.append(Row("first document query after reopen, same process", dim, locations,
                    f"{w1:.3f} s", f"{c1:.3f} s", "",
                    f"loads {writes:,} document vectors + posting lists, once"))
    rows.append(Row("first exact document query", dim, locations,
                    f"{w0:.3f} s", f"{c0:.3f} s", "",
                    "makes the float16 copy of the document vectors, once"))
    rows.append(Row("document query, indexed / exact", dim, locations,
                    f"{w2 * 1e3:.1f} / {w3 * 1e3:.1f} ms", f"{c2 * 1e3:.1f} / {c3 * 1e3:.1f} ms",
                    "", f"n=10 over {writes:,} documents"))
    fresh = fresh_reopen(path, "big", dim)
    rows.append(Row("reopen in a fresh process", dim, locations, f"{fresh['reopen']:.3f} s", "",
                    "", "open + collection() after a restart (median of 3 processes)"))
    rows.append(Row("... then the first read, first document query", dim, locations,
                    f"{fresh['read']:.3f} / {fresh['query']:.3f} s", "", "",
                    "the read builds the location index; the query loads the document indexes"))
    if drop_page_cache():  # as root on Linux: a restart after a reboot, files read from disk
        cold = fresh_reopen(path, "big", dim, cold=True)
        rows.append(Row("reopen in a fresh process, page cache dropped", dim, locations,
                        f"{cold['reopen']:.3f} s", "", "", "the file read from disk"))
        rows.append(Row("... then the first read, first document query", dim, locations,
                        f"{cold['read']:.3f} / {cold['query']:.3f} s", "", "",
                        "the query reads every journal entry's vectors from disk"))
    else:
        notes.append("the page cache could not be dropped (needs root on Linux): no cold reopen rows")

    # A crash image: 10 batches of 100 written with checkpoints off, files copied while open.
    tail = 10
    work = os.path.join(tmp, "work.hopmem")
    shutil.copyfile(path, work)  # the big file stays as built (clean close: no -wal)
    with hopmem.open(work, replay_budget=1e9) as db:
        coll = db.collection("big")
        for _ in range(tail):
            coll.write(data(100), metadata=[{"tail": j} for j in range(100)])
        for s in ("", "-wal"):
            if os.path.exists(work + s):
                shutil.copyfile(work + s, crash + s)
        coll.checkpoint()
        ckpt_s = coll._checkpoint_s
    walls, cpus = [], []
    for i in range(3):
        copy = os.path.join(tmp, f"crash{i}.hopmem")
        for s in ("", "-wal"):
            if os.path.exists(crash + s):
                shutil.copyfile(crash + s, copy + s)
        w, c = time.perf_counter(), time.process_time()
        db = hopmem.open(copy, replay_budget=1e9)  # measure the replay, do not checkpoint
        db.collection("big")
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
        db.close()
        for s in ("", "-wal", "-shm", ".lock"):
            if os.path.exists(copy + s):
                os.unlink(copy + s)
    rows.append(Row("reopen after a crash", dim, locations + 0,
                    f"{med(walls):.3f} s", f"{med(cpus):.3f} s", "",
                    f"replays {tail} entries x 100 vectors after the checkpoint"))
    if ckpt_s is not None:
        notes.append(f"one checkpoint of {locations:,} locations took {ckpt_s:.2f} s wall; the "
                     f"policy lets at most max(0.25 s, 2 x that) of engine time pile up for replay")

    # Disk bytes per written vector (the big file, as built).
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    total = os.path.getsize(path)
    n_vec = conn.execute("SELECT sum(n) FROM journal").fetchone()[0]
    journal_b = conn.execute("SELECT sum(length(vectors)) FROM journal").fetchone()[0] or 0
    docs_b = conn.execute("SELECT sum(length(metadata) + length(locations)) FROM documents"
                          ).fetchone()[0] or 0
    ckpt_b = conn.execute("SELECT sum(length(ids) + length(addresses) + length(counters) + "
                          "length(weights)) FROM checkpoint_parts").fetchone()[0] or 0
    free = conn.execute("PRAGMA freelist_count").fetchone()[0] * conn.execute(
        "PRAGMA page_size").fetchone()[0]
    conn.close()
    rows.append(Row("disk bytes per written vector, metadata", dim, locations,
                    f"{total / n_vec:,.0f} B", "", "",
                    f"file {total / 1e6:.1f} MB for {n_vec:,} vectors"))
    notes.append(
        f"bytes per vector: journal vectors {journal_b / n_vec:,.0f} B (= 4 x d), documents "
        f"(metadata + posting list) {docs_b / n_vec:,.0f} B, checkpoint {ckpt_b / n_vec:,.0f} B "
        f"({ckpt_b / 1e6:.1f} MB = {locations:,} locations x d x 12 B; one per collection, "
        f"overwritten), free pages {free / n_vec:,.0f} B, SQLite overhead "
        f"{(total - journal_b - docs_b - ckpt_b - free) / n_vec:,.0f} B")
    return rows, notes


def bytes_without_metadata(tmp: str, dim: int, n: int = 20_000) -> Row:
    data = Data(dim, seed=9)
    path = os.path.join(tmp, "plainbytes.hopmem")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    with hopmem.open(path, dim=dim) as db:
        coll = db.collection("c")
        for _ in range(n // 100):
            coll.write(data(100))
        locations = len(coll)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ckpt_b = conn.execute("SELECT sum(length(ids) + length(addresses) + length(counters) + "
                          "length(weights)) FROM checkpoint_parts").fetchone()[0] or 0
    conn.close()
    total = os.path.getsize(path)
    return Row("disk bytes per written vector, no metadata", dim, locations,
               f"{total / n:,.0f} B", "", "",
               f"{(total - ckpt_b) / n:,.0f} B without the checkpoint; {n:,} vectors in batches of 100")


def design_comparison(tmp: str, dim: int = 384, locations: int = 2000, k: int = 20,
                      writes: int = 300) -> list[Row]:
    """The two durable designs of the issue, in bare SQLite, per single-vector write.

    journal: INSERT one row with the input vector (what hopmem.store does).
    rows: UPDATE the k touched location rows (address float32 + counter float64)
    and a scalar row, in one transaction (the alternative). WAL bytes are the WAL
    file's growth with auto-checkpointing off.
    """
    rng = np.random.default_rng(0)
    rows = []
    for design in ("journal", "rows"):
        path = os.path.join(tmp, f"design-{design}.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE journal (jid INTEGER PRIMARY KEY, cid INTEGER, seq INTEGER, "
                     "vectors BLOB, UNIQUE (cid, seq))")
        conn.execute("CREATE TABLE locations (cid INTEGER, id INTEGER, address BLOB, counter BLOB, "
                     "weight REAL, PRIMARY KEY (cid, id))")
        conn.execute("CREATE TABLE scalars (cid INTEGER PRIMARY KEY, eta REAL, writes INTEGER)")
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO locations VALUES (1, ?, ?, ?, 1.0)", (
            (i, rng.standard_normal(dim).astype("<f4").tobytes(),
             rng.standard_normal(dim).astype("<f8").tobytes()) for i in range(locations)))
        conn.execute("INSERT INTO scalars VALUES (1, 0.01, 0)")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        x = rng.standard_normal(dim).astype("<f4").tobytes()
        addr = rng.standard_normal(dim).astype("<f4").tobytes()
        cnt = rng.standard_normal(dim).astype("<f8").tobytes()
        walls, cpus = [], []
        for seq in range(1, writes + 1):
            touched = rng.choice(locations, k, replace=False).tolist()
            w, c = time.perf_counter(), time.process_time()
            conn.execute("BEGIN IMMEDIATE")
            if design == "journal":
                conn.execute("INSERT INTO journal (cid, seq, vectors) VALUES (1, ?, ?)", (seq, x))
            else:
                conn.executemany("UPDATE locations SET address = ?, counter = ?, weight = weight + 1 "
                                 "WHERE cid = 1 AND id = ?", [(addr, cnt, t) for t in touched])
                conn.execute("UPDATE scalars SET eta = eta * 0.9999, writes = writes + 1 WHERE cid = 1")
            conn.execute("COMMIT")
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
        wal = os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0
        conn.close()
        rows.append(Row(f"design: {design} (bare SQLite, per write)", dim, locations,
                        f"{med(walls) * 1e3:.3f} ms", f"{med(cpus) * 1e3:.3f} ms", "",
                        f"{wal / writes / 1024:,.1f} KiB of WAL per write"
                        + (f" ({k} rows updated)" if design == "rows" else "")))
    return rows


def print_table(rows: list[Row]) -> None:
    head = Row("measure", "d", "locations", "wall (median)", "cpu (median)", "engine alone", "note")
    cols = [head] + rows
    widths = [max(len(str(getattr(r, f))) for r in cols) for f in Row.__dataclass_fields__]
    for i, r in enumerate(cols):
        print("  ".join(str(getattr(r, f)).ljust(w) for f, w in zip(Row.__dataclass_fields__, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, 20,000-vector reopen")
    ap.add_argument("--reopen-writes", type=int, default=None)
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep the files")
    ap.add_argument("--reuse", action="store_true",
                    help="with --keep: reuse the big collection built by an earlier run")
    ap.add_argument("--design-only", action="store_true",
                    help="only the journal-versus-row-updates comparison")
    args = ap.parse_args(argv)
    singles, batches = (100, 10) if args.quick else (400, 30)
    writes = args.reopen_writes or (20_000 if args.quick else 100_000)
    tmp = args.keep or tempfile.mkdtemp(prefix="hopmem-store-bench-")
    os.makedirs(tmp, exist_ok=True)
    try:
        if args.design_only:
            print_table(design_comparison(tmp))
            return
        rows = design_comparison(tmp)
        rows += bench_writes(tmp, 384, singles, batches, with_full=True)
        threads_row = bench_threads(tmp, 384, batches)
        if threads_row is not None:
            rows.append(threads_row)
        rows.append(bench_sustained(tmp, 384, 60 if args.quick else 200))
        rows += bench_writes(tmp, 128, singles, batches)
        rows.append(Row("HeatherDB (published)", 128, "", f"{HEATHERDB['single_ms']} ms single",
                        "", "", f"{HEATHERDB['batch_ms_per_vector']} ms/vec in batches of 100 "
                                f"= {1 / HEATHERDB['batch_ms_per_vector'] * 1e3:,.0f} vec/s"))
        reopen_rows, notes = bench_reopen(tmp, 384, writes, reuse=args.reuse)
        rows += reopen_rows
        rows.append(bytes_without_metadata(tmp, 384, 10_000 if args.quick else 20_000))
        print(f"hopmem {hopmem.__version__}, SQLite {sqlite3.sqlite_version}, "
              f"{os.cpu_count()} CPUs, kernel threads {hopmem.get_threads()}, "
              f"load average {os.getloadavg()[0]:.1f}")
        print_table(rows)
        for note in notes:
            print("note:", note)
        print("targets: single durable write at d=384 < 1 ms (median); batches of 100 >= 20,000 "
              "vec/s; reopen after 100,000 writes < 1 s")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
