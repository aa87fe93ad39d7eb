"""Pure-NumPy twin of every kernel function: the test oracle.

Readable first, fast never. Each function follows docs/algorithm.md step by step
and works on the same :class:`~hopmem.engine._state.State` the C kernel mutates, so a
test can run both on copies of one state and compare.

Numerical conventions shared with the kernel (the tests rely on them):

* activation scores are ``dot(x, a_j) / |x|`` (addresses are unit or zero), in
  float64 here and float32 with float32 lanes in C; ranking is by score, then
  lower row (= lower id);
* every other quantity is computed in float64 and rounded to float32 only
  when stored into ``addresses``, returned as a result, or used as a unit
  pattern in the iterative read (the kernel streams those as float32);
* the random generator is splitmix64, turned into Gaussians by Box-Muller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ._state import SPLITMIX_GAMMA, State
from .config import MemoryConfig

__all__ = [
    "TINY", "normalize", "activate", "activate_approximate", "approximate_index", "write",
    "read", "attention",
    "merge_closest_until", "merge_above", "WriteLog", "ReadTrace",
]

TINY = 1e-12
_MASK64 = (1 << 64) - 1


def normalize(v: np.ndarray) -> np.ndarray:
    """``v / |v|`` in float64; ``v`` unchanged when its norm is below 1e-12."""
    v = np.asarray(v, dtype=np.float64)
    norm = math.sqrt(float(np.dot(v, v)))
    return v if norm < TINY else v / norm


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    na = math.sqrt(float(np.dot(a, a)))
    nb = math.sqrt(float(np.dot(b, b)))
    if na < TINY or nb < TINY:
        return 0.0
    return float(np.dot(a, b)) / (na * nb)


# -- random generator ---------------------------------------------------------

def _splitmix(state: int) -> tuple[int, int]:
    state = (state + SPLITMIX_GAMMA) & _MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return state, z ^ (z >> 31)


def random_unit(state: State) -> np.ndarray:
    """A unit Gaussian direction of ``state.dim``; advances ``state.rng``."""
    out = np.empty(state.dim, dtype=np.float64)
    rng = state.rng
    for i in range(state.dim):
        rng, a = _splitmix(rng)
        rng, b = _splitmix(rng)
        u1 = ((a >> 11) + 1) * (1.0 / 9007199254740992.0)  # (0, 1]
        u2 = (b >> 11) * (1.0 / 9007199254740992.0)        # [0, 1)
        out[i] = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    state.rng = rng
    return normalize(out)


# -- activation ----------------------------------------------------------------

def scores(addresses: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Activation scores cos(x, a_j) for every row (0 when |x| is ~0)."""
    x64 = np.asarray(x, dtype=np.float64)
    norm = math.sqrt(float(np.dot(x64, x64)))
    if norm < TINY or addresses.shape[0] == 0:
        return np.zeros(addresses.shape[0], dtype=np.float64)
    # Row-wise sums (not BLAS) so that equal rows get bit-equal scores.
    return (addresses.astype(np.float64) * x64).sum(axis=1) / norm


def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Rows of the k largest values, best first; ties go to the lower row."""
    rows = np.arange(values.shape[0])
    order = np.lexsort((rows, -values))
    return order[: min(k, values.shape[0])]


def activate(state: State, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    s = scores(state.addresses[: state.size], x)
    rows = top_k(s, k)
    return rows, s[rows]


# -- approximate activation (an inverted-file probe of the location index) --------

INDEX_MIN_ROWS = 512
INDEX_ITERATIONS = 10  # rounds of spherical k-means (the kernel's APPROX_INDEX_ITERATIONS)
INDEX_SAMPLE = 32      # sample rows a group (APPROX_INDEX_SAMPLE)
GROUPS_PER_ROOT = 2.0  # groups per sqrt(rows fitted on) (APPROX_GROUPS_PER_ROOT)


def index_groups(rows: int) -> int:
    """Groups of an approximate memory's index fitted on ``rows`` rows (0: none below 512)."""
    return 0 if rows < INDEX_MIN_ROWS else max(16, int(GROUPS_PER_ROOT * math.sqrt(rows)))


