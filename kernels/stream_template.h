/* Template for one block of a streamed (full-activation) step, included by
 * hopmem_kernel.c with HM_STREAM_NAME (the block function), HM_STREAM_ATTR
 * (its target attribute), HM_LDF4(p) (four floats widened to a v4d) and
 * HM_ADD_WIDE(p, v) (p[0..8) += the eight floats of v, widened) defined: once with AVX2 loads, once portable. Both do the same IEEE
 * operations in the same order (no fused multiply-add), so they give the same
 * bits. See "full activation" in hopmem_kernel.c for the block's contract. */

#if defined(__GNUC__)
/* acc_q[i] += f_q[j] * row_j[i], j = 0 .. n-1 in order, for one query or four
 * (acc + q * dim, f + q * HM_STREAM_BLOCK); rows of type T at R + j * dim.
 * Each acc_q[i] sees the same operations in the same order whatever nq is. */
#define HM_AXPY_BODY(T, LD4, PF)                                                              \
    for (int64_t j0 = 0; j0 < n; j0 += 8) {                                               \
        int64_t j1 = j0 + 8 < n ? j0 + 8 : n, i = 0;                                      \
        if (nq == 1) {                                                                    \
            for (; i + 8 <= dim; i += 8) {                                                \
                v4d y0 = LDD(acc + i), y1 = LDD(acc + i + 4);                             \
                for (int64_t j = j0; j < j1; j++) {                                       \
                    v4d fv = {f[j], f[j], f[j], f[j]};                                    \
                    const T *x = R + j * dim + i;                                         \
                    if (PF && j + 8 < n) HM_PREFETCH(x + 8 * dim);                        \
                    y0 += fv * LD4(x); y1 += fv * LD4(x + 4);                             \
                }                                                                         \
                *(v4d_u *)(acc + i) = y0; *(v4d_u *)(acc + i + 4) = y1;                   \
            }                                                                             \
        } else {                                                                          \
            double *a0 = acc, *a1 = acc + dim, *a2 = acc + 2 * dim, *a3 = acc + 3 * dim;  \
            const double *f0 = f, *f1 = f + HM_STREAM_BLOCK, *f2 = f + 2 * HM_STREAM_BLOCK, \
                         *f3 = f + 3 * HM_STREAM_BLOCK;                                   \
            for (; i + 8 <= dim; i += 8) {                                                \
                v4d y0 = LDD(a0 + i), z0 = LDD(a0 + i + 4), y1 = LDD(a1 + i),             \
                    z1 = LDD(a1 + i + 4), y2 = LDD(a2 + i), z2 = LDD(a2 + i + 4),         \
                    y3 = LDD(a3 + i), z3 = LDD(a3 + i + 4);                               \
                for (int64_t j = j0; j < j1; j++) {                                       \
                    const T *x = R + j * dim + i;                                         \
                    v4d lo = LD4(x), hi = LD4(x + 4);                                     \
                    v4d g0 = {f0[j], f0[j], f0[j], f0[j]};                                \
                    v4d g1 = {f1[j], f1[j], f1[j], f1[j]};                                \
                    v4d g2 = {f2[j], f2[j], f2[j], f2[j]};                                \
                    v4d g3 = {f3[j], f3[j], f3[j], f3[j]};                                \
                    y0 += g0 * lo; z0 += g0 * hi; y1 += g1 * lo; z1 += g1 * hi;           \
                    y2 += g2 * lo; z2 += g2 * hi; y3 += g3 * lo; z3 += g3 * hi;           \
                }                                                                         \
                *(v4d_u *)(a0 + i) = y0; *(v4d_u *)(a0 + i + 4) = z0;                     \
                *(v4d_u *)(a1 + i) = y1; *(v4d_u *)(a1 + i + 4) = z1;                     \
                *(v4d_u *)(a2 + i) = y2; *(v4d_u *)(a2 + i + 4) = z2;                     \
                *(v4d_u *)(a3 + i) = y3; *(v4d_u *)(a3 + i + 4) = z3;                     \
            }                                                                             \
        }                                                                                 \
        for (; i < dim; i++)                                                              \
            for (int64_t q = 0; q < nq; q++) {                                            \
                double t = acc[q * dim + i];                                              \
                for (int64_t j = j0; j < j1; j++)                                         \
                    t += f[q * HM_STREAM_BLOCK + j] * (double)R[j * dim + i];             \
                acc[q * dim + i] = t;                                                     \
            }                                                                             \
    }
