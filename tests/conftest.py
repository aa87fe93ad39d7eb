"""What every test shares: markers, Hypothesis profiles, the seed fixtures and the clustered data.

Markers (registered in pyproject.toml; ``--strict-markers`` rejects any other name)
-------------------------------------------------------------------------------------

``slow``
    Tens of seconds or more. Skipped unless ``CI=true`` or ``HOPMEM_SLOW_TESTS=1``
    (the hook below); CI runs them.
``model``
    Loads a real text model (all-MiniLM-L6-v2 through sentence-transformers).
    Such a test skips itself where the model is not installed.
``subprocess``
    Starts processes: Python children (crash tests, the live server, the CLI),
    a C compiler and its program (the ThreadSanitizer tests).
``notebook``
    Executes a notebook under notebooks/ headless with nbclient (which also
    starts a kernel process).

Select with ``-m``, for example::

    pytest -m "not slow"                      # what a default local run does anyway
    pytest -m "not model and not notebook"    # no model download or load, no notebooks
    HOPMEM_SLOW_TESTS=1 pytest -m slow        # only the slow ones, run

Hypothesis profiles
-------------------

``dev`` (the default) runs fewer examples for a quick local loop; ``ci`` (chosen
when ``CI`` is true) runs more, derandomized, so a CI run is reproducible, and
prints the blob that replays a failure. ``HYPOTHESIS_PROFILE=ci`` (or ``dev``)
chooses one explicitly. Both disable the deadline: timings on shared machines
are noise. A test keeps its own ``@settings`` only for a reason written next to
it (an expensive example, a health check that does not apply).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings

SLOW_ENV = "HOPMEM_SLOW_TESTS"


def _env_flag(name: str) -> bool:
    """An environment variable set to anything but "", "0", "false" or "no"."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def in_ci() -> bool:
    """True under CI (CI=true, as CI services set it)."""
    return _env_flag("CI")


def slow_tests_enabled() -> bool:
    return in_ci() or _env_flag(SLOW_ENV)


# -- Hypothesis -------------------------------------------------------------------------------

# Tests without their own max_examples cost a few ms an example: at 150 they take about what
# their hand-picked counts (50 to 300) took, so CI time stays put; dev spends a third of it.
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=150, deadline=None, derandomize=True, print_blob=True)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if in_ci() else "dev")
settings.load_profile(PROFILE)


# -- markers ----------------------------------------------------------------------------------


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if slow_tests_enabled():
        return
    skip = pytest.mark.skip(reason=f"slow: runs in CI (CI=true) or with {SLOW_ENV}=1")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> str:
    slow = "run" if slow_tests_enabled() else f"skipped (set CI=true or {SLOW_ENV}=1)"
    return f"hypothesis profile: {PROFILE}; slow tests: {slow}"


# -- seeds ------------------------------------------------------------------------------------


@pytest.fixture
def seed() -> int:
    """The seed a test draws its data from; parametrize ``seed`` to run a test on several."""
    return 0


@pytest.fixture
def rng(seed: int) -> np.random.Generator:
    """A generator seeded with ``seed``: the same data on every run."""
    return np.random.default_rng(seed)


# -- data -------------------------------------------------------------------------------------


def clustered(n: int, dim: int, *, rng: np.random.Generator | int = 0, centers: int = 6,
              noise: float = 0.3, centre_seed: int | None = None, duplicates: int = 0,
              unit: bool = False) -> np.ndarray:
    """``n`` float32 rows of ``dim`` components, in ``centers`` clusters.

    Each row is one of ``centers`` standard-normal centers (chosen uniformly)
    plus ``noise`` times standard-normal noise. The draws come in one fixed
    order (centers, assignments, noise, duplicates), so the same arguments give
    the same array.

    Parameters
    ----------
    rng
        A generator to draw from (successive calls then give fresh data) or a
        seed for a new one.
    centers, noise
        How many clusters, and the noise's scale relative to the centers' (1).
    centre_seed
        Draw the centers (as float32) from a generator of their own with this
        seed instead of from ``rng``: calls with different ``rng`` then sample
        the same clusters, for example one batch after another of a stream.
    duplicates
        Overwrite that many rows, chosen at random, with row 0: exact ties in
        every score.
    unit
        Scale every row to unit length.
    """
    rng = np.random.default_rng(rng)
    if centre_seed is None:
        points = rng.standard_normal((centers, dim))
    else:
        points = np.random.default_rng(centre_seed).standard_normal((centers, dim)).astype(np.float32)
    X = points[rng.integers(0, centers, n)] + noise * rng.standard_normal((n, dim))
    if duplicates:
        X[rng.integers(0, n, duplicates)] = X[0]
    if unit:
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32)


def assert_batch_agrees_with_single_reads(mem, Q: np.ndarray, strategy: str, atol: float) -> None:
    """``mem.read(Q, strategy)`` is within ``atol`` of reading each row alone, and gives the same bits
    on 4 hopmem threads as on the current setting."""
    import hopmem

    batch = mem.read(Q, strategy)
    single = np.stack([mem.read(q, strategy) for q in Q])
    np.testing.assert_allclose(batch, single, rtol=0, atol=atol)
    before = hopmem.get_threads()
    try:
        hopmem.set_threads(4)
        np.testing.assert_array_equal(mem.read(Q, strategy), batch)
    finally:
        hopmem.set_threads(before)


# -- Ray (hopmem.cluster) ---------------------------------------------------------------------

CLUSTER_SKIP = "Ray is not installed (the optional extra hopmem[cluster])"


def ray_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("ray") is not None


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """ONE local Ray cluster (2 shard hosts) for the whole session, shut down at its end.

    Starting Ray costs 5-10 s, so every cluster test shares this one; each test
    works in databases of its own (:func:`cluster_db_name`).
    """
    if not ray_installed():
        pytest.skip(CLUSTER_SKIP)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    from hopmem.cluster import start_local
    cluster = start_local(hosts=2, root=str(tmp_path_factory.mktemp("cluster")))
    try:
        yield cluster
    finally:
        cluster.shutdown()


_CLUSTER_DBS = iter(range(1, 1 << 30))


def cluster_db_name(prefix: str = "t") -> str:
    """A database name not used before in this session's cluster."""
    return f"{prefix}{next(_CLUSTER_DBS)}"


class StoreOpener:
    """``opener(dim=None, **config)``: a database to use in a ``with`` block, reopened on
    each later call: a file (``hopmem.open(path)``) or a cluster database (``start_local``)."""

    def __init__(self, kind: str, path: str, cluster=None, replicas: int = 1) -> None:
        self.kind = kind
        self.path = path
        self.cluster = cluster
        self.replicas = replicas
        self.name = cluster_db_name() if cluster is not None else None

    def __call__(self, dim=None, **config):
        if self.cluster is None:
            import hopmem
            return hopmem.open(self.path, dim, **config)
        if dim is not None and not self.cluster.exists(self.name):
            return self.cluster.create(self.name, dim, replicas=self.replicas, **config)
        return self.cluster.get(self.name)


@pytest.fixture(params=["local", "cluster", "cluster-r2"])
def store_opener(request, tmp_path):
    """The store API tests' databases: a local file, then the same on a Ray cluster, with
    one copy of each shard and with two (replicated: every write forwarded to a follower)."""
    if request.param.startswith("cluster"):
        return StoreOpener("cluster", "", request.getfixturevalue("ray_cluster"),
                           replicas=2 if request.param == "cluster-r2" else 1)
    return StoreOpener("local", str(tmp_path / "db.hopmem"))
