/* hopmem kernel: see hopmem_kernel.h for the contract and the conventions. */
#include "hopmem_kernel.h"
#include "hopmem_threads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Function multi-versioning: an AVX2 clone of the scan loops, chosen at load
 * time, with the portable default beside it. -ffp-contract=off (setup.py) keeps
 * both clones bit-identical. HM_PORTABLE (setup.py's "portable" build) compiles
 * every x86 path out, as a non-x86 machine gets the kernel. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) \
    && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__) && !defined(HM_PORTABLE)
/* (not under a sanitizer: its runtime is not up yet when the clones are resolved) */
#define HM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HM_CLONES
#endif

#if defined(__GNUC__)
#define HM_INLINE static inline __attribute__((always_inline))
#else
#define HM_INLINE static inline
#endif

/* A cache hint: GCC and clang's builtin, nothing elsewhere (a hint never
 * changes a result, only when memory arrives). HM_PREFETCH_W: for writing. */
#if defined(__GNUC__)
#define HM_PREFETCH(p) __builtin_prefetch(p)
#define HM_PREFETCH_W(p) __builtin_prefetch((p), 1)
#else
#define HM_PREFETCH(p) ((void)(p))
#define HM_PREFETCH_W(p) ((void)(p))
#endif

#define LANES 16   /* float32 lanes per row in the scan: two 8-wide vectors */

/* ---- float32 scan ---------------------------------------------------------- */
/* Each row's dot product uses 16 float32 lanes (element i goes to lane i % 16),
 * summed at the end in one fixed tree. The order is the same for every row and
 * every clone, so equal rows score bit-equal wherever they sit. GCC and clang
 * get explicit vectors; other compilers run the same lane arithmetic in scalars. */

#if defined(__GNUC__)
typedef float v8f __attribute__((vector_size(32)));
typedef float v8f_u __attribute__((vector_size(32), aligned(4)));
#define LD(p) (*(const v8f_u *)(p))
typedef int v8i __attribute__((vector_size(32)));

/* Whether any lane of a vector comparison is true. */
HM_INLINE int any8(v8i m) {
    uint64_t w[4];
    memcpy(w, &m, sizeof w);
    return (w[0] | w[1] | w[2] | w[3]) != 0;
}

HM_INLINE float hsum2(v8f lo, v8f hi) {
    v8f t = lo + hi;
    float u[8];
    memcpy(u, &t, sizeof u);
    for (int l = 0; l < 4; l++) u[l] += u[l + 4];
    for (int l = 0; l < 2; l++) u[l] += u[l + 2];
    return u[0] + u[1];
}

/* The ragged end of a row: zero-padded copies, so the lanes line up. */
HM_INLINE void tail16(const float *a, const float *x, int64_t rem, v8f *lo, v8f *hi) {
    float pa[LANES] = {0}, px[LANES] = {0};
    memcpy(pa, a, (size_t)rem * sizeof(float));
    memcpy(px, x, (size_t)rem * sizeof(float));
    *lo += LD(pa) * LD(px);
    *hi += LD(pa + 8) * LD(px + 8);
}

/* pf: the first of 4 rows to prefetch while these 4 are summed (the scan asks
 * for rows 8 ahead, so they stream in from L3 or memory before they are due:
 * the hardware prefetcher alone leaves the scan waiting on memory), or NULL. */
HM_INLINE void dot4p(const float *a0, const float *a1, const float *a2, const float *a3,
                     int64_t dim, const float *x, float *out, int64_t stride, const float *pf) {
    v8f l0 = {0}, h0 = {0}, l1 = {0}, h1 = {0}, l2 = {0}, h2 = {0}, l3 = {0}, h3 = {0};
    int64_t i = 0;
    for (; i + LANES <= dim; i += LANES) {
        if (pf) {
            HM_PREFETCH(pf + i);
            HM_PREFETCH(pf + dim + i);
            HM_PREFETCH(pf + 2 * dim + i);
            HM_PREFETCH(pf + 3 * dim + i);
        }
        v8f xl = LD(x + i), xh = LD(x + i + 8);
        l0 += LD(a0 + i) * xl; h0 += LD(a0 + i + 8) * xh;
        l1 += LD(a1 + i) * xl; h1 += LD(a1 + i + 8) * xh;
        l2 += LD(a2 + i) * xl; h2 += LD(a2 + i + 8) * xh;
        l3 += LD(a3 + i) * xl; h3 += LD(a3 + i + 8) * xh;
    }
    if (i < dim) {
        int64_t rem = dim - i;
        tail16(a0 + i, x + i, rem, &l0, &h0);
        tail16(a1 + i, x + i, rem, &l1, &h1);
        tail16(a2 + i, x + i, rem, &l2, &h2);
        tail16(a3 + i, x + i, rem, &l3, &h3);
    }
    out[0] = hsum2(l0, h0);
    out[stride] = hsum2(l1, h1);
    out[2 * stride] = hsum2(l2, h2);
    out[3 * stride] = hsum2(l3, h3);
}

HM_INLINE void dot4(const float *a0, int64_t dim, const float *x, float *out,
                    const float *pf) {
    dot4p(a0, a0 + dim, a0 + 2 * dim, a0 + 3 * dim, dim, x, out, 1, pf);
}

HM_INLINE float dot1(const float *a, int64_t dim, const float *x) {
    v8f lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + LANES <= dim; i += LANES) {
        lo += LD(a + i) * LD(x + i);
        hi += LD(a + i + 8) * LD(x + i + 8);
    }
    if (i < dim) tail16(a + i, x + i, dim - i, &lo, &hi);
    return hsum2(lo, hi);
}

#else /* portable scalar twin of the vector code above */

static inline float hsum16(const float *acc) {
    float t[8];
    for (int l = 0; l < 8; l++) t[l] = acc[l] + acc[l + 8];
    for (int l = 0; l < 4; l++) t[l] += t[l + 4];
    for (int l = 0; l < 2; l++) t[l] += t[l + 2];
    return t[0] + t[1];
}

HM_INLINE float dot1(const float *a, int64_t dim, const float *x) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= dim; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * x[i + l];
    for (int l = 0; i + l < dim; l++) acc[l] += a[i + l] * x[i + l];
    return hsum16(acc);
}

HM_INLINE void dot4p(const float *a0, const float *a1, const float *a2, const float *a3,
                     int64_t dim, const float *x, float *out, int64_t stride, const float *pf) {
    (void)pf;
    out[0] = dot1(a0, dim, x);
    out[stride] = dot1(a1, dim, x);
    out[2 * stride] = dot1(a2, dim, x);
    out[3 * stride] = dot1(a3, dim, x);
}

HM_INLINE void dot4(const float *a0, int64_t dim, const float *x, float *out,
                    const float *pf) {
    (void)pf;
    for (int r = 0; r < 4; r++) out[r] = dot1(a0 + r * dim, dim, x);
}
#endif

HM_CLONES
static void dots_rows(const float *A, int64_t n, int64_t dim, const float *x, float *out) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)
        dot4(A + j * dim, dim, x, out + j, j + 12 <= n ? A + (j + 8) * dim : NULL);
    for (; j < n; j++) out[j] = dot1(A + j * dim, dim, x);
}

/* out[q * ld + j] for n rows of A against nq queries. */
HM_CLONES
static void dots_batch_rows(const float *A, int64_t n, int64_t dim, const float *X, int64_t nq,
                            float *out, int64_t ld) {
    /* Queries four at a time: each row is loaded once for four queries that
     * stay in L1 (dot4p with the roles swapped: q * a is a * q, so every score
     * is dot1's), 12-14% faster than passing each query over blocks of four
     * rows in a C benchmark (d = 384, 1,500-2,500 rows, blocks of 8 queries);
     * the last nq % 4 queries pass over blocks of 4 rows. */
    int64_t q = 0;
    for (; q + 4 <= nq; q += 4) {
        const float *x = X + q * dim;
        for (int64_t j = 0; j < n; j++)
            dot4p(x, x + dim, x + 2 * dim, x + 3 * dim, dim, A + j * dim, out + q * ld + j, ld,
                  NULL);
    }
    if (q == nq) return;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4)  /* a block of 4 rows stays in L1 while each query passes */
        for (int64_t r = q; r < nq; r++) dot4(A + j * dim, dim, X + r * dim, out + r * ld + j, NULL);
    for (; j < n; j++)
        for (int64_t r = q; r < nq; r++) out[r * ld + j] = dot1(A + j * dim, dim, X + r * dim);
}

/* The scans share their rows with the helper threads (hopmem_threads.c): a
 * row's score is the same code on any thread, so results stay bit-equal. */
typedef struct {
    const void *A;   /* float or hm_half rows */
    int64_t n, dim;  /* all rows; n is also the output's stride */
    const float *X;
    int64_t nq;
    float *out;
} scan_job;

static void dots_chunk(void *ctx, int64_t lo, int64_t hi) {
    const scan_job *j = (const scan_job *)ctx;
    dots_rows((const float *)j->A + lo * j->dim, hi - lo, j->dim, j->X, j->out + lo);
}

static void dots_batch_chunk(void *ctx, int64_t lo, int64_t hi) {
    const scan_job *j = (const scan_job *)ctx;
    dots_batch_rows((const float *)j->A + lo * j->dim, hi - lo, j->dim, j->X, j->nq,
                    j->out + lo, j->n);
}

void hm_dots(const float *A, int64_t n, int64_t dim, const float *x, float *out) {
    scan_job job = {A, n, dim, x, 1, out};
    hm_parallel_rows(dots_chunk, &job, n, (double)n * (double)dim);
}

void hm_dots_batch(const float *A, int64_t n, int64_t dim, const float *X, int64_t nq,
                   float *out) {
    scan_job job = {A, n, dim, X, nq, out};
    hm_parallel_rows(dots_batch_chunk, &job, n, (double)n * (double)dim * (double)nq);
}

/* ---- compact activation: a half-precision copy of the addresses ------------ */
/* Scanning IEEE halves moves half the bytes of the float32 scan. Every row
 * whose half score lies within the proven error bound of the k-th best
 * (hm_score_error) is then re-scored exactly with dot1(), so a read's
 * activated set, its order and its similarities are bit-equal to the exact
 * scan's (tests/test_compact.py holds reads of both to the same bits); only
 * the cost differs. Writes always activate exactly. */

#if defined(__GNUC__) && defined(__FLT16_MAX__)
#define HM_HAVE_F16 1
typedef _Float16 hm_half;

/* The half scan is written once (dots16_template.h) and compiled twice: with
 * F16C conversion instructions (vcvtph2ps) where the CPU has them, and with
 * the compiler's portable conversion elsewhere. Half to float is exact, and
 * the lane order is the same, so both give bit-equal scores. */
static inline v8f ldh_portable(const hm_half *p) {
    v8f out;
    for (int l = 0; l < 8; l++) out[l] = (float)p[l];
    return out;
}
#define HM_DOTS16_NAME dots16_portable
#define HM_DOTS16_ATTR
#define HM_LDH(p) ldh_portable(p)
#include "dots16_template.h"
#undef HM_DOTS16_NAME
#undef HM_DOTS16_ATTR
#undef HM_LDH

#if defined(__x86_64__) && (defined(__linux__) || defined(__APPLE__)) && !defined(HM_PORTABLE)
#include <immintrin.h>
#define HM_HAVE_F16C_PATH 1
#define HM_DOTS16_NAME dots16_f16c
#define HM_DOTS16_ATTR __attribute__((target("avx2,f16c")))
#define HM_LDH(p) ((v8f)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#include "dots16_template.h"
#undef HM_DOTS16_NAME
#undef HM_DOTS16_ATTR
#undef HM_LDH
#endif

static void dots16_rows(const hm_half *A, int64_t n, int64_t dim, const float *X, int64_t nq,
                        float *out, int64_t ld) {
#ifdef HM_HAVE_F16C_PATH
    static int use_f16c = -1;  /* any thread may settle it; all get the same answer */
    int f16c = __atomic_load_n(&use_f16c, __ATOMIC_RELAXED);
    if (f16c < 0) {
        __builtin_cpu_init();
        f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
        __atomic_store_n(&use_f16c, f16c, __ATOMIC_RELAXED);
    }
    if (f16c) { dots16_f16c(A, n, dim, X, nq, out, ld); return; }
#endif
    dots16_portable(A, n, dim, X, nq, out, ld);
}

static void dots16_chunk(void *ctx, int64_t lo, int64_t hi) {
    const scan_job *j = (const scan_job *)ctx;
    dots16_rows((const hm_half *)j->A + lo * j->dim, hi - lo, j->dim, j->X, j->nq, j->out + lo,
                j->n);
}

static void dots16_batch(const hm_half *A, int64_t n, int64_t dim, const float *X, int64_t nq,
                         float *out) {
    scan_job job = {A, n, dim, X, nq, out};
    hm_parallel_rows(dots16_chunk, &job, n, (double)n * (double)dim * (double)nq);
}

HM_CLONES
static void sync_rows16(hm_state *s, int64_t row, int64_t count) {
    if (!s->addresses16) return;
    const float *a = s->addresses + row * s->dim;
    hm_half *h = (hm_half *)s->addresses16 + row * s->dim;
    for (int64_t i = 0; i < count * s->dim; i++) h[i] = (hm_half)a[i];
}

int hm_has_compact(void) { return 1; }

/* The conversion vectorises (vcvtps2ph) in the x86-64-v3 clone; both clones
 * round to nearest even, as IEEE and NumPy's astype(float16) do. */
HM_CLONES
int hm_to_half(const float *x, int64_t n, void *out) {
    hm_half *h = (hm_half *)out;
    for (int64_t i = 0; i < n; i++) h[i] = (hm_half)x[i];
    return 1;
}
#else
int hm_has_compact(void) { return 0; }
int hm_to_half(const float *x, int64_t n, void *out) {
    (void)x; (void)n; (void)out;
    return 0;
}
static void sync_rows16(hm_state *s, int64_t row, int64_t count) {
    (void)s; (void)row; (void)count;
}
#endif

void hm_sync_compact(hm_state *s) { sync_rows16(s, 0, s->size); }

void hm_scan(const hm_state *s, const hm_config *c, const float *X, int64_t nq, float *out) {
#ifdef HM_HAVE_F16
    if (c->compact && s->addresses16) {
        dots16_batch((const hm_half *)s->addresses16, s->size, s->dim, X, nq, out);
        return;
    }
#else
    (void)c;
#endif
    if (nq == 1) hm_dots(s->addresses, s->size, s->dim, X, out);
    else hm_dots_batch(s->addresses, s->size, s->dim, X, nq, out);
}

/* ---- float64 helpers (short sums over dim) ------------------------------------ */

/* Dots of float64 vectors with 8 lanes (two 4-wide vectors), fixed order. */
#if defined(__GNUC__)
typedef double v4d __attribute__((vector_size(32)));
typedef double v4d_u __attribute__((vector_size(32), aligned(8)));
typedef long long v4di __attribute__((vector_size(32)));
typedef float v4f_u __attribute__((vector_size(16), aligned(4)));
#define LDD(p) (*(const v4d_u *)(p))
#define LDF4(p) __builtin_convertvector(*(const v4f_u *)(p), v4d)

HM_INLINE double lanes_sum(v4d lo, v4d hi, double tail) {
    v4d t = lo + hi;
    return ((t[0] + t[2]) + (t[1] + t[3])) + tail;
}

HM_INLINE double ddot(const double *a, const double *b, int64_t dim) {
    v4d lo = {0}, hi = {0};
    double tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        lo += LDD(a + i) * LDD(b + i);
        hi += LDD(a + i + 4) * LDD(b + i + 4);
    }
    for (; i < dim; i++) tail += a[i] * b[i];
    return lanes_sum(lo, hi, tail);
}

HM_INLINE double fddot(const float *a, const double *b, int64_t dim) {
    v4d lo = {0}, hi = {0};
    double tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        lo += LDF4(a + i) * LDD(b + i);
        hi += LDF4(a + i + 4) * LDD(b + i + 4);
    }
    for (; i < dim; i++) tail += (double)a[i] * b[i];
    return lanes_sum(lo, hi, tail);
}

HM_INLINE double fnorm(const float *a, int64_t dim) {
    v4d lo = {0}, hi = {0};
    double tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        v4d x = LDF4(a + i), y = LDF4(a + i + 4);
        lo += x * x;
        hi += y * y;
    }
    for (; i < dim; i++) tail += (double)a[i] * (double)a[i];
    return sqrt(lanes_sum(lo, hi, tail));
}

HM_INLINE double ffdot(const float *a, const float *b, int64_t dim) {
    v4d lo = {0}, hi = {0};
    double tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        lo += LDF4(a + i) * LDF4(b + i);
        hi += LDF4(a + i + 4) * LDF4(b + i + 4);
    }
    for (; i < dim; i++) tail += (double)a[i] * (double)b[i];
    return lanes_sum(lo, hi, tail);
}

