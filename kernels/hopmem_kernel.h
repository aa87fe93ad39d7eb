/* hopmem kernel: the hot loops of the associative memory, portable C99.
 *
 * No Python here. The caller (hopmem/_kernel.pyx) owns every array, validates
 * every input and reserves capacity; these functions never allocate memory the
 * caller sees and report failure only before they mutate anything.
 *
 * Conventions (shared with hopmem/_reference.py, the NumPy oracle):
 *   - rows are kept in ascending id order, so "lower id" == "lower row";
 *   - activation score of row j for x is dot(x / |x|, a_j) (addresses are unit
 *     or zero; the unit query is rounded to float32 first), computed with
 *     float32 lanes in one fixed order for every row;
 *     ranking: higher score first, ties to the lower row;
 *   - everything else is float64, rounded to float32 only when stored in an
 *     address, returned as a result, or streamed as a unit pattern in the
 *     iterative read (the state there still moves in float64).
 */
#ifndef HOPMEM_KERNEL_H
#define HOPMEM_KERNEL_H

#include <stdint.h>

#define HM_TINY 1e-12

enum {
    HM_OK = 0,
    HM_ERR_NOMEM = -1,     /* scratch allocation failed (nothing changed) */
    HM_ERR_CAPACITY = -2,  /* caller reserved too few rows (nothing changed) */
    HM_ERR_LOG = -3        /* caller's write-log buffers too small (nothing changed) */
};

/* out[q * n + j] = dot(A[j], X[q]): the signature of hm_dots_batch. */
typedef void (*hm_dots_batch_fn)(const float *A, int64_t n, int64_t dim, const float *X,
                                 int64_t nq, float *out);

typedef struct {
    int64_t dim;
    int64_t size;       /* rows in use */
    int64_t capacity;   /* rows allocated */
    int64_t *ids;       /* [capacity] */
    float *addresses;   /* [capacity * dim] unit (or zero) rows */
    void *addresses16;  /* [capacity * dim] IEEE half copy for compact activation, or NULL */
    double *counters;   /* [capacity * dim], or NULL: not held (implied counters, below) */
    double *weights;    /* [capacity] */
    double eta;
    int64_t writes;
    int64_t next_id;
    uint64_t rng;
    /* Location index (see "location index" in hopmem_kernel.c): groups of rows
     * around unit centroids, each with a radius that bounds |address - centroid|,
     * so activation skips groups that provably hold no top-k row. Derived data,
     * never part of the state's value; groups == 0: no index, every read scans. */
    int64_t groups;
    float *centroids;    /* [groups * dim] */
    double *radius;      /* [groups] */
    int32_t *group_of;   /* [capacity]: each row's group */
    int64_t *members;    /* [capacity]: rows by group, group g at start[g] .. start[g + 1] */
    int64_t *start;      /* [groups + 1] */
    int index_stale;     /* 1: rows were added or moved since members was built */
    /* Scores rows against the centroids when the index assigns rows to groups:
     * NULL for hm_dots_batch; an approximate memory's index passes BLAS sgemm
     * (six times faster on a block; its own summation order, so a near-tie
     * between two centroids may go the other way than with hm_dots_batch:
     * the index is then another, equally valid one). */
    hm_dots_batch_fn assign_dots;
    /* [capacity] |counters row| (sqrt of its float64 dot with itself), kept by
     * every change of a row, or NULL: derived data, never part of the state's
     * value (a plain memory's fast read at full activation reads out its
     * weight-1 locations as norm * address instead of the float64 counters). */
    double *norms;
    /* counters NULL: the rows whose counters are not implied, ascending, and
     * their counters [exceptions capacity * dim] (see hm_inputs_check). */
    int64_t n_exceptions;
    int64_t *exception_rows;
    double *exception_counters;
} hm_state;

typedef struct {
    int competitive;        /* 1: competitive mode, 0: plain */
    int64_t k;
    double beta;
    int64_t t_max;
    double epsilon;
    double eta_decay, eta_min;
    double tau_split, tau_merge, tau_overload;
    double gamma, tau_damp;
    int64_t max_locations;  /* 0: unbounded */
    int compact;            /* 1: reads scan the half copy, then re-score candidates exactly */
    int64_t iter_copy_max;  /* iterations run on float64 copies of the k rows while k * dim <= this */
    int64_t probe;          /* approximate activation: groups of the location index probed
                             * (0: exact; >= the index's groups: exact too). Reads only:
                             * writes always activate exactly. */
} hm_config;