#else
#define HM_AXPY_BODY(T, LD4, PF)                                                              \
    for (int64_t j0 = 0; j0 < n; j0 += 8) {                                               \
        int64_t j1 = j0 + 8 < n ? j0 + 8 : n;                                             \
        for (int64_t i = 0; i < dim; i++)                                                 \
            for (int64_t q = 0; q < nq; q++) {                                            \
                double t = acc[q * dim + i];                                              \
                for (int64_t j = j0; j < j1; j++)                                         \
                    t += f[q * HM_STREAM_BLOCK + j] * (double)R[j * dim + i];             \
                acc[q * dim + i] = t;                                                     \
            }                                                                             \
    }
#endif

#define HM_CAT2(a, b) a##b
#define HM_CAT(a, b) HM_CAT2(a, b)

/* The same for float32 rows with float32 products: each tile of up to 8 rows
 * is summed in float32 (t = ((0 + f_j0 x_j0) + f_j1 x_j1) + ..., f rounded
 * to float32), and the tile's sum is added to the float64 acc. A third of
 * the instructions of widening every value, and each tile sum is within
 * 8 * 2^-24 of its exact value relative to the sum of its terms' sizes. */
HM_STREAM_ATTR static inline void HM_CAT(HM_STREAM_NAME, _axpy_f)(
        double *acc, const float *f, const float *R, int64_t n, int64_t dim, int64_t nq) {
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
        int64_t j1 = j0 + 8 < n ? j0 + 8 : n, i = 0;
#if defined(__GNUC__)
        if (nq == 1) {
            for (; i + 16 <= dim; i += 16) {
                v8f t0 = {0}, t1 = {0};
                for (int64_t j = j0; j < j1; j++) {
                    v8f fv = {f[j], f[j], f[j], f[j], f[j], f[j], f[j], f[j]};
                    const float *x = R + j * dim + i;
                    t0 += fv * LD(x); t1 += fv * LD(x + 8);
                }
                HM_ADD_WIDE(acc + i, t0);
                HM_ADD_WIDE(acc + i + 8, t1);
            }
        } else {
            for (; i + 16 <= dim; i += 16) {
                v8f t0 = {0}, u0 = {0}, t1 = {0}, u1 = {0}, t2 = {0}, u2 = {0}, t3 = {0}, u3 = {0};
                for (int64_t j = j0; j < j1; j++) {
                    const float *x = R + j * dim + i;
                    v8f lo = LD(x), hi = LD(x + 8);
                    float g0 = f[j], g1 = f[HM_STREAM_BLOCK + j], g2 = f[2 * HM_STREAM_BLOCK + j],
                          g3 = f[3 * HM_STREAM_BLOCK + j];
                    v8f b0 = {g0, g0, g0, g0, g0, g0, g0, g0}, b1 = {g1, g1, g1, g1, g1, g1, g1, g1};
                    v8f b2 = {g2, g2, g2, g2, g2, g2, g2, g2}, b3 = {g3, g3, g3, g3, g3, g3, g3, g3};
                    t0 += b0 * lo; u0 += b0 * hi; t1 += b1 * lo; u1 += b1 * hi;
                    t2 += b2 * lo; u2 += b2 * hi; t3 += b3 * lo; u3 += b3 * hi;
                }
                HM_ADD_WIDE(acc + i, t0); HM_ADD_WIDE(acc + i + 8, u0);
                HM_ADD_WIDE(acc + dim + i, t1); HM_ADD_WIDE(acc + dim + i + 8, u1);
                HM_ADD_WIDE(acc + 2 * dim + i, t2); HM_ADD_WIDE(acc + 2 * dim + i + 8, u2);
                HM_ADD_WIDE(acc + 3 * dim + i, t3); HM_ADD_WIDE(acc + 3 * dim + i + 8, u3);
            }
        }
#endif
        for (; i < dim; i++)
            for (int64_t q = 0; q < nq; q++) {
                float t = 0.0f;
                for (int64_t j = j0; j < j1; j++) t += f[q * HM_STREAM_BLOCK + j] * R[j * dim + i];
                acc[q * dim + i] += (double)t;
            }
    }
}