/* One competitive update of a row, in one pass: c += w x (the counters), and
 * t = a + rate (x - a) from the float32 address a; returns ddot(t, t), summed
 * in ddot's lanes, so the result equals the separate passes bit for bit. */
HM_INLINE double move_row(double *c, const float *a, const double *x, double w, double rate,
                          double *t, int64_t dim) {
    v4d lo = {0}, hi = {0};
    double tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        v4d x0 = LDD(x + i), x1 = LDD(x + i + 4);
        *(v4d_u *)(c + i) = LDD(c + i) + w * x0;
        *(v4d_u *)(c + i + 4) = LDD(c + i + 4) + w * x1;
        v4d a0 = LDF4(a + i), a1 = LDF4(a + i + 4);
        v4d t0 = a0 + rate * (x0 - a0), t1 = a1 + rate * (x1 - a1);
        *(v4d_u *)(t + i) = t0;
        *(v4d_u *)(t + i + 4) = t1;
        lo += t0 * t0;
        hi += t1 * t1;
    }
    for (; i < dim; i++) {
        c[i] += w * x[i];
        double ai = (double)a[i];
        t[i] = ai + rate * (x[i] - ai);
        tail += t[i] * t[i];
    }
    return lanes_sum(lo, hi, tail);
}
#else
HM_INLINE double lanes_sum8(const double *acc, double tail) {
    return (((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])))
           + tail;
}

HM_INLINE double ddot(const double *a, const double *b, int64_t dim) {
    double acc[8] = {0}, tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (; i < dim; i++) tail += a[i] * b[i];
    return lanes_sum8(acc, tail);
}

HM_INLINE double fddot(const float *a, const double *b, int64_t dim) {
    double acc[8] = {0}, tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)a[i + l] * b[i + l];
    for (; i < dim; i++) tail += (double)a[i] * b[i];
    return lanes_sum8(acc, tail);
}

HM_INLINE double fnorm(const float *a, int64_t dim) {
    double acc[8] = {0}, tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)a[i + l] * (double)a[i + l];
    for (; i < dim; i++) tail += (double)a[i] * (double)a[i];
    return sqrt(lanes_sum8(acc, tail));
}

HM_INLINE double ffdot(const float *a, const float *b, int64_t dim) {
    double acc[8] = {0}, tail = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)a[i + l] * (double)b[i + l];
    for (; i < dim; i++) tail += (double)a[i] * (double)b[i];
    return lanes_sum8(acc, tail);
}

HM_INLINE double move_row(double *c, const float *a, const double *x, double w, double rate,
                          double *t, int64_t dim) {
    for (int64_t i = 0; i < dim; i++) {
        c[i] += w * x[i];
        double ai = (double)a[i];
        t[i] = ai + rate * (x[i] - ai);
    }
    return ddot(t, t, dim);
}
#endif

/* Short sums over the k activated rows, written for instruction-level
 * parallelism: several rows (or several output lanes) are in flight at once,
 * while every single value is still summed in exactly the order of the plain
 * loop it replaces (fddot's lanes; j = 0, 1, ... from +0.0), so results are
 * bit-equal to the straightforward code and to each other. */

/* fddot_rows over float32 rows, ddot_rows over float64 ones (the same sums). */
#define HM_ROWS_NAME fddot_rows
#define HM_ROWS_T float
#define HM_ROWS_LD4(p) LDF4(p)
#define HM_ROWS_ONE fddot
#include "rows_dot_template.h"
#undef HM_ROWS_NAME
#undef HM_ROWS_T
#undef HM_ROWS_LD4
#undef HM_ROWS_ONE
#define HM_ROWS_NAME ddot_rows
#define HM_ROWS_T double
#define HM_ROWS_LD4(p) LDD(p)
#define HM_ROWS_ONE ddot
#include "rows_dot_template.h"
#undef HM_ROWS_NAME
#undef HM_ROWS_T
#undef HM_ROWS_LD4
#undef HM_ROWS_ONE

/* y[i] = sum_j w[j] * u_j[i] (u_j float32), each y[i] summed in j order from
 * +0.0, as zeroing y and adding one row after another would. */
HM_INLINE void combine_f(double *y, const double *w, const float *const *u, int64_t n,
                         int64_t dim) {
    int64_t i = 0;
#if defined(__GNUC__)
    for (; i + 16 <= dim; i += 16) {
        v4d y0 = {0}, y1 = {0}, y2 = {0}, y3 = {0};
        for (int64_t j = 0; j < n; j++) {
            v4d f = {w[j], w[j], w[j], w[j]};
            const float *x = u[j] + i;
            y0 += f * LDF4(x); y1 += f * LDF4(x + 4);
            y2 += f * LDF4(x + 8); y3 += f * LDF4(x + 12);
        }
        memcpy(y + i, &y0, sizeof y0); memcpy(y + i + 4, &y1, sizeof y1);
        memcpy(y + i + 8, &y2, sizeof y2); memcpy(y + i + 12, &y3, sizeof y3);
    }
#endif
    for (; i < dim; i++) {
        double t = 0.0;
        for (int64_t j = 0; j < n; j++) t += w[j] * (double)u[j][i];
        y[i] = t;
    }
}

/* The same for float64 rows: y[i] = sum_j w[j] * u_j[i]. These rows (the
 * counters) are scattered and rarely in cache: each is prefetched 64 values
 * ahead of its use, as the hardware does not follow n interleaved streams. */
HM_INLINE void combine_d(double *y, const double *w, const double *const *u, int64_t n,
                         int64_t dim) {
    int64_t i = 0;
#if defined(__GNUC__)
    for (int64_t j = 0; j < n; j++)
        for (int64_t b = 0; b < 64 && b < dim; b += 8) HM_PREFETCH(u[j] + b);
    for (; i + 16 <= dim; i += 16) {
        v4d y0 = {0}, y1 = {0}, y2 = {0}, y3 = {0};
        for (int64_t j = 0; j < n; j++) {
            v4d f = {w[j], w[j], w[j], w[j]};
            const double *x = u[j] + i;
            if (i + 80 <= dim) { HM_PREFETCH(x + 64); HM_PREFETCH(x + 72); }
            y0 += f * LDD(x); y1 += f * LDD(x + 4);
            y2 += f * LDD(x + 8); y3 += f * LDD(x + 12);
        }
        memcpy(y + i, &y0, sizeof y0); memcpy(y + i + 4, &y1, sizeof y1);
        memcpy(y + i + 8, &y2, sizeof y2); memcpy(y + i + 12, &y3, sizeof y3);
    }
#endif
    for (; i < dim; i++) {
        double t = 0.0;
        for (int64_t j = 0; j < n; j++) t += w[j] * u[j][i];
        y[i] = t;
    }
}

/* v /= |v| in place unless |v| < TINY; returns the norm. Multiplies by the
 * reciprocal: a vector division is several times slower than a product, and
 * a write normalizes k rows (the result differs from v / |v| by an ulp at most). */
HM_INLINE double normalize_d(double *v, int64_t dim) {
    double norm = sqrt(ddot(v, v, dim));
    if (norm >= HM_TINY) {
        double inv = 1.0 / norm;
        for (int64_t i = 0; i < dim; i++) v[i] *= inv;
    }
    return norm;
}

/* out = float(v / norm) (float(v) when norm < TINY), norm = |v|: normalize_d
 * then a cast to float32, bit for bit, in one pass over v instead of two. */
HM_INLINE void scale_to_float(const double *v, double norm, int64_t dim, float *out) {
    if (norm >= HM_TINY) {
        double inv = 1.0 / norm;
        for (int64_t i = 0; i < dim; i++) out[i] = (float)(v[i] * inv);
    } else {
        for (int64_t i = 0; i < dim; i++) out[i] = (float)v[i];
    }
}

HM_INLINE double cos_d(const double *a, const double *b, int64_t dim) {
    double na = sqrt(ddot(a, a, dim)), nb = sqrt(ddot(b, b, dim));
    if (na < HM_TINY || nb < HM_TINY) return 0.0;
    return ddot(a, b, dim) / (na * nb);
}

/* ---- top-k ------------------------------------------------------------------- */

typedef struct { float v; int64_t r; } hm_pair;

/* a before b: higher value first, then lower row. */
HM_INLINE int pair_before(hm_pair a, hm_pair b) {
    return a.v > b.v || (a.v == b.v && a.r < b.r);
}

/* Sort pairs best first: quicksort (median of three) down to short runs,
 * then insertion sort; comparisons inline (qsort's callback is the cost). */
static void sort_pairs(hm_pair *p, int64_t n) {
    while (n > 24) {
        int64_t mid = n / 2, last = n - 1;
        if (pair_before(p[mid], p[0])) { hm_pair t = p[mid]; p[mid] = p[0]; p[0] = t; }
        if (pair_before(p[last], p[0])) { hm_pair t = p[last]; p[last] = p[0]; p[0] = t; }
        if (pair_before(p[last], p[mid])) { hm_pair t = p[last]; p[last] = p[mid]; p[mid] = t; }
        hm_pair pivot = p[mid];
        int64_t i = 0, j = last;
        while (i <= j) {
            while (pair_before(p[i], pivot)) i++;
            while (pair_before(pivot, p[j])) j--;
            if (i <= j) { hm_pair t = p[i]; p[i] = p[j]; p[j] = t; i++; j--; }
        }
        /* Recurse into the smaller side, loop on the larger. */
        if (j + 1 < n - i) { sort_pairs(p, j + 1); p += i; n -= i; }
        else { sort_pairs(p + i, n - i); n = j + 1; }
    }
    for (int64_t i = 1; i < n; i++) {
        hm_pair x = p[i];
        int64_t j = i;
        while (j > 0 && pair_before(x, p[j - 1])) { p[j] = p[j - 1]; j--; }
        p[j] = x;
    }
}

/* Sorted insertion of (v, row) into the k best so far, when v beats the k-th. */
HM_INLINE void top_insert(float v, int64_t row, int64_t k, int64_t *have, int64_t *rows,
                          float *top) {
    if (*have == k && !(v > top[k - 1])) return;
    int64_t p = *have < k ? *have : k - 1;
    while (p > 0 && top[p - 1] < v) {
        top[p] = top[p - 1];
        rows[p] = rows[p - 1];
        p--;
    }
    top[p] = v;
    rows[p] = row;
    if (*have < k) (*have)++;
}

/* The rows j (ascending) with (double)values[j] >= cut; returns their count.
 * Compared in float32 against the smallest float >= cut (the same test for
 * every float), eight at a time, skipping blocks without one (nearly all). */
HM_INLINE int64_t at_least(const float *values, int64_t n, double cut, int64_t *out) {
    float cf = (float)cut;
    if ((double)cf < cut) cf = nextafterf(cf, INFINITY);
    int64_t count = 0, j0 = 0;
#if defined(__GNUC__)
    v8f cv = {cf, cf, cf, cf, cf, cf, cf, cf};
    for (; j0 + 32 <= n; j0 += 32) {  /* 32 at a time: one test per four vectors */
        const float *v = values + j0;
        if (!any8((LD(v) >= cv) | (LD(v + 8) >= cv) | (LD(v + 16) >= cv) | (LD(v + 24) >= cv)))
            continue;
        for (int64_t j = j0; j < j0 + 32; j++)
            if (values[j] >= cf) out[count++] = j;
    }
#endif
    for (int64_t j = j0; j < n; j++)
        if (values[j] >= cf) out[count++] = j;
    return count;
}

/* The k-th largest of a[0..n) (1 <= k <= n, no NaN); reorders a. Quickselect. */
static float kth_largest(float *a, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1, want = k - 1;  /* a[want] once a is sorted descending */
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) { float t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;  /* between j and i: equal to the pivot */
    }
    return a[want];
}

/* Small k over many values, in two cheap passes instead of n insertions:
 * the k-th largest of the block maxima is a lower bound t on the k-th largest
 * value (at least k blocks hold a value >= t), so the answer is among the
 * values >= t, typically a few dozen; those are sorted. The same k pairs as
 * sorted insertion (value descending, then row ascending). Returns -2 when a
 * NaN is seen (the caller falls back to insertion), or -1 without memory. */
HM_INLINE int64_t top_k_blocks(const float *values, int64_t n, int64_t k, int64_t *rows,
                               float *top) {
    int64_t bs = n / (4 * k);
    bs = bs < 8 ? 8 : bs - bs % 8;
    int64_t nb = n / bs;
    float *maxima = (float *)malloc((size_t)nb * sizeof(float));
    hm_pair *cand = NULL;
    int64_t *idx = NULL, rc = -1;
    if (!maxima) goto done;
    for (int64_t b = 0; b < nb; b++) {
        const float *v = values + b * bs;
#if defined(__GNUC__)
        /* Eight lanes at a time (bs is a multiple of 8); blend by mask, as C
         * has no vector ?: and the portable clone has no max instruction. */
        v8f m8 = LD(v);
        v8i nan = m8 != m8;
        for (int64_t i = 8; i < bs; i += 8) {
            v8f x = LD(v + i);
            v8i gt = x > m8;
            nan |= x != x;
            m8 = (v8f)(((v8i)x & gt) | ((v8i)m8 & ~gt));
        }
        if (any8(nan)) { rc = -2; goto done; }
        float m = m8[0];
        for (int l = 1; l < 8; l++) m = m8[l] > m ? m8[l] : m;
#else
        float m = v[0];
        for (int64_t i = 0; i < bs; i++) {
            if (v[i] != v[i]) { rc = -2; goto done; }
            m = v[i] > m ? v[i] : m;
        }
#endif
        maxima[b] = m;
    }
    float t = kth_largest(maxima, nb, k);
    idx = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (!idx) goto done;
    int64_t nc = at_least(values, n, (double)t, idx);
    cand = (hm_pair *)malloc((size_t)nc * sizeof(hm_pair));
    if (!cand) goto done;
    for (int64_t j = 0; j < nc; j++) { cand[j].v = values[idx[j]]; cand[j].r = idx[j]; }
    sort_pairs(cand, nc);
    for (int64_t j = 0; j < k; j++) { rows[j] = cand[j].r; top[j] = cand[j].v; }
    rc = k;
done:
    free(maxima); free(idx); free(cand);
    return rc;
}

HM_CLONES
int64_t hm_top_k(const float *values, int64_t n, int64_t k, int64_t *rows, float *top) {
    if (k > n) k = n;
    if (k <= 0) return 0;
    if (k * 8 >= n) {
        /* Large k: sort everything. */
        hm_pair *all = (hm_pair *)malloc((size_t)n * sizeof(hm_pair));
        if (!all) return HM_ERR_NOMEM;
        for (int64_t j = 0; j < n; j++) { all[j].v = values[j]; all[j].r = j; }
        sort_pairs(all, n);
        for (int64_t j = 0; j < k; j++) { rows[j] = all[j].r; top[j] = all[j].v; }
        free(all);
        return k;
    }
    if (n >= 256) {
        int64_t rc = top_k_blocks(values, n, k, rows, top);
        if (rc != -2) return rc < 0 ? HM_ERR_NOMEM : rc;
    }
    /* Sorted insertion; rows arrive in increasing order, so a value equal to
     * one already kept goes after it (lower row wins ties). Also the answer
     * with NaNs among the values (they are never "better" than a kept one). */
    int64_t have = 0;
    for (int64_t j = 0; j < n; j++) top_insert(values[j], j, k, &have, rows, top);
    return have;
}

int64_t hm_search(const float *A, int64_t n, int64_t dim, const float *x, int64_t k,
                  int64_t *rows, float *top, float *scratch) {
    hm_dots(A, n, dim, x, scratch);
    return hm_top_k(scratch, n, k, rows, top);
}

/* ---- random generator (splitmix64 + Box-Muller), mirrored in _reference.py ---- */

static uint64_t splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void random_unit(uint64_t *rng, double *out, int64_t dim) {
    const double two53 = 1.0 / 9007199254740992.0;
    const double two_pi = 6.283185307179586;
    for (int64_t i = 0; i < dim; i++) {
        uint64_t a = splitmix(rng), b = splitmix(rng);
        double u1 = (double)((a >> 11) + 1) * two53;
        double u2 = (double)(b >> 11) * two53;
        out[i] = sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
    }
    normalize_d(out, dim);
}

/* ---- location index ------------------------------------------------------------ */
/* Exact pruning of the activation scan. Rows are grouped around unit
 * centroids c_g, and radius[g] >= |a_r - c_g| for every row r of group g, so
 * for a unit query q (Cauchy-Schwarz) q.a_r <= q.c_g + radius[g]. Activation
 * scores the centroids, visits the groups from the highest bound down, and
 * skips a group once its bound, widened by the float32 rounding of both sides,
 * is below the k-th best score already found: none of its rows can enter the
 * top k. Visited rows are scored with the scan's own lanes and order, and the
 * top k is chosen by the same hm_top_k over all rows (skipped ones at -inf), so
 * the activated set, its order and its similarities are bit-equal to a full
 * scan's. The index is derived data: writes keep it valid (a changed address
 * raises its group's radius, a new row joins its nearest centroid, a removed
 * row leaves), and the caller rebuilds it as the memory grows. */

