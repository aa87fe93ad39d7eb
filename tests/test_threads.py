"""The kernel's helper threads: any thread count gives the same bits.

Scans split their rows between the caller and helper threads, and a batch
write lets a helper score each next block of inputs while the current block's
writes move rows (rows moved meanwhile are scored again; a merge discards the
block). Every test here compares threaded runs with single-threaded ones bit for
bit. ``_kernel.set_split(0, 0, 0)`` shares even tiny scans, in chunks of four
rows, so small hypothesis examples take the threaded paths and interleave as
much as they can.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hopmem
from conftest import clustered
from hopmem import InvalidInput, Memory
from hopmem.engine import _kernel
from hopmem.engine.threads import default_threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def threads(n: int, split_everything: bool = True):
    before = hopmem.get_threads()
    hopmem.set_threads(n)
    if split_everything:
        _kernel.set_split(0, 0, 0)
    try:
        yield
    finally:
        _kernel.set_split()
        hopmem.set_threads(before)


def write_all(X: np.ndarray, batch: int, **cfg) -> tuple[Memory, list]:
    mem = Memory(X.shape[1], **cfg)
    log = []
    for i in range(0, len(X), batch):
        r = mem.write(X[i:i + batch])
        log += [(t.tolist(), c.tolist()) for t, c in zip(r.touched, r.created)]
        log.append(list(r.merges))
    return mem, log


CONFIGS = [
    {},
    {"k": 2, "tau_overload": 2.0},
    {"tau_split": 0.9, "tau_overload": 1.5, "tau_merge": 0.92},  # merges inside blocks
    {"tau_split": 0.9, "max_locations": 90},                    # merges every write
    {"activation": "compact", "k": 5},
    {"k": 40},                                                  # many rows moved a write
]


@settings(max_examples=30)  # expensive: up to 400 writes, threaded and not, per example
@given(seed=st.integers(0, 2**31 - 1), dim=st.sampled_from([3, 16, 17, 40]),
       n=st.integers(150, 400), batch=st.sampled_from([9, 17, 64, 100]),
       helpers=st.integers(2, 4), config=st.sampled_from(CONFIGS))
def test_threaded_batch_writes_are_bit_equal_to_one_thread(seed, dim, n, batch, helpers, config):
    X = clustered(n, dim, rng=seed, noise=0.6 if seed % 2 else 0.2)
    with threads(1, split_everything=False):
        alone, log_alone = write_all(X, batch, seed=seed, **config)
    with threads(helpers):
        shared, log_shared = write_all(X, batch, seed=seed, **config)
    assert log_shared == log_alone
    assert shared.snapshot() == alone.snapshot()


@pytest.mark.parametrize("config", CONFIGS[:3], ids=["default", "k2", "merging"])
def test_threaded_writes_match_the_reference(config):
    # The oracle: the NumPy reference, fed the same vectors one at a time.
    X = clustered(300, 17, rng=3, noise=0.4)
    with threads(3):
        native, _ = write_all(X, 100, seed=5, **config)
    reference = Memory(17, backend="reference", seed=5, **config)
    for x in X:
        reference.write(x)
    np.testing.assert_array_equal(native.ids, reference.ids)
    np.testing.assert_allclose(native.addresses, reference.addresses, atol=1e-6)
    np.testing.assert_allclose(native.weights, reference.weights, rtol=1e-5)


@pytest.mark.parametrize("activation", ["exact", "compact"])
def test_threaded_reads_are_bit_equal(activation):
    X = clustered(1200, 40, rng=11, centers=30, noise=0.4)
    mem = Memory(40, activation=activation, mode="plain", seed=2)
    mem.write(X)
    Q = clustered(24, 40, rng=12, centers=30, noise=0.4)
    with threads(1, split_everything=False):
        alone = [mem.analyze(q, s) for q in Q for s in ("fast", "iterative")]
        batch_alone = mem.read(Q, "iterative")
    with threads(4):
        shared = [mem.analyze(q, s) for q in Q for s in ("fast", "iterative")]
        batch_shared = mem.read(Q, "iterative")
    for a, b in zip(alone, shared):
        np.testing.assert_array_equal(a.activated, b.activated)
        np.testing.assert_array_equal(a.result, b.result)
    np.testing.assert_array_equal(batch_alone, batch_shared)


def test_default_scans_share_large_memories_only():
    # With the real thresholds a 10,000-location scan is shared; results still equal.
    X = clustered(10_000, 64, rng=4, centers=200, noise=0.3)
    mem = Memory(64, mode="plain", seed=1)
    mem.write(X)
    q = X[17] + 0.01
    with threads(1, split_everything=False):
        alone = mem.analyze(q, "fast")
    with threads(2, split_everything=False):
        shared = mem.analyze(q, "fast")
    np.testing.assert_array_equal(alone.result, shared.result)
    np.testing.assert_array_equal(alone.activated, shared.activated)


def test_concurrent_writers_and_readers_share_one_pool():
    # Only one scan uses the helpers at a time; the others run alone. Four
    # threads write to their own memories and read a shared one, all at once.
    Xs = [clustered(500, 24, rng=20 + i, noise=0.4) for i in range(4)]
    shared_mem = Memory(24, seed=1)
    shared_mem.write(clustered(600, 24, rng=30, noise=0.4))
    Q = clustered(40, 24, rng=31, noise=0.4)
    with threads(1, split_everything=False):
        expected = [write_all(X, 50, seed=i)[0].snapshot() for i, X in enumerate(Xs)]
        expected_reads = [shared_mem.read(q, "iterative") for q in Q]
    results, reads, errors = [None] * 4, [None] * 4, []

    def work(i: int) -> None:
        try:
            results[i] = write_all(Xs[i], 50, seed=i)[0].snapshot()
            reads[i] = [shared_mem.read(q, "iterative") for q in Q]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with threads(3):
        workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=300)
    assert not errors
    assert results == expected
    for got in reads:
        for a, b in zip(got, expected_reads):
            np.testing.assert_array_equal(a, b)


def _child_writes(X: np.ndarray, queue) -> None:
    mem, _ = write_all(X, 100, seed=3)
    queue.put(mem.snapshot())


@pytest.mark.subprocess
def test_a_forked_child_starts_its_own_helpers():
    # The parent's helpers do not exist in a fork()ed child: it must not wait
    # for them (a hang), and its writes must be the same bits.
    X = clustered(400, 32, rng=40, noise=0.4)
    with threads(2):
        parent = write_all(X, 100, seed=3)[0].snapshot()  # helpers are running now
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_child_writes, args=(X, queue))
        child.start()
        got = queue.get(timeout=120)
        child.join(timeout=60)
    assert child.exitcode == 0
    assert got == parent


def test_set_threads_validates_and_reports():
    before = hopmem.get_threads()
    try:
        assert hopmem.set_threads(3) == 3 == hopmem.get_threads()
        assert hopmem.set_threads(1) == 1
        for bad in (0, -1, 17, 2.0, True, "2"):
            with pytest.raises(InvalidInput, match="threads"):
                hopmem.set_threads(bad)  # type: ignore[arg-type]
        assert hopmem.get_threads() == 1  # unchanged by the bad calls
        assert hopmem.set_threads(None) == default_threads()
    finally:
        hopmem.set_threads(before)


def _import_with(env_value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOPMEM_THREADS=env_value, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", "import hopmem; print(hopmem.get_threads())"],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.subprocess
def test_the_environment_sets_the_default():
    done = _import_with("3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
    bad = _import_with("many")
    assert bad.returncode != 0
    assert "HOPMEM_THREADS" in bad.stderr and "'many'" in bad.stderr
    unset = _import_with("")  # empty: the CPUs this process may use, at most 4
    assert unset.stdout.strip() == str(max(1, min(4, len(os.sched_getaffinity(0)))))


def run_under_threadsanitizer(tmp_path, program: str, kernel_sources: list[str],
                              halt_on_error: bool) -> subprocess.CompletedProcess:
    """Build tests/c/PROGRAM with the given kernels/ sources and -fsanitize=thread, run it."""
    import shutil

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / program.removesuffix(".c")
    kernels = os.path.join(ROOT, "kernels")
    build = subprocess.run(
        [cc, "-O1", "-g", "-std=gnu99", "-ffp-contract=off", "-fsanitize=thread",
         f"-I{kernels}", os.path.join(ROOT, "tests", "c", program),
         *[os.path.join(kernels, src) for src in kernel_sources], "-lm", "-pthread",
         "-o", str(exe)],
        capture_output=True, text=True, timeout=300)
    if build.returncode != 0:
        pytest.skip(f"cannot build with -fsanitize=thread: {build.stderr[-300:]}")
    options = "halt_on_error=1 exitcode=66" if halt_on_error else "exitcode=0"
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, TSAN_OPTIONS=options))
    if "FATAL: ThreadSanitizer" in run.stderr:
        pytest.skip(f"ThreadSanitizer cannot run here: {run.stderr[-300:]}")
    return run


@pytest.mark.subprocess
def test_the_pool_is_race_free_under_threadsanitizer(tmp_path):
    # The pool's protocol (one atomic job word, a count of helpers inside,
    # spinning holds, sleeping helpers) stressed from three caller threads
    # in C, with ThreadSanitizer watching every access.
    run = run_under_threadsanitizer(tmp_path, "pool_stress.c", ["hopmem_threads.c"],
                                    halt_on_error=True)
    assert "ThreadSanitizer" not in run.stderr, run.stderr[-3000:]
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert "failures 0" in run.stdout


@pytest.mark.subprocess
def test_scoring_ahead_races_only_where_designed(tmp_path):
    # A batch write's helper reads address rows that the writes may be moving
    # (those rows are scored again before use). Under ThreadSanitizer every
    # race reported must be that one: a write by scale_to_float into the
    # address array; and the threaded states must equal one thread's, bytes.
    run = run_under_threadsanitizer(tmp_path, "write_stress.c",
                                    ["hopmem_kernel.c", "hopmem_threads.c"], halt_on_error=False)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert "failures 0" in run.stdout and "DIFFERENT" not in run.stdout
    assert " 0 merges" not in run.stdout.splitlines()[2], run.stdout  # variant 1 merges
    size = run.stdout.split("addresses_bytes ")[1].split()[0]
    reports = run.stderr.split("WARNING: ThreadSanitizer")[1:]
    for report in reports:
        assert "data race" in report.splitlines()[0], report
        assert f"Location is heap block of size {size} " in report, report
        assert "#0 scale_to_float" in report, report