def approximate_index_rows(rows: int) -> int:
    """The rows an approximate memory's index is fitted on: the largest
    512 * 2**j not above ``rows`` (0 below 512)."""
    if rows < INDEX_MIN_ROWS:
        return 0
    t = INDEX_MIN_ROWS
    while 2 * t <= rows:
        t *= 2
    return t


def _nearest(centroids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Each row's group: the centroid with the highest dot product, ties to the lower."""
    s = rows.astype(np.float64) @ centroids.astype(np.float64).T
    return np.argmax(s, axis=1)  # first maximum: the lower group


def approximate_index(state: State) -> tuple[np.ndarray, np.ndarray]:
    """An approximate memory's index as a function of its rows: ``(centroids,
    group_of)`` (float32 ``(G, d)``, each row's group), or empty arrays below
    512 rows.

    Spherical k-means (``INDEX_ITERATIONS`` rounds) on ``INDEX_SAMPLE`` rows a group, evenly
    spaced over the first T = ``approximate_index_rows(L)`` rows (all T when
    that is fewer), seeded with evenly spaced rows of those; then every row
    joins its nearest centroid, as the kernel's writes add rows after T.
    """
    L = state.size
    fit = approximate_index_rows(L)
    if fit == 0:
        return np.zeros((0, state.dim), np.float32), np.zeros(0, np.int64)
    groups = index_groups(fit)
    addresses = state.addresses[:L]
    ns = INDEX_SAMPLE * groups
    sample = addresses[(np.arange(ns) * fit) // ns] if ns < fit else addresses[:fit]
    n = sample.shape[0]
    centroids = sample[(np.arange(groups) * n) // groups].astype(np.float64)
    centroids = np.array([normalize(c) for c in centroids]).astype(np.float32)
    for _ in range(INDEX_ITERATIONS):
        group = _nearest(centroids, sample)
        for g in range(groups):
            members = sample[group == g]
            if members.shape[0] == 0:
                continue  # an empty group keeps its centroid
            total = members.astype(np.float64).sum(axis=0)
            if math.sqrt(float(np.dot(total, total))) >= TINY:
                centroids[g] = normalize(total).astype(np.float32)
    return centroids, _nearest(centroids, addresses)


def activate_approximate(state: State, x: np.ndarray, k: int, probe: int,
                         centroids: np.ndarray, group_of: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Approximate activation: the exact top k of the rows of the ``probe``
    groups whose centroids score highest for ``x`` (ties to the lower group),
    and of further groups in that order while those hold fewer than k rows.
    Exact activation without an index (fewer than 512 rows) or for a zero query."""
    L = state.size
    x64 = np.asarray(x, dtype=np.float64)
    if centroids.shape[0] == 0 or math.sqrt(float(np.dot(x64, x64))) < TINY:
        return activate(state, x, k)  # no index, or a zero query (every score 0): exact
    order = top_k(scores(centroids, x), centroids.shape[0])
    sizes = np.bincount(group_of[:L], minlength=centroids.shape[0])
    chosen: list[int] = []
    held = 0
    for g in order:
        if len(chosen) >= probe and held >= min(k, L):
            break
        chosen.append(int(g))
        held += int(sizes[g])
    rows = np.flatnonzero(np.isin(group_of[:L], chosen))
    s = scores(state.addresses[rows], x)
    best = top_k(s, k)
    return rows[best], s[best]


def _activate(state: State, cfg: MemoryConfig, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A read's activation: exact, or approximate for ``activation="approximate"``."""
    if cfg.activation == "approximate":
        centroids, group_of = approximate_index(state)
        return activate_approximate(state, x, k, cfg.probe, centroids, group_of)
    return activate(state, x, k)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max())
    return z / z.sum()


# -- writes ----------------------------------------------------------------------

@dataclass
class WriteLog:
    """Per written vector: ids that absorbed it, ids created, merges (removed, survivor)."""

    touched: list[list[int]] = field(default_factory=list)
    created: list[list[int]] = field(default_factory=list)
    merges: list[list[tuple[int, int]]] = field(default_factory=list)


def _append(state: State, address: np.ndarray, counter: np.ndarray, weight: float) -> int:
    state.reserve(1)
    row = state.size
    new_id = state.next_id
    state.ids[row] = new_id
    state.addresses[row] = address
    state.counters[row] = counter
    state.weights[row] = weight
    state.size += 1
    state.next_id += 1
    return new_id


def _spawn(state: State, x: np.ndarray) -> int:
    return _append(state, normalize(x).astype(np.float32), np.asarray(x, np.float64), 1.0)


def _remove_row(state: State, row: int) -> None:
    n = state.size
    for arr in (state.ids, state.addresses, state.counters, state.weights):
        arr[row : n - 1] = arr[row + 1 : n].copy()
    state.size = n - 1


def _merge_rows(state: State, keep: int, drop: int) -> tuple[int, int]:
    """Merge row ``drop`` into row ``keep``; returns (removed id, survivor id)."""
    nk, nd = state.weights[keep], state.weights[drop]
    address = normalize(nk * state.addresses[keep].astype(np.float64)
                        + nd * state.addresses[drop].astype(np.float64))
    state.addresses[keep] = address.astype(np.float32)
    state.counters[keep] = state.counters[keep] + state.counters[drop]
    state.weights[keep] = nk + nd
    event = (int(state.ids[drop]), int(state.ids[keep]))
    _remove_row(state, drop)
    return event


def _closest_pair(state: State) -> tuple[int, int, float]:
    """Rows (i < j) of the most similar pair of addresses; ties to the lowest (i, j)."""
    n = state.size
    a = state.addresses[:n].astype(np.float64)
    # Addresses are unit, or tiny (an input of norm < 1e-12 kept unchanged):
    # cos is 0 for a tiny one (docs/algorithm.md), not its underflowing dot product.
    tiny = np.sqrt((a * a).sum(axis=1)) < TINY
    best = (-1, -1, -np.inf)
    for i in range(n - 1):
        sims = (a[i + 1 :] * a[i]).sum(axis=1)
        sims[tiny[i + 1 :] | tiny[i]] = 0.0
        j = int(np.argmax(sims))  # argmax takes the first maximum: lowest j
        if sims[j] > best[2]:
            best = (i, i + 1 + j, float(sims[j]))
    return best


def merge_closest_until(state: State, bound: int) -> list[tuple[int, int]]:
    """Merge the most similar pair (keeping the older id) until size <= bound."""
    events = []
    while state.size > bound and state.size >= 2:
        i, j, _ = _closest_pair(state)
        events.append(_merge_rows(state, i, j))
    return events


def merge_above(state: State, tau: float) -> list[tuple[int, int]]:
    """Merge the most similar pair while its cosine exceeds ``tau``."""
    events = []
    while state.size >= 2:
        i, j, sim = _closest_pair(state)
        if not sim > tau:
            break
        events.append(_merge_rows(state, i, j))
    return events


def _row_of(state: State, location_id: int) -> int:
    return int(np.searchsorted(state.ids[: state.size], location_id))


def _write_competitive(state: State, cfg: MemoryConfig, x: np.ndarray, log: WriteLog) -> None:
    touched: list[int] = []
    created: list[int] = []
    merges: list[tuple[int, int]] = []
    state.writes += 1
    if state.size == 0:
        created.append(_spawn(state, x))
    else:
        x64 = x.astype(np.float64)
        rows, sims = activate(state, x, cfg.k)
        s_max = float(sims[0])
        winner_id = None
        if s_max > TINY:
            w = np.maximum(sims, 0.0) / s_max
            n_act = state.weights[rows]
            total = float(n_act.sum())
            if total > TINY:
                # Only locations that absorb (w > 0) may win; the first maximum wins.
                merit = np.where(w > 0.0, sims - cfg.gamma * n_act / total, -np.inf)
                winner = int(rows[int(np.argmax(merit))])
            else:
                winner = int(rows[0])
            eta_w = state.eta / (1.0 + state.weights[winner] / cfg.tau_damp)
            for row, wj in zip(rows, w):
                if wj <= 0.0:
                    continue
                rate = eta_w if row == winner else 0.1 * eta_w
                state.counters[row] += wj * x64
                state.weights[row] += wj
                a = state.addresses[row].astype(np.float64)
                state.addresses[row] = normalize(a + rate * (x64 - a)).astype(np.float32)
                touched.append(int(state.ids[row]))
            state.eta = max(state.eta * cfg.eta_decay, cfg.eta_min)
            winner_id = int(state.ids[winner])
        spawned = None
        if s_max < cfg.tau_split:
            spawned = _spawn(state, x)
            created.append(spawned)
        child = None
        if winner_id is not None:
            w_row = _row_of(state, winner_id)
            if state.weights[w_row] > cfg.tau_overload:
                r = random_unit(state)
                parent = state.addresses[w_row].astype(np.float64)
                half_c = state.counters[w_row] * 0.5
                half_n = state.weights[w_row] * 0.5
                state.counters[w_row] = half_c
                state.weights[w_row] = half_n
                child = _append(state, normalize(parent + 0.1 * r).astype(np.float32),
                                half_c.copy(), half_n)
                created.append(child)
        if spawned is not None and child is not None:
            rs, rc = _row_of(state, spawned), _row_of(state, child)
            if cosine(state.addresses[rs], state.addresses[rc]) > cfg.tau_merge:
                merges.append(_merge_rows(state, rs, rc))
        if cfg.max_locations is not None and state.size > cfg.max_locations:
            merges.extend(merge_closest_until(state, cfg.max_locations))
    log.touched.append(touched)
    log.created.append(created)
    log.merges.append(merges)


def write(state: State, cfg: MemoryConfig, vectors: np.ndarray) -> WriteLog:
    """Write the rows of ``vectors`` (float32, validated) in order."""
    log = WriteLog()
    for x in np.asarray(vectors, dtype=np.float32):
        if cfg.competitive:
            _write_competitive(state, cfg, x, log)
        else:
            state.writes += 1
            log.created.append([_spawn(state, x)])
            log.touched.append([])
            log.merges.append([])
    return log


# -- reads -------------------------------------------------------------------------

@dataclass
class ReadTrace:
    rows: np.ndarray          # activated rows, best first
    similarities: np.ndarray  # cos(query, address) of each
    weights: np.ndarray       # softmax weights of the step that made the result
    iterations: int
    converged: bool
    result: np.ndarray        # float32 (d,)
    fast_result: np.ndarray   # float32 (d,): the one-step read, for first_contact


def _fast(state: State, cfg: MemoryConfig, rows: np.ndarray, sims: np.ndarray):
    alpha = softmax(cfg.beta * sims)
    patterns = state.counters[rows] / state.weights[rows][:, None]
    return normalize(alpha @ patterns), alpha


def read(state: State, cfg: MemoryConfig, query: np.ndarray, strategy: str) -> ReadTrace:
    """One read of a non-empty memory ("fast" or "iterative")."""
    rows, sims = _activate(state, cfg, query, cfg.k)
    fast, alpha = _fast(state, cfg, rows, sims)
    if strategy == "fast":
        return ReadTrace(rows, sims, alpha, 1, True, fast.astype(np.float32),
                         fast.astype(np.float32))
    addresses = state.addresses[rows].astype(np.float64)
    # Unit patterns are rounded to float32, as the kernel streams them (the
    # state itself still moves in float64).
    units = np.array([normalize(c) for c in state.counters[rows]]).reshape(len(rows), -1)
    units = units.astype(np.float32).astype(np.float64)
    xi = normalize(query)
    converged = False
    iterations = 0
    weights = alpha
    for _ in range(cfg.t_max):
        iterations += 1
        norm = math.sqrt(float(np.dot(xi, xi)))
        s = (addresses @ xi) / norm if norm >= TINY else np.zeros(len(rows))
        weights = softmax(cfg.beta * s)
        nxt = normalize(weights @ units)
        converged = cosine(xi, nxt) > 1.0 - cfg.epsilon
        xi = nxt
        if converged:
            break
    return ReadTrace(rows, sims, weights, iterations, converged, xi.astype(np.float32),
                     fast.astype(np.float32))


def attention(state: State, cfg: MemoryConfig, query: np.ndarray, scale: float):
    """Softmax attention over the activated locations: returns (rows, sims, alpha, result)."""
    rows, sims = _activate(state, cfg, query, cfg.k)
    patterns = state.counters[rows] / state.weights[rows][:, None]
    logits = scale * (patterns @ query.astype(np.float64)) + np.log(state.weights[rows])
    alpha = softmax(logits)
    return rows, sims, alpha, (alpha @ patterns).astype(np.float32)