HM_INLINE double row_distance(const hm_state *s, int64_t row, int64_t g) {
    const float *a = s->addresses + row * s->dim, *c = s->centroids + g * s->dim;
    int64_t i = 0;
    double tail = 0.0;
#if defined(__GNUC__)
    v4d lo = {0}, hi = {0};
    for (; i + 8 <= s->dim; i += 8) {
        v4d x = LDF4(a + i) - LDF4(c + i), y = LDF4(a + i + 4) - LDF4(c + i + 4);
        lo += x * x;
        hi += y * y;
    }
#endif
    for (; i < s->dim; i++) {
        double t = (double)a[i] - (double)c[i];
        tail += t * t;
    }
#if defined(__GNUC__)
    return sqrt(lanes_sum(lo, hi, tail));
#else
    return sqrt(tail);
#endif
}

/* Row's address changed: keep its group's radius an upper bound. */
HM_INLINE void index_touch(hm_state *s, int64_t row) {
    if (s->groups <= 0) return;
    int64_t g = s->group_of[row];
    double r = row_distance(s, row, g);
    if (r > s->radius[g]) s->radius[g] = r;
}

/* New row: it joins the group of its nearest centroid. */
HM_INLINE void index_add(hm_state *s, int64_t row) {
    if (s->groups <= 0) return;
    const float *a = s->addresses + row * s->dim;
    int64_t best = 0;
    float best_v = -INFINITY;
    for (int64_t g = 0; g < s->groups; g++) {
        float v = dot1(s->centroids + g * s->dim, s->dim, a);
        if (v > best_v) { best_v = v; best = g; }
    }
    s->group_of[row] = (int32_t)best;
    s->index_stale = 1;
    index_touch(s, row);
}

/* Row is about to be removed (the rows after it move up one). */
HM_INLINE void index_remove(hm_state *s, int64_t row) {
    if (s->groups <= 0) return;
    int64_t tail = s->size - row - 1;
    if (tail > 0) memmove(s->group_of + row, s->group_of + row + 1, (size_t)tail * sizeof(int32_t));
    s->index_stale = 1;
}

/* Members by group (a counting sort of group_of; rows ascending in a group). */
static void index_members(hm_state *s) {
    if (s->groups <= 0 || !s->index_stale) return;
    int64_t G = s->groups, L = s->size;
    memset(s->start, 0, (size_t)(G + 1) * sizeof(int64_t));
    for (int64_t r = 0; r < L; r++) s->start[s->group_of[r] + 1]++;
    for (int64_t g = 0; g < G; g++) s->start[g + 1] += s->start[g];
    for (int64_t r = 0; r < L; r++) s->members[s->start[s->group_of[r]]++] = r;
    for (int64_t g = G; g > 0; g--) s->start[g] = s->start[g - 1];
    s->start[0] = 0;
    s->index_stale = 0;
}

void hm_index_refresh(hm_state *s) {
    s->index_stale = 1;
    index_members(s);
}

/* Rows [from, size) to their nearest centroids, scored in chunks of rows with the
 * batched dots (bit-equal to index_add's one row at a time); `touch`: record each
 * row's group change as index_add does (index_touch). */
static void index_assign_rows(hm_state *s, float *S, int64_t chunk, int64_t from, int touch) {
    int64_t G = s->groups, d = s->dim, L = s->size;
    for (int64_t r0 = from; r0 < L; r0 += chunk) {
        int64_t nr = L - r0 < chunk ? L - r0 : chunk;
        (s->assign_dots ? s->assign_dots : hm_dots_batch)(s->centroids, G, d,
                                                           s->addresses + r0 * d, nr, S);
        for (int64_t q = 0; q < nr; q++) {
            const float *row = S + q * G;
            int64_t best = 0;
            for (int64_t g = 1; g < G; g++) if (row[g] > row[best]) best = g;
            s->group_of[r0 + q] = (int32_t)best;
            if (touch) index_touch(s, r0 + q);
        }
    }
}

/* Assign every row to its nearest centroid. */
static void index_assign(hm_state *s, float *S, int64_t chunk) {
    index_assign_rows(s, S, chunk, 0, 0);
}

/* Rows [from, size) join their nearest centroids. */
static void index_join(hm_state *s, int64_t from) {
    const int64_t chunk = 256;
    float *S = (float *)malloc((size_t)(chunk * s->groups) * sizeof(float));
    if (!S) {
        for (int64_t r = from; r < s->size; r++) index_add(s, r);
        return;
    }
    index_assign_rows(s, S, chunk, from, 1);
    free(S);
    s->index_stale = 1;
}

void hm_index_extend(hm_state *s, int64_t from) {
    if (s->groups <= 0) return;
    index_join(s, from);
    index_members(s);
}

int64_t hm_index_groups(int64_t rows) {
    if (rows < 512) return 0;  /* a scan is as cheap */
    int64_t g = (int64_t)(2.0 * sqrt((double)rows));
    return g < 16 ? 16 : g;
}

/* Spherical k-means over s's rows into s->centroids (seeded with evenly
 * spaced rows unless `seeded`), then every row assigned, radii, members. */
static int index_fit(hm_state *s, int64_t iterations, int seeded) {
    int64_t G = s->groups, d = s->dim, L = s->size;
    const int64_t chunk = 256;
    float *S = (float *)malloc((size_t)(chunk * G) * sizeof(float));
    double *sum = (double *)malloc((size_t)(G * d) * sizeof(double));
    int64_t *count = (int64_t *)malloc((size_t)G * sizeof(int64_t));
    if (!S || !sum || !count) {
        free(S); free(sum); free(count);
        return HM_ERR_NOMEM;
    }
    /* Seeds: evenly spaced rows (rows are in write order, so this spreads them
     * over time as well). */
    for (int64_t g = 0; g < G && !seeded; g++) {
        const float *a = s->addresses + ((g * L) / G) * d;
        for (int64_t i = 0; i < d; i++) sum[g * d + i] = (double)a[i];
        normalize_d(sum + g * d, d);
        for (int64_t i = 0; i < d; i++) s->centroids[g * d + i] = (float)sum[g * d + i];
    }
    for (int64_t it = 0; it < iterations; it++) {
        index_assign(s, S, chunk);
        memset(sum, 0, (size_t)(G * d) * sizeof(double));
        memset(count, 0, (size_t)G * sizeof(int64_t));
        for (int64_t r = 0; r < L; r++) {
            int64_t g = s->group_of[r];
            const float *a = s->addresses + r * d;
            for (int64_t i = 0; i < d; i++) sum[g * d + i] += (double)a[i];
            count[g]++;
        }
        for (int64_t g = 0; g < G; g++) {
            if (count[g] == 0 || normalize_d(sum + g * d, d) < HM_TINY) continue;  /* keep it */
            for (int64_t i = 0; i < d; i++) s->centroids[g * d + i] = (float)sum[g * d + i];
        }
    }
    index_assign(s, S, chunk);
    for (int64_t g = 0; g < G; g++) s->radius[g] = 0.0;
    for (int64_t r = 0; r < L; r++) index_touch(s, r);
    s->index_stale = 1;
    index_members(s);
    free(S); free(sum); free(count);
    return HM_OK;
}

int hm_index_build(hm_state *s, int64_t iterations, int64_t per_group, int64_t k,
                   double max_visits, double *visits) {
    int64_t G = s->groups, d = s->dim, L = s->size;
    *visits = 1.0;
    if (G <= 0 || G > L) { s->groups = 0; return HM_OK; }
    /* The centroids are fitted on a sample of per_group rows a group (8 for
     * the pruning index), which is also where the index is first judged (k
     * scaled to the sample's density), so a memory it would not help costs a
     * small fraction of a full build: the full assignment, L x G dots, only
     * follows a promising judgement. */
    int64_t ns = per_group * G;
    if (ns < L) {
        hm_state t = *s;
        t.size = t.capacity = ns;
        t.addresses16 = NULL;
        float *rows = (float *)malloc((size_t)(ns * d) * sizeof(float));
        t.group_of = (int32_t *)malloc((size_t)ns * sizeof(int32_t));
        t.members = (int64_t *)malloc((size_t)ns * sizeof(int64_t));
        t.start = (int64_t *)malloc((size_t)(G + 1) * sizeof(int64_t));
        t.radius = (double *)malloc((size_t)G * sizeof(double));
        int rc = rows && t.group_of && t.members && t.start && t.radius ? HM_OK : HM_ERR_NOMEM;
        if (rc == HM_OK) {
            for (int64_t r = 0; r < ns; r++)
                memcpy(rows + r * d, s->addresses + ((r * L) / ns) * d, (size_t)d * sizeof(float));
            t.addresses = rows;
            rc = index_fit(&t, iterations, 0);  /* into s->centroids, shared */
        }
        if (rc == HM_OK) {
            int64_t ks = (k * ns) / L;
            *visits = hm_index_visits(&t, ks > 1 ? ks : 1, 32);
        }
        free(rows); free(t.group_of); free(t.members); free(t.start); free(t.radius);
        if (rc != HM_OK) { s->groups = 0; return rc; }
        if (*visits > max_visits) return HM_OK;  /* judged on the sample: not worth it */
        rc = index_fit(s, 0, 1);
        if (rc != HM_OK) { s->groups = 0; return rc; }
    } else {
        int rc = index_fit(s, iterations, 0);
        if (rc != HM_OK) { s->groups = 0; return rc; }
    }
    *visits = hm_index_visits(s, k, 32);
    return HM_OK;
}

/* ---- location bookkeeping ------------------------------------------------------ */

/* Keep norms[row] = |counters row| (when the state keeps norms). */
HM_INLINE void sync_norm(hm_state *s, int64_t row) {
    if (s->norms) {
        const double *c = s->counters + row * s->dim;
        s->norms[row] = sqrt(ddot(c, c, s->dim));
    }
}

void hm_sync_norms(hm_state *s) {
    if (!s->counters) return;  /* implied counters: the norms are their source */
    for (int64_t r = 0; r < s->size; r++) sync_norm(s, r);
}

/* ---- implied counters ------------------------------------------------------------ */
#define HM_NORM_MIN 1e-20     /* read-out by norm (hm_read): the largest norm's range */
#define HM_NORM_MAX 1e30
/* A plain location holds one written input x (float32): its counters are x,
 * its weight 1, its norm |x| and its address a = float(x / |x|). For a unit
 * input (all but about one in 50,000, which has a component at a power of
 * two; inputs of other norms mostly not) x is also float(a * |x|), computed
 * in float64 and rounded: its counters are implied by its address and norm. A plain state may then
 * hold no counters (counters NULL): only the rows whose counters are not
 * implied (exceptions, ascending rows) keep theirs, a third of the bytes of
 * a state that holds them all. Rows are then only appended: the caller
 * (hopmem/_kernel.pyx) holds the counters before a merge, and before a write
 * of an input outside the read-out-by-norm range (hm_inputs_check), and
 * reserves room for the exceptions a write makes. */

/* What a plain location's counters c need: 0 implied by the address a and
 * norm, 1 an exception, 2 counters held (a norm outside the range, so that a
 * state that holds none always reads out by norm, or a weight other than 1). */
static int counters_need(const float *a, double norm, double weight, const double *c,
                         int64_t dim) {
    if (!(norm >= HM_NORM_MIN && norm <= HM_NORM_MAX) || weight != 1.0) return 2;
    for (int64_t i = 0; i < dim; i++)
        if ((double)(float)((double)a[i] * norm) != c[i]) return 1;
    return 0;
}

/* counters_need of the location that spawn makes from x (tmp: 2 dim doubles,
 * a: dim floats): as spawn makes its address and norm. */
static int input_need(const float *x, int64_t dim, double *tmp, float *a) {
    double *c = tmp, *t = tmp + dim;
    for (int64_t i = 0; i < dim; i++) t[i] = c[i] = (double)x[i];
    double norm = normalize_d(t, dim);
    for (int64_t i = 0; i < dim; i++) a[i] = (float)t[i];
    return counters_need(a, norm, 1.0, c, dim);
}

int64_t hm_inputs_check(const float *X, int64_t m, int64_t dim) {
    double *tmp = (double *)malloc((size_t)dim * 2 * sizeof(double));
    float *a = (float *)malloc((size_t)dim * sizeof(float));
    int64_t exceptions = tmp && a ? 0 : HM_ERR_NOMEM;
    for (int64_t r = 0; exceptions >= 0 && r < m; r++) {
        int need = input_need(X + r * dim, dim, tmp, a);
        if (need == 2) exceptions = -2;
        else exceptions += need;
    }
    free(tmp);
    free(a);
    return exceptions;
}

int64_t hm_rows_check(const hm_state *s) {
    if (!s->counters || !s->norms) return s->counters ? -2 : s->n_exceptions;
    int64_t exceptions = 0;
    for (int64_t r = 0; r < s->size; r++) {
        int need = counters_need(s->addresses + r * s->dim, s->norms[r], s->weights[r],
                                 s->counters + r * s->dim, s->dim);
        if (need == 2) return -2;
        exceptions += need;
    }
    return exceptions;
}

void hm_release_counters(hm_state *s) {
    int64_t d = s->dim, e = 0;
    for (int64_t r = 0; r < s->size; r++) {
        const double *c = s->counters + r * d;
        if (counters_need(s->addresses + r * d, s->norms[r], 1.0, c, d) == 0) continue;
        s->exception_rows[e] = r;
        memcpy(s->exception_counters + e * d, c, (size_t)d * sizeof(double));
        e++;
    }
    s->n_exceptions = e;
    s->counters = NULL;
}

/* The exception that holds row `row`'s counters, or NULL (binary search). */
static const double *exception_of(const hm_state *s, int64_t row) {
    int64_t lo = 0, hi = s->n_exceptions;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (s->exception_rows[mid] < row) lo = mid + 1; else hi = mid;
    }
    return lo < s->n_exceptions && s->exception_rows[lo] == row
               ? s->exception_counters + lo * s->dim : NULL;
}

/* Row `row`'s counters: the held row, its exception, or its implied
 * counters out[i] = float(a_i * norm) (widened), written to buf. */
static const double *counter_row(const hm_state *s, int64_t row, double *buf) {
    if (s->counters) return s->counters + row * s->dim;
    const double *e = exception_of(s, row);
    if (e) return e;
    const float *a = s->addresses + row * s->dim;
    double norm = s->norms[row];
    for (int64_t i = 0; i < s->dim; i++) buf[i] = (double)(float)((double)a[i] * norm);
    return buf;
}

void hm_counter_rows(const hm_state *s, int64_t from, int64_t to, double *out) {
    int64_t d = s->dim;
    for (int64_t r = from; r < to; r++) {
        double *o = out + (r - from) * d;
        const double *c = counter_row(s, r, o);
        if (c != o) memcpy(o, c, (size_t)d * sizeof(double));
    }
}

static int64_t append_row(hm_state *s, const double *address, const double *counter,
                          double weight) {
    int64_t row = s->size, d = s->dim;
    float *a = s->addresses + row * d;
    if (s->counters) {
        double *c = s->counters + row * d;
        for (int64_t i = 0; i < d; i++) { a[i] = (float)address[i]; c[i] = counter[i]; }
    } else {  /* a plain input (the caller checked): implied, or an exception */
        for (int64_t i = 0; i < d; i++) a[i] = (float)address[i];
        s->norms[row] = sqrt(ddot(counter, counter, d));
        if (counters_need(a, s->norms[row], weight, counter, d) != 0) {
            int64_t e = s->n_exceptions++;  /* room reserved by the caller */
            s->exception_rows[e] = row;
            memcpy(s->exception_counters + e * d, counter, (size_t)d * sizeof(double));
        }
    }
    s->weights[row] = weight;
    s->ids[row] = s->next_id++;
    s->size++;
    sync_rows16(s, row, 1);
    if (s->counters) sync_norm(s, row);
    index_add(s, row);
    return s->ids[row];
}

static int64_t spawn(hm_state *s, const float *x, double *tmp_a, double *tmp_c) {
    for (int64_t i = 0; i < s->dim; i++) tmp_a[i] = tmp_c[i] = (double)x[i];
    normalize_d(tmp_a, s->dim);
    return append_row(s, tmp_a, tmp_c, 1.0);
}

static void remove_row(hm_state *s, int64_t row) {
    index_remove(s, row);
    int64_t d = s->dim, tail = s->size - row - 1;
    if (tail > 0) {
        memmove(s->ids + row, s->ids + row + 1, (size_t)tail * sizeof(int64_t));
        memmove(s->weights + row, s->weights + row + 1, (size_t)tail * sizeof(double));
        if (s->norms) memmove(s->norms + row, s->norms + row + 1, (size_t)tail * sizeof(double));
        memmove(s->addresses + row * d, s->addresses + (row + 1) * d,
                (size_t)(tail * d) * sizeof(float));
        if (s->counters)
            memmove(s->counters + row * d, s->counters + (row + 1) * d,
                    (size_t)(tail * d) * sizeof(double));
        if (s->addresses16)
            memmove((uint16_t *)s->addresses16 + row * d,
                    (uint16_t *)s->addresses16 + (row + 1) * d,
                    (size_t)(tail * d) * sizeof(uint16_t));
    }
    s->size--;
}