/* Float64 rows (counters): every product and sum in float64. */
HM_STREAM_ATTR static inline void HM_CAT(HM_STREAM_NAME, _axpy_d)(
        double *acc, const double *f, const double *R, int64_t n, int64_t dim, int64_t nq) {
    HM_AXPY_BODY(double, LDD, 1)
}

/* One block: float32 scores (dot1's lanes), its largest logit, the weights,
 * the read-out; the partial (m_b, sum_b, acc_b) of each query into jb->part. */
HM_STREAM_ATTR static void HM_STREAM_NAME(const stream_job *jb, int64_t b) {
    int64_t d = jb->dim, n = jb->n, nq = jb->nq;
    int64_t lo = b * HM_STREAM_BLOCK, hi = lo + HM_STREAM_BLOCK < n ? lo + HM_STREAM_BLOCK : n;
    int64_t nr = hi - lo, w = nq == 1 ? 1 : 4;  /* several queries: four lanes, padded */
    double lg[4 * HM_STREAM_BLOCK];  /* logits, then read-out factors, query-major */
    float sc[4 * HM_STREAM_BLOCK];
    const float *A = jb->A + lo * d;
    if (w == 1) {
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4)
            dot4(A + r * d, d, jb->q[0], sc + r, NULL);  /* rows in order: the hardware prefetches */
        for (; r < nr; r++) sc[r] = dot1(A + r * d, d, jb->q[0]);
    } else {
        for (int64_t r = 0; r < nr; r++)  /* dot4p(q, a) is dot1(a, q) for each q */
            dot4p(jb->q[0], jb->q[1], jb->q[2], jb->q[3], d, A + r * d, sc + r,
                  HM_STREAM_BLOCK, NULL);
    }
    double m[4], sum[4];
    for (int64_t q = 0; q < w; q++) {
        double *x = lg + q * HM_STREAM_BLOCK, mx = -INFINITY, t = 0.0;
        const float *v = sc + q * HM_STREAM_BLOCK;
        for (int64_t r = 0; r < nr; r++) {
            x[r] = jb->beta * (double)v[r];
            if (x[r] > mx) mx = x[r];
        }
        for (int64_t r = 0; r < nr; r++) { x[r] = exp(x[r] - mx); t += x[r]; }
        if (jb->W) for (int64_t r = 0; r < nr; r++) x[r] /= jb->W[lo + r];
        m[q] = mx;
        sum[q] = t;
    }
    float lf[4 * HM_STREAM_BLOCK];  /* the factors in float32, for float32 rows */
    if (!jb->C)
        for (int64_t q = 0; q < w; q++)
            for (int64_t r = 0; r < nr; r++)
                lf[q * HM_STREAM_BLOCK + r] = (float)lg[q * HM_STREAM_BLOCK + r];
    double *p = jb->part + (b - jb->b0) * nq * (d + 2);
    if (w == 1 || d > 512) {  /* one query (or long rows): straight into its partial */
        for (int64_t q = 0; q < nq; q++) {
            double *pq = p + q * (d + 2);
            memset(pq + 2, 0, (size_t)d * sizeof(double));
            if (jb->C) HM_CAT(HM_STREAM_NAME, _axpy_d)(pq + 2, lg + q * HM_STREAM_BLOCK,
                                                       jb->C + lo * d, nr, d, 1);
            else HM_CAT(HM_STREAM_NAME, _axpy_f)(pq + 2, lf + q * HM_STREAM_BLOCK, A, nr, d, 1);
            pq[0] = m[q];
            pq[1] = sum[q];
        }
        return;
    }
    double y[4 * 512];
    memset(y, 0, (size_t)(4 * d) * sizeof(double));
    if (jb->C) HM_CAT(HM_STREAM_NAME, _axpy_d)(y, lg, jb->C + lo * d, nr, d, 4);
    else HM_CAT(HM_STREAM_NAME, _axpy_f)(y, lf, A, nr, d, 4);
    for (int64_t q = 0; q < nq; q++) {
        double *pq = p + q * (d + 2);
        pq[0] = m[q];
        pq[1] = sum[q];
        memcpy(pq + 2, y + q * d, (size_t)d * sizeof(double));
    }
}

#undef HM_AXPY_BODY
#undef HM_CAT
#undef HM_CAT2