typedef struct {
    int64_t *touched;       /* [m * touched_stride] ids that absorbed vector i */
    int32_t *n_touched;     /* [m] */
    int64_t touched_stride; /* >= min(k, size) */
    int64_t *created;       /* [m * 2] */
    int32_t *n_created;     /* [m] */
    int64_t *merges;        /* [merges_capacity * 3]: (vector index, removed id, survivor id) */
    int64_t merges_capacity;
    int64_t n_merges;       /* out */
} hm_write_log;

/* out[j] = dot(A[j], x) for j < n, float32 lanes; same op order for every row. */
void hm_dots(const float *A, int64_t n, int64_t dim, const float *x, float *out);

/* out[q * n + j] = dot(A[j], X[q]) for a block of queries; bit-equal to hm_dots. */
void hm_dots_batch(const float *A, int64_t n, int64_t dim, const float *X, int64_t nq,
                   float *out);

/* Whether this build can keep and scan a half-precision copy (compact activation). */
int hm_has_compact(void);

/* Read-activation scores for nq queries: exact float32 dots, or half-precision
 * approximations when c->compact (re-scored exactly inside hm_read). */
void hm_scan(const hm_state *s, const hm_config *c, const float *X, int64_t nq, float *out);

/* Refresh the half copy of every address row (after a restore). */
void hm_sync_compact(hm_state *s);
/* Recompute norms[0 .. size) from the counters (after a restore); no-op when
 * norms or counters are NULL. */
void hm_sync_norms(hm_state *s);

/* Implied counters (plain memories; hopmem_kernel.c, "implied counters"): a
 * row of weight 1 whose counters c equal float(a_i * norm) widened, for its
 * address a and norm |c| (within the read-out-by-norm range), needs no
 * counters held. A state may leave counters NULL (then it needs norms): the
 * rows whose counters are not so are its exceptions. Writes to such a state
 * need inputs within the range and room for their exceptions
 * (hm_inputs_check); merges and competitive writes need counters held. */
/* The exceptions the rows of X would make, or -2 when one needs counters held. */
int64_t hm_inputs_check(const float *X, int64_t m, int64_t dim);
/* The same for the rows of a state that holds its counters (and syncs its norms). */
int64_t hm_rows_check(const hm_state *s);
/* Stop holding the counters (counters NULL): the exceptions (room for
 * hm_rows_check's count) take the rows that need theirs. */
void hm_release_counters(hm_state *s);
/* out [(to - from) * dim]: the counters of rows from .. to, held or not. */
void hm_counter_rows(const hm_state *s, int64_t from, int64_t to, double *out);

/* out[i] = x[i] as an IEEE half (round to nearest, ties to even) for i < n.
 * Returns 0, writing nothing, when this build has no half type. */
int hm_to_half(const float *x, int64_t n, void *out);

/* Rows of the k largest values (ties: lower row first), best first. Returns k' = min(k, n). */
int64_t hm_top_k(const float *values, int64_t n, int64_t k, int64_t *rows, float *top);

/* Exact top-k by dot product over a matrix (documents); returns k'. */
int64_t hm_search(const float *A, int64_t n, int64_t dim, const float *x, int64_t k,
                  int64_t *rows, float *top, float *scratch /* [n] */);

/* Exact top-k by cosine (dot with q/|q|) over rows of norm <= 1; half: an
 * IEEE half copy of A to scan first (re-scored exactly), or NULL. Returns k'. */
int64_t hm_search_unit(const float *A, const void *half, int64_t n, int64_t dim,
                       const float *q, int64_t k, int64_t *rows, float *top);

/* Write m vectors (row-major float32) in order. Needs capacity >= size + 2m. */
int hm_write(hm_state *s, const hm_config *c, const float *X, int64_t m, hm_write_log *log);

/* out[r] = X[r] / |X[r]| rounded to float32 (zero rows stay zero): the form in
 * which queries are scored, also for precomputed batch scores. */
void hm_unit_rows(const float *X, int64_t n, int64_t dim, float *out);

/* cos(a, b) in float64 (0 when either norm is below HM_TINY): a read's
 * fidelity cos(q, result) and first contact cos(q, one-step result). */
double hm_cosine(const float *a, const float *b, int64_t dim);

/* Relative error bound of approximate activation scores (see activate()). */
double hm_score_error(int64_t dim, int half);

/* One read. dots: precomputed scores dot(a_j, q) for every row with relative
 * error bound dots_error (0 for exact; the candidates are then re-scored
 * exactly, so the activation never differs), or NULL to compute.
 * Outputs sized k' = min(k, size): rows, sims, weights, or all three NULL when
 * no trace is wanted. result and fast_result: [dim]; fast_result may be NULL
 * when only result is wanted. At full activation (hm_read_streams) the result
 * comes from one pass over the rows a step, summed in row order.
 * Returns k', or HM_ERR_NOMEM. */