/* Merge row drop into row keep (keep < drop: the older id survives). */
static void merge_rows(hm_state *s, int64_t keep, int64_t drop, double *tmp,
                       int64_t *removed, int64_t *survivor) {
    int64_t d = s->dim;
    double nk = s->weights[keep], nd = s->weights[drop];
    float *ak = s->addresses + keep * d;
    const float *ad = s->addresses + drop * d;
    for (int64_t i = 0; i < d; i++) tmp[i] = nk * (double)ak[i] + nd * (double)ad[i];
    normalize_d(tmp, d);
    for (int64_t i = 0; i < d; i++) ak[i] = (float)tmp[i];
    sync_rows16(s, keep, 1);
    index_touch(s, keep);
    double *ck = s->counters + keep * d;
    const double *cd = s->counters + drop * d;
    for (int64_t i = 0; i < d; i++) ck[i] += cd[i];
    sync_norm(s, keep);
    s->weights[keep] = nk + nd;
    *removed = s->ids[drop];
    *survivor = s->ids[keep];
    remove_row(s, drop);
}

static int64_t row_of(const hm_state *s, int64_t id) {
    int64_t lo = 0, hi = s->size;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (s->ids[mid] < id) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* Most similar pair of addresses, i < j, ties to the lowest (i, j). */
static double closest_pair(const hm_state *s, float *scratch, int64_t *bi, int64_t *bj) {
    int64_t n = s->size, d = s->dim;
    double best = -INFINITY;
    *bi = *bj = -1;
    for (int64_t i = 0; i + 1 < n; i++) {
        int64_t rest = n - i - 1;
        /* A tiny address (an input of norm < 1e-12 kept as is) has cos 0 with
         * everything (docs/algorithm.md), whatever its float32 dot underflows to. */
        int tiny_i = fnorm(s->addresses + i * d, d) < HM_TINY;
        hm_dots(s->addresses + (i + 1) * d, rest, d, s->addresses + i * d, scratch);
        for (int64_t t = 0; t < rest; t++) {
            double sim = scratch[t];
            if (tiny_i || (sim < 1e-6 && sim > -1e-6 &&
                           fnorm(s->addresses + (i + 1 + t) * d, d) < HM_TINY))
                sim = 0.0;
            if (sim > best) { best = sim; *bi = i; *bj = i + 1 + t; }
        }
    }
    return best;
}

int64_t hm_merge(hm_state *s, int64_t bound, double tau, int64_t *merges, int64_t max_merges) {
    float *scratch = (float *)malloc((size_t)(s->size > 0 ? s->size : 1) * sizeof(float));
    double *tmp = (double *)malloc((size_t)s->dim * sizeof(double));
    if (!scratch || !tmp) { free(scratch); free(tmp); return HM_ERR_NOMEM; }
    int64_t count = 0;
    while (s->size >= 2 && count < max_merges) {
        if (bound >= 0 && s->size <= bound) break;
        int64_t i, j;
        double sim = closest_pair(s, scratch, &i, &j);
        if (bound < 0 && !(sim > tau)) break;
        merges[3 * count] = -1;
        merge_rows(s, i, j, tmp, &merges[3 * count + 1], &merges[3 * count + 2]);
        count++;
    }
    free(scratch);
    free(tmp);
    index_members(s);
    return count;
}

/* ---- activation ------------------------------------------------------------ */
/* Scores may be approximate: the half-precision scan (compact activation) or
 * BLAS for a batch. Then every row whose approximate score lies within the
 * proven error bound of the k-th best is re-scored exactly with dot1(), in row
 * order, so the activated set, its order and its similarities are bit-equal to
 * the exact scan's. The bound: a float32 dot product of length d, in any
 * summation order, is off by at most ~d * 2^-24 * |q| * |a| (|a| <= 1 here),
 * and rounding an address to half moves it by at most 2^-11 * |a|; both are
 * doubled for safety. */

double hm_score_error(int64_t dim, int half) {
    return 4.0 * (double)dim * 5.9604644775390625e-08 + (half ? 2.0 * 4.8828125e-04 : 0.0);
}

typedef struct {
    float *scores;    /* [capacity] */
    int64_t *cand;    /* [capacity] */
    float *vals;      /* [capacity] */
    float *top;       /* [k] */
    float *qhat;      /* [dim] */
    hm_pair *order;   /* [capacity]: the index's groups by bound */
    int64_t nvis;     /* index_scan: groups visited (their ids in cand), -1: all rows */
} act_scratch;

/* One allocation carved into the buffers (a read is called often: six
 * allocations cost as much as a short read's arithmetic), 8-byte members first. */
static int act_alloc(act_scratch *a, int64_t rows, int64_t k, int64_t dim) {
    size_t n = (size_t)(rows > 0 ? rows : 1), kk = (size_t)(k > 0 ? k : 1);
    char *block = (char *)malloc(n * (sizeof(hm_pair) + sizeof(int64_t) + 2 * sizeof(float))
                                 + (kk + (size_t)dim) * sizeof(float));
    if (!block) {
        memset(a, 0, sizeof *a);
        return 0;
    }
    a->order = (hm_pair *)block;
    a->cand = (int64_t *)(a->order + n);
    a->scores = (float *)(a->cand + n);
    a->vals = a->scores + n;
    a->top = a->vals + n;
    a->qhat = a->top + kk;
    return 1;
}

static void act_free(act_scratch *a) { free(a->order); }

/* out = q / |q| rounded to float32 (zeros when |q| < TINY); returns |q|.
 * Scores against a unit query are cosines in [-1, 1]: no float32 overflow
 * for huge inputs, and a tiny query scores 0 everywhere as docs/algorithm.md says. */
HM_INLINE double unit_query(const float *q, int64_t dim, float *out) {
    double norm = fnorm(q, dim);
    if (norm < HM_TINY) {
        memset(out, 0, (size_t)dim * sizeof(float));
    } else {
        for (int64_t i = 0; i < dim; i++) out[i] = (float)((double)q[i] / norm);
    }
    return norm;
}

void hm_unit_rows(const float *X, int64_t n, int64_t dim, float *out) {
    for (int64_t r = 0; r < n; r++) unit_query(X + r * dim, dim, out + r * dim);
}

HM_CLONES
double hm_cosine(const float *a, const float *b, int64_t dim) {
    double na = fnorm(a, dim), nb = fnorm(b, dim);
    if (na < HM_TINY || nb < HM_TINY) return 0.0;
    return ffdot(a, b, dim) / (na * nb);
}

/* Min-heap of the k best scores seen (heap[0] is the k-th best once full). */
HM_INLINE void heap_push(float *heap, int64_t k, int64_t *n, float v) {
    int64_t i;
    if (*n < k) {
        i = (*n)++;
        while (i > 0 && heap[(i - 1) / 2] > v) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
        heap[i] = v;
        return;
    }
    if (!(v > heap[0])) return;
    i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        float mv = v;
        if (l < k && heap[l] < mv) { m = l; mv = heap[l]; }
        if (r < k && heap[r] < mv) { m = r; }
        if (m == i) break;
        heap[i] = heap[m];
        i = m;
    }
    heap[i] = v;
}

/* Score the n rows m[0 .. n) against q, four at a time with the scan's own
 * lanes, pushing each score into the min-heap of the k best seen; each score
 * goes to by_row[row] (by_row non-NULL) or to the next pair of *pairs. */
HM_INLINE void score_members(const hm_state *s, const int64_t *m, int64_t n, const float *q,
                             float *by_row, hm_pair **pairs, float *heap, int64_t k,
                             int64_t *have) {
    int64_t d = s->dim, j = 0;
    float four[4];
    for (; j + 4 <= n; j += 4) {
        if (j + 8 <= n)  /* the rows are scattered: ask for the next four whole */
            for (int u = 4; u < 8; u++) {
                const char *row = (const char *)(s->addresses + m[j + u] * d);
                for (int64_t b = 0; b < d * (int64_t)sizeof(float); b += 64)
                    HM_PREFETCH(row + b);
            }
        dot4p(s->addresses + m[j] * d, s->addresses + m[j + 1] * d,
              s->addresses + m[j + 2] * d, s->addresses + m[j + 3] * d, d, q, four, 1, NULL);
        for (int u = 0; u < 4; u++) {
            if (by_row) by_row[m[j + u]] = four[u];
            else { (*pairs)->v = four[u]; (*pairs)->r = m[j + u]; (*pairs)++; }
            heap_push(heap, k, have, four[u]);
        }
    }
    for (; j < n; j++) {
        float v = dot1(s->addresses + m[j] * d, d, q);
        if (by_row) by_row[m[j]] = v;
        else { (*pairs)->v = v; (*pairs)->r = m[j]; (*pairs)++; }
        heap_push(heap, k, have, v);
    }
}

/* Score the rows of group g against q (their scores into a->scores), keep
 * the k best scores seen in the min-heap a->top, and list g as visited in
 * a->cand. Returns the group's rows. */
HM_INLINE int64_t visit_group(const hm_state *s, int64_t g, int64_t k, const float *q,
                              act_scratch *a, int64_t *have) {
    a->cand[a->nvis++] = g;
    const int64_t *m = s->members + s->start[g], n = s->start[g + 1] - s->start[g];
    score_members(s, m, n, q, a->scores, NULL, a->top, k, have);
    return n;
}

/* Scores of q against the rows the index cannot rule out for the top k: see
 * "location index". q is a unit vector. Returns the rows scored. Afterwards
 * either a->nvis >= 0 and the scored rows are the members of the groups
 * a->cand[0 .. nvis) (only their entries of a->scores are set), or a->nvis is
 * -1 and every row was scored (a streaming scan was cheaper).
 *
 * Groups are visited from the highest bound down, so that the k-th best
 * score found rises fast and rules out the most groups. Only the order needs
 * the bounds sorted, and most groups are ruled out by the first ones
 * visited, so the best groups are picked one at a time until the heap holds k
 * scores, and only the groups that its k-th best cannot rule out are sorted. */
HM_INLINE int64_t index_scan(const hm_state *s, int64_t k, const float *q, act_scratch *a) {
    int64_t d = s->dim, L = s->size, G = s->groups;
    if (k > L) k = L;
    float *gs = a->vals, *heap = a->top;
    hm_pair *order = a->order;
    hm_dots(s->centroids, G, d, q, gs);
    for (int64_t g = 0; g < G; g++) { order[g].v = gs[g] + (float)s->radius[g]; order[g].r = g; }
    /* both the centroid's score and a row's are float32 dots: each within
     * hm_score_error of the exact value (|q| = 1, |c|, |a| <= 1) */
    const double slack = 2.0 * hm_score_error(d, 0);
    int64_t have = 0, visited = 0, t = 0, end = G;
    a->nvis = 0;
    for (; t < G && have < k; t++) {  /* the best remaining group, until k scores */
        int64_t best = t;
        for (int64_t u = t + 1; u < G; u++) if (pair_before(order[u], order[best])) best = u;
        hm_pair tmp = order[t]; order[t] = order[best]; order[best] = tmp;
        visited += visit_group(s, order[t].r, k, q, a, &have);
    }
    if (have == k) {  /* keep the groups the k-th best cannot rule out, best first */
        end = t;
        for (int64_t u = t; u < G; u++) {
            int64_t h = order[u].r;
            if (!((double)gs[h] + s->radius[h] + slack < (double)heap[0])) order[end++] = order[u];
        }
    }
    sort_pairs(order + t, end - t);
    int judged = 0;
    for (; t < end; t++) {
        int64_t g = order[t].r;
        if (have == k && !judged && 8 * visited > L) {
            /* Once an eighth of the rows are visited, count the rows the
             * bounds cannot rule out yet; if a streaming scan of all rows is
             * cheaper than visiting those scattered rows (a query far from
             * every group, such as a write that will spawn), do that instead.
             * The result is the same either way: only the cost differs. */
            judged = 1;
            int64_t open = 0;
            for (int64_t u = t; u < end; u++) {
                int64_t h = order[u].r;
                if (!((double)gs[h] + s->radius[h] + slack < (double)heap[0]))
                    open += s->start[h + 1] - s->start[h];
            }
            if (4 * (visited + open) > L) {  /* a scattered row costs ~4 streamed ones */
                hm_dots(s->addresses, L, d, q, a->scores);
                a->nvis = -1;
                return visited + L;
            }
        }
        if (have == k && (double)gs[g] + s->radius[g] + slack < (double)heap[0]) continue;
        visited += visit_group(s, g, k, q, a, &have);
    }
    return visited;
}

/* The k best of the rows index_scan scored (the members of its visited
 * groups): the same rows, order and values as hm_top_k over all rows with the
 * others at -inf, without touching the others. Every row in the top k scores
 * at least the heap's k-th best, so only those are sorted. Returns -2 on a
 * NaN score (the caller then takes the general path). */
HM_INLINE int64_t top_k_visited(const hm_state *s, int64_t k, act_scratch *a, int64_t *rows,
                                float *top) {
    if (k > s->size) k = s->size;
    if (k <= 0) return 0;
    const float *sc = a->scores;
    float kth = a->top[0];
    hm_pair *cand = a->order;  /* the groups' order is no longer needed */
    int64_t nc = 0;
    for (int64_t t = 0; t < a->nvis; t++) {
        int64_t g = a->cand[t];
        for (int64_t j = s->start[g]; j < s->start[g + 1]; j++) {
            int64_t r = s->members[j];
            float v = sc[r];
            if (v != v) return -2;
            if (v >= kth) { cand[nc].v = v; cand[nc].r = r; nc++; }
        }
    }
    sort_pairs(cand, nc);
    if (k > nc) k = nc;
    for (int64_t j = 0; j < k; j++) { rows[j] = cand[j].r; top[j] = cand[j].v; }
    return k;
}

HM_CLONES
double hm_index_visits(const hm_state *s, int64_t k, int64_t samples) {
    int64_t L = s->size, d = s->dim;
    if (s->groups <= 0 || L == 0 || samples <= 0) return 1.0;
    if (k > L) k = L;
    act_scratch a;
    if (!act_alloc(&a, L, k, d)) { act_free(&a); return 1.0; }
    double total = 0.0;
    for (int64_t t = 0; t < samples; t++) {
        unit_query(s->addresses + ((t * L) / samples) * d, d, a.qhat);
        total += (double)index_scan(s, k, a.qhat, &a);
    }
    act_free(&a);
    return (total / (double)samples + (double)s->groups) / (double)L;
}

/* ---- approximate activation ------------------------------------------------------
 * An inverted-file probe over the location index: the groups are ranked by
 * their centroid's score q.c_g (ties to the lower group), the first `probe`
 * of them are taken (more, in that order, while they hold fewer than k rows),
 * and the activated set is the exact top k of their rows: the same float32
 * scores, order and tie rule as the scan, over fewer rows. A probed group
 * whose bound (see "location index") is below the k-th best score found so
 * far is skipped: it holds no row of that top k, so skipping it changes only
 * the cost. Rows of unprobed groups are never scored: that is the
 * approximation, measured as recall against exact activation in
 * benchmarks/ann.py. q is a unit vector. Returns k' (min(k, rows probed)),
 * or -2 on a NaN score (the caller then scans). */
HM_INLINE int64_t activate_approx(const hm_state *s, int64_t k, int64_t probe, const float *q,
                                  int64_t *rows, double *sims, act_scratch *a) {
    int64_t d = s->dim, L = s->size, G = s->groups;
    if (k > L) k = L;
    if (k <= 0) return 0;
    float *gs = a->vals, *heap = a->top;
    hm_pair *order = a->order;
    hm_dots(s->centroids, G, d, q, gs);
    for (int64_t g = 0; g < G; g++) { order[g].v = gs[g]; order[g].r = g; }
    sort_pairs(order, G);
    int64_t ng = 0, nrows = 0;
    while (ng < G && (ng < probe || nrows < k)) {
        int64_t g = order[ng++].r;
        nrows += s->start[g + 1] - s->start[g];
    }
    hm_pair *cand = (hm_pair *)malloc((size_t)(nrows > 0 ? nrows : 1) * sizeof(hm_pair));
    if (!cand) return -2;
    const double slack = 2.0 * hm_score_error(d, 0);
    int64_t have = 0, nc = 0;
    for (int64_t t = 0; t < ng; t++) {
        int64_t g = order[t].r;
        if (have == k && (double)gs[g] + s->radius[g] + slack < (double)heap[0]) continue;
        hm_pair *next = cand + nc;
        score_members(s, s->members + s->start[g], s->start[g + 1] - s->start[g], q, NULL,
                      &next, heap, k, &have);
        nc = next - cand;
    }
    /* Every row of the top k scores at least the heap's k-th best: sort those only. */
    float kth = heap[0];
    int64_t keep = 0;
    for (int64_t j = 0; j < nc; j++) {
        float v = cand[j].v;
        if (v != v) { free(cand); return -2; }
        if (v >= kth) cand[keep++] = cand[j];
    }
    sort_pairs(cand, keep);
    if (k > keep) k = keep;
    for (int64_t j = 0; j < k; j++) { rows[j] = cand[j].r; sims[j] = (double)cand[j].v; }
    free(cand);
    return k;
}

