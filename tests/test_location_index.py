"""The native kernel's location index: exact pruning of the activation scan.

The index groups the rows around centroids with radii that bound every row's
distance to its centroid, and an activation skips the groups whose bound
cannot reach the k-th best score (``kernels/hopmem_kernel.c``, "location
index"). It must never change a result: reads and writes with an index are
held bit for bit to the same memory without one, on awkward shapes and
configs, and the index's invariants are checked after writes and merges.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopmem import Memory
from hopmem.engine import _kernel


def index_invariants(mem: Memory) -> None:
    """Every row sits in one group, within its group's radius; lists match group_of."""
    state = mem._state
    ix = state.index
    assert ix is not None and ix.useful
    L = state.size
    A = state.addresses[:L].astype(np.float64)
    group_of = ix.group_of[:L]
    assert ((group_of >= 0) & (group_of < ix.groups)).all()
    dist = np.linalg.norm(A - ix.centroids.astype(np.float64)[group_of], axis=1)
    assert (dist <= ix.radius[group_of] * (1 + 1e-12) + 1e-12).all()
    assert ix.start[0] == 0 and ix.start[-1] == L and (np.diff(ix.start) >= 0).all()
    members = ix.members[:L]
    assert sorted(members.tolist()) == list(range(L))
    for g in range(ix.groups):
        rows = members[ix.start[g]:ix.start[g + 1]]
        assert (group_of[rows] == g).all()
        assert (np.diff(rows) > 0).all()  # ascending within a group


@st.composite
def index_plan(draw):
    dim = draw(st.sampled_from([1, 3, 16, 17, 40]))
    n = draw(st.integers(40, 220))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((draw(st.integers(1, 10)), dim))
    spread = draw(st.sampled_from([0.05, 0.3, 1.0]))
    X = (centers[rng.integers(0, len(centers), 2 * n)] + spread *
         rng.standard_normal((2 * n, dim))).astype(np.float32)
    if draw(st.booleans()):
        X[rng.integers(0, 2 * n, 3)] = X[0]  # exact duplicates: ties in the scores
    Q = (centers[rng.integers(0, len(centers), 12)] + spread *
         rng.standard_normal((12, dim))).astype(np.float32)
    Q[0] = X[1]  # a stored input
    groups = draw(st.sampled_from([1, 2, 7, 30, 1000]))
    cut = draw(st.integers(1, n - 1))
    return X, Q, n, cut, groups


CONFIGS = [
    {},
    {"k": 1},
    {"k": 5, "tau_split": 0.9, "tau_overload": 1.5, "tau_merge": 0.92},
    {"k": 100},
    {"mode": "plain", "k": 7},
    {"tau_split": 0.9, "max_locations": 60},
    {"beta": 50.0, "t_max": 3},
]


@settings(max_examples=60)  # expensive: a memory grown and read with and without its index per example
@given(index_plan(), st.sampled_from(CONFIGS))
def test_the_location_index_changes_no_read_and_no_write(plan, config):
    X, Q, n, cut, groups = plan
    dim = X.shape[1]
    with_index, without = Memory(dim, **config), Memory(dim, **config)
    for mem in (with_index, without):
        mem.write(X[:n])
    _kernel.maintain_index(with_index._state, with_index.config.k, groups=groups, force=True)
    assert without._state.index is None  # too small for one of its own
    index_invariants(with_index)
    # writes with the index in place: it is kept valid, rows added, moved and merged
    for mem in (with_index, without):
        mem.write(X[n:n + cut])
        mem.write(X[n + cut])
    assert with_index.snapshot() == without.snapshot()
    if with_index._state.index is not None:
        index_invariants(with_index)
    for strategy in ("iterative", "fast"):
        a = with_index.analyze(Q, strategy=strategy)
        b = without.analyze(Q, strategy=strategy)
        for ta, tb in zip(a, b):
            np.testing.assert_array_equal(ta.activated, tb.activated)
            np.testing.assert_array_equal(ta.similarities, tb.similarities)
            np.testing.assert_array_equal(ta.weights, tb.weights)
            np.testing.assert_array_equal(ta.result, tb.result)
            assert (ta.iterations, ta.converged) == (tb.iterations, tb.converged)
        np.testing.assert_array_equal(with_index.read(Q[3], strategy=strategy),
                                      without.read(Q[3], strategy=strategy))
    a, b = with_index.attention(Q[2], 2.0), without.attention(Q[2], 2.0)
    np.testing.assert_array_equal(a.activated, b.activated)
    np.testing.assert_array_equal(a.result, b.result)