int64_t hm_read(const hm_state *s, const hm_config *c, const float *q, const float *dots,
                double dots_error, int fast_only, float *result, float *fast_result, int64_t *rows,
                double *sims, double *weights, int32_t *iterations, int8_t *converged);

/* Full activation (k >= size): whether a read streams every row once a step
 * (online softmax, no ranking) instead of ranking them: any fast read, and an
 * iterative read of a plain memory whose locations all have weight 1. */
int hm_read_streams(const hm_state *s, const hm_config *c, int fast_only);

/* nq reads (rows of Q) at full activation, four queries sharing each pass over
 * the rows; results [nq * dim], bit-equal to nq single hm_read calls. Returns
 * 1 when done, 0 when these reads do not stream (nothing written; use
 * hm_read), or HM_ERR_NOMEM. */
int hm_read_full(const hm_state *s, const hm_config *c, const float *Q, int64_t nq,
                 int fast_only, float *results, int32_t *iterations, int8_t *converged);

/* The modern Hopfield update on a caller's patterns X [n * dim] (float32, any
 * norms), for nq queries Q [nq * dim]: xi <- X^T softmax(beta X xi), from
 * xi = the query, at most `steps` times, stopping early once
 * |xi' - xi| <= epsilon |xi'|. Scores are float32 dots of the float32 rows
 * with the state rounded to float32; one pass over X a step (online softmax), four
 * queries at a time. out [nq * dim]: the last state, rounded to float32;
 * iterations [nq]: steps taken. Returns 0 or HM_ERR_NOMEM. */
int hm_hopfield(const float *X, int64_t n, int64_t dim, const float *Q, int64_t nq,
                double beta, int64_t steps, double epsilon, float *out, int32_t *iterations);

/* nq reads of an approximate memory (probe < groups; ranked, not streamed),
 * the queries grouped by the groups they probe: each group's rows are
 * scored for all its queries while in cache. Outputs as nq hm_read calls
 * (rows, sims, weights [nq * min(k, size)], results and fast_results (or
 * NULL) [nq * dim]), bit-equal to them. Returns 1 when done, 0 when these
 * reads are not approximate (nothing written: use hm_read), or HM_ERR_NOMEM. */
int hm_read_probed(const hm_state *s, const hm_config *c, const float *Q, int64_t nq,
                   int fast_only, float *results, float *fast_results, int64_t *rows,
                   double *sims, double *weights, int32_t *iterations, int8_t *converged);

/* For tests: 1 makes streamed reads take their portable code everywhere. */
void hm_stream_force_portable(int on);

/* Attention over the activated set; result [dim] not normalized. Returns k'. */
int64_t hm_attention(const hm_state *s, const hm_config *c, const float *q, double scale,
                     float *result, int64_t *rows, double *sims, double *weights);

/* Merge the most similar pair (older id survives) until size <= bound, or, with
 * bound < 0, while the pair's cosine exceeds tau. Appends (−1, removed, survivor)
 * triples to merges (capacity max_merges). Returns the number of merges or < 0. */
int64_t hm_merge(hm_state *s, int64_t bound, double tau, int64_t *merges, int64_t max_merges);

/* Groups to build an index with for L rows (0: too few rows to be worth one). */
int64_t hm_index_groups(int64_t rows);

/* Build the location index over the current rows into the arrays s points at
 * (s->groups of them), and judge it: *visits is the share of the rows (plus
 * centroids) an activation with this k would score, estimated on rows used as
 * queries. When a first judgement on a sample already exceeds max_visits the
 * full build is skipped (the arrays are then not an index: do not use them).
 * HM_ERR_NOMEM if scratch allocation fails (then s->groups is set to 0). The
 * centroids come from `iterations` rounds of spherical k-means on `per_group`
 * evenly spaced sample rows a group (all rows when that is as many). */
int hm_index_build(hm_state *s, int64_t iterations, int64_t per_group, int64_t k,
                   double max_visits, double *visits);

/* Rebuild the members lists from group_of over the current rows (after rows
 * were truncated or restored in place to addresses within their radius). */
void hm_index_refresh(hm_state *s);

/* Add rows [from, size) to the index (each joins its nearest centroid) and
 * rebuild the members lists: the rows written after the index was built. */
void hm_index_extend(hm_state *s, int64_t from);

/* The index's cost estimate for reads: rows plus centroids an activation with
 * this k scores, as a fraction of the rows, averaged over `samples` rows used
 * as queries (1.0 without an index). */
double hm_index_visits(const hm_state *s, int64_t k, int64_t samples);

#endif