/* Rows of the k best exact scores for q (ties to the lower row) and their
 * cosine similarities. scores: precomputed scores for q with relative error
 * bound scores_error (0 = exact), or NULL to scan here. */
HM_INLINE int64_t activate(const hm_state *s, const hm_config *c, const float *q,
                           const float *scores, double scores_error, int64_t *rows,
                           double *sims, act_scratch *a) {
    int64_t d = s->dim, L = s->size;
    /* Given exact scores (a write's block), the unit query is not needed. */
    double qnorm = scores && scores_error == 0.0 ? 1.0 : unit_query(q, d, a->qhat);
    if (!scores && c->probe > 0 && c->probe < s->groups && qnorm >= HM_TINY
        && !(c->compact && s->addresses16)) {
        int64_t kk = activate_approx(s, c->k, c->probe, a->qhat, rows, sims, a);
        if (kk >= 0) return kk;  /* else (NaN, or no memory for the candidates): scan */
    }
    if (!scores) {
        scores = a->scores;
        if (s->groups > 0 && !(c->compact && s->addresses16) && qnorm >= HM_TINY) {
            index_scan(s, c->k, a->qhat, a);  /* exact: the same scores where they matter */
            scores_error = 0.0;
            int64_t kk = a->nvis >= 0 ? top_k_visited(s, c->k, a, rows, a->top) : -2;
            if (kk >= 0) {
                for (int64_t j = 0; j < kk; j++) sims[j] = (double)a->top[j];
                return kk;
            }
            if (a->nvis >= 0) hm_dots(s->addresses, L, d, a->qhat, a->scores);  /* NaN: rescore all */
        } else {
            hm_scan(s, c, a->qhat, 1, a->scores);
            scores_error = (c->compact && s->addresses16) ? hm_score_error(d, 1) : 0.0;
        }
    }
    int64_t kk = hm_top_k(scores, L, c->k, rows, a->top);
    if (kk > 0 && scores_error > 0.0 && qnorm >= HM_TINY) {
        double cut = (double)a->top[kk - 1] - scores_error;  /* |qhat| = 1 */
        int64_t nc = at_least(scores, L, cut, a->cand);
        for (int64_t j = 0; j < nc; j++) {
            const char *row = (const char *)(s->addresses + a->cand[j] * d);
            for (int64_t b = 0; b < d * (int64_t)sizeof(float); b += 64) HM_PREFETCH(row + b);
        }
        for (int64_t j = 0; j < nc; j++)
            a->vals[j] = dot1(s->addresses + a->cand[j] * d, d, a->qhat);
        kk = hm_top_k(a->vals, nc, c->k, rows, a->top);
        if (kk < 0) return kk;
        for (int64_t j = 0; j < kk; j++) rows[j] = a->cand[rows[j]];
    }
    if (kk < 0) return kk;
    for (int64_t j = 0; j < kk; j++) sims[j] = (double)a->top[j];
    return kk;
}

/* Exact top-k by cosine over rows of norm <= 1 (documents), for one query.
 * With half (an IEEE half copy of A) the half copy is scanned and candidates
 * are re-scored exactly, so the answer equals the float32 scan's. */
int64_t hm_search_unit(const float *A, const void *half, int64_t n, int64_t dim,
                       const float *q, int64_t k, int64_t *rows, float *top) {
    hm_state s;
    memset(&s, 0, sizeof s);
    s.dim = dim;
    s.size = s.capacity = n;
    s.addresses = (float *)A;
    s.addresses16 = (void *)half;
    hm_config c;
    memset(&c, 0, sizeof c);
    c.k = k;
    c.compact = half != NULL;
    int64_t kmax = k < n ? k : n;
    act_scratch a;
    double *sims = (double *)malloc((size_t)(kmax > 0 ? kmax : 1) * sizeof(double));
    if (!act_alloc(&a, n, kmax, dim) || !sims) { act_free(&a); free(sims); return HM_ERR_NOMEM; }
    int64_t kk = activate(&s, &c, q, NULL, 0.0, rows, sims, &a);
    for (int64_t j = 0; j < kk; j++) top[j] = (float)sims[j];
    act_free(&a);
    free(sims);
    return kk;
}

/* ---- writes ------------------------------------------------------------------------ */

#define HM_WRITE_BLOCK 8               /* writes scored together, while the matrix fits in cache */
#define HM_WRITE_BLOCK_BIG 64          /* ... and once it does not (see write_block_size) */
#define HM_WRITE_BLOCK_CACHE 8e6       /* bytes of addresses: "fits in cache" (measured, below) */
#define HM_WRITE_BLOCK_MIN_ROWS 64     /* below this a scan is as cheap */
#define HM_WRITE_BLOCK_ROWS (1 << 18)  /* above this the block's scores take too much memory */

/* A block of a batch's writes scored together (see hm_write): the exact
 * scores of its unit inputs against the rows that existed when it started,
 * kept current as its writes change rows (block_touch). */
typedef struct {
    float *S;            /* [nb * L0]: S[j * L0 + r] = dot(address r, unit input j) */
    float *Q;            /* [nb * dim]: the unit inputs */
    int64_t L0, nb;      /* rows scored; writes in the block */
    int valid;           /* 0 once a merge moved rows (the rest of the block scans) */
} write_block;

typedef struct {
    act_scratch act;  /* activation buffers, [capacity] */
    int64_t *rows;    /* [k] */
    double *sims;     /* [k] */
    double *tmp_a;    /* [dim] */
    double *tmp_c;    /* [dim] */
    double *x64;      /* [dim] */
    write_block *blk; /* NULL: every write scans */
    int64_t bj;       /* this write's index in the block */
    struct write_ahead *ahead; /* the next block, scored by a helper meanwhile, or NULL */
} write_scratch;

/* The next block's scores, computed by a helper thread while this block's
 * writes run (hm_rows_start). The helper reads rows the writes may be moving,
 * so a score it computed for a row moved meanwhile can be stale or torn: such
 * rows are listed (`moved`) and scored again once the helper is done, and a
 * merge (rows shift) discards the whole block. Rows added meanwhile lie past
 * L0 and are scored by block_scores like any block's. What reaches a write is
 * therefore exactly what a scan would compute. */
typedef struct write_ahead {
    write_block blk;
    int64_t first;    /* index of the block's first input in the call */
    int running;      /* a helper job is scoring blk (hm_rows_finish pending) */
    int64_t *moved;   /* rows below blk.L0 whose address changed since it started */
    int64_t n_moved, max_moved;
} write_ahead;

/* How many writes a block scores together. While the address matrix fits in
 * the caches a block's pass is bound by arithmetic, and small blocks keep the
 * re-scoring of changed rows cheap; once it spills to memory the pass streams
 * the whole matrix, and larger blocks share each stream among more writes.
 * Measured at d = 384 (us a write, blocks of 8 / 16 / 64): 69 / 73 / 84 at
 * 1,500 rows (2.3 MB), 158 / 176 / 178 at 5,000 (7.7 MB), 295 / 226 / 207 at
 * 7,500 (11.5 MB), 612 / 475 / 408 at 17,466 (27 MB). */
HM_INLINE int64_t write_block_size(int64_t rows, int64_t d) {
    return (double)rows * (double)d * sizeof(float) <= HM_WRITE_BLOCK_CACHE ? HM_WRITE_BLOCK
                                                                            : HM_WRITE_BLOCK_BIG;
}

/* This write's scores from its block: the block's scores, and the rows
 * added since the block started scored against the same unit input. Every
 * score is computed exactly as the scan computes it (same lanes, same order),
 * so the activation is bit-equal to a scan's. NULL when the block no longer
 * applies. */
HM_INLINE const float *block_scores(const hm_state *s, write_scratch *w) {
    write_block *b = w->blk;
    if (!b || !b->valid) return NULL;
    int64_t d = s->dim, L0 = b->L0;
    float *sc = w->act.scores;
    const float *qh = b->Q + w->bj * d;
    memcpy(sc, b->S + w->bj * L0, (size_t)L0 * sizeof(float));
    for (int64_t r = L0; r < s->size; r++) sc[r] = dot1(s->addresses + r * d, d, qh);
    return sc;
}

/* Score row `row` (address a) against inputs j0 .. nb - 1 of a block, four
 * inputs at a time (one dot1 is a chain of dependent adds): dot4's lanes and
 * order are dot1's, and q * a is a * q, so each score is bit-equal to
 * dot1(a, d, q). */
HM_INLINE void block_rescore(write_block *b, int64_t d, const float *a, int64_t row, int64_t j0) {
    float four[4];
    int64_t j = j0;
    for (; j + 4 <= b->nb; j += 4) {
        dot4(b->Q + j * d, d, a, four, NULL);
        for (int u = 0; u < 4; u++) b->S[(j + u) * b->L0 + row] = four[u];
    }
    for (; j < b->nb; j++) b->S[j * b->L0 + row] = dot1(a, d, b->Q + j * d);
}

/* A write changed a row's address: score it again for the block's later
 * inputs now, while the row is in cache (re-scoring the changed rows at each
 * later write instead reads them back from memory, which cost more than the
 * block's pass over the whole matrix once the block was large); and list it
 * for the block being scored ahead. */
HM_INLINE void block_touch(const hm_state *s, write_scratch *w, int64_t row) {
    write_ahead *ahead = w->ahead;
    if (ahead && ahead->running && row < ahead->blk.L0) {
        if (ahead->n_moved < ahead->max_moved) ahead->moved[ahead->n_moved++] = row;
        else ahead->blk.valid = 0;  /* more rows moved than listed: score the block anew */
    }
    write_block *b = w->blk;
    if (!b || !b->valid || row >= b->L0) return;
    block_rescore(b, s->dim, s->addresses + row * s->dim, row, w->bj + 1);
}

HM_INLINE void block_rows_moved(write_scratch *w) {
    if (w->blk) w->blk->valid = 0;
    if (w->ahead) w->ahead->blk.valid = 0;
}

/* Ask for a row of n doubles ahead of its use. */
HM_INLINE void prefetch_doubles(const double *p, int64_t n) {
    const char *b = (const char *)p;
    for (int64_t o = 0; o < n * (int64_t)sizeof(double); o += 64) HM_PREFETCH(b + o);
}

/* Ask for a location's counters and address ahead of an update. */
HM_INLINE void prefetch_row(const hm_state *s, int64_t row) {
    const char *cr = (const char *)(s->counters + row * s->dim);
    const char *ar = (const char *)(s->addresses + row * s->dim);
    for (int64_t b = 0; b < s->dim * (int64_t)sizeof(double); b += 64) HM_PREFETCH_W(cr + b);
    for (int64_t b = 0; b < s->dim * (int64_t)sizeof(float); b += 64) HM_PREFETCH_W(ar + b);
}

HM_INLINE void write_competitive(hm_state *s, const hm_config *c, const float *x, int64_t vi,
                              write_scratch *w, hm_write_log *log) {
    int64_t d = s->dim;
    int64_t *touched = log->touched + vi * log->touched_stride;
    int64_t *created = log->created + vi * 2;
    int32_t nt = 0, nc = 0;
    s->writes++;
    if (s->size == 0) {
        created[nc++] = spawn(s, x, w->tmp_a, w->tmp_c);
        log->n_touched[vi] = nt;
        log->n_created[vi] = nc;
        return;
    }
    for (int64_t i = 0; i < d; i++) w->x64[i] = (double)x[i];
    /* The same activation as a read (compact or not, the set is exact); in a
     * block, from the block's exact scores instead of a scan of its own
     * (a block shares one pass over the addresses among 8 writes: cheaper
     * than the location index whenever inputs are new, and they often are). */
    const float *scores = block_scores(s, w);
    if (!scores) index_members(s);  /* the index may serve this activation */
    int64_t kk = activate(s, c, x, scores, 0.0, w->rows, w->sims, &w->act);
    double s_max = w->sims[0];
    int64_t winner_id = -1;
    if (s_max > HM_TINY) {
        double total = 0.0;
        for (int64_t j = 0; j < kk; j++) total += s->weights[w->rows[j]];
        int64_t winner = w->rows[0];
        if (total > HM_TINY) {
            double best = -INFINITY;
            for (int64_t j = 0; j < kk; j++) {
                if (!(w->sims[j] > 0.0)) continue;  /* only absorbing locations compete */
                double merit = w->sims[j] - c->gamma * s->weights[w->rows[j]] / total;
                if (merit > best) { best = merit; winner = w->rows[j]; }
            }
        }
        double eta_w = s->eta / (1.0 + s->weights[winner] / c->tau_damp);
        prefetch_row(s, w->rows[0]);
        for (int64_t j = 0; j < kk; j++) {
            /* The rows are scattered; the next one streams in while this one
             * is updated (its counters row is 8 bytes a value, rarely cached). */
            if (j + 1 < kk) prefetch_row(s, w->rows[j + 1]);
            double wj = (w->sims[j] > 0.0 ? w->sims[j] : 0.0) / s_max;
            if (wj <= 0.0) continue;
            int64_t row = w->rows[j];
            double rate = row == winner ? eta_w : 0.1 * eta_w;
            float *aj = s->addresses + row * d;
            double sq = move_row(s->counters + row * d, aj, w->x64, wj, rate, w->tmp_a, d);
            s->weights[row] += wj;
            scale_to_float(w->tmp_a, sqrt(sq), d, aj);
            sync_rows16(s, row, 1);
            sync_norm(s, row);
            index_touch(s, row);
            block_touch(s, w, row);
            touched[nt++] = s->ids[row];
        }
        double eta = s->eta * c->eta_decay;
        s->eta = eta > c->eta_min ? eta : c->eta_min;
        winner_id = s->ids[winner];
    }
    int64_t spawned = -1, child = -1;
    if (s_max < c->tau_split) {
        spawned = spawn(s, x, w->tmp_a, w->tmp_c);
        created[nc++] = spawned;
    }
    if (winner_id >= 0) {
        int64_t wr = row_of(s, winner_id);
        if (s->weights[wr] > c->tau_overload) {
            random_unit(&s->rng, w->tmp_c, d);
            const float *pa = s->addresses + wr * d;
            for (int64_t i = 0; i < d; i++) w->tmp_a[i] = (double)pa[i] + 0.1 * w->tmp_c[i];
            normalize_d(w->tmp_a, d);
            double *pc = s->counters + wr * d;
            for (int64_t i = 0; i < d; i++) { pc[i] *= 0.5; w->tmp_c[i] = pc[i]; }
            sync_norm(s, wr);
            s->weights[wr] *= 0.5;
            child = append_row(s, w->tmp_a, w->tmp_c, s->weights[wr]);
            created[nc++] = child;
        }
    }
    if (spawned >= 0 && child >= 0) {
        int64_t rs = row_of(s, spawned), rc = row_of(s, child);
        const float *as = s->addresses + rs * d, *ac = s->addresses + rc * d;
        for (int64_t i = 0; i < d; i++) { w->tmp_a[i] = as[i]; w->tmp_c[i] = ac[i]; }
        if (cos_d(w->tmp_a, w->tmp_c, d) > c->tau_merge) {
            int64_t *m = log->merges + 3 * log->n_merges++;
            m[0] = vi;
            merge_rows(s, rs, rc, w->tmp_a, &m[1], &m[2]);
            block_rows_moved(w);
        }
    }
    if (c->max_locations > 0) {
        while (s->size > c->max_locations && s->size >= 2) {
            int64_t i, j;
            closest_pair(s, w->act.scores, &i, &j);
            int64_t *m = log->merges + 3 * log->n_merges++;
            m[0] = vi;
            merge_rows(s, i, j, w->tmp_a, &m[1], &m[2]);
            block_rows_moved(w);
        }
    }
    log->n_touched[vi] = nt;
    log->n_created[vi] = nc;
}

