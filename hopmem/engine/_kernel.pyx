# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The only compiled module: thin typed wrappers over kernels/hopmem_kernel.c.

Inputs arrive validated (hopmem.engine.memory does that); these functions build the C
views over the State's arrays, release the GIL for the work, and write the
scalar state back. IN arguments are const memoryviews; outputs are allocated
here and returned.
"""

import sys

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, int32_t, int8_t, uint16_t, uint32_t, uint64_t
from libc.math cimport sqrt
from libc.stdlib cimport free, malloc
from scipy.linalg.cython_blas cimport sgemm

cnp.import_array()


cdef extern from "hopmem_threads.h" nogil:
    int hm_set_threads(int n)
    int hm_get_threads()
    void hm_set_split(double min_work, double min_work_held, double chunk_work)
    double HM_PARALLEL_MIN_WORK
    double HM_PARALLEL_MIN_WORK_HELD
    double HM_CHUNK_WORK
    int HM_MAX_THREADS


cdef extern from "amx_batch.h" nogil:
    int hm_amx_available()
    int hm_amx_split_a(const float *src, int64_t rows, int64_t cols, int64_t lds,
                       const float *colscale, int pieces, int64_t rows_p, int64_t cols_p,
                       uint16_t *out)
    int hm_amx_pack_b(const float *src, int64_t sk, int64_t sn, int64_t K, int64_t N,
                      int pieces, int64_t Kp, int64_t Np, uint16_t *out)
    int hm_amx_softmax_split(const float *S, int64_t lds, int64_t nq, int64_t nt, const double *m_old,
                             double *m_new, const float *scale, int64_t sub, int64_t rows_p, uint16_t *W)
    void hm_amx_accumulate(double *acc, int64_t nq, int64_t d, const double *alpha, const float *Y,
                           int64_t ldy)
    int hm_amx_exp(const float *x, int64_t n, float *out)
    int hm_amx_gemm_softmax(const uint16_t *A, int a_pieces, const uint16_t *B, int b_pieces, float *C,
                            int64_t ldc, int64_t Mp, int64_t Np, int64_t Kp, int precision, const float *S,
                            int64_t lds, int64_t nq, int64_t nt, const double *m_old, double *m_new,
                            const float *scale, int64_t sub, int64_t rows_p, uint16_t *W)
    int hm_amx_gemm(const uint16_t *A, int a_pieces, const uint16_t *B, int b_pieces,
                    float *C, int64_t ldc, int64_t Mp, int64_t Np, int64_t Kp, int precision)

cdef extern from "hopmem_kernel.h" nogil:
    ctypedef struct hm_state:
        int64_t dim
        int64_t size
        int64_t capacity
        int64_t *ids
        float *addresses
        void *addresses16
        double *counters
        double *weights
        double eta
        int64_t writes
        int64_t next_id
        uint64_t rng
        int64_t groups
        float *centroids
        double *radius
        int32_t *group_of
        int64_t *members
        int64_t *start
        int index_stale
        void *assign_dots
        double *norms
        int64_t n_exceptions
        int64_t *exception_rows
        double *exception_counters

    ctypedef struct hm_config:
        int competitive
        int64_t k
        double beta
        int64_t t_max
        double epsilon
        double eta_decay, eta_min
        double tau_split, tau_merge, tau_overload
        double gamma, tau_damp
        int64_t max_locations
        int compact
        int64_t iter_copy_max
        int64_t probe

    ctypedef struct hm_write_log:
        int64_t *touched
        int32_t *n_touched
        int64_t touched_stride
        int64_t *created
        int32_t *n_created
        int64_t *merges
        int64_t merges_capacity
        int64_t n_merges

    void hm_dots(const float *A, int64_t n, int64_t dim, const float *x, float *out)
    void hm_dots_batch(const float *A, int64_t n, int64_t dim, const float *X, int64_t nq,
                       float *out)
    int hm_has_compact()
    int hm_to_half(const float *x, int64_t n, void *out)
    void hm_scan(const hm_state *s, const hm_config *c, const float *X, int64_t nq, float *out)
    int64_t hm_top_k(const float *values, int64_t n, int64_t k, int64_t *rows, float *top)
    int64_t hm_search_unit(const float *A, const void *half, int64_t n, int64_t dim,
                           const float *q, int64_t k, int64_t *rows, float *top)
    int hm_write(hm_state *s, const hm_config *c, const float *X, int64_t m, hm_write_log *log)
    double hm_score_error(int64_t dim, int half)
    double hm_cosine(const float *a, const float *b, int64_t dim)
    void hm_unit_rows(const float *X, int64_t n, int64_t dim, float *out)
    int64_t hm_read(const hm_state *s, const hm_config *c, const float *q, const float *dots,
                    double dots_error, int fast_only, float *result, float *fast_result, int64_t *rows,
                    double *sims, double *weights, int32_t *iterations, int8_t *converged)
    int hm_read_streams(const hm_state *s, const hm_config *c, int fast_only)
    void hm_stream_force_portable(int on)
    int hm_read_probed(const hm_state *s, const hm_config *c, const float *Q, int64_t nq,
                       int fast_only, float *results, float *fast_results, int64_t *rows,
                       double *sims, double *weights, int32_t *iterations, int8_t *converged)
    int hm_read_full(const hm_state *s, const hm_config *c, const float *Q, int64_t nq,
                     int fast_only, float *results, int32_t *iterations, int8_t *converged)
    int hm_hopfield(const float *X, int64_t n, int64_t dim, const float *Q, int64_t nq,
                    double beta, int64_t steps, double epsilon, float *out, int32_t *iterations)
    int64_t hm_attention(const hm_state *s, const hm_config *c, const float *q, double scale,
                         float *result, int64_t *rows, double *sims, double *weights)
    int64_t hm_index_groups(int64_t rows)
    int hm_index_build(hm_state *s, int64_t iterations, int64_t per_group, int64_t k,
                       double max_visits,
                       double *visits)
    void hm_index_refresh(hm_state *s)
    void hm_index_extend(hm_state *s, int64_t frm)
    void hm_sync_norms(hm_state *s)
    int64_t hm_inputs_check(const float *X, int64_t m, int64_t dim)
    int64_t hm_rows_check(const hm_state *s)
    void hm_release_counters(hm_state *s)
    void hm_counter_rows(const hm_state *s, int64_t frm, int64_t to, double *out)
    int64_t hm_merge(hm_state *s, int64_t bound, double tau, int64_t *merges,
                     int64_t max_merges)


cdef void _batch_scores(const hm_state *s, const float *Q, int64_t nq, float *out,
                        float *unit) noexcept nogil:
    """out[q * L + j] = dot(Q[q], a_j) for a block of queries, by BLAS sgemm.

    A batch is where a matrix product pays: BLAS keeps a tile of the address
    matrix in registers for many queries at once (the single-query scan cannot).
    Its summation order differs from the kernel's scan, so batched scores can
    differ from single-query scores in the last bits. Row-major out (nq, L) is
    column-major (L, nq) = A Q^T.
    """
    cdef char transa = b'T', transb = b'N'
    cdef int m = <int>s.size, n = <int>nq, k = <int>s.dim
    cdef int lda = <int>s.dim, ldb = <int>s.dim, ldc = <int>s.size
    cdef float alpha = 1.0, beta = 0.0
    hm_unit_rows(Q, nq, s.dim, unit)  # queries are scored as unit vectors
    sgemm(&transa, &transb, &m, &n, &k, &alpha, s.addresses, &lda, unit, &ldb,
          &beta, out, &ldc)


# Write in chunks so that the capacity reserved ahead (2 rows per vector) stays small.
WRITE_CHUNK = 4096
# Batched reads score this many queries per pass over the address matrix.
cdef int64_t READ_BLOCK = 64


cdef hm_state _view(state) except *:
    # The arrays are created by hopmem.engine._state.State with these exact dtypes and
    # C order; reading their data pointers directly keeps small calls cheap.
    cdef hm_state s
    cdef cnp.ndarray ids = state.ids
    cdef cnp.ndarray addresses = state.addresses
    cdef cnp.ndarray counters = state.held_counters  # None: implied (see State)
    cdef cnp.ndarray weights = state.weights
    if (ids.dtype.num != cnp.NPY_INT64 or addresses.dtype.num != cnp.NPY_FLOAT32
            or weights.dtype.num != cnp.NPY_FLOAT64
            or not (cnp.PyArray_IS_C_CONTIGUOUS(addresses)
                    and cnp.PyArray_IS_C_CONTIGUOUS(ids) and cnp.PyArray_IS_C_CONTIGUOUS(weights))):
        raise TypeError("hopmem kernel: state arrays have unexpected dtypes or layout")
    if counters is not None and (counters.dtype.num != cnp.NPY_FLOAT64
                                 or not cnp.PyArray_IS_C_CONTIGUOUS(counters)):
        raise TypeError("hopmem kernel: the state's counters have an unexpected dtype or layout")
    if counters is None and state.norms is None:
        raise TypeError("hopmem kernel: implied counters need the state's norms")
    s.dim = state.dim
    s.size = state.size
    s.capacity = cnp.PyArray_DIM(ids, 0)
    s.ids = <int64_t *>cnp.PyArray_DATA(ids)
    s.addresses = <float *>cnp.PyArray_DATA(addresses)
    half = state.addresses16
    if half is None:
        s.addresses16 = NULL
    else:
        if (<cnp.ndarray>half).dtype.num != cnp.NPY_FLOAT16 or cnp.PyArray_DIM(half, 0) != s.capacity:
            raise TypeError("hopmem kernel: the half copy of the addresses is out of shape")
        s.addresses16 = cnp.PyArray_DATA(half)
    s.counters = NULL if counters is None else <double *>cnp.PyArray_DATA(counters)
    s.n_exceptions = 0
    s.exception_rows = NULL
    s.exception_counters = NULL
    if counters is None:
        _view_exceptions(state, &s)
    s.weights = <double *>cnp.PyArray_DATA(weights)
    norms = state.norms
    if norms is None:
        s.norms = NULL
    else:
        if ((<cnp.ndarray>norms).dtype.num != cnp.NPY_FLOAT64 or cnp.PyArray_NDIM(norms) != 1
                or cnp.PyArray_DIM(norms, 0) != s.capacity
                or not cnp.PyArray_IS_C_CONTIGUOUS(norms)):
            raise TypeError("hopmem kernel: the state's row norms are out of shape")
        s.norms = <double *>cnp.PyArray_DATA(norms)
    s.eta = state.eta
    s.writes = state.writes
    s.next_id = state.next_id
    s.rng = <uint64_t>state.rng
    _view_index(state.index, &s)
    return s


cdef void _view_exceptions(state, hm_state *s) except *:
    """The rows whose counters a state that holds none keeps (see State)."""
    cdef cnp.ndarray rows = state.exception_rows
    cdef cnp.ndarray counters = state.exception_counters
    cdef int64_t n = state.n_exceptions
    if (rows.dtype.num != cnp.NPY_INT64 or counters.dtype.num != cnp.NPY_FLOAT64
            or cnp.PyArray_NDIM(counters) != 2 or cnp.PyArray_DIM(counters, 1) != s.dim
            or cnp.PyArray_DIM(rows, 0) != cnp.PyArray_DIM(counters, 0)
            or not (0 <= n <= cnp.PyArray_DIM(rows, 0))
            or not (cnp.PyArray_IS_C_CONTIGUOUS(rows) and cnp.PyArray_IS_C_CONTIGUOUS(counters))):
        raise TypeError("hopmem kernel: the state's exception rows are out of shape")
    s.n_exceptions = n
    s.exception_rows = <int64_t *>cnp.PyArray_DATA(rows)
    s.exception_counters = <double *>cnp.PyArray_DATA(counters)


cdef void _blas_dots(const float *A, int64_t n, int64_t dim, const float *X, int64_t nq,
                     float *out) noexcept nogil:
    """hm_dots_batch by BLAS sgemm: out[q * n + j] = dot(A[j], X[q]) (row-major
    (nq, n) is column-major (n, nq) = A X^T). An approximate memory's index
    assigns rows to centroids with it."""
    cdef char transa = b'T', transb = b'N'
    cdef int m = <int>n, nn = <int>nq, k = <int>dim
    cdef int lda = <int>dim, ldb = <int>dim, ldc = <int>n
    cdef float alpha = 1.0, beta = 0.0
    sgemm(&transa, &transb, &m, &nn, &k, &alpha, <float *>A, &lda, <float *>X, &ldb,
          &beta, out, &ldc)


cdef void _view_index(index, hm_state *s) except *:
    s.index_stale = 0
    s.assign_dots = NULL
    if index is None or not index.useful:
        s.groups = 0
        s.centroids = NULL
        s.radius = NULL
        s.group_of = NULL
        s.members = NULL
        s.start = NULL
        return
    cdef cnp.ndarray centroids = index.centroids
    cdef cnp.ndarray radius = index.radius
    cdef cnp.ndarray group_of = index.group_of
    cdef cnp.ndarray members = index.members
    cdef cnp.ndarray start = index.start
    cdef int64_t groups = index.groups
    if (centroids.dtype.num != cnp.NPY_FLOAT32 or radius.dtype.num != cnp.NPY_FLOAT64
            or group_of.dtype.num != cnp.NPY_INT32 or members.dtype.num != cnp.NPY_INT64
            or start.dtype.num != cnp.NPY_INT64
            or cnp.PyArray_DIM(centroids, 0) != groups or cnp.PyArray_DIM(centroids, 1) != s.dim
            or cnp.PyArray_DIM(radius, 0) != groups or cnp.PyArray_DIM(start, 0) != groups + 1
            or cnp.PyArray_DIM(group_of, 0) < s.capacity or cnp.PyArray_DIM(members, 0) < s.capacity
            or not (cnp.PyArray_IS_C_CONTIGUOUS(centroids) and cnp.PyArray_IS_C_CONTIGUOUS(radius)
                    and cnp.PyArray_IS_C_CONTIGUOUS(group_of)
                    and cnp.PyArray_IS_C_CONTIGUOUS(members) and cnp.PyArray_IS_C_CONTIGUOUS(start))):
        raise TypeError("hopmem kernel: the location index is out of shape")
    s.groups = groups
    s.centroids = <float *>cnp.PyArray_DATA(centroids)
    s.radius = <double *>cnp.PyArray_DATA(radius)
    s.group_of = <int32_t *>cnp.PyArray_DATA(group_of)
    s.members = <int64_t *>cnp.PyArray_DATA(members)
    s.start = <int64_t *>cnp.PyArray_DATA(start)
    if index.approximate:
        s.assign_dots = <void *>_blas_dots


INDEX_ITERATIONS = 2    # rounds of spherical k-means when building the location index
INDEX_MAX_VISITS = 0.3  # used only if a read would score at most this share of the rows
INDEX_ENABLED = True    # False: every activation scans (benchmarks compare the two)
# An iterative read runs its steps on float64 copies of the k activated rows while
# k * dim is at most this (128 KiB a copy: in L2), else on the float32 rows. The
# same bits either way; read when a memory's kernel config is made (tests set 0).
ITER_COPY_MAX = 16384


def sync_norms(state):
    """Recompute the state's row norms (|counters row|, as the kernel keeps them
    with every change) from its counters: after the arrays were set wholesale."""
    cdef hm_state s = _view(state)
    if s.norms != NULL:
        hm_sync_norms(&s)


def inputs_check(const float[:, ::1] X):
    """The rows of X whose counters a plain state that holds none would keep
    (exceptions), or -2 when one of them needs the counters held (see
    "implied counters" in kernels/hopmem_kernel.c)."""
    cdef int64_t rc = 0
    if X.shape[0] > 0:
        with nogil:
            rc = hm_inputs_check(&X[0, 0], X.shape[0], X.shape[1])
    if rc == -1:
        raise MemoryError("hopmem kernel: out of memory checking inputs")
    return rc


def _few_exceptions(int64_t exceptions, int64_t rows):
    """Whether a state of ``rows`` rows holds no counters with this many
    exceptions: one row in 16 at most (inputs that are not unit, whose rows
    are mostly exceptions, are better held: no search for each row)."""
    return 16 * exceptions <= rows


def release_counters(state):
    """Stop holding the counters of a plain state whose rows all allow it: the
    few rows that need theirs keep them as exceptions. Returns whether it did."""
    cdef hm_state s = _view(state)
    cdef int64_t n
    if s.counters == NULL:
        return True
    with nogil:
        n = hm_rows_check(&s)
    if n < 0 or not _few_exceptions(n, s.size):
        return False
    state.reserve_exceptions(n)
    _view_exceptions(state, &s)
    with nogil:
        hm_release_counters(&s)
    state.held_counters = None
    state.n_exceptions = s.n_exceptions
    return True


def counter_rows(state, int64_t start, int64_t stop, double[:, ::1] out):
    """out[:] = the counters of rows start .. stop, held or not."""
    cdef hm_state s = _view(state)
    if not (0 <= start <= stop <= s.size) or out.shape[0] != stop - start or out.shape[1] != s.dim:
        raise ValueError("counter_rows: rows or output out of range")
    if stop > start:
        with nogil:
            hm_counter_rows(&s, start, stop, &out[0, 0])


def refresh_index(state):
    """Rebuild the index's member lists after rows were truncated, or restored in
    place to earlier addresses of the same rows (benchmarks rewinding a write)."""
    cdef hm_state s
    if state.index is not None and state.index.useful:
        s = _view(state)
        hm_index_refresh(&s)


def note_change(state):
    """After rows were added, moved or restored (state exclusively held): mark
    the location index for building at the next read if one is due.

    Due when the memory reaches hm_index_groups' minimum, and again when it
    has doubled or halved since the last build. Never for compact activation
    (its half scan is another path) or with INDEX_ENABLED off. Building waits
    for a read (see Memory's read paths), so a store's replay on open or a
    run of writes pays nothing for it.
    """
    if state.addresses16 is not None or not INDEX_ENABLED:
        state.index = None
        state.index_pending = False
        return
    cdef int64_t rows = state.size
    index = state.index
    if index is None:
        state.index_pending = hm_index_groups(rows) > 0
    elif not (index.rows <= 2 * rows and rows <= 2 * index.rows):
        state.index_pending = True


INDEX_MIN_ROWS = 512  # hm_index_groups' minimum: no index below it
# An approximate memory's index decides which rows a read sees, so it is fitted
# harder than the exact one (which only prunes): rounds of spherical k-means, on
# this many sample rows a group (hopmem/_reference.py fits it the same way).
APPROX_INDEX_ITERATIONS = 10
APPROX_INDEX_SAMPLE = 32
# Groups of an approximate memory's index fitted on T rows: this many times sqrt(T).
# 4 (with 16 sample rows a group and 5 rounds) takes a diffuse set to 0.99 recall
# and reads faster, but a million writes take about 1.8 times as long (index
# assignment is rows x groups dot products): see docs/approximate.md.
APPROX_GROUPS_PER_ROOT = 2.0


def approximate_groups(int64_t rows):
    """Groups of an approximate memory's index fitted on ``rows`` rows (0 below INDEX_MIN_ROWS)."""
    if rows < INDEX_MIN_ROWS:
        return 0
    return max(16, <int64_t>(<double>APPROX_GROUPS_PER_ROOT * sqrt(<double>rows)))


def approximate_index_rows(int64_t rows):
    """The rows an approximate memory's index is fitted on: the largest
    INDEX_MIN_ROWS * 2**j not above ``rows`` (0 below INDEX_MIN_ROWS).

    The index of an approximate memory is a function of its rows alone:
    spherical k-means fitted on rows [0, T), then rows [T, L) each added to
    its nearest centroid, as writes add them. Writes fit it anew the moment
    the memory reaches the next T (they stop a batch there for it), and a
    restored memory fits it the same way, so the same rows give the same
    index, and the same reads, whatever the batching, the reads in between
    or a snapshot and restore on the way.
    """
    if rows < INDEX_MIN_ROWS:
        return 0
    cdef int64_t t = INDEX_MIN_ROWS
    while 2 * t <= rows:
        t *= 2
    return t


def approximate_index(state, k):
    """Fit (or keep) an approximate memory's index: see approximate_index_rows.
    Called by writes as they cross a fitting point, and by the first read after a
    restore or a compaction dropped it. The state must not change meanwhile."""
    state.index_pending = False
    cdef int64_t rows = state.size, fit = approximate_index_rows(state.size), groups
    cdef hm_state s
    cdef int rc
    cdef double visits = 1.0
    cdef int64_t iterations = APPROX_INDEX_ITERATIONS, per_group = APPROX_INDEX_SAMPLE
    index = state.index
    if fit == 0:
        state.index = None
        return
    if index is not None and index.rows == fit and index.useful:
        return
    groups = approximate_groups(fit)
    from hopmem.engine._state import LocationIndex
    fresh = LocationIndex(groups, state.dim, state.capacity, fit, int(k))
    fresh.useful = True
    fresh.approximate = True
    state.index = None
    s = _view(state)
    _view_index(fresh, &s)
    s.size = fit
    with nogil:
        rc = hm_index_build(&s, iterations, per_group, 1, 1e300, &visits)
        if rc == 0 and s.groups > 0:
            s.size = rows
            hm_index_extend(&s, fit)
    if rc == -1:
        raise MemoryError("hopmem kernel: out of memory fitting the location index")
    if rc == 0 and s.groups > 0:
        fresh.visits = visits
        state.index = fresh


def maintain_index(state, k=None, *, groups=None, force=False):
    """Build (or rebuild, or drop) the location index now, if one is due.

    Called by the first read after note_change marked it due, under a lock,
    while the memory's readers-writer lock keeps writers out: the state does
    not change meanwhile, other readers scan until the new index is published
    (one assignment). The index is then judged on sample rows used as queries:
    reads use it only where it skips most of the scan (clustered locations, as
    competitive writes make; plain memories of scattered inputs usually scan).
    The index never changes a result, only which rows an activation scores.
    ``groups`` and ``force`` (tests) build one now with that many groups and
    use it whatever it costs.
    """
    state.index_pending = False
    cdef int64_t rows = state.size, kk
    cdef hm_state s
    cdef int rc
    cdef int64_t iterations = INDEX_ITERATIONS
    cdef double visits = 1.0
    index = state.index
    if state.addresses16 is not None or not INDEX_ENABLED:
        state.index = None
        return
    if (groups is None and index is not None and index.rows <= 2 * rows
            and rows <= 2 * index.rows):
        return
    groups = hm_index_groups(rows) if groups is None else min(int(groups), rows)
    if groups == 0:
        state.index = None
        return
    kk = int(k if k is not None else (index.k if index is not None else 20))
    from hopmem.engine._state import LocationIndex
    fresh = LocationIndex(groups, state.dim, state.capacity, rows, kk)
    fresh.useful = True
    state.index = None
    s = _view(state)
    _view_index(fresh, &s)
    cdef double max_visits = 1e300 if force else INDEX_MAX_VISITS
    with nogil:
        rc = hm_index_build(&s, iterations, 8, kk, max_visits, &visits)
    if rc == 0 and s.groups > 0:
        fresh.visits = visits
        fresh.useful = force or visits <= INDEX_MAX_VISITS
        state.index = fresh


cdef void _store(state, hm_state *s) except *:
    state.size = s.size
    state.n_exceptions = s.n_exceptions
    state.eta = s.eta
    state.writes = s.writes
    state.next_id = s.next_id
    state.rng = int(s.rng)


cdef class KernelConfig:
    """A MemoryConfig converted once to the C struct (reads are called often)."""
    cdef hm_config c
    cdef readonly object k
    cdef readonly object config  # the MemoryConfig it was made from

    def __cinit__(self, cfg):
        self.k = int(cfg.k)
        self.config = cfg
        self.c.competitive = 1 if cfg.mode == "competitive" else 0
        self.c.k = cfg.k
        self.c.beta = cfg.beta
        self.c.t_max = cfg.t_max
        self.c.epsilon = cfg.epsilon
        self.c.eta_decay = cfg.eta_decay
        self.c.eta_min = cfg.eta_min
        self.c.tau_split = cfg.tau_split
        self.c.tau_merge = cfg.tau_merge
        self.c.tau_overload = cfg.tau_overload
        self.c.gamma = cfg.gamma
        self.c.tau_damp = cfg.tau_damp
        self.c.max_locations = cfg.max_locations or 0
        self.c.compact = 1 if getattr(cfg, "activation", "exact") == "compact" else 0
        self.c.iter_copy_max = ITER_COPY_MAX
        self.c.probe = cfg.probe if getattr(cfg, "activation", "exact") == "approximate" else 0


cdef hm_config _config(cfg) except *:
    if isinstance(cfg, KernelConfig):
        return (<KernelConfig>cfg).c
    return KernelConfig(cfg).c


cdef _raise(int64_t rc, what):
    if rc == -1:
        raise MemoryError(f"hopmem kernel: out of memory in {what}")
    raise RuntimeError(f"hopmem kernel: {what} failed with code {rc} (a bug: please report)")


def write(state, cfg, const float[:, ::1] X):
    """Write the rows of X in order. Returns (touched, created, merges) by id."""
    cdef hm_config c = _config(cfg)
    cdef hm_state s
    cdef hm_write_log log
    cdef int64_t m_all = X.shape[0], start = 0, m, i, rc
    cdef int64_t stride = max(1, c.k)
    touched_out = []
    created_out = []
    merges_out = []
    cdef bint approximate = c.probe > 0
    cdef int64_t fit_at
    if state.held_counters is None:
        need = -2 if c.competitive else inputs_check(X)
        if need < 0 or not _few_exceptions(state.n_exceptions + need, state.size + m_all):
            state.hold_counters()  # an input outside the rule, or too many exceptions
        else:
            state.reserve_exceptions(need)
    while start < m_all:
        m = min(<int64_t>WRITE_CHUNK, m_all - start)
        if approximate and not c.competitive:
            # stop where the index is fitted anew (approximate_index_rows)
            fit_at = max(INDEX_MIN_ROWS, 2 * approximate_index_rows(state.size))
            if state.size < fit_at:
                m = min(m, fit_at - state.size)
        state.reserve(2 * m)
        s = _view(state)
        excess = max(0, s.size - c.max_locations) if c.max_locations > 0 else 0
        touched = np.empty((m, stride), dtype=np.int64)
        n_touched = np.empty(m, dtype=np.int32)
        created = np.empty((m, 2), dtype=np.int64)
        n_created = np.empty(m, dtype=np.int32)
        merges = np.empty((3 * m + excess, 3), dtype=np.int64)
        log.touched = <int64_t *>cnp.PyArray_DATA(touched)
        log.n_touched = <int32_t *>cnp.PyArray_DATA(n_touched)
        log.touched_stride = stride
        log.created = <int64_t *>cnp.PyArray_DATA(created)
        log.n_created = <int32_t *>cnp.PyArray_DATA(n_created)
        log.merges = <int64_t *>cnp.PyArray_DATA(merges)
        log.merges_capacity = 3 * m + excess
        with nogil:
            rc = hm_write(&s, &c, &X[start, 0], m, &log)
        _store(state, &s)
        if rc != 0:
            _raise(rc, "write")
        # Views of this chunk's log, one per vector (a copy each cost ~1 us a vector).
        touched_out.extend([row[:n] for row, n in zip(touched, n_touched.tolist())])
        created_out.extend([row[:n] for row, n in zip(created, n_created.tolist())])
        merges_out.extend((int(r[1]), int(r[2])) for r in merges[: log.n_merges])
        start += m
        if approximate:
            approximate_index(state, c.k)
        else:
            note_change(state)
    return touched_out, created_out, merges_out


def read(state, cfg, const float[:, ::1] Q, bint fast_only):
    """Read every row of Q. Returns a list of (rows, sims, weights, iterations,
    converged, result, fast_result, fidelity, first_contact)."""
    cdef hm_config c = _config(cfg)
    cdef hm_state s = _view(state)
    cdef int64_t nq = Q.shape[0], d = s.dim, L = s.size
    cdef int64_t kmax = min(c.k, L), q, b, nb, kk = 0
    results = np.empty((nq, d), dtype=np.float32)
    fast_results = np.empty((nq, d), dtype=np.float32)
    rows = np.empty((nq, kmax), dtype=np.int64)
    sims = np.empty((nq, kmax), dtype=np.float64)
    weights = np.empty((nq, kmax), dtype=np.float64)
    iterations = np.empty(nq, dtype=np.int32)
    converged = np.empty(nq, dtype=np.int8)
    cdef float[:, ::1] res_v = results, fast_v = fast_results
    cdef int64_t[:, ::1] rows_v = rows
    cdef double[:, ::1] sims_v = sims, w_v = weights
    cdef int32_t[::1] it_v = iterations
    cdef int8_t[::1] conv_v = converged
    cdef float[:, ::1] dots_v, unit_v
    cdef double blas_error = hm_score_error(d, 0)
    if nq == 0:
        return []
    cdef int rc = 0
    if nq > 1 and s.groups > 0:  # approximate: the queries grouped by the groups they probe
        with nogil:
            rc = hm_read_probed(&s, &c, &Q[0, 0], nq, fast_only, &res_v[0, 0], &fast_v[0, 0],
                                &rows_v[0, 0], &sims_v[0, 0], &w_v[0, 0], &it_v[0], &conv_v[0])
        if rc < 0:
            _raise(rc, "read")
    # One query at a time: with a location index each query's own activation is
    # cheaper, and a full activation streams the rows without scores from BLAS.
    if rc == 1:
        pass
    elif nq == 1 or s.groups > 0 or hm_read_streams(&s, &c, fast_only):
        with nogil:
            for q in range(nq):
                kk = hm_read(&s, &c, &Q[q, 0], NULL, 0.0, fast_only, &res_v[q, 0], &fast_v[q, 0],
                             &rows_v[q, 0], &sims_v[q, 0], &w_v[q, 0], &it_v[q], &conv_v[q])
                if kk < 0:
                    break
        if kk < 0:
            _raise(kk, "read")
    else:
        dots = np.empty((min(READ_BLOCK, nq), L), dtype=np.float32)
        dots_v = dots
        unit_v = np.empty((min(READ_BLOCK, nq), d), dtype=np.float32)
        with nogil:
            b = 0
            while b < nq:
                nb = min(READ_BLOCK, nq - b)
                _batch_scores(&s, &Q[b, 0], nb, &dots_v[0, 0], &unit_v[0, 0])
                for q in range(nb):
                    kk = hm_read(&s, &c, &Q[b + q, 0], &dots_v[q, 0], blas_error, fast_only,
                                 &res_v[b + q, 0], &fast_v[b + q, 0], &rows_v[b + q, 0],
                                 &sims_v[b + q, 0], &w_v[b + q, 0], &it_v[b + q],
                                 &conv_v[b + q])
                    if kk < 0:
                        break
                if kk < 0:
                    break
                b += nb
        if kk < 0:
            _raise(kk, "batched read")
    fidelity = np.empty(nq, dtype=np.float64)
    first_contact = np.empty(nq, dtype=np.float64)
    cdef double[::1] fid_v = fidelity, fc_v = first_contact
    with nogil:
        for q in range(nq):
            fid_v[q] = hm_cosine(&Q[q, 0], &res_v[q, 0], d)
            fc_v[q] = hm_cosine(&Q[q, 0], &fast_v[q, 0], d)
    return [(rows[i], sims[i], weights[i], int(iterations[i]), bool(converged[i]),
             results[i], fast_results[i], float(fidelity[i]), float(first_contact[i]))
            for i in range(nq)]


def read_one(state, cfg, q, bint fast_only, bint scores=False):
    """The lean single read behind Memory.read, or None when it does not apply.

    Applies to the common query: a 1-D, C-contiguous, aligned, native-order
    float32 array of the memory's dimension with finite values, on a memory
    that is not empty. Anything else returns None and the caller validates and
    reads the general way (so every error is raised there, with its message).
    Returns the float32 (d,) reconstruction, bit-equal to read_results; with
    ``scores``, ``(result, fidelity, first_contact)`` bit-equal to read's.
    """
    cdef cnp.ndarray arr
    if type(q) is not np.ndarray:
        return None
    arr = <cnp.ndarray>q
    if (cnp.PyArray_NDIM(arr) != 1 or cnp.PyArray_TYPE(arr) != cnp.NPY_FLOAT32
            or not cnp.PyArray_IS_C_CONTIGUOUS(arr) or not cnp.PyArray_ISALIGNED(arr)
            or not cnp.PyArray_ISNOTSWAPPED(arr)):
        return None
    cdef hm_state s = _view(state)
    cdef int64_t d = s.dim
    if cnp.PyArray_DIM(arr, 0) != d or s.size == 0:
        return None
    cdef const float *x = <const float *>cnp.PyArray_DATA(arr)
    cdef int64_t i
    for i in range(d):
        if x[i] - x[i] != 0:  # NaN or infinity
            return None
    cdef hm_config c = _config(cfg)
    cdef int64_t kmax = min(c.k, s.size), kk
    cdef cnp.ndarray result = cnp.PyArray_EMPTY(1, cnp.PyArray_DIMS(arr), cnp.NPY_FLOAT32, 0)
    cdef float *res = <float *>cnp.PyArray_DATA(result)
    # scratch: rows (int64), sims, weights [kmax each], then the fast result (d floats)
    cdef double *scratch = <double *>malloc((3 * kmax + 3) * sizeof(double)
                                            + (d * sizeof(float) if scores else 0))
    if scratch == NULL:
        raise MemoryError("hopmem kernel: out of memory in read")
    cdef float *fast = <float *>(scratch + 3 * kmax + 3) if scores else NULL
    cdef int32_t it
    cdef int8_t conv
    cdef double fidelity = 0.0, first_contact = 0.0
    cdef bint trace = not hm_read_streams(&s, &c, fast_only)  # streamed: no ranking wanted
    with nogil:
        kk = hm_read(&s, &c, x, NULL, 0.0, fast_only, res, fast,
                     <int64_t *>scratch if trace else NULL, scratch + kmax if trace else NULL,
                     scratch + 2 * kmax if trace else NULL, &it, &conv)
        if kk >= 0 and scores:
            fidelity = hm_cosine(x, res, d)
            first_contact = hm_cosine(x, fast, d)
    free(scratch)
    if kk < 0:
        _raise(kk, "read")
    if scores:
        return result, fidelity, first_contact
    return result


def read_results(state, cfg, const float[:, ::1] Q, bint fast_only):
    """Only the reconstructions, float32 (nq, d): the lean path behind Memory.read."""
    cdef hm_config c = _config(cfg)
    cdef hm_state s = _view(state)
    cdef int64_t nq = Q.shape[0], d = s.dim, L = s.size
    cdef int64_t kmax = min(c.k, L), q, b, nb, kk = 0
    cdef cnp.ndarray results = np.empty((nq, d), dtype=np.float32)
    cdef cnp.ndarray scratch = np.empty(3 * kmax + 3, dtype=np.float64)
    cdef float *res = <float *>cnp.PyArray_DATA(results)
    cdef double *sc = <double *>cnp.PyArray_DATA(scratch)
    # scratch layout: rows (int64, kmax) | sims | weights
    cdef int64_t *rows = <int64_t *>sc
    cdef double *sims = sc + kmax
    cdef double *weights = sc + 2 * kmax
    cdef float *fast = NULL  # not wanted: an iterative read then skips the fast read-out
    cdef int32_t it
    cdef int8_t conv
    cdef float[:, ::1] dots_v, unit_v
    cdef double blas_error = hm_score_error(d, 0)
    cdef int rc
    cdef cnp.ndarray its, convs
    cdef int64_t *p_rows
    cdef double *p_f64
    cdef int32_t *p_its
    cdef int8_t *p_convs
    if nq == 0:
        return results
    if hm_read_streams(&s, &c, fast_only):
        # Full activation: the batch streams the rows once a step for four
        # queries at a time, each query's bits its single read's.
        its = np.empty(nq, dtype=np.int32)
        convs = np.empty(nq, dtype=np.int8)
        with nogil:
            rc = hm_read_full(&s, &c, &Q[0, 0], nq, fast_only, res,
                              <int32_t *>cnp.PyArray_DATA(its), <int8_t *>cnp.PyArray_DATA(convs))
        if rc < 0:
            _raise(rc, "read")
        return results
    if nq > 1 and s.groups > 0:  # approximate: the queries grouped by the groups they probe
        probe_rows = np.empty((nq, kmax), dtype=np.int64)
        probe_f64 = np.empty((2, nq, kmax), dtype=np.float64)  # sims, weights
        its = np.empty(nq, dtype=np.int32)
        convs = np.empty(nq, dtype=np.int8)
        p_rows = <int64_t *>cnp.PyArray_DATA(probe_rows)
        p_f64 = <double *>cnp.PyArray_DATA(probe_f64)
        p_its = <int32_t *>cnp.PyArray_DATA(its)
        p_convs = <int8_t *>cnp.PyArray_DATA(convs)
        with nogil:
            rc = hm_read_probed(&s, &c, &Q[0, 0], nq, fast_only, res, NULL, p_rows, p_f64,
                                p_f64 + nq * kmax, p_its, p_convs)
        if rc < 0:
            _raise(rc, "read")
        if rc == 1:
            return results
    if nq == 1 or s.groups > 0:  # with a location index, each query's own activation is cheaper
        with nogil:
            for q in range(nq):
                kk = hm_read(&s, &c, &Q[q, 0], NULL, 0.0, fast_only, res + q * d, fast, rows,
                             sims, weights, &it, &conv)
                if kk < 0:
                    break
    else:
        dots_v = np.empty((min(READ_BLOCK, nq), L), dtype=np.float32)
        unit_v = np.empty((min(READ_BLOCK, nq), d), dtype=np.float32)
        with nogil:
            b = 0
            while b < nq and kk >= 0:
                nb = min(READ_BLOCK, nq - b)
                _batch_scores(&s, &Q[b, 0], nb, &dots_v[0, 0], &unit_v[0, 0])
                for q in range(nb):
                    kk = hm_read(&s, &c, &Q[b + q, 0], &dots_v[q, 0], blas_error, fast_only,
                                 res + (b + q) * d, fast, rows, sims, weights, &it, &conv)
                    if kk < 0:
                        break
                b += nb
    if kk < 0:
        _raise(kk, "read")
    return results


def hopfield(const float[:, ::1] X, const float[:, ::1] Q, double beta, int64_t steps,
             double epsilon):
    """The modern Hopfield update on the caller's rows (validated by hopmem.hopfield).

    Returns (states float32 (nq, d), iterations int32 (nq,)); X is read in place.
    """
    cdef int64_t n = X.shape[0], d = X.shape[1], nq = Q.shape[0]
    cdef int rc = 0
    cdef cnp.npy_intp shape[2]
    shape[0] = nq
    shape[1] = d
    # Made with the C API, not typed memoryviews: a call at N = 1,000 is ~40 us,
    # of which acquiring two views more would be ~1 us.
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(2, shape, cnp.NPY_FLOAT32, 0)
    cdef cnp.ndarray iterations = cnp.PyArray_ZEROS(1, shape, cnp.NPY_INT32, 0)
    if nq == 0 or d == 0:
        return out, iterations
    cdef float *o = <float *>cnp.PyArray_DATA(out)
    cdef int32_t *it = <int32_t *>cnp.PyArray_DATA(iterations)
    with nogil:
        rc = hm_hopfield(&X[0, 0], n, d, &Q[0, 0], nq, beta, steps, epsilon, o, it)
    if rc < 0:
        _raise(rc, "hopfield")
    return out, iterations


def stream_force_portable(bint on):
    """For tests: streamed (full-activation) reads take their portable code (fmaf
    and fma per lane) instead of AVX2 and FMA instructions. Not thread-safe."""
    hm_stream_force_portable(on)


def attention(state, cfg, const float[::1] q, double scale):
    cdef hm_config c = _config(cfg)
    cdef hm_state s = _view(state)
    cdef int64_t kmax = min(c.k, s.size), kk
    result = np.empty(s.dim, dtype=np.float32)
    rows = np.empty(kmax, dtype=np.int64)
    sims = np.empty(kmax, dtype=np.float64)
    weights = np.empty(kmax, dtype=np.float64)
    cdef float[::1] r_v = result
    cdef int64_t[::1] rows_v = rows
    cdef double[::1] s_v = sims, w_v = weights
    with nogil:
        kk = hm_attention(&s, &c, &q[0], scale, &r_v[0], &rows_v[0], &s_v[0], &w_v[0])
    if kk < 0:
        _raise(kk, "attention")
    return rows, sims, weights, result


def _merge(state, int64_t bound, double tau):
    state.hold_counters()  # merged rows add counters: held (State.drop_implied_counters after)
    cdef hm_state s = _view(state)
    cdef int64_t cap = max(1, s.size), count
    merges = np.empty((cap, 3), dtype=np.int64)
    cdef int64_t[:, ::1] m_v = merges
    with nogil:
        count = hm_merge(&s, bound, tau, &m_v[0, 0], cap)
    _store(state, &s)
    note_change(state)
    if count < 0:
        _raise(count, "merge")
    return [(int(r[1]), int(r[2])) for r in merges[:count]]


def merge_closest_until(state, int64_t bound):
    """Merge the most similar pair until size <= bound; returns (removed, survivor) ids."""
    return _merge(state, bound, 0.0)


def merge_above(state, double tau):
    """Merge the most similar pair while its cosine exceeds tau."""
    return _merge(state, -1, tau)


def all_finite(const float[::1] values):
    """True when every value is finite (no NaN, no infinity)."""
    cdef Py_ssize_t i, j, end, n = values.shape[0]
    cdef const uint32_t *bits
    cdef uint32_t bad = 0
    if n == 0:
        return True
    bits = <const uint32_t *>&values[0]
    with nogil:
        # A float is NaN or infinite when its exponent bits are all ones. The
        # inner loop has no exit, so it vectorises; blocks keep the early exit.
        i = 0
        while i < n and not bad:
            end = min(i + 4096, n)
            for j in range(i, end):
                bad |= (bits[j] & 0x7F800000u) == 0x7F800000u
            i = end
    return not bad


def posting_lists(list touched, list created):
    """Each vector's posting list from a write's log: the ids it touched or created.

    ``touched[i]`` and ``created[i]`` are the write's int64 id arrays for vector
    ``i`` (``WriteResult.touched`` / ``.created``). Returns ``(lists, blobs)``:
    per vector the ids sorted and unique (``WriteResult.postings(i)``), as a list
    of ints and as little-endian int64 bytes (the stored form). About 0.5 us a
    vector, against 6 us for the same in Python.
    """
    cdef Py_ssize_t n = len(touched), i, a, b, j, u
    cdef const int64_t[:] t, c
    cdef int64_t ids[64]
    cdef int64_t v
    if len(created) != n:
        raise ValueError("touched and created: expected one array per vector each")
    lists = []
    blobs = []
    for i in range(n):
        t = touched[i]
        c = created[i]
        a = t.shape[0]
        b = c.shape[0]
        if a + b > 64:  # longer than any real log (k ids + 2): the general path
            merged = np.unique(np.concatenate([np.asarray(t), np.asarray(c)])).astype("<i8")
            lists.append(merged.tolist())
            blobs.append(merged.tobytes())
            continue
        for j in range(a):
            ids[j] = t[j]
        for j in range(b):
            ids[a + j] = c[j]
        for j in range(1, a + b):  # insertion sort: a few ids
            v = ids[j]
            u = j - 1
            while u >= 0 and ids[u] > v:
                ids[u + 1] = ids[u]
                u -= 1
            ids[u + 1] = v
        u = 0
        for j in range(a + b):  # unique, in place
            if j == 0 or ids[j] != ids[u - 1]:
                ids[u] = ids[j]
                u += 1
        out = [ids[j] for j in range(u)]
        lists.append(out)
        if _LITTLE_ENDIAN:
            blobs.append((<char *>ids)[:u * 8])
        else:
            blobs.append(np.asarray(out, dtype="<i8").tobytes())
    return lists, blobs


_LITTLE_ENDIAN = sys.byteorder == "little"


MAX_THREADS = HM_MAX_THREADS


def set_threads(int n):
    """Threads the scans may use, the caller's included (1: no helpers); returns the value set."""
    return hm_set_threads(n)


def get_threads():
    """Threads the scans may use, the caller's included."""
    return hm_get_threads()


def set_split(min_work=None, min_work_held=None, chunk_work=None):
    """For tests: when scans are shared and in what chunks (None: the default).

    ``set_split(0, 0, 0)`` shares every scan in chunks of four rows, so small
    test memories take the threaded paths. Set it while no scan runs.
    """
    hm_set_split(HM_PARALLEL_MIN_WORK if min_work is None else min_work,
                 HM_PARALLEL_MIN_WORK_HELD if min_work_held is None else min_work_held,
                 HM_CHUNK_WORK if chunk_work is None else chunk_work)


def has_compact():
    """Whether this build supports compact (half-precision) activation."""
    return bool(hm_has_compact())


def to_half(const float[::1] src, out):
    """out[:] = src rounded to float16 (as ``src.astype(np.float16)``), vectorised.

    out: a writable C-contiguous float16 array of the same size. Returns False,
    writing nothing, when this build has no half type (the caller converts).
    """
    cdef cnp.ndarray o = out
    cdef int64_t n = src.shape[0]
    cdef int rc = 1
    if (o.dtype.num != cnp.NPY_FLOAT16 or not cnp.PyArray_IS_C_CONTIGUOUS(o)
            or not o.flags.writeable or cnp.PyArray_SIZE(o) != n):
        raise ValueError("out: expected a writable C-contiguous float16 array of the source's size")
    cdef void *op = cnp.PyArray_DATA(o)
    if n == 0:
        return True
    with nogil:
        rc = hm_to_half(&src[0], n, op)
    return bool(rc)


def dots(const float[:, ::1] A, const float[::1] x):
    """dot(A[j], x) for every row, with the kernel's float32 lanes."""
    out = np.empty(A.shape[0], dtype=np.float32)
    cdef float[::1] o = out
    if A.shape[0] == 0:
        return out
    with nogil:
        hm_dots(&A[0, 0], A.shape[0], A.shape[1], &x[0], &o[0])
    return out


def search(const float[:, ::1] A, const float[:, ::1] Q, int64_t k):
    """Exact top-k rows of A by dot product for each query row of Q.

    Returns (rows int64 (nq, k'), scores float32 (nq, k')); ties go to the lower row.
    """
    cdef int64_t n = A.shape[0], d = A.shape[1], nq = Q.shape[0]
    cdef int64_t kk = min(k, n), b, nb, q, rc = 0
    rows = np.empty((nq, kk), dtype=np.int64)
    top = np.empty((nq, kk), dtype=np.float32)
    if nq == 0 or kk == 0:
        return rows, top
    cdef int64_t[:, ::1] rows_v = rows
    cdef float[:, ::1] top_v = top
    dots_buf = np.empty((min(READ_BLOCK, nq), n), dtype=np.float32)
    cdef float[:, ::1] dots_v = dots_buf
    with nogil:
        b = 0
        while b < nq:
            nb = min(READ_BLOCK, nq - b)
            if nb == 1:
                hm_dots(&A[0, 0], n, d, &Q[b, 0], &dots_v[0, 0])
            else:
                hm_dots_batch(&A[0, 0], n, d, &Q[b, 0], nb, &dots_v[0, 0])
            for q in range(nb):
                rc = hm_top_k(&dots_v[q, 0], n, kk, &rows_v[b + q, 0], &top_v[b + q, 0])
                if rc < 0:
                    break
            if rc < 0:
                break
            b += nb
    if rc < 0:
        _raise(rc, "search")
    return rows, top


def search_unit(const float[:, ::1] A, half, const float[:, ::1] Q, int64_t k):
    """Exact top-k by cosine over rows of norm <= 1, one query at a time.

    half: None, or a float16 (n, d) copy of A to scan first; candidates are
    re-scored exactly, so the answer is the same either way. Returns
    (rows int64 (nq, k'), cosines float32 (nq, k')); ties go to the lower row.
    """
    cdef int64_t n = A.shape[0], d = A.shape[1], nq = Q.shape[0]
    cdef int64_t kk = min(k, n), q, rc = 0
    cdef const void *hp = NULL
    cdef cnp.ndarray h
    rows = np.empty((nq, kk), dtype=np.int64)
    top = np.empty((nq, kk), dtype=np.float32)
    if nq == 0 or kk == 0:
        return rows, top
    if half is not None:
        h = half
        if (h.dtype.num != cnp.NPY_FLOAT16 or not cnp.PyArray_IS_C_CONTIGUOUS(h)
                or cnp.PyArray_DIM(h, 0) != n or cnp.PyArray_DIM(h, 1) != d):
            raise ValueError("half: expected a C-contiguous float16 array shaped like A")
        hp = cnp.PyArray_DATA(h)
    cdef int64_t[:, ::1] rows_v = rows
    cdef float[:, ::1] top_v = top
    with nogil:
        for q in range(nq):
            rc = hm_search_unit(&A[0, 0], hp, n, d, &Q[q, 0], kk, &rows_v[q, 0], &top_v[q, 0])
            if rc < 0:
                break
    if rc < 0:
        _raise(rc, "search")
    return rows, top


# AMX bf16 tile products for batched reads (kernels/amx_batch.h, hopmem/_batched.py).

def amx_available():
    """Whether this CPU, OS and build run AMX bf16 tiles (asks Linux once for the tile state)."""
    return bool(hm_amx_available())


def amx_split(const float[:, :] src, colscale, int pieces, int64_t rows_p, int64_t cols_p,
              uint16_t[:, :, ::1] out):
    """out[p] = bf16 piece p of src (times colscale per column, float32), zero padded.

    src: rows with unit element stride; out: (pieces, rows_p, cols_p)."""
    cdef int64_t rows = src.shape[0], cols = src.shape[1]
    cdef int64_t lds = src.strides[0] // 4 if rows > 1 else cols
    cdef const float[::1] sc
    cdef const float *scp = NULL
    cdef const float *sp = NULL
    if cols > 1 and src.strides[1] != 4:
        raise ValueError(f"src: expected rows of contiguous float32, got an element stride of {src.strides[1]} bytes")
    if out.shape[0] != pieces or out.shape[1] != rows_p or out.shape[2] != cols_p:
        raise ValueError(f"out: expected shape {(pieces, rows_p, cols_p)}, got {(out.shape[0], out.shape[1], out.shape[2])}")
    if colscale is not None:
        sc = colscale
        if sc.shape[0] != cols:
            raise ValueError(f"colscale: expected {cols} float32 values (one a column), got {sc.shape[0]}")
        if cols > 0:
            scp = &sc[0]
    if rows > 0 and cols > 0:
        sp = &src[0, 0]
    cdef int rc
    with nogil:
        rc = hm_amx_split_a(sp, rows if cols > 0 else 0, cols, lds, scp, pieces, rows_p, cols_p, &out[0, 0, 0])
    if rc < 0:
        raise ValueError(f"amx_split: expected AMX, 1 to 3 pieces and src within the padded shape, "
                         f"got {pieces} pieces, src {(rows, cols)}, padded {(rows_p, cols_p)}"
                         f"{'' if hm_amx_available() else ' (no AMX here)'}")


def amx_pack_b(const float[:, :] src, int pieces, int64_t Kp, int64_t Np):
    """The bf16 pieces of src (K x N) in the AMX B layout, (pieces, Kp * Np) uint16."""
    cdef int64_t K = src.shape[0], N = src.shape[1]
    out = np.empty((pieces, Kp * Np), dtype=np.uint16)
    cdef uint16_t[:, ::1] o = out
    cdef int64_t sk = src.strides[0] // 4, sn = src.strides[1] // 4
    cdef const float *sp = &src[0, 0] if K > 0 and N > 0 else NULL
    cdef int rc
    with nogil:
        rc = hm_amx_pack_b(sp, sk, sn, K if N > 0 else 0, N if K > 0 else 0, pieces, Kp, Np, &o[0, 0])
    if rc < 0:
        raise ValueError(f"amx_pack_b: expected AMX, 1 to 3 pieces and src within Kp x Np (multiples of 32), "
                         f"got {pieces} pieces, src {(K, N)}, padded {(Kp, Np)}"
                         f"{'' if hm_amx_available() else ' (no AMX here)'}")
    return out


def amx_gemm(const uint16_t[:, :, ::1] A, const uint16_t[:, ::1] B, float[:, :] C, int precision):
    """C (Mp x Np) = A (pieces, Mp, Kp) times B (pieces, Kp * Np, AMX layout), precision 3 or 6."""
    cdef int64_t Mp = A.shape[1], Kp = A.shape[2], Np = C.shape[1]
    cdef int64_t ldc = C.strides[0] // 4
    if C.shape[0] != Mp or B.shape[1] != Kp * Np or (Np > 1 and C.strides[1] != 4):
        raise ValueError(f"amx_gemm: expected A (p, Mp, Kp), B (p, Kp * Np), C (Mp, Np) with contiguous rows, "
                         f"got A {(A.shape[0], A.shape[1], A.shape[2])}, B {(B.shape[0], B.shape[1])}, C {(C.shape[0], C.shape[1])}")
    cdef int rc
    with nogil:
        rc = hm_amx_gemm(&A[0, 0, 0], <int>A.shape[0], &B[0, 0], <int>B.shape[0], &C[0, 0], ldc,
                         Mp, Np, Kp, precision)
    if rc < 0:
        raise ValueError(f"amx_gemm: expected AMX, multiples of 32 and enough pieces for precision 3 (2) "
                         f"or 6 (3), got precision {precision}, {A.shape[0]} and {B.shape[0]} pieces, "
                         f"shape {(Mp, Np, Kp)}{'' if hm_amx_available() else ' (no AMX here)'}")


cdef const float *_softmax_tile_args(str name, const float[:, :] S, int64_t nq, int64_t nt,
                                     const double[::1] m_old, const double[::1] m_new, scale, int64_t sub,
                                     int64_t rows_p, const uint16_t[::1] W) except? NULL:
    """Check a softmax tile's arguments (amx_softmax_split, amx_gemm_softmax); the column scales' data, or
    NULL without them (``scale`` must outlive the call that uses the pointer)."""
    cdef const float[::1] sc
    cdef int64_t nsub = (nt + sub - 1) // sub if sub > 0 else 0
    cdef int64_t last = nt - (nsub - 1) * sub if nsub > 0 else 0
    if (nq < 1 or nt < 1 or S.shape[0] < nq or S.shape[1] < nt or (S.shape[1] > 1 and S.strides[1] != 4)
            or m_old.shape[0] < nq or m_new.shape[0] < nq or sub < 32 or sub % 32 or rows_p < nq
            or W.shape[0] < (nsub - 1) * 2 * rows_p * sub + 2 * rows_p * ((last + 31) // 32 * 32)):
        raise ValueError(f"{name}: expected S (>= nq, >= nt) with contiguous rows, nq maxima, "
                         f"sub a multiple of 32 and W large enough, got S {(S.shape[0], S.shape[1])}, "
                         f"nq {nq}, nt {nt}, sub {sub}, rows_p {rows_p}, W {W.shape[0]}")
    if scale is None:
        return NULL
    sc = scale
    if sc.shape[0] < nt:
        raise ValueError(f"scale: expected {nt} float32 values (one a column), got {sc.shape[0]}")
    return &sc[0]


def amx_softmax_split(const float[:, :] S, int64_t nq, int64_t nt, const double[::1] m_old,
                      double[::1] m_new, scale, int64_t sub, int64_t rows_p, uint16_t[::1] W):
    """The read-out weights exp(S - max) (times scale) of a tile of logits, in bf16 pieces.

    S: (>= nq, >= nt) float32 logits with contiguous rows; m_old, m_new: (nq,)
    running maxima before and after the tile; W: blocks of sub columns, block
    b at b * 2 * rows_p * sub, each (2, rows_p, pad32(its columns))."""
    cdef int64_t lds = S.strides[0] // 4 if S.shape[0] > 1 else S.shape[1]
    cdef const float *scp = _softmax_tile_args("amx_softmax_split", S, nq, nt, m_old, m_new, scale, sub, rows_p, W)
    cdef int rc
    with nogil:
        rc = hm_amx_softmax_split(&S[0, 0], lds, nq, nt, &m_old[0], &m_new[0], scp, sub, rows_p, &W[0])
    if rc < 0:
        raise ValueError(f"amx_softmax_split: expected AMX, got none{'' if hm_amx_available() else ' (no AMX here)'}")


def amx_accumulate(double[:, ::1] acc, alpha, const float[:, :] Y):
    """acc = acc * alpha[:, None] + Y[:nq, :d] (alpha None: acc + Y), in one pass, float64."""
    cdef int64_t nq = acc.shape[0], d = acc.shape[1]
    cdef const double[::1] al
    cdef const double *ap = NULL
    if Y.shape[0] < nq or Y.shape[1] < d or (Y.shape[1] > 1 and Y.strides[1] != 4):
        raise ValueError(f"Y: expected at least {(nq, d)} float32 with contiguous rows, "
                         f"got {(Y.shape[0], Y.shape[1])}")
    if alpha is not None:
        al = alpha
        if al.shape[0] < nq:
            raise ValueError(f"alpha: expected {nq} float64 values, got {al.shape[0]}")
        ap = &al[0]
    if nq == 0 or d == 0:
        return
    cdef int64_t ldy = Y.strides[0] // 4
    with nogil:
        hm_amx_accumulate(&acc[0, 0], nq, d, ap, &Y[0, 0], ldy)


def amx_exp(const float[::1] x):
    """exp(x) (x <= 0) as the AMX softmax pass computes it, float32; for tests."""
    out = np.empty(x.shape[0], dtype=np.float32)
    cdef float[::1] o = out
    cdef int rc = 0
    if x.shape[0] > 0:
        with nogil:
            rc = hm_amx_exp(&x[0], x.shape[0], &o[0])
    if rc < 0:
        raise ValueError("amx_exp: expected AMX, got none (no AMX here)")
    return out


def amx_gemm_softmax(const uint16_t[:, :, ::1] A, const uint16_t[:, ::1] B, float[:, :] C, int precision,
                     const float[:, :] S, int64_t nq, int64_t nt, const double[::1] m_old,
                     double[::1] m_new, scale, int64_t sub, int64_t rows_p, uint16_t[::1] W):
    """amx_gemm(A, B, C, precision) with amx_softmax_split(S, ...) of another tile run
    between its tile products (the same bits as the two calls). S must not overlap C."""
    cdef int64_t Mp = A.shape[1], Kp = A.shape[2], Np = C.shape[1]
    cdef int64_t ldc = C.strides[0] // 4
    cdef int64_t lds = S.strides[0] // 4 if S.shape[0] > 1 else S.shape[1]
    if C.shape[0] != Mp or B.shape[1] != Kp * Np or (Np > 1 and C.strides[1] != 4):
        raise ValueError(f"amx_gemm_softmax: expected A (p, Mp, Kp), B (p, Kp * Np), C (Mp, Np) with contiguous rows, "
                         f"got A {(A.shape[0], A.shape[1], A.shape[2])}, B {(B.shape[0], B.shape[1])}, C {(C.shape[0], C.shape[1])}")
    cdef const float *scp = _softmax_tile_args("amx_gemm_softmax", S, nq, nt, m_old, m_new, scale, sub, rows_p, W)
    cdef int rc
    with nogil:
        rc = hm_amx_gemm_softmax(&A[0, 0, 0], <int>A.shape[0], &B[0, 0], <int>B.shape[0], &C[0, 0], ldc,
                                 Mp, Np, Kp, precision, &S[0, 0], lds, nq, nt, &m_old[0], &m_new[0], scp,
                                 sub, rows_p, &W[0])
    if rc < 0:
        raise ValueError(f"amx_gemm_softmax: expected AMX, multiples of 32 and enough pieces for precision 3 (2) "
                         f"or 6 (3), got precision {precision}, {A.shape[0]} and {B.shape[0]} pieces, "
                         f"shape {(Mp, Np, Kp)}{'' if hm_amx_available() else ' (no AMX here)'}")
