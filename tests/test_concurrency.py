"""Threads: concurrent reads equal serial ones; reads during writes stay sane.

The kernel releases the GIL, so these tests really do overlap reads with each
other and with writes on a multi-core machine.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from hopmem import Memory

DIM = 48


def data(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((6, DIM))
    return (centers[rng.integers(0, 6, n)] + 0.4 * rng.standard_normal((n, DIM))).astype(np.float32)


def make_memory(**overrides) -> Memory:
    cfg = dict(k=8, beta=6.0, tau_overload=4.0, max_locations=300, seed=1)
    cfg.update(overrides)
    return Memory(DIM, **cfg)


def one_read(mem: Memory, job):
    kind, strategy, q = job
    if kind == "read":
        return mem.read(q, strategy)
    if kind == "analyze":
        traces = mem.analyze(q, strategy)
        traces = traces if isinstance(traces, list) else [traces]
        return np.stack([t.result for t in traces]), [t.activated for t in traces]
    return mem.attention(q, 0.2).result


def jobs(queries: np.ndarray) -> list:
    out = []
    for i in range(0, len(queries), 4):
        for strategy in ("fast", "iterative"):
            out.append(("read", strategy, queries[i]))          # single
            out.append(("read", strategy, queries[i:i + 4]))    # batched
            out.append(("analyze", strategy, queries[i + 1]))
        out.append(("attention", None, queries[i + 2]))
    return out


def same(a, b) -> bool:
    if isinstance(a, tuple):
        return np.array_equal(a[0], b[0]) and all(np.array_equal(x, y) for x, y in zip(a[1], b[1]))
    return np.array_equal(a, b)


@pytest.mark.parametrize("threads", [4, 8])
def test_concurrent_reads_equal_serial_reads(threads):
    mem = make_memory()
    mem.write(data(0, 400))
    work = jobs(data(1, 160)) * 2
    serial = [one_read(mem, job) for job in work]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        parallel = list(pool.map(lambda job: one_read(mem, job), work))
    mismatches = [i for i, (a, b) in enumerate(zip(serial, parallel)) if not same(a, b)]
    assert mismatches == []


def test_concurrent_reads_of_several_memories():
    # Two memories in one pool: nothing (scratch, config, state) leaks between them.
    a, b = make_memory(seed=1), make_memory(mode="plain", k=5)
    a.write(data(2, 200))
    b.write(data(3, 120))
    work = [(mem, job) for job in jobs(data(4, 80)) for mem in (a, b)]
    serial = [one_read(mem, job) for mem, job in work]
    with ThreadPoolExecutor(max_workers=6) as pool:
        parallel = list(pool.map(lambda mj: one_read(*mj), work))
    assert all(same(x, y) for x, y in zip(serial, parallel))


def test_reads_during_writes_stay_sane_and_writes_are_serialisable():
    initial, stream = data(5, 60), data(6, 600)
    chunks = np.array_split(stream, 60)  # many small writes: many interleavings
    mem = make_memory()
    mem.write(initial)
    queries = data(7, 32)
    stop = threading.Event()
    start = threading.Barrier(5)  # the writer starts once every reader is running
    problems: list[str] = []
    observed: list = [[] for _ in range(4)]  # (query index, strategy, result) per reader
    states = []  # every state between two writes, as the writer left it

    def reader(worker: int) -> None:
        start.wait()
        i = worker
        while not stop.is_set() or len(observed[worker]) < 40:  # until the writer is done
            qi, strategy = i % len(queries), ("fast" if i % 2 else "iterative")
            out = mem.read(queries[qi], strategy)
            observed[worker].append((qi, strategy, out))
            batch = mem.read(queries[:5], strategy)
            t = mem.analyze(queries[qi], strategy)
            if not (out.shape == (DIM,) and out.dtype == np.float32 and batch.shape == (5, DIM)
                    and np.isfinite(out).all() and np.isfinite(batch).all()
                    and np.isfinite(t.result).all() and np.isfinite(t.weights).all()
                    and len(t.activated) == len(set(t.activated.tolist()))):
                problems.append(f"read {i} of worker {worker}")
            i += 4

    def writer() -> None:
        start.wait()
        try:
            states.append(mem.snapshot())
            for chunk in chunks:
                mem.write(chunk)
                states.append(mem.snapshot())
        finally:
            stop.set()

    with ThreadPoolExecutor(max_workers=5) as pool:
        futures = [pool.submit(reader, w) for w in range(4)] + [pool.submit(writer)]
        for f in futures:
            f.result()  # re-raises any exception from a thread
    assert problems == []
    # Every read saw the memory between two whole writes: its result is, bit for
    # bit, the result of the same read on one of those states.
    possible = {s: [set() for _ in queries] for s in ("fast", "iterative")}
    for snap in states:
        frozen = Memory.from_config(mem.config, snap)
        for strategy, seen in possible.items():
            for qi, out in enumerate(frozen.read(queries, strategy)):
                seen[qi].add(out.tobytes())
    torn = [(qi, s) for obs in observed for qi, s, out in obs
            if out.tobytes() not in possible[s][qi]]
    assert torn == []
    # Reads never change the state: the result equals the same writes done serially.
    serial = make_memory()
    serial.write(initial)
    for chunk in chunks:
        serial.write(chunk)
    assert mem.snapshot() == serial.snapshot() == states[-1]
    assert mem.stats().writes == 660


def test_plain_reads_during_appends_see_whole_rows():
    # In plain mode a location never changes once appended, so every similarity a
    # read reports must match the final memory exactly: a read that saw a row
    # half-written, or arrays the writer had just reallocated, would not.
    mem = Memory(DIM, mode="plain", k=6)
    mem.write(data(8, 10))
    stream = data(9, 3000)
    queries = data(10, 16)
    stop = threading.Event()
    start = threading.Barrier(3)
    seen: list = []

    def reader(worker: int) -> None:
        start.wait()
        i = worker
        while not stop.is_set():
            q = queries[i % len(queries)]
            seen.append((q, mem.analyze(q, "fast")))
            i += 2

    def writer() -> None:
        start.wait()
        try:
            for chunk in np.array_split(stream, 300):  # capacity doubles several times
                mem.write(chunk)
        finally:
            stop.set()

    with ThreadPoolExecutor(max_workers=3) as pool:
        for f in [pool.submit(reader, 0), pool.submit(reader, 1), pool.submit(writer)]:
            f.result()
    assert len(mem) == 3010 and seen
    addresses = mem.addresses.astype(np.float64)
    for q, trace in seen:
        rows = trace.activated - 1  # plain mode: id j + 1 is row j, and nothing is removed
        assert rows.max() < len(mem)
        expect = addresses[rows] @ q / np.linalg.norm(q.astype(np.float64))
        np.testing.assert_allclose(trace.similarities, expect, atol=1e-5)
        assert np.isfinite(trace.result).all()


def test_concurrent_writers_are_exclusive():
    # Three batches from three threads at once: the final state must equal one
    # of the 3! serial orders, whole batch by whole batch, with matching logs.
    base = data(11, 100)
    batches = [data(12 + i, 150) for i in range(3)]
    mem = make_memory()
    mem.write(base)
    start = threading.Barrier(3)

    def write(batch):
        start.wait()
        return mem.write(batch)

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(write, batches))
    final = mem.snapshot()
    matches = []
    for order in itertools.permutations(range(3)):
        serial = make_memory()
        serial.write(base)
        logs = {i: serial.write(batches[i]) for i in order}
        if serial.snapshot() == final:
            matches.append(order)
            for i in range(3):
                assert [c.tolist() for c in logs[i].created] == \
                    [c.tolist() for c in results[i].created]
                assert logs[i].merges == results[i].merges
    assert len(matches) >= 1