HM_CLONES
int hm_write(hm_state *s, const hm_config *c, const float *X, int64_t m, hm_write_log *log) {
    int64_t d = s->dim;
    hm_config exact = *c;  /* writes activate exactly, whatever the reads do */
    exact.probe = 0;
    c = &exact;
    if (s->size + 2 * m > s->capacity) return HM_ERR_CAPACITY;
    int64_t kk = c->k < s->size + 2 * m ? c->k : s->size + 2 * m;
    if (log->touched_stride < kk) return HM_ERR_LOG;
    int64_t excess = c->max_locations > 0 && s->size > c->max_locations
                         ? s->size - c->max_locations : 0;
    if (log->merges_capacity < 3 * m + excess) return HM_ERR_LOG;
    log->n_merges = 0;
    if (!c->competitive) {
        double *tmp_a = (double *)malloc((size_t)d * 2 * sizeof(double));
        if (!tmp_a) return HM_ERR_NOMEM;
        /* the new rows join the index together afterwards (index_join) */
        int64_t first = s->size, groups = s->groups;
        s->groups = 0;
        for (int64_t vi = 0; vi < m; vi++) {
            s->writes++;
            log->created[2 * vi] = spawn(s, X + vi * d, tmp_a, tmp_a + d);
            log->n_created[vi] = 1;
            log->n_touched[vi] = 0;
        }
        s->groups = groups;
        free(tmp_a);
        if (groups > 0) index_join(s, first);
        index_members(s);
        return HM_OK;
    }
    write_scratch w;
    size_t k = (size_t)(c->k < s->capacity ? c->k : s->capacity) + 1;
    int ok = act_alloc(&w.act, s->capacity, (int64_t)k, d);
    w.rows = (int64_t *)malloc(k * sizeof(int64_t));
    w.sims = (double *)malloc(k * sizeof(double));
    w.tmp_a = (double *)malloc((size_t)d * 3 * sizeof(double));
    ok = ok && w.rows && w.sims && w.tmp_a;
    /* Writes in blocks: one pass over the address matrix scores a block's
     * inputs together (each block of 4 rows stays in L1 while every input
     * passes over it), instead of one pass per write. A block stops being
     * used once a merge moves rows. Keeping its scores current costs up to
     * k * (block - 1) dot products a write, so a block needs rows enough
     * for that to stay well under a scan. */
    write_block blk;
    write_ahead ahead;
    memset(&blk, 0, sizeof blk);
    memset(&ahead, 0, sizeof ahead);
    int64_t bsize = write_block_size(s->size, d);
    if (m < bsize) bsize = m;
    if (ok && bsize >= 2 && s->capacity <= HM_WRITE_BLOCK_ROWS) {
        /* rows only grow during a call (merges move them, not add): capacity bounds L0 */
        blk.S = (float *)malloc((size_t)(bsize * s->capacity) * sizeof(float));
        blk.Q = (float *)malloc((size_t)(bsize * d) * sizeof(float));
        if (!(blk.S && blk.Q)) bsize = 1;  /* scan instead */
    } else {
        bsize = 1;
    }
    /* Several blocks: keep the scan helpers awake, and let one score each next
     * block while this one's writes run (a block's writes touch k rows each;
     * the list of rows to score again holds that many). */
    int hold = ok && bsize >= 2 && m > bsize && s->size >= HM_WRITE_BLOCK_MIN_ROWS
                   ? hm_parallel_hold((double)s->size * (double)d * (double)bsize) : 0;
    if (hold) {
        ahead.max_moved = kk * bsize;
        ahead.blk.S = (float *)malloc((size_t)(bsize * s->capacity) * sizeof(float));
        ahead.blk.Q = (float *)malloc((size_t)(bsize * d) * sizeof(float));
        ahead.moved = (int64_t *)malloc((size_t)ahead.max_moved * sizeof(int64_t));
    }
    int use_ahead = hold && ahead.blk.S && ahead.blk.Q && ahead.moved;
    scan_job ahead_job;  /* the helper's job: lives until hm_rows_finish */
    if (ok) {
        w.tmp_c = w.tmp_a + d;
        w.x64 = w.tmp_a + 2 * d;
        w.blk = NULL;
        w.ahead = NULL;
        for (int64_t vi = 0; vi < m;) {
            int64_t nb = m - vi < bsize ? m - vi : bsize;
            if (ahead.running) {  /* this block was scored ahead */
                hm_rows_finish();
                ahead.running = 0;
                w.ahead = NULL;
            }
            if (ahead.blk.valid && ahead.first == vi && ahead.blk.nb == nb) {
                write_block t = blk;  /* take the scores; the old buffers score the next */
                blk = ahead.blk;
                ahead.blk = t;
                ahead.blk.valid = 0;
                for (int64_t i = 0; i < ahead.n_moved; i++) {
                    int64_t r = ahead.moved[i];
                    block_rescore(&blk, d, s->addresses + r * d, r, 0);
                }
                w.blk = &blk;
            } else if (nb >= 2 && bsize >= 2 && s->size >= HM_WRITE_BLOCK_MIN_ROWS
                    && s->size >= kk * (nb - 1)) {
                blk.L0 = s->size;
                blk.nb = nb;
                blk.valid = 1;
                for (int64_t j = 0; j < nb; j++) unit_query(X + (vi + j) * d, d, blk.Q + j * d);
                hm_dots_batch(s->addresses, blk.L0, d, blk.Q, nb, blk.S);
                w.blk = &blk;
            } else {
                w.blk = NULL;
            }
            int64_t next = vi + nb, nb2 = m - next < bsize ? m - next : bsize;
            ahead.blk.valid = 0;
            if (use_ahead && nb2 >= 2 && s->size >= HM_WRITE_BLOCK_MIN_ROWS
                    && s->size >= kk * (nb2 - 1)) {
                write_block *a = &ahead.blk;
                a->L0 = s->size;
                a->nb = nb2;
                for (int64_t j = 0; j < nb2; j++) unit_query(X + (next + j) * d, d, a->Q + j * d);
                ahead_job = (scan_job){s->addresses, a->L0, d, a->Q, nb2, a->S};
                ahead.first = next;
                ahead.n_moved = 0;
                a->valid = 1;
                ahead.running = hm_rows_start(dots_batch_chunk, &ahead_job, a->L0,
                                              (double)a->L0 * (double)d * (double)nb2);
                if (!ahead.running) a->valid = 0;  /* the pool was busy: score it when due */
                w.ahead = ahead.running ? &ahead : NULL;
            }
            for (int64_t j = 0; j < nb; j++, vi++) {
                w.bj = j;
                write_competitive(s, c, X + vi * d, vi, &w, log);
            }
        }
        if (ahead.running) hm_rows_finish();
    }
    hm_parallel_release(hold);
    free(blk.S); free(blk.Q);
    free(ahead.blk.S); free(ahead.blk.Q); free(ahead.moved);
    act_free(&w.act); free(w.rows); free(w.sims); free(w.tmp_a);
    index_members(s);
    return ok ? HM_OK : HM_ERR_NOMEM;
}

/* ---- reads --------------------------------------------------------------------------- */

HM_INLINE void softmax_d(const double *x, int64_t n, double beta, double *out) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < n; j++) if (beta * x[j] > mx) mx = beta * x[j];
    for (int64_t j = 0; j < n; j++) { out[j] = exp(beta * x[j] - mx); sum += out[j]; }
    for (int64_t j = 0; j < n; j++) out[j] /= sum;
}

/* Whether an iterative read takes a location's unit pattern from its address
 * (a plain-mode location of weight 1: see hm_read) instead of its counters. */
HM_INLINE int reuses_address(const hm_state *s, const hm_config *c, int64_t row) {
    return !c->competitive && s->weights[row] == 1.0;
}

/* ---- full activation: one pass over the rows per step ----------------------------- */
/* When every row is activated (k >= L) a read's softmax runs over all rows and
 * nothing needs ranking, so a step streams the rows once, in row order, with
 * no sort and no buffer the size of the memory: the online softmax of
 * FlashAttention. Rows go in blocks of HM_STREAM_BLOCK: a block scores its
 * rows, keeps a reference logit m_b (its first rows' largest, raised only by
 * a tile whose largest exceeds it by more than HM_STREAM_SLACK), and sums
 * e_j = exp(logit_j - m_b) and e_j * pattern_j in row order (a tile's rows
 * are still in L1 for the read-out, so each row comes from memory once a
 * step). Blocks are then merged in block order, each rescaled by
 * exp(m_b - M). Block boundaries are
 * fixed, so a query gives the same bits on any number of threads (threads
 * share a super-block of blocks, each block writing its own partial) and in a
 * batch (up to four queries share every row load; each query's arithmetic is
 * the single query's, element by element).
 *
 * The arithmetic differs from the ranked path's in order and rounding, not
 * in kind: scores are float32 dot products of the float32 unit query (an
 * iterative step's state made unit and rounded, as a read's query is), with
 * fused multiply-adds in 16 lanes; logits and weights are float64 (beta *
 * score, exp); a memory's fast read reads out its float64 counters in float64,
 * float32 rows (addresses, a caller's patterns) are read out as float32
 * products summed over tiles of 16 rows, then in float64. The ranked path
 * sums best row first with one maximum, this one in row order with a
 * reference per block. docs/hopfield.md gives the error bound against a float64
 * evaluation that tests/test_hopfield.py enforces. */

/* Rows a block scores and reads out together. Each block ends in a partial
 * and a merge, and starts with no reference logit; at 128 rows that cost a
 * pass over 10,000 rows ~3%, at 1,024 rows ~0.3%, while a pass long enough
 * to share between threads still has blocks enough to share. */
#define HM_STREAM_BLOCK 1024
/* How far a tile's largest logit may exceed its block's reference before it
 * becomes the reference: weights up to exp(4) ~ 55, so a plain memory's
 * float32 read-out factors (weight times norm, norms up to HM_NORM_MAX)
 * and their tile sums stay far from float32's range. */
#define HM_STREAM_SLACK 4.0
#define HM_STREAM_SUPER 64    /* blocks shared between threads at a time */

typedef struct {
    const float *A;       /* [n * dim] rows scored (addresses, or a user's patterns) */
    const double *C;      /* [n * dim] rows read out (counters), or NULL: read out A */
    const double *W;      /* [n] read-out divisors (location weights), or NULL */
    const double *N;      /* [n] read-out scales of float32 rows (norms), or NULL */
    int64_t n, dim;
    int64_t nq;           /* queries in this pass: 1 .. 4 */
    const float *q[4];    /* float32 queries, scored by dot1 (unused lanes padded) */
    double beta;
    int64_t b0;           /* the super-block's first block */
    int64_t nb;           /* its blocks */
    int reverse;          /* 1: they run last to first (the merge stays in block order) */
    double *part;         /* [HM_STREAM_SUPER * nq * (dim + 2)]: m_b, sum_b, acc_b */
} stream_job;

/* The block, compiled twice (stream_template.h): with AVX2 and FMA
 * instructions where the CPU has both, and portable elsewhere (C99 fmaf and
 * fma, correctly rounded like the instructions): the same bits either way. */
#if defined(__GNUC__)
HM_INLINE v8f fma8_portable(v8f a, v8f b, v8f c) {
    v8f r;
    for (int l = 0; l < 8; l++) r[l] = fmaf(a[l], b[l], c[l]);
    return r;
}
HM_INLINE v4d fma4d_portable(v4d a, v4d b, v4d c) {
    v4d r;
    for (int l = 0; l < 4; l++) r[l] = fma(a[l], b[l], c[l]);
    return r;
}
HM_INLINE void add_wide_portable(double *p, v8f v) {
    for (int l = 0; l < 8; l++) p[l] += (double)v[l];
}
#define HM_STREAM_NAME stream_block_portable
#define HM_STREAM_ATTR
#define HM_FMA8(a, b, c) fma8_portable((a), (b), (c))
#define HM_FMA4D(a, b, c) fma4d_portable((a), (b), (c))
#define HM_ADD_WIDE(p, v) add_wide_portable((p), (v))
#include "stream_template.h"
#undef HM_STREAM_NAME
#undef HM_STREAM_ATTR
#undef HM_FMA8
#undef HM_FMA4D
#undef HM_ADD_WIDE
#if !defined(__clang__) && defined(__x86_64__) && (defined(__linux__) || defined(__APPLE__)) && !defined(HM_PORTABLE)
#include <immintrin.h>
#define HM_HAVE_STREAM_AVX2 1
#define HM_STREAM_NAME stream_block_avx2
#define HM_STREAM_ATTR __attribute__((target("avx2,fma")))
#define HM_FMA8(a, b, c) ((v8f)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define HM_FMA4D(a, b, c) ((v4d)_mm256_fmadd_pd((__m256d)(a), (__m256d)(b), (__m256d)(c)))
#define HM_ADD_WIDE(p, v) do {                                                            \
        __m256 w_ = (__m256)(v);                                                          \
        *(v4d_u *)(p) += (v4d)_mm256_cvtps_pd(_mm256_castps256_ps128(w_));                \
        *(v4d_u *)((p) + 4) += (v4d)_mm256_cvtps_pd(_mm256_extractf128_ps(w_, 1));        \
    } while (0)
#include "stream_template.h"
#undef HM_STREAM_NAME
#undef HM_STREAM_ATTR
#undef HM_FMA8
#undef HM_FMA4D
#undef HM_ADD_WIDE
#endif
#else
/* Other compilers: the same operations in scalars (lanes, trees, fused
 * multiply-adds), one query at a time. */
static float stream_dot_scalar(const float *a, const float *x, int64_t dim) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= dim; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] = fmaf(a[i + l], x[i + l], acc[l]);
    for (int l = 0; i + l < dim; l++) acc[l] = fmaf(a[i + l], x[i + l], acc[l]);
    return hsum16(acc);
}

/* The template's _exp4, one lane. */
static double stream_exp(double x) {
    static const double coef[13] = {
        1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
        1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0};
    const double shifter = 0x1.8p52;
    if (x < -746.0) x = -746.0;
    double k = x * 0x1.71547652b82fep0 + shifter, n = k - shifter;
    int64_t kb, sb, ni, n1, n2, e1, e2;
    memcpy(&kb, &k, sizeof kb);
    memcpy(&sb, &shifter, sizeof sb);
    ni = kb - sb;
    double r = fma(n, -0x1.62e42fefa3800p-1, x);
    r = fma(n, -0x1.ef35793c76730p-45, r);
    double p = coef[0];
    for (int i = 1; i < 13; i++) p = fma(p, r, coef[i]);
    n1 = ni >> 1;
    n2 = ni - n1;
    e1 = (n1 + 1023) << 52;
    e2 = (n2 + 1023) << 52;
    double s1, s2;
    memcpy(&s1, &e1, sizeof s1);
    memcpy(&s2, &e2, sizeof s2);
    return (p * s2) * s1;
}

static void stream_block_portable(const stream_job *jb, int64_t b) {
    int64_t d = jb->dim, n = jb->n, nq = jb->nq;
    int64_t lo = b * HM_STREAM_BLOCK, hi = lo + HM_STREAM_BLOCK < n ? lo + HM_STREAM_BLOCK : n;
    double lg[16];
    const float *A = jb->A + lo * d;
    for (int64_t q = 0; q < nq; q++) {
        double M = -INFINITY, S = 0.0, *p = jb->part + ((b - jb->b0) * nq + q) * (d + 2);
        for (int64_t i = 0; i < d; i++) p[2 + i] = 0.0;
        for (int64_t t0 = 0; t0 < hi - lo; t0 += 16) {
            int64_t nt = hi - lo - t0 < 16 ? hi - lo - t0 : 16;
            double mx = -INFINITY;
            for (int64_t r = 0; r < nt; r++) {
                lg[r] = jb->beta * (double)stream_dot_scalar(A + (t0 + r) * d, jb->q[q], d);
                if (lg[r] > mx) mx = lg[r];
            }
            if (M == -INFINITY || mx > M + HM_STREAM_SLACK) {
                if (M != -INFINITY) {
                    double a = stream_exp(M - mx);
                    S *= a;
                    for (int64_t i = 0; i < d; i++) p[2 + i] *= a;
                }
                M = mx;
            }
            for (int64_t r = 0; r < nt; r++) lg[r] = stream_exp(lg[r] - M);
            for (int64_t r = 0; r < nt; r++) S += lg[r];
            if (jb->W) for (int64_t r = 0; r < nt; r++) lg[r] /= jb->W[lo + t0 + r];
            if (jb->N) for (int64_t r = 0; r < nt; r++) lg[r] *= jb->N[lo + t0 + r];
            for (int64_t i = 0; i < d; i++) {
                if (jb->C) {
                    double u = p[2 + i];
                    for (int64_t j = 0; j < nt; j++)
                        u = fma(lg[j], jb->C[(lo + t0 + j) * d + i], u);
                    p[2 + i] = u;
                } else {
                    float u = 0.0f;
                    for (int64_t j = 0; j < nt; j++) u = fmaf((float)lg[j], A[(t0 + j) * d + i], u);
                    p[2 + i] += (double)u;
                }
            }
        }
        p[0] = M;
        p[1] = S;
    }
}
#endif

/* For tests: 1 makes every streamed block take the portable code (fmaf and
 * fma per lane), to hold it to the AVX2 code's bits. Not thread-safe. */
static int stream_portable_only = 0;
void hm_stream_force_portable(int on) { stream_portable_only = on; }