def test_compress_keeps_the_index_valid():
    rng = np.random.default_rng(3)
    centers = rng.standard_normal((6, 24))
    X = (centers[rng.integers(0, 6, 300)] + 1.0 * rng.standard_normal((300, 24))).astype(np.float32)
    mem = Memory(24, tau_split=0.9)
    mem.write(X)
    twin = Memory.from_config(mem.config, mem.snapshot())
    _kernel.maintain_index(mem._state, mem.config.k, groups=9, force=True)
    twin._state.index = None
    bound = len(mem) * 3 // 4
    assert mem.compress(max_locations=bound) == twin.compress(max_locations=bound)
    assert len(mem) <= bound and mem._state.index is not None
    index_invariants(mem)
    assert mem.snapshot() == twin.snapshot()
    np.testing.assert_array_equal(mem.read(X[:20]), twin.read(X[:20]))


def test_an_index_is_built_used_and_judged_as_the_memory_grows(rng):
    centers = rng.standard_normal((60, 32))
    clustered = (centers[rng.integers(0, 60, 3000)] +
                 0.1 * rng.standard_normal((3000, 32))).astype(np.float32)
    mem = Memory(32)
    mem.write(clustered[:100])
    mem.read(clustered[0])
    assert mem._state.index is None and not mem._state.index_pending  # a small memory scans
    mem.write(clustered[100:])
    assert len(mem) >= 512 and mem._state.index is None and mem._state.index_pending
    mem.read(clustered[0])  # the first read builds it
    ix = mem._state.index
    assert ix is not None and ix.useful and ix.visits < 0.3 and not mem._state.index_pending
    index_invariants(mem)
    # restored from a snapshot, the memory indexes itself again at its first read
    copy = Memory.from_config(mem.config, mem.snapshot())
    assert copy._state.index is None and copy._state.index_pending
    np.testing.assert_array_equal(copy.read(clustered[:50]), mem.read(clustered[:50]))
    assert copy._state.index is not None and copy._state.index.useful
    # scattered inputs in plain mode: an index would not skip enough, reads scan
    plain = Memory(32, mode="plain")
    plain.write(rng.standard_normal((800, 32)).astype(np.float32))
    plain.read(clustered[0])
    assert plain._state.index is not None and not plain._state.index.useful


def test_readers_racing_to_build_the_index_read_what_a_scan_reads():
    rng = np.random.default_rng(4)
    centers = rng.standard_normal((40, 24))
    X = (centers[rng.integers(0, 40, 2500)] + 0.1 * rng.standard_normal((2500, 24))).astype(np.float32)
    Q = (centers[rng.integers(0, 40, 64)] + 0.1 * rng.standard_normal((64, 24))).astype(np.float32)
    mem = Memory(24)
    mem.write(X)
    _kernel.INDEX_ENABLED = False
    try:
        scan = Memory.from_config(mem.config, mem.snapshot())
        expected = scan.read(Q)
    finally:
        _kernel.INDEX_ENABLED = True
    assert scan._state.index is None
    fresh = Memory.from_config(mem.config, mem.snapshot())
    assert fresh._state.index_pending
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: fresh.read(Q[i]), range(64)))
    np.testing.assert_array_equal(np.stack(got), expected)
    assert fresh._state.index is not None and fresh._state.index.useful


@pytest.mark.parametrize("activation", ["compact"])
def test_compact_activation_never_builds_an_index(activation):
    rng = np.random.default_rng(1)
    mem = Memory(16, mode="plain", activation=activation)
    mem.write(rng.standard_normal((700, 16)).astype(np.float32))
    assert mem._state.index is None


def test_a_read_never_fails_for_want_of_memory_for_the_index(monkeypatch):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((700, 16)).astype(np.float32)
    mem = Memory(16, mode="plain")
    mem.write(X)
    assert mem._state.index_pending

    def no_memory(*args, **kwargs):
        raise MemoryError("test")

    monkeypatch.setattr(_kernel, "maintain_index", no_memory)
    trace = mem.analyze(X[3])
    assert mem._state.index is None and not mem._state.index_pending
    np.testing.assert_array_equal(trace.activated[:1], mem.ids[3:4])
