"""The public API of hopmem.Memory: results, shapes, errors, config, snapshots."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import hopmem
from conftest import clustered
from hopmem import (
    DimensionMismatch,
    EmptyMemory,
    HopmemError,
    InvalidConfig,
    InvalidInput,
    Memory,
    MemoryConfig,
    Snapshot,
    Trace,
)

BACKENDS = ["native", "reference"]


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


# -- writes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_plain_write_reports_one_created_id_per_vector(backend):
    mem = Memory(4, mode="plain", backend=backend)
    res = mem.write(np.eye(4, dtype=np.float32)[:3])
    assert res.count == 3
    assert [c.tolist() for c in res.created] == [[1], [2], [3]]
    assert [t.tolist() for t in res.touched] == [[], [], []]
    assert res.merges == []
    assert all(c.dtype == np.int64 for c in res.created)
    res = mem.write(np.ones(4))  # a single vector: ids keep counting
    assert res.count == 1 and res.created[0].tolist() == [4]
    assert mem.ids.tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("backend", BACKENDS)
def test_competitive_write_reports_touched_and_created(backend):
    mem = Memory(3, k=5, tau_overload=100.0, backend=backend)
    first = mem.write([1.0, 0.0, 0.0])
    assert (first.touched[0].tolist(), first.created[0].tolist()) == ([], [1])
    near = mem.write([1.0, 0.1, 0.0])  # similar: absorbed by location 1, nothing new
    assert (near.touched[0].tolist(), near.created[0].tolist()) == ([1], [])
    far = mem.write([0.0, 0.0, 1.0])  # orthogonal: only spawns
    assert (far.touched[0].tolist(), far.created[0].tolist()) == ([], [2])
    assert far.postings(0).tolist() == [2]
    both = mem.write(np.array([[1.0, 0.0, 0.05], [0.0, 0.05, 1.0]]))
    assert both.count == 2 and both.postings(0).tolist() == sorted(both.touched[0].tolist())
    assert 1 in both.touched[0] and 2 in both.touched[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_batch_write_changes_nothing(backend):
    mem = Memory(3, backend=backend)
    mem.write(np.eye(3))
    before = mem.snapshot()
    res = mem.write(np.zeros((0, 3), np.float32))
    assert (res.count, res.touched, res.created, res.merges) == (0, [], [], [])
    assert mem.snapshot() == before


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_batch_is_rejected_whole(backend):
    # The NaN is in the last row: nothing before it may have been written.
    mem = Memory(3, backend=backend)
    mem.write(np.eye(3))
    before = mem.snapshot()
    X = np.ones((4, 3))
    X[3, 2] = np.nan
    with pytest.raises(InvalidInput, match=r"vectors\[3, 2\]"):
        mem.write(X)
    assert mem.snapshot() == before


# -- reads --------------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def filled(request) -> Memory:
    mem = Memory(6, k=4, beta=8.0, tau_overload=3.0, backend=request.param)
    mem.write(clustered(30, 6, rng=0, centers=3))
    return mem


def test_read_shapes(filled):
    q = clustered(5, 6, rng=1, centers=3)
    for strategy in ("iterative", "fast"):
        one = filled.read(q[0], strategy)
        assert one.shape == (6,) and one.dtype == np.float32
        many = filled.read(q, strategy)
        assert many.shape == (5, 6) and many.dtype == np.float32
        np.testing.assert_array_equal(many[0], one)
        assert filled.read(q[:1], strategy).shape == (1, 6)
        assert filled.read(np.zeros((0, 6)), strategy).shape == (0, 6)
        assert np.allclose(np.linalg.norm(many, axis=1), 1.0, atol=1e-6)
    assert filled.read(q[0].tolist()).shape == (6,)


def test_analyze_returns_trace_or_list(filled):
    q = clustered(3, 6, rng=2, centers=3)
    trace = filled.analyze(q[0], "fast")
    assert isinstance(trace, Trace) and trace.strategy == "fast"
    kk = min(4, len(filled))
    assert trace.activated.dtype == np.int64 and trace.activated.shape == (kk,)
    assert set(trace.activated.tolist()) <= set(filled.ids.tolist())  # ids, not rows
    assert trace.similarities.shape == trace.weights.shape == (kk,)
    assert np.all(np.diff(trace.similarities) <= 0)  # best first
    assert trace.iterations == 1 and trace.converged
    np.testing.assert_array_equal(trace.result, filled.read(q[0], "fast"))
    traces = filled.analyze(q)  # default strategy: iterative
    assert isinstance(traces, list) and len(traces) == 3
    assert all(isinstance(t, Trace) and t.strategy == "iterative" for t in traces)
    np.testing.assert_array_equal(np.stack([t.result for t in traces]), filled.read(q))
    assert filled.analyze(np.zeros((0, 6))) == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["competitive", "plain"])
def test_read_equals_the_traced_result(backend, mode):
    # read() takes a lean path (no trace, and no fast read-out behind an
    # iterative read): its result must still be the traced read's, bit for bit.
    mem = Memory(6, mode=mode, k=4, beta=8.0, backend=backend)
    mem.write(clustered(30, 6, rng=0, centers=3))
    q = clustered(4, 6, rng=3, centers=3)
    for strategy in ("iterative", "fast"):
        traces = mem.analyze(q, strategy)
        np.testing.assert_array_equal(mem.read(q, strategy), np.stack([t.result for t in traces]))
        for x, t in zip(q, traces):
            np.testing.assert_array_equal(mem.read(x, strategy), t.result)  # float32: the lean path
            # every other form of the same query takes the general path, to the same answer
            for other in (x.astype(np.float64), x.tolist(), x.astype(">f4"), np.repeat(x, 2)[::2],
                          x[None, :]):
                got = mem.read(other, strategy)
                np.testing.assert_array_equal(got.reshape(-1), t.result)


def test_trace_ids_are_ids_not_rows():
    # After a merge removes an early location, rows and ids no longer coincide.
    mem = Memory(2, mode="plain", k=1, tau_merge=0.9)
    mem.write(np.array([[1, 0], [1, 0.01], [0, 1]], np.float32))
    mem.compress()
    assert mem.ids.tolist() == [1, 3]
    assert mem.analyze([0.0, 1.0], "fast").activated.tolist() == [3]
    assert mem.attention([0.0, 1.0], 1.0).activated.tolist() == [3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_in_plain_mode_is_softmax_attention(backend):
    X = clustered(7, 5, rng=3, centers=3)
    mem = Memory(5, mode="plain", k=7, backend=backend)
    mem.write(X)
    q = clustered(1, 5, rng=4, centers=3)[0]
    scale = 1.0 / math.sqrt(5)
    logits = scale * (X.astype(np.float64) @ q.astype(np.float64))
    alpha = np.exp(logits - logits.max())
    alpha /= alpha.sum()
    out = mem.attention(q, scale)
    np.testing.assert_allclose(out.result, alpha @ X.astype(np.float64), rtol=1e-5, atol=1e-6)
    order = out.activated - 1  # plain mode: id j+1 holds row j
    np.testing.assert_allclose(out.weights, alpha[order], rtol=1e-6, atol=1e-9)
    assert out.scale == scale and out.result.dtype == np.float32
    with pytest.raises(InvalidInput, match="scale"):
        mem.attention(q, float("nan"))
    with pytest.raises(InvalidInput, match="one vector"):
        mem.attention(X[:2], scale)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fingerprint(backend):
    mem = Memory(4, backend=backend)
    assert mem.fingerprint() is None
    mem.write(clustered(10, 4, rng=5, centers=3))
    fp = mem.fingerprint()
    assert fp.shape == (4,) and fp.dtype == np.float32
    assert np.linalg.norm(fp) == pytest.approx(1.0, abs=1e-6)
    seed = unit(mem.counters.sum(axis=0)).astype(np.float32)
    np.testing.assert_array_equal(fp, mem.read(seed, "iterative"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_stats(backend):
    mem = Memory(3, eta0=0.05, eta_min=0.01, backend=backend)
    empty = mem.stats()
    assert (empty.num_locations, empty.writes, empty.total_weight, empty.avg_write_weight,
            empty.max_write_weight) == (0, 0, 0.0, 0.0, 0.0)
    assert empty.current_eta == 0.05
    mem.write(clustered(12, 3, rng=6, centers=3))
    s = mem.stats()
    assert s.num_locations == len(mem) == len(mem.ids)
    assert s.writes == 12  # vectors, not the sum of weights
    assert s.total_weight == pytest.approx(float(mem.weights.sum()))
    assert s.avg_write_weight == pytest.approx(s.total_weight / s.num_locations)
    assert s.max_write_weight == float(mem.weights.max())
    assert s.total_weight > s.writes  # several locations absorb each write
    assert s.current_eta < 0.05
    assert set(s.to_dict()) == {"num_locations", "writes", "total_weight", "current_eta",
                                "avg_write_weight", "max_write_weight"}


def test_stats_write_count_names_are_deprecated():
    mem = Memory(3)
    mem.write(clustered(12, 3, rng=6, centers=3))
    s = mem.stats()
    with pytest.warns(DeprecationWarning, match=r"Stats\.avg_write_count.*avg_write_weight"):
        assert s.avg_write_count == s.avg_write_weight
    with pytest.warns(DeprecationWarning, match=r"Stats\.max_write_count.*max_write_weight"):
        assert s.max_write_count == s.max_write_weight


# -- compress ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_compress(backend):
    mem = Memory(3, mode="plain", tau_merge=0.9, backend=backend)
    X = np.array([[1, 0, 0], [0, 1, 0], [1, 0.05, 0], [0, 0, 1], [0.05, 1, 0], [1, 1, 1]],
                 np.float32)
    mem.write(X)
    weight, counter_sum = mem.weights.sum(), mem.counters.sum(axis=0)
    res = mem.compress()
    assert (res.locations_before, res.locations_after) == (6, 4)
    assert sorted(res.merges) == [(3, 1), (5, 2)]  # (removed, survivor): the older id survives
    assert mem.ids.tolist() == [1, 2, 4, 6]
    assert mem.weights.tolist() == [2.0, 2.0, 1.0, 1.0]
    # Merging adds counters and weights: nothing absorbed is lost.
    assert mem.weights.sum() == weight
    np.testing.assert_allclose(mem.counters.sum(axis=0), counter_sum)
    assert mem.compress().merges == []  # nothing left above tau_merge
    res = mem.compress(max_locations=2)
    assert res.locations_after == len(mem) == 2 and len(res.merges) == 2
    assert all(survivor < removed for removed, survivor in res.merges)
    assert mem.ids[0] == 1
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidInput, match="max_locations"):
            mem.compress(max_locations=bad)


def test_compress_uses_the_configured_bound():
    mem = Memory(4, mode="plain", max_locations=3)
    mem.write(clustered(8, 4, rng=7, centers=3))
    assert len(mem) == 8  # plain mode stores every vector; compress enforces the bound
    assert mem.compress().locations_after == 3


# -- read-only views and frozen config ---------------------------------------------------------------


def test_views_are_read_only_copies(filled):
    for name in ("ids", "addresses", "patterns", "weights", "counters"):
        view = getattr(filled, name)
        assert not view.flags.writeable, name
        with pytest.raises(ValueError):
            view[0] = 0
    assert filled.addresses.dtype == np.float32 and filled.patterns.dtype == np.float32
    assert filled.counters.dtype == np.float64 and filled.ids.dtype == np.int64
    np.testing.assert_allclose(filled.patterns, filled.counters / filled.weights[:, None],
                               rtol=1e-6)
    snap = filled.snapshot()
    if snap.addresses.flags.writeable:  # a snapshot is a copy too
        snap.addresses[:] = 0
        snap.weights[:] = 0
    assert np.abs(filled.addresses).sum() > 0 and filled.weights.min() > 0


def test_config_is_frozen():
    mem = Memory(4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        mem.config.k = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        MemoryConfig(4).beta = 1.0
    assert mem.config.tau_overload == 8.0  # None resolves to max(d/32, 8) ...
    assert MemoryConfig(640).tau_overload == 20.0
    cfg = MemoryConfig(4, k=3, max_locations=9, seed=5)
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg  # ... and is what gets stored


BAD_CONFIGS = [
    (dict(dim=0), "dim"),
    (dict(dim=-3), "dim"),
    (dict(dim=2.5), "dim"),
    (dict(k=0), "k"),
    (dict(k=2.5), "k"),
    (dict(eta_min=0.0), "eta_min"),
    (dict(eta_min=0.02, eta0=0.01), "eta_min"),
    (dict(eta0=0.0), "eta0"),
    (dict(eta_decay=0.0), "eta_decay"),
    (dict(eta_decay=1.01), "eta_decay"),
    (dict(tau_split=-0.1), "tau_split"),
    (dict(tau_split=0.5, tau_merge=0.5), "tau_merge"),
    (dict(tau_merge=1.01), "tau_merge"),
    (dict(beta=0.0), "beta"),
    (dict(beta=-1.0), "beta"),
    (dict(t_max=0), "t_max"),
    (dict(beta=math.inf), "beta"),
    (dict(epsilon=math.nan), "epsilon"),
    (dict(eta0=math.nan), "eta0"),
    (dict(tau_split=math.nan), "tau_split"),
    (dict(gamma=-math.inf), "gamma"),
    (dict(tau_damp=math.inf), "tau_damp"),
    (dict(tau_overload=math.nan), "tau_overload"),
    (dict(mode="hebbian"), "mode"),
    (dict(mode=None), "mode"),
    (dict(max_locations=0), "max_locations"),
    (dict(seed=-1), "seed"),
    (dict(k="3"), "k"),
]


@pytest.mark.parametrize("overrides,field", BAD_CONFIGS, ids=[repr(o) for o, _ in BAD_CONFIGS])
def test_every_bad_config_is_a_named_error(overrides, field):
    kwargs = dict(dim=4)
    kwargs.update(overrides)
    with pytest.raises(InvalidConfig) as info:
        MemoryConfig(**kwargs)
    assert field in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, HopmemError)
    dim = kwargs.pop("dim")
    with pytest.raises(InvalidConfig):
        Memory(dim, **kwargs)


def test_edge_configs_are_valid():
    MemoryConfig(1, eta_min=0.5, eta0=0.5, eta_decay=1.0, tau_split=0.0, tau_merge=1.0)


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_dimension_mismatch(backend):
    mem = Memory(4, backend=backend)
    mem.write(np.eye(4))
    for call in (mem.write, mem.read, mem.analyze, lambda q: mem.attention(q, 1.0)):
        with pytest.raises(DimensionMismatch) as info:
            call(np.ones(3))
        assert str(info.value).startswith("dimension mismatch: expected 4, got 3")
        assert (info.value.expected, info.value.got) == (4, 3)
        assert isinstance(info.value, InvalidInput) and isinstance(info.value, ValueError)
    with pytest.raises(DimensionMismatch, match="expected 4, got 5"):
        mem.write(np.ones((2, 5)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_finite_input_names_the_position(backend):
    mem = Memory(3, backend=backend)
    mem.write(np.eye(3))
    with pytest.raises(InvalidInput, match=r"query\[2\].*nan"):
        mem.read([0.0, 1.0, math.nan])
    with pytest.raises(InvalidInput, match=r"query\[1, 0\].*inf"):
        mem.read(np.array([[1, 2, 3], [-math.inf, 0, 0]]))
    with pytest.raises(InvalidInput, match=r"vectors\[0\]"):
        mem.write([math.inf, 0, 0])
    with pytest.raises(InvalidInput, match=r"\[1\]"):  # finite in float64, inf in float32
        mem.write([0.0, 1e39, 0.0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [
    np.ones((2, 2, 3)), np.float32(1.0), "abc", ["a", "b", "c"], [object()] * 3, None,
    [[1, 2, 3], [4, 5]], np.ones(3, dtype=complex), {"x": 1},
], ids=["3d", "0d", "str", "strs", "objects", "none", "ragged", "complex", "dict"])
def test_malformed_input_is_invalid_input(backend, bad):
    mem = Memory(3, backend=backend)
    mem.write(np.eye(3))
    before = mem.snapshot()
    for call in (mem.write, mem.read, mem.analyze):
        with pytest.raises(InvalidInput):
            call(bad)
    assert mem.snapshot() == before


def test_unknown_strategy_and_backend():
    mem = Memory(3)
    mem.write(np.eye(3))
    for call in (mem.read, mem.analyze):
        with pytest.raises(InvalidInput, match="strategy"):
            call(np.ones(3), "exact")
    with pytest.raises(InvalidInput, match="backend"):
        Memory(3, backend="gpu")
    with pytest.raises(InvalidInput, match="config"):
        Memory.from_config({"dim": 3})


def test_lean_read_leaves_errors_to_the_general_path():
    mem = Memory(4)
    with pytest.raises(EmptyMemory):
        mem.read(np.ones(4, dtype=np.float32))
    mem.write(np.eye(4, dtype=np.float32))
    bad = np.array([1.0, np.nan, 0.0, 0.0], dtype=np.float32)
    with pytest.raises(InvalidInput, match=r"query\[1\]"):
        mem.read(bad)
    with pytest.raises(DimensionMismatch):
        mem.read(np.ones(3, dtype=np.float32))
    q = np.ones(4, dtype=np.float32)
    q.setflags(write=False)  # read-only input is fine and never written
    np.testing.assert_array_equal(mem.read(q), mem.analyze(q).result)


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_scored_is_analyze_without_the_activation(backend):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((40, 8))
    mem = Memory(8, k=5, backend=backend)
    mem.write(X)
    Q = X[:6] + 0.3 * rng.standard_normal((6, 8))
    queries = [Q[0].astype(np.float32),  # the lean path
               Q[1],  # float64: the general path
               Q[2].astype(np.float32)[::-1].copy()[::-1],  # strided
               Q[3].tolist(), Q[4].astype(">f4")]
    for strategy in ("iterative", "fast"):
        for q in queries:
            got, want = mem.read_scored(q, strategy), mem.analyze(q, strategy)
            np.testing.assert_array_equal(got.result, want.result)
            assert (got.fidelity, got.first_contact) == (want.fidelity, want.first_contact)
            assert got.result.dtype == np.float32 and type(got.fidelity) is float
        batch = mem.read_scored(Q, strategy)
        assert [b.fidelity for b in batch] == [t.fidelity for t in mem.analyze(Q, strategy)]
    with pytest.raises(InvalidInput, match=r"query\[1\]"):
        mem.read_scored(np.array([1, np.nan] + [0] * 6, dtype=np.float32))
    with pytest.raises(DimensionMismatch):
        mem.read_scored(np.ones(3, dtype=np.float32))
    with pytest.raises(InvalidInput, match="strategy"):
        mem.read_scored(Q[0], "exact")
    with pytest.raises(EmptyMemory):
        Memory(8, backend=backend).read_scored(np.ones(8, dtype=np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reading_an_empty_memory_is_a_typed_error(backend):
    mem = Memory(3, backend=backend)
    for call in (mem.read, mem.analyze, lambda q: mem.attention(q, 1.0)):
        with pytest.raises(EmptyMemory, match="empty") as info:
            call(np.ones(3))
        assert isinstance(info.value, LookupError) and isinstance(info.value, HopmemError)
        assert not isinstance(info.value, ValueError)
    with pytest.raises(EmptyMemory):
        mem.read(np.ones((2, 3)), "fast")


@pytest.mark.parametrize("backend", BACKENDS)
def test_unrelated_queries_get_an_answer_not_an_exception(backend):
    # Abstention is decided on the trace by a gate; the read itself always answers.
    mem = Memory(4, mode="plain", k=2, backend=backend)
    mem.write(np.array([[1, 0, 0, 0], [0, 1, 0, 0]], np.float32))
    for q in ([0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, -1e-30]):
        for strategy in ("fast", "iterative"):
            t = mem.analyze(q, strategy)
            assert np.all(np.isfinite(t.result))
            assert t.fidelity == 0.0 and t.first_contact == 0.0


def test_errors_keep_their_builtin_bases():
    assert issubclass(InvalidConfig, InvalidInput) and issubclass(InvalidInput, ValueError)
    assert issubclass(DimensionMismatch, ValueError)
    assert issubclass(hopmem.NotFound, KeyError)


# -- snapshots ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_snapshot_restore_is_bit_exact(backend):
    mem = Memory(5, k=3, tau_overload=2.0, max_locations=6, backend=backend)
    X = clustered(40, 5, rng=8, centers=3)
    mem.write(X[:20])
    snap = mem.snapshot()
    assert isinstance(snap, Snapshot) and snap == mem.snapshot()
    mem.write(X[20:])
    assert mem.snapshot() != snap
    mem.restore(snap)
    assert mem.snapshot() == snap
    assert mem.stats().writes == 20


@pytest.mark.parametrize("backend", BACKENDS)
def test_from_config_continues_identically(backend):
    # tau_overload small so that the continuation splits: the generator state
    # must be carried over too, not only the arrays.
    mem = Memory(5, k=3, tau_overload=2.0, max_locations=8, seed=3, backend=backend)
    X = clustered(60, 5, rng=9, centers=3)
    mem.write(X[:25])
    twin = Memory.from_config(mem.config, mem.snapshot(), backend=backend)
    assert twin.config == mem.config and twin.snapshot() == mem.snapshot()
    r1, r2 = mem.write(X[25:]), twin.write(X[25:])
    assert [c.tolist() for c in r1.created] == [c.tolist() for c in r2.created]
    assert r1.merges == r2.merges and len(r1.merges) > 0
    assert twin.snapshot() == mem.snapshot()
    np.testing.assert_array_equal(twin.read(X[:5]), mem.read(X[:5]))
    fresh = Memory.from_config(mem.config)
    assert len(fresh) == 0 and fresh.stats().current_eta == mem.config.eta0


def test_restore_rejects_a_foreign_snapshot():
    small, big = Memory(3), Memory(4)
    small.write(np.eye(3))
    with pytest.raises(InvalidInput, match="snapshot"):
        big.restore(small.snapshot())
    with pytest.raises(InvalidInput, match="snapshot"):
        Memory.from_config(big.config, small.snapshot())
    with pytest.raises(InvalidInput, match="snapshot"):
        big.restore("not a snapshot")
    snap = small.snapshot()
    bad_ids = dataclasses.replace(snap, ids=snap.ids[::-1].copy())
    with pytest.raises(InvalidInput, match="ascending"):
        small.restore(bad_ids)


def test_a_read_with_its_own_k_equals_a_memory_built_with_that_k():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((900, 32))  # past the location index's minimum (512 rows)
    queries = X[rng.choice(len(X), 6)] + 0.3 * rng.standard_normal((6, 32))
    mem, wide = Memory(32, mode="plain", k=8, beta=12.0), Memory(32, mode="plain", k=40, beta=12.0)
    for m in (mem, wide):
        m.write(X)
    for q in queries:
        for strategy in ("fast", "iterative"):
            got, want = mem.analyze(q, strategy, k=40), wide.analyze(q, strategy)
            assert np.array_equal(got.activated, want.activated) and len(got.activated) == 40
            assert np.array_equal(got.result, want.result)  # the same bits as a k = 40 memory
            assert np.array_equal(mem.read(q, strategy, k=40), want.result)
            assert mem.read_scored(q, strategy, k=40).fidelity == want.fidelity
        assert len(mem.analyze(q).activated) == 8  # the memory's own k is unchanged
    assert np.array_equal(mem.read(queries, "fast", k=40), wide.read(queries, "fast"))  # a batch too
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(InvalidInput, match="k: expected"):
            mem.read(queries[0], k=bad)


@pytest.mark.parametrize("mode", ["plain", "competitive"])
def test_a_read_with_its_own_k_agrees_with_the_reference_twin(mode):
    rng = np.random.default_rng(6)
    X = rng.standard_normal((700, 24))
    native = Memory(24, mode=mode, k=6, beta=8.0, seed=2)
    twin = Memory(24, mode=mode, k=6, beta=8.0, seed=2, backend="reference")
    native.write(X)
    twin.write(X)
    for q in X[:5] + 0.2 * rng.standard_normal((5, 24)):
        for strategy in ("fast", "iterative"):
            got, ref = native.analyze(q, strategy, k=30), twin.analyze(q, strategy, k=30)
            assert sorted(got.activated) == sorted(ref.activated)
            np.testing.assert_allclose(got.result, ref.result, rtol=1e-5, atol=1e-6)