static void stream_block(const stream_job *jb, int64_t b) {
#ifdef HM_HAVE_STREAM_AVX2
    static int use_avx2 = -1;  /* any thread may settle it; all get the same answer */
    int avx2 = __atomic_load_n(&use_avx2, __ATOMIC_RELAXED);
    if (avx2 < 0) {
        __builtin_cpu_init();
        avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&use_avx2, avx2, __ATOMIC_RELAXED);
    }
    if (avx2 && !stream_portable_only) { stream_block_avx2(jb, b); return; }
#endif
    stream_block_portable(jb, b);
}

static void stream_chunk(void *ctx, int64_t lo, int64_t hi) {
    const stream_job *jb = (const stream_job *)ctx;
    for (int64_t i = lo; i < hi; i++)
        stream_block(jb, jb->b0 + (jb->reverse ? jb->nb - 1 - i : i));
}

/* Fold a block's partial into the running (M, S, acc) of its query. */
HM_INLINE void stream_merge(double *M, double *S, double *acc, const double *p, int64_t d) {
    if (*M == -INFINITY) {
        *M = p[0];
        *S = p[1];
        memcpy(acc, p + 2, (size_t)d * sizeof(double));
        return;
    }
    double m = p[0] > *M ? p[0] : *M, a = exp(*M - m), b = exp(p[0] - m);
    *S = *S * a + p[1] * b;
    for (int64_t i = 0; i < d; i++) acc[i] = acc[i] * a + p[2 + i] * b;
    *M = m;
}

/* One step for jb->nq queries (1 .. 4; unused lanes of qf/qd padded): acc
 * [nq * dim] = sum_j exp(logit_j - M_q) * pattern_j (not divided by S_q),
 * M [nq] the largest logit, S [nq] = sum_j exp(logit_j - M_q). part: scratch
 * of stream_part_size(). */
static void stream_pass(stream_job *jb, double *part, double *M, double *S, double *acc) {
    int64_t d = jb->dim, nq = jb->nq;
    int64_t nblocks = (jb->n + HM_STREAM_BLOCK - 1) / HM_STREAM_BLOCK;
    for (int64_t q = 0; q < nq; q++) { M[q] = -INFINITY; S[q] = 0.0; }
    jb->part = part;
    /* Passes alternate their direction: a pass ends with its last ~2 MB of
     * rows in L2, and the next one (the next step of an iterative read, the
     * next read) starts with them there instead of streaming them from L3
     * again: a step over 10,000 rows at d = 384 ~3% faster. Each block's
     * partial is its own and the merge runs in block order, so the bits are
     * the same either way; a pass with more than one super-block (merged one
     * after another) always runs forward. */
    static unsigned passes = 0;
#if defined(__GNUC__)
    unsigned pass = __atomic_fetch_add(&passes, 1, __ATOMIC_RELAXED);
#else
    unsigned pass = passes++;  /* a race here only picks a direction */
#endif
    int reverse = nblocks <= HM_STREAM_SUPER && (pass & 1);
    for (int64_t b0 = 0; b0 < nblocks; b0 += HM_STREAM_SUPER) {
        int64_t nb = nblocks - b0 < HM_STREAM_SUPER ? nblocks - b0 : HM_STREAM_SUPER;
        int64_t rows = (b0 + nb) * HM_STREAM_BLOCK < jb->n ? nb * HM_STREAM_BLOCK
                                                           : jb->n - b0 * HM_STREAM_BLOCK;
        jb->b0 = b0;
        jb->nb = nb;
        jb->reverse = reverse;
        hm_parallel_rows(stream_chunk, jb, nb, 2.0 * (double)rows * (double)d * (double)nq);
        for (int64_t b = 0; b < nb; b++)
            for (int64_t q = 0; q < nq; q++)
                stream_merge(M + q, S + q, acc + q * d, part + (b * nq + q) * (d + 2), d);
    }
}

HM_INLINE size_t stream_part_size(int64_t n, int64_t dim, int64_t nq) {
    int64_t nblocks = (n + HM_STREAM_BLOCK - 1) / HM_STREAM_BLOCK;
    if (nblocks > HM_STREAM_SUPER) nblocks = HM_STREAM_SUPER;
    return (size_t)(nblocks > 0 ? nblocks : 1) * (size_t)nq * (size_t)(dim + 2);
}

/* Whether a read activates every row and can stream them: any fast read, and
 * an iterative read whose every unit pattern is its address (plain mode,
 * every location of weight 1: see reuses_address). */
/* Whether every one of the n weights is 1, and (norms not NULL) the largest
 * of the n norms in *top (NaNs ignored, as `>` ignores them): vector lanes
 * and no branch a row, where one comparison and branch a row took ~1.5% of a
 * full-activation read over 10,000 rows. */
static int unit_weights(const double *weights, const double *norms, int64_t n, double *top) {
    double t = 0.0;
    int64_t j = 0;
#if defined(__GNUC__)
    /* two lanes: SSE2's width, so every build runs it in registers */
    typedef double v2d __attribute__((vector_size(16)));
    typedef double v2d_u __attribute__((vector_size(16), aligned(8)));
    typedef long long v2di __attribute__((vector_size(16)));
    const v2d one = {1.0, 1.0};
    v2d ta = {0.0, 0.0}, tb = {0.0, 0.0};
    while (j + 4 <= n) {  /* chunks of up to 256 rows, then a check */
        int64_t stop = j + 256 < n ? j + 256 : n;
        v2di off = {0, 0};
        for (; j + 4 <= stop; j += 4) {
            off |= (v2di)(*(const v2d_u *)(weights + j) != one)
                   | (v2di)(*(const v2d_u *)(weights + j + 2) != one);
            if (norms) {
                v2d x = *(const v2d_u *)(norms + j), y = *(const v2d_u *)(norms + j + 2);
                v2di ux = (v2di)(x > ta), uy = (v2di)(y > tb);
                ta = (v2d)(((v2di)x & ux) | ((v2di)ta & ~ux));
                tb = (v2d)(((v2di)y & uy) | ((v2di)tb & ~uy));
            }
        }
        if (off[0] | off[1]) return 0;
    }
    double lanes[4] = {ta[0], ta[1], tb[0], tb[1]};
    for (int l = 0; l < 4; l++) if (lanes[l] > t) t = lanes[l];
#endif
    for (; j < n; j++) {
        if (weights[j] != 1.0) return 0;
        if (norms && norms[j] > t) t = norms[j];
    }
    if (top) *top = t;
    return 1;
}

HM_INLINE int streams(const hm_state *s, const hm_config *c, int fast_only) {
    if (s->size <= 0 || c->k < s->size) return 0;
    if (fast_only) return 1;
    if (c->competitive) return 0;
    return unit_weights(s->weights, NULL, s->size, NULL);
}

/* Whether a fast read may read each location out as norm * address (float32
 * rows, scaled) instead of counters / weight (float64 rows): a plain memory
 * whose every location is one written input (weight 1), whose counters are
 * that input and whose address is its direction rounded to float32, so the
 * two differ by the address's rounding only (docs/hopfield.md bounds it). */
HM_INLINE int reads_out_by_norm(const hm_state *s, const hm_config *c) {
    double top = 0.0;
    if (c->competitive || !s->norms || !unit_weights(s->weights, s->norms, s->size, &top))
        return 0;
    /* The scaled weights and the tile sums are float32: inputs so large or so
     * small that they would overflow or lose their bits there (far outside
     * any embedding's range) keep the float64 read-out. */
    return top >= HM_NORM_MIN && top <= HM_NORM_MAX;
}

/* One row's score as a streamed block computes it (the trace's weights). */
static void stream_score(const float *a, const float *q, int64_t dim, float *out) {
#if defined(__GNUC__)
#ifdef HM_HAVE_STREAM_AVX2
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !stream_portable_only) {
        *out = stream_block_avx2_dot(a, q, dim);
        return;
    }
#endif
    *out = stream_block_portable_dot(a, q, dim);
#else
    *out = stream_dot_scalar(a, q, dim);
#endif
}

/* The float32 query a streamed step scores with: v / |v| rounded to float32
 * (zeros when |v| < TINY), as unit_query makes a read's query. */
HM_INLINE void unit_state(const double *v, int64_t dim, float *out) {
    double norm = sqrt(ddot(v, v, dim));
    if (norm < HM_TINY) memset(out, 0, (size_t)dim * sizeof(float));
    else for (int64_t i = 0; i < dim; i++) out[i] = (float)(v[i] / norm);
}

/* Full-activation reads of nq queries (rows of Q), four at a time: results
 * [nq * dim] (and fast [nq * dim] when not NULL: the one-step read), their
 * iterations and convergence. Every query's bits are its single read's. When
 * rows is not NULL (one query), the trace too: every row best first, its
 * similarity, and the softmax weights of the step that made the result.
 * An iterative step scores the rows against its state as a read scores them
 * against a query (made unit and rounded to float32, float32 lanes), and
 * reads out the addresses (the unit patterns here) in float64.
 * Returns 0 or HM_ERR_NOMEM. */
static int read_streamed(const hm_state *s, const hm_config *c, const float *Q, int64_t nq,
                         int fast_only, float *results, float *fast, int64_t *rows,
                         double *sims, double *weights, int32_t *iterations, int8_t *converged) {
    int64_t d = s->dim, L = s->size;
    size_t np = stream_part_size(L, d, 4);
    /* float64: part | acc [4 d] | 2 states a query [8 d] | M, S [4 each];
     * then float32 scoring queries [4 d] */
    char *block = (char *)malloc((np + 12 * (size_t)d + 8) * sizeof(double)
                                 + 4 * (size_t)d * sizeof(float));
    if (!block) return HM_ERR_NOMEM;
    double *part = (double *)block, *acc = part + np, *st = acc + 4 * d, *M = st + 8 * d;
    double *S = M + 4;
    float *qf = (float *)(S + 4);
    if (rows) {
        act_scratch a;
        int64_t kk = act_alloc(&a, L, L, d) ? activate(s, c, Q, NULL, 0.0, rows, sims, &a)
                                            : HM_ERR_NOMEM;
        act_free(&a);
        if (kk < 0) { free(block); return HM_ERR_NOMEM; }
    }
    stream_job jb;
    memset(&jb, 0, sizeof jb);
    jb.n = L;
    jb.dim = d;
    jb.beta = c->beta;
    jb.A = s->addresses;
    int by_norm = (fast || fast_only) && reads_out_by_norm(s, c);
    for (int64_t g = 0; g < nq; g += 4) {
        int64_t ng = nq - g < 4 ? nq - g : 4;
        const float *Qg = Q + g * d;
        if (fast || fast_only) {  /* the one-step read: raw patterns (counters / weight) */
            for (int64_t q = 0; q < ng; q++) unit_query(Qg + q * d, d, qf + q * d);
            if (by_norm) {  /* every location one input: norm * address, float32 rows */
                jb.C = NULL;
                jb.W = NULL;
                jb.N = s->norms;
            } else {
                jb.C = s->counters;
                jb.W = s->weights;
                jb.N = NULL;
            }
            jb.nq = ng;
            for (int q = 0; q < 4; q++) jb.q[q] = qf + (q < ng ? q : 0) * d;
            stream_pass(&jb, part, M, S, acc);
            for (int64_t q = 0; q < ng; q++) {
                float *out = fast ? fast + (g + q) * d : results + (g + q) * d;
                normalize_d(acc + q * d, d);
                for (int64_t i = 0; i < d; i++) out[i] = (float)acc[q * d + i];
                if (fast_only && fast) memcpy(results + (g + q) * d, out, (size_t)d * sizeof(float));
                if (fast_only) { iterations[g + q] = 1; converged[g + q] = 1; }
            }
            if (rows && fast_only) softmax_d(sims, L, c->beta, weights);
            if (fast_only) continue;
        }
        /* Iterative: the states on the sphere, the addresses as unit patterns. */
        double *xi[4], *nxt[4];
        int64_t act[4], na = 0;
        for (int64_t q = 0; q < ng; q++) {
            xi[q] = st + 2 * q * d;
            nxt[q] = xi[q] + d;
            for (int64_t i = 0; i < d; i++) xi[q][i] = (double)Qg[q * d + i];
            normalize_d(xi[q], d);
            iterations[g + q] = 0;
            converged[g + q] = 0;
            if (c->t_max > 0) act[na++] = q;
        }
        jb.C = NULL;
        jb.W = NULL;
        jb.N = NULL;
        while (na > 0) {
            jb.nq = na;
            for (int64_t u = 0; u < na; u++) unit_state(xi[act[u]], d, qf + act[u] * d);
            for (int u = 0; u < 4; u++) jb.q[u] = qf + act[u < na ? u : 0] * d;
            stream_pass(&jb, part, M, S, acc);
            int64_t keep = 0;
            for (int64_t u = 0; u < na; u++) {
                int64_t q = act[u];
                memcpy(nxt[q], acc + u * d, (size_t)d * sizeof(double));
                normalize_d(nxt[q], d);
                int8_t conv = cos_d(xi[q], nxt[q], d) > 1.0 - c->epsilon;
                double *t = xi[q]; xi[q] = nxt[q]; nxt[q] = t;
                iterations[g + q]++;
                converged[g + q] = conv;
                if (!conv && iterations[g + q] < c->t_max) act[keep++] = q;
                else if (rows) { M[0] = M[u]; S[0] = S[u]; }  /* one query: the last step's */
            }
            na = keep;
        }
        for (int64_t q = 0; q < ng; q++) {
            float *out = results + (g + q) * d;
            for (int64_t i = 0; i < d; i++) out[i] = (float)xi[q][i];
        }
        if (rows && c->t_max > 0) {  /* the last step's weights, rows best first */
            for (int64_t j = 0; j < L; j++) {  /* qf holds the state that step scored */
                float v;
                stream_score(s->addresses + rows[j] * d, qf, d, &v);
                double sj = (double)v;
                weights[j] = exp(c->beta * sj - M[0]) / S[0];
            }
        } else if (rows) {
            softmax_d(sims, L, c->beta, weights);
        }
    }
    free(block);
    return HM_OK;
}

int hm_read_streams(const hm_state *s, const hm_config *c, int fast_only) {
    return streams(s, c, fast_only);
}

int hm_read_full(const hm_state *s, const hm_config *c, const float *Q, int64_t nq,
                 int fast_only, float *results, int32_t *iterations, int8_t *converged) {
    if (!streams(s, c, fast_only)) return 0;
    int rc = read_streamed(s, c, Q, nq, fast_only, results, NULL, NULL, NULL, NULL, iterations,
                           converged);
    return rc < 0 ? rc : 1;
}

/* The textbook update on a caller's patterns (see hopmem_kernel.h): the
 * streamed step with the state rounded to float32 for scoring (as float32
 * NumPy scores it) and read out in float64. */
int hm_hopfield(const float *X, int64_t n, int64_t dim, const float *Q, int64_t nq,
                double beta, int64_t steps, double epsilon, float *out, int32_t *iterations) {
    size_t np = stream_part_size(n, dim, 4);
    char *block = (char *)malloc((np + 12 * (size_t)dim + 8) * sizeof(double)
                                 + 4 * (size_t)dim * sizeof(float));
    if (!block) return HM_ERR_NOMEM;
    double *part = (double *)block, *acc = part + np, *st = acc + 4 * dim, *M = st + 8 * dim;
    double *S = M + 4;
    float *qf = (float *)(S + 4);
    stream_job jb;
    memset(&jb, 0, sizeof jb);
    jb.A = X;
    jb.n = n;
    jb.dim = dim;
    jb.beta = beta;
    for (int64_t g = 0; g < nq; g += 4) {
        int64_t ng = nq - g < 4 ? nq - g : 4, act[4], na = 0;
        double *xi[4], *nxt[4];
        for (int64_t q = 0; q < ng; q++) {
            xi[q] = st + 2 * q * dim;
            nxt[q] = xi[q] + dim;
            for (int64_t i = 0; i < dim; i++) xi[q][i] = (double)Q[(g + q) * dim + i];
            iterations[g + q] = 0;
            if (steps > 0) act[na++] = q;
        }
        while (na > 0) {
            jb.nq = na;
            for (int64_t u = 0; u < na; u++)
                for (int64_t i = 0; i < dim; i++) qf[act[u] * dim + i] = (float)xi[act[u]][i];
            for (int u = 0; u < 4; u++) jb.q[u] = qf + act[u < na ? u : 0] * dim;
            stream_pass(&jb, part, M, S, acc);
            int64_t keep = 0;
            for (int64_t u = 0; u < na; u++) {
                int64_t q = act[u];
                double change = 0.0, size = 0.0;
                for (int64_t i = 0; i < dim; i++) {
                    double v = acc[u * dim + i] / S[u], t = v - xi[q][i];
                    nxt[q][i] = v;
                    change += t * t;
                    size += v * v;
                }
                double *t = xi[q]; xi[q] = nxt[q]; nxt[q] = t;
                iterations[g + q]++;
                if (!(change <= epsilon * epsilon * size) && iterations[g + q] < steps)
                    act[keep++] = q;
            }
            na = keep;
        }
        for (int64_t q = 0; q < ng; q++)
            for (int64_t i = 0; i < dim; i++) out[(g + q) * dim + i] = (float)xi[q][i];
    }
    free(block);
    return HM_OK;
}

HM_CLONES
/* A ranked read (not streamed): the activation, then the read over it. given
 * >= 0: rows and sims already hold the activation (given rows: see
 * hm_read_probed), dots are not used. */
static int64_t read_ranked(const hm_state *s, const hm_config *c, const float *q,
                           const float *dots, double dots_error, int64_t given, int fast_only,
                           float *result, float *fast_result, int64_t *rows, double *sims,
                           double *weights, int32_t *iterations, int8_t *converged);

int64_t hm_read(const hm_state *s, const hm_config *c, const float *q, const float *dots,
                double dots_error, int fast_only, float *result, float *fast_result,
                int64_t *rows, double *sims, double *weights, int32_t *iterations,
                int8_t *converged) {
    if (streams(s, c, fast_only)) {  /* every row activated: one pass a step */
        int rc = read_streamed(s, c, q, 1, fast_only, result, fast_result, rows, sims, weights,
                               iterations, converged);
        return rc < 0 ? rc : s->size;
    }
    return read_ranked(s, c, q, dots, dots_error, -1, fast_only, result, fast_result, rows,
                       sims, weights, iterations, converged);
}

static int64_t read_ranked(const hm_state *s, const hm_config *c, const float *q,
                           const float *dots, double dots_error, int64_t given, int fast_only,
                           float *result, float *fast_result, int64_t *rows, double *sims,
                           double *weights, int32_t *iterations, int8_t *converged) {
    int64_t d = s->dim;
    int64_t kmax = c->k < s->size ? c->k : s->size;
    if (!rows) {  /* no trace wanted: scratch for the ranked path's own use */
        size_t kk = (size_t)(kmax > 0 ? kmax : 1);
        char *own = (char *)malloc(kk * (sizeof(int64_t) + 2 * sizeof(double)));
        if (!own) return HM_ERR_NOMEM;
        int64_t rc = read_ranked(s, c, q, dots, dots_error, given, fast_only, result,
                                 fast_result, (int64_t *)own,
                                 (double *)(own + kk * sizeof(int64_t)),
                                 (double *)(own + kk * (sizeof(int64_t) + sizeof(double))),
                                 iterations, converged);
        free(own);
        return rc;
    }
    act_scratch a;
    size_t kp = (size_t)(kmax > 0 ? kmax : 1);
    /* The iterations read every activated row (address and unit pattern) at
     * each step. While float64 copies of them fit in L2 they run on copies
     * made once: an iteration at k = 20, d = 384 took 1.6 us on them against
     * 3.3 us on float32 rows, which widen every value at every step. Above
     * that they read float32 rows (half the bytes: float64 copies that
     * spilled to memory were twice as slow at k = 10,000). A float widens to
     * double exactly, so both ways give the same bits. */
    int copies = (int64_t)kp * d <= c->iter_copy_max;
    /* One allocation: float64 [the fast result, the state and the next state
     * (d each), the iteration's similarities and the read-out factors (k each),
     * then the float64 copies (2 k d) or nothing], the row pointers [5 k], then
     * the float32 unit patterns when there are no copies [k d]. */
    size_t n64 = 3 * (size_t)d + 2 * kp + (copies ? 2 * kp * (size_t)d : 0);
    char *block = (char *)malloc(n64 * sizeof(double) + 5 * kp * sizeof(void *)
                                 + (copies ? 0 : kp * (size_t)d * sizeof(float)));
    double *buf = (double *)block;
    double *own64 = block && copies ? buf + 3 * d + 2 * kp : NULL;
    const float **units = block ? (const float **)(buf + n64) : NULL;
    const double **units64 = block ? (const double **)(units + 2 * kp) : NULL;
    const double **crows = block ? units64 + 2 * kp : NULL;
    float *own_units = block && !copies ? (float *)(crows + kp) : NULL;
    int64_t kk = given;
    if (given < 0) {
        int ok = act_alloc(&a, s->size, kmax, d) && block;
        kk = ok ? activate(s, c, q, dots, dots_error, rows, sims, &a) : HM_ERR_NOMEM;
        act_free(&a);
    } else if (!block) {
        kk = HM_ERR_NOMEM;
    }
    if (kk < 0) {
        free(block);
        return kk;
    }
    double *acc = buf, *xi = acc + d, *nxt = xi + d, *s_it = nxt + d, *f = s_it + kp;
    const float **arows = units + kp;        /* the activated addresses */
    const double **arows64 = units64 + kp;   /* ... and their float64 copies */

    /* Fast read: softmax over the initial similarities, raw patterns. An
     * iterative read that does not want it (fast_result NULL) skips the
     * read-out: in plain mode it then never touches the counters at all. */
    softmax_d(sims, kk, c->beta, weights);
    /* implied counters (a plain state that holds none): the read-out's rows
     * are made from the addresses and norms, once, for this read */
    double *implied = NULL;  /* each row made here, or a pointer to its exception */
    if (!s->counters && (fast_result || fast_only)) {
        implied = (double *)malloc(kp * (size_t)d * sizeof(double));
        if (!implied) { free(block); return HM_ERR_NOMEM; }
    }
    for (int64_t j = 0; j < kk; j++)
        crows[j] = implied ? counter_row(s, rows[j], implied + (size_t)j * d)
                 : s->counters ? s->counters + rows[j] * d : NULL;
    if (fast_result || fast_only) {
        for (int64_t j = 0; j < kk; j++) f[j] = weights[j] / s->weights[rows[j]];
        combine_d(acc, f, crows, kk, d);
        free(implied);
        normalize_d(acc, d);
        if (fast_result) for (int64_t i = 0; i < d; i++) fast_result[i] = (float)acc[i];
        else for (int64_t i = 0; i < d; i++) result[i] = (float)acc[i];
    }
    if (fast_only) {
        if (fast_result) memcpy(result, fast_result, (size_t)d * sizeof(float));
        *iterations = 1;
        *converged = 1;
        free(block);
        return kk;
    }

    /* Iterative read over the fixed set: unit patterns, state on the sphere.
     * A plain-mode location of weight 1 holds one input x: its address was
     * made as float(normalize(x)), exactly its unit pattern, so it is reused. */
    /* The counters rows are scattered and, without a fast read-out before,
     * rarely in cache: the next one streams in while this one is normalized. */
    if (kk > 0 && !reuses_address(s, c, rows[0])) prefetch_doubles(crows[0], d);
    for (int64_t j = 0; j < kk; j++) {
        int64_t row = rows[j];
        arows[j] = s->addresses + row * d;
        if (copies) {
            double *a64 = own64 + (kp + (size_t)j) * d;
            for (int64_t i = 0; i < d; i++) a64[i] = (double)arows[j][i];
            arows64[j] = a64;
        }
        if (j + 1 < kk && !reuses_address(s, c, rows[j + 1])) prefetch_doubles(crows[j + 1], d);
        if (reuses_address(s, c, row)) {
            if (copies) units64[j] = arows64[j];
            else units[j] = arows[j];
            continue;
        }
        const double *cj = crows[j];
        double norm = sqrt(ddot(cj, cj, d));  /* as normalize_d, without the copy */
        double inv = 1.0 / norm;  /* as normalize_d */
        if (copies) {  /* the float32 unit pattern, widened */
            double *u = own64 + (size_t)j * d;
            if (norm >= HM_TINY) for (int64_t i = 0; i < d; i++) u[i] = (float)(cj[i] * inv);
            else for (int64_t i = 0; i < d; i++) u[i] = (float)cj[i];
            units64[j] = u;
        } else {
            float *u = own_units + (size_t)j * d;
            if (norm >= HM_TINY) for (int64_t i = 0; i < d; i++) u[i] = (float)(cj[i] * inv);
            else for (int64_t i = 0; i < d; i++) u[i] = (float)cj[i];
            units[j] = u;
        }
    }
    for (int64_t i = 0; i < d; i++) xi[i] = (double)q[i];
    normalize_d(xi, d);
    int32_t it = 0;
    int8_t conv = 0;
    while (it < c->t_max) {
        it++;
        double norm = sqrt(ddot(xi, xi, d));
        if (copies) ddot_rows(arows64, kk, xi, norm, d, s_it);
        else fddot_rows(arows, kk, xi, norm, d, s_it);
        softmax_d(s_it, kk, c->beta, weights);
        if (copies) combine_d(nxt, weights, units64, kk, d);
        else combine_f(nxt, weights, units, kk, d);
        normalize_d(nxt, d);
        conv = cos_d(xi, nxt, d) > 1.0 - c->epsilon;
        double *t = xi; xi = nxt; nxt = t;
        if (conv) break;
    }
    for (int64_t i = 0; i < d; i++) result[i] = (float)xi[i];
    *iterations = it;
    *converged = conv;
    free(block);
    return kk;
}

/* ---- batched approximate reads: queries grouped by the groups they probe ---------- */
/* hm_read_probed reads nq queries of an approximate memory as hm_read reads
 * each: every query ranks the centroids and takes its groups (the rule of
 * activate_approx), then the groups are visited once each, in group order,
 * and every query that probes a group scores its rows there, while they are
 * in cache (one group's rows: ~0.5 MB at a million rows of d = 384), instead
 * of each query fetching its groups' rows from memory on its own. The scores
 * are the single read's (score_members), a group is skipped for a query by
 * the same sound bound (it changes only the cost), and the top k and the
 * read that follows are the single read's: bit-equal results. */

typedef struct {
    float *qhat;       /* [d] unit query */
    int64_t *groups;   /* the groups it probes */
    int64_t ngroups;
    hm_pair *cand;     /* candidates: every row scored */
    int64_t ncand;
    float *heap;       /* [k] min-heap of the best scores */
    int64_t have;
    int single;        /* 1: read on its own with hm_read (a zero query, or a NaN score) */
} probed_query;

int hm_read_probed(const hm_state *s, const hm_config *c, const float *Q, int64_t nq,
                   int fast_only, float *results, float *fast_results, int64_t *rows,
                   double *sims, double *weights, int32_t *iterations, int8_t *converged) {
    int64_t d = s->dim, G = s->groups, L = s->size;
    int64_t k = c->k < L ? c->k : L;
    if (c->probe <= 0 || c->probe >= G || (c->compact && s->addresses16) || k <= 0
        || streams(s, c, fast_only))
        return 0;
    probed_query *pq = (probed_query *)calloc((size_t)nq, sizeof(probed_query));
    float *qhat = (float *)malloc((size_t)(nq * (d + k)) * sizeof(float));
    float *gs = (float *)malloc((size_t)G * sizeof(float));
    hm_pair *order = (hm_pair *)malloc((size_t)G * sizeof(hm_pair));
    int64_t *count = (int64_t *)calloc((size_t)G + 1, sizeof(int64_t));
    int64_t *by_group = NULL;
    int ok = pq && qhat && gs && order && count;
    int64_t total = 0;
    for (int64_t i = 0; ok && i < nq; i++) {  /* each query's groups, as activate_approx */
        probed_query *p = pq + i;
        p->qhat = qhat + i * (d + k);
        p->heap = p->qhat + d;
        if (unit_query(Q + i * d, d, p->qhat) < HM_TINY) { p->single = 1; continue; }
        hm_dots(s->centroids, G, d, p->qhat, gs);
        for (int64_t g = 0; g < G; g++) { order[g].v = gs[g]; order[g].r = g; }
        sort_pairs(order, G);
        int64_t ng = 0, nrows = 0;
        while (ng < G && (ng < c->probe || nrows < k)) {
            int64_t g = order[ng++].r;
            nrows += s->start[g + 1] - s->start[g];
        }
        p->groups = (int64_t *)malloc((size_t)ng * sizeof(int64_t));
        p->cand = (hm_pair *)malloc((size_t)(nrows > 0 ? nrows : 1) * sizeof(hm_pair));
        if (!p->groups || !p->cand) { ok = 0; break; }
        for (int64_t t = 0; t < ng; t++) { p->groups[t] = order[t].r; count[order[t].r + 1]++; }
        p->ngroups = ng;
        total += ng;
    }
    /* the queries of each group, ascending (a counting sort) */
    if (ok) by_group = (int64_t *)malloc((size_t)(total > 0 ? total : 1) * sizeof(int64_t));
    ok = ok && by_group;
    if (ok) {
        for (int64_t g = 0; g < G; g++) count[g + 1] += count[g];
        for (int64_t i = 0; i < nq; i++)
            for (int64_t t = 0; t < pq[i].ngroups; t++) by_group[count[pq[i].groups[t]]++] = i;
        for (int64_t g = G; g > 0; g--) count[g] = count[g - 1];
        count[0] = 0;
        const double slack = 2.0 * hm_score_error(d, 0);
        for (int64_t g = 0; g < G; g++) {
            const int64_t *m = s->members + s->start[g], n = s->start[g + 1] - s->start[g];
            for (int64_t u = count[g]; u < count[g + 1]; u++) {
                probed_query *p = pq + by_group[u];
                if (p->have == k
                    && (double)dot1(s->centroids + g * d, d, p->qhat) + s->radius[g] + slack
                           < (double)p->heap[0])
                    continue;  /* no row of its top k here (see activate_approx) */
                hm_pair *next = p->cand + p->ncand;
                score_members(s, m, n, p->qhat, NULL, &next, p->heap, k, &p->have);
                p->ncand = next - p->cand;
            }
        }
    }
    int64_t rc = ok ? 1 : HM_ERR_NOMEM;
    for (int64_t i = 0; rc > 0 && i < nq; i++) {
        probed_query *p = pq + i;
        int64_t kk = -1;  /* -1: read on its own (hm_read) */
        if (!p->single) {  /* the top k of its candidates, as activate_approx */
            float kth = p->heap[0];
            int64_t keep = 0;
            int nan = 0;
            for (int64_t j = 0; j < p->ncand && !nan; j++) {
                float v = p->cand[j].v;
                nan = v != v;  /* then hm_read scans, as a single read does */
                if (v >= kth) p->cand[keep++] = p->cand[j];
            }
            if (!nan) {
                sort_pairs(p->cand, keep);
                kk = k < keep ? k : keep;
                for (int64_t j = 0; j < kk; j++) {
                    rows[i * k + j] = p->cand[j].r;
                    sims[i * k + j] = (double)p->cand[j].v;
                }
            }
        }
        float *fast = fast_results ? fast_results + i * d : NULL;
        int64_t r = kk >= 0
            ? read_ranked(s, c, Q + i * d, NULL, 0.0, kk, fast_only, results + i * d, fast,
                          rows + i * k, sims + i * k, weights + i * k, iterations + i,
                          converged + i)
            : hm_read(s, c, Q + i * d, NULL, 0.0, fast_only, results + i * d, fast,
                      rows + i * k, sims + i * k, weights + i * k, iterations + i,
                      converged + i);
        if (r < 0) rc = r;
    }
    for (int64_t i = 0; pq && i < nq; i++) { free(pq[i].groups); free(pq[i].cand); }
    free(pq); free(qhat); free(gs); free(order); free(count); free(by_group);
    return (int)rc;
}

HM_CLONES
int64_t hm_attention(const hm_state *s, const hm_config *c, const float *q, double scale,
                     float *result, int64_t *rows, double *sims, double *weights) {
    int64_t d = s->dim;
    int64_t kmax = c->k < s->size ? c->k : s->size;
    act_scratch a;
    double *buf = (double *)malloc((size_t)(3 * d + kmax) * sizeof(double));
    if (!act_alloc(&a, s->size, kmax, d) || !buf) { act_free(&a); free(buf); return HM_ERR_NOMEM; }
    double *q64 = buf, *acc = buf + d, *row = acc + d, *logits = row + d;
    int64_t kk = activate(s, c, q, NULL, 0.0, rows, sims, &a);
    act_free(&a);
    if (kk >= 0) {
        for (int64_t i = 0; i < d; i++) q64[i] = (double)q[i];
        for (int64_t j = 0; j < kk; j++) {
            double n = s->weights[rows[j]];
            logits[j] = scale * (ddot(counter_row(s, rows[j], row), q64, d) / n) + log(n);
        }
        softmax_d(logits, kk, 1.0, weights);
        memset(acc, 0, (size_t)d * sizeof(double));
        for (int64_t j = 0; j < kk; j++) {
            const double *cj = counter_row(s, rows[j], row);
            double f = weights[j] / s->weights[rows[j]];
            for (int64_t i = 0; i < d; i++) acc[i] += f * cj[i];
        }
        for (int64_t i = 0; i < d; i++) result[i] = (float)acc[i];
    }
    free(buf);
    return kk;
}
