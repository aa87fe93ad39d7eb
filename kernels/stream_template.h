/* Template for one block of a streamed (full-activation) step, included by
 * hopmem_kernel.c with HM_STREAM_NAME (the block function), HM_STREAM_ATTR
 * (its target attribute), HM_FMA8(a, b, c) (a * b + c on eight floats,
 * fused: one rounding), HM_FMA4D(a, b, c) (the same on four doubles) and
 * HM_ADD_WIDE(p, v) (p[0..8) += the eight floats of v, widened) defined:
 * once with AVX2 and FMA instructions, once portable (C99 fmaf / fma per
 * lane). A fused multiply-add is correctly rounded by definition, so both
 * give the same bits on any machine; the streamed path uses it where the rest
 * of the kernel keeps products and sums apart (-ffp-contract=off), halving
 * its instructions. See "full activation" in hopmem_kernel.c. */

#if defined(__GNUC__)
#define HM_CAT2(a, b) a##b
#define HM_CAT(a, b) HM_CAT2(a, b)

/* Score of one row against one query: 16 float32 lanes (element i to lane
 * i % 16, zero-padded at the end), fused multiply-adds, summed by hsum2's tree. */
HM_STREAM_ATTR static inline float HM_CAT(HM_STREAM_NAME, _dot)(const float *a, const float *x,
                                                                int64_t dim) {
    v8f lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + LANES <= dim; i += LANES) {
        lo = HM_FMA8(LD(a + i), LD(x + i), lo);
        hi = HM_FMA8(LD(a + i + 8), LD(x + i + 8), hi);
    }
    if (i < dim) {
        float pa[LANES] = {0}, px[LANES] = {0};
        memcpy(pa, a + i, (size_t)(dim - i) * sizeof(float));
        memcpy(px, x + i, (size_t)(dim - i) * sizeof(float));
        lo = HM_FMA8(LD(pa), LD(px), lo);
        hi = HM_FMA8(LD(pa + 8), LD(px + 8), hi);
    }
    return hsum2(lo, hi);
}

/* Four rows against one query, or one row against four queries (the same
 * lanes per pair: a * x = x * a), out[0], out[stride], ... pf: four rows to
 * ask the cache for meanwhile (contiguous, dim apart), or NULL. */
HM_STREAM_ATTR static inline void HM_CAT(HM_STREAM_NAME, _dot4)(
        const float *a0, const float *a1, const float *a2, const float *a3, const float *x,
        int64_t dim, float *out, int64_t stride, const float *pf) {
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
        l0 = HM_FMA8(LD(a0 + i), xl, l0); h0 = HM_FMA8(LD(a0 + i + 8), xh, h0);
        l1 = HM_FMA8(LD(a1 + i), xl, l1); h1 = HM_FMA8(LD(a1 + i + 8), xh, h1);
        l2 = HM_FMA8(LD(a2 + i), xl, l2); h2 = HM_FMA8(LD(a2 + i + 8), xh, h2);
        l3 = HM_FMA8(LD(a3 + i), xl, l3); h3 = HM_FMA8(LD(a3 + i + 8), xh, h3);
    }
    if (i < dim) {
        const float *a[4] = {a0, a1, a2, a3};
        v8f *acc[8] = {&l0, &h0, &l1, &h1, &l2, &h2, &l3, &h3};
        float px[LANES] = {0};
        memcpy(px, x + i, (size_t)(dim - i) * sizeof(float));
        for (int r = 0; r < 4; r++) {
            float pa[LANES] = {0};
            memcpy(pa, a[r] + i, (size_t)(dim - i) * sizeof(float));
            *acc[2 * r] = HM_FMA8(LD(pa), LD(px), *acc[2 * r]);
            *acc[2 * r + 1] = HM_FMA8(LD(pa + 8), LD(px + 8), *acc[2 * r + 1]);
        }
    }
    out[0] = hsum2(l0, h0);
    out[stride] = hsum2(l1, h1);
    out[2 * stride] = hsum2(l2, h2);
    out[3 * stride] = hsum2(l3, h3);
}

/* acc_q[i] += sum over a tile of up to 16 float32 rows of f_q[j] * row_j[i]:
 * the tile summed in float32 from 0 by fused multiply-adds in row order, then
 * widened and added to the float64 acc; one query or four (acc + q * dim,
 * f + q * HM_STREAM_BLOCK). Each acc_q[i] sees the same operations whatever
 * nq is. A tile's sum is within 16 * 2^-24 of exact, relative to the sum of
 * its terms' sizes. */
#define HM_TILE 16
HM_STREAM_ATTR static inline void HM_CAT(HM_STREAM_NAME, _axpy_f)(
        double *acc, const float *f, const float *R, int64_t n, int64_t dim, int64_t nq,
        const float *end) {
    /* While these rows (in L2 since the scores) are read out, the next block's
     * rows are asked for, so its scores find them in cache: the read-out's
     * arithmetic overlaps the next block's transfer (end: the rows' end). */
    const float *next = R + HM_STREAM_BLOCK * dim;
    for (int64_t j0 = 0; j0 < n; j0 += HM_TILE) {
        int64_t j1 = j0 + HM_TILE < n ? j0 + HM_TILE : n, i = 0;
        if (nq == 1) {
            /* 64 columns at a time: eight independent chains of fused
             * multiply-adds hide their latency, where 16 columns (two chains)
             * wait on it. Each column's chain, and so its bits, is the same.
             * No prefetch of the next block here: the scores' own prefetch
             * and the hardware's keep a single query's stream fed (asking
             * here measured no faster from memory, and slower from cache). */
            for (; i + 64 <= dim; i += 64) {
                v8f t0 = {0}, t1 = {0}, t2 = {0}, t3 = {0}, t4 = {0}, t5 = {0}, t6 = {0}, t7 = {0};
                for (int64_t j = j0; j < j1; j++) {
                    v8f fv = {f[j], f[j], f[j], f[j], f[j], f[j], f[j], f[j]};
                    const float *x = R + j * dim + i;
                    t0 = HM_FMA8(fv, LD(x), t0);
                    t1 = HM_FMA8(fv, LD(x + 8), t1);
                    t2 = HM_FMA8(fv, LD(x + 16), t2);
                    t3 = HM_FMA8(fv, LD(x + 24), t3);
                    t4 = HM_FMA8(fv, LD(x + 32), t4);
                    t5 = HM_FMA8(fv, LD(x + 40), t5);
                    t6 = HM_FMA8(fv, LD(x + 48), t6);
                    t7 = HM_FMA8(fv, LD(x + 56), t7);
                }
                HM_ADD_WIDE(acc + i, t0);
                HM_ADD_WIDE(acc + i + 8, t1);
                HM_ADD_WIDE(acc + i + 16, t2);
                HM_ADD_WIDE(acc + i + 24, t3);
                HM_ADD_WIDE(acc + i + 32, t4);
                HM_ADD_WIDE(acc + i + 40, t5);
                HM_ADD_WIDE(acc + i + 48, t6);
                HM_ADD_WIDE(acc + i + 56, t7);
            }
            for (; i + 16 <= dim; i += 16) {
                v8f t0 = {0}, t1 = {0};
                for (int64_t j = j0; j < j1; j++) {
                    v8f fv = {f[j], f[j], f[j], f[j], f[j], f[j], f[j], f[j]};
                    const float *x = R + j * dim + i;
                    if (next + j * dim + i + 16 <= end) HM_PREFETCH(next + j * dim + i);
                    t0 = HM_FMA8(fv, LD(x), t0);
                    t1 = HM_FMA8(fv, LD(x + 8), t1);
                }
                HM_ADD_WIDE(acc + i, t0);
                HM_ADD_WIDE(acc + i + 8, t1);
            }
        } else {
            for (; i + 16 <= dim; i += 16) {
                v8f t0 = {0}, u0 = {0}, t1 = {0}, u1 = {0}, t2 = {0}, u2 = {0}, t3 = {0}, u3 = {0};
                for (int64_t j = j0; j < j1; j++) {
                    const float *x = R + j * dim + i;
                    if (next + j * dim + i + 16 <= end) HM_PREFETCH(next + j * dim + i);
                    v8f lo = LD(x), hi = LD(x + 8);
                    float g0 = f[j], g1 = f[HM_STREAM_BLOCK + j], g2 = f[2 * HM_STREAM_BLOCK + j],
                          g3 = f[3 * HM_STREAM_BLOCK + j];
                    v8f b0 = {g0, g0, g0, g0, g0, g0, g0, g0}, b1 = {g1, g1, g1, g1, g1, g1, g1, g1};
                    v8f b2 = {g2, g2, g2, g2, g2, g2, g2, g2}, b3 = {g3, g3, g3, g3, g3, g3, g3, g3};
                    t0 = HM_FMA8(b0, lo, t0); u0 = HM_FMA8(b0, hi, u0);
                    t1 = HM_FMA8(b1, lo, t1); u1 = HM_FMA8(b1, hi, u1);
                    t2 = HM_FMA8(b2, lo, t2); u2 = HM_FMA8(b2, hi, u2);
                    t3 = HM_FMA8(b3, lo, t3); u3 = HM_FMA8(b3, hi, u3);
                }
                HM_ADD_WIDE(acc + i, t0); HM_ADD_WIDE(acc + i + 8, u0);
                HM_ADD_WIDE(acc + dim + i, t1); HM_ADD_WIDE(acc + dim + i + 8, u1);
                HM_ADD_WIDE(acc + 2 * dim + i, t2); HM_ADD_WIDE(acc + 2 * dim + i + 8, u2);
                HM_ADD_WIDE(acc + 3 * dim + i, t3); HM_ADD_WIDE(acc + 3 * dim + i + 8, u3);
            }
        }
        for (; i < dim; i++)
            for (int64_t q = 0; q < nq; q++) {
                float t = 0.0f;
                for (int64_t j = j0; j < j1; j++)
                    t = fmaf(f[q * HM_STREAM_BLOCK + j], R[j * dim + i], t);
                acc[q * dim + i] += (double)t;
            }
    }
}

/* Float64 rows (counters): acc_q[i] = fma(f_q[j], row_j[i], acc_q[i]) in row
 * order, every value in float64. */
HM_STREAM_ATTR static inline void HM_CAT(HM_STREAM_NAME, _axpy_d)(
        double *acc, const double *f, const double *R, int64_t n, int64_t dim, int64_t nq,
        const float *next, const float *end) {
    /* next: the next block's scored rows, asked for meanwhile (see _axpy_f). */
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
        int64_t j1 = j0 + 8 < n ? j0 + 8 : n, i = 0;
        for (; i + 8 <= dim; i += 8)
            for (int64_t q = 0; q < nq; q++) {
                double *a = acc + q * dim;
                const double *fq = f + q * HM_STREAM_BLOCK;
                v4d y0 = LDD(a + i), y1 = LDD(a + i + 4);
                for (int64_t j = j0; j < j1; j++) {
                    v4d fv = {fq[j], fq[j], fq[j], fq[j]};
                    const double *x = R + j * dim + i;
                    if (q == 0 && j + 8 < n) HM_PREFETCH(x + 8 * dim);
                    if (q == 0 && (i & 15) == 0 && next + j * dim + i + 16 <= end)
                        HM_PREFETCH(next + j * dim + i);
                    y0 = HM_FMA4D(fv, LDD(x), y0);
                    y1 = HM_FMA4D(fv, LDD(x + 4), y1);
                }
                *(v4d_u *)(a + i) = y0;
                *(v4d_u *)(a + i + 4) = y1;
            }
        for (; i < dim; i++)
            for (int64_t q = 0; q < nq; q++) {
                double t = acc[q * dim + i];
                for (int64_t j = j0; j < j1; j++) t = fma(f[q * HM_STREAM_BLOCK + j], R[j * dim + i], t);
                acc[q * dim + i] = t;
            }
    }
}

/* One block: float32 scores, its largest logit, the weights, the read-out;
 * the partial (m_b, sum_b, acc_b) of each query into jb->part. */
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
            HM_CAT(HM_STREAM_NAME, _dot4)(A + r * d, A + (r + 1) * d, A + (r + 2) * d,
                                          A + (r + 3) * d, jb->q[0], d, sc + r, 1,
                                          lo + r + 12 <= n ? A + (r + 8) * d : NULL);
        for (; r < nr; r++) sc[r] = HM_CAT(HM_STREAM_NAME, _dot)(A + r * d, jb->q[0], d);
    } else {
        for (int64_t r = 0; r < nr; r++)
            HM_CAT(HM_STREAM_NAME, _dot4)(jb->q[0], jb->q[1], jb->q[2], jb->q[3], A + r * d, d,
                                          sc + r, HM_STREAM_BLOCK, NULL);
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
        if (jb->N) for (int64_t r = 0; r < nr; r++) x[r] *= jb->N[lo + r];
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
                                                       jb->C + lo * d, nr, d, 1,
                                                       A + HM_STREAM_BLOCK * d, jb->A + n * d);
            else HM_CAT(HM_STREAM_NAME, _axpy_f)(pq + 2, lf + q * HM_STREAM_BLOCK, A, nr, d, 1,
                                                 jb->A + n * d);
            pq[0] = m[q];
            pq[1] = sum[q];
        }
        return;
    }
    double y[4 * 512];
    memset(y, 0, (size_t)(4 * d) * sizeof(double));
    if (jb->C) HM_CAT(HM_STREAM_NAME, _axpy_d)(y, lg, jb->C + lo * d, nr, d, 4,
                                               A + HM_STREAM_BLOCK * d, jb->A + n * d);
    else HM_CAT(HM_STREAM_NAME, _axpy_f)(y, lf, A, nr, d, 4, jb->A + n * d);
    for (int64_t q = 0; q < nq; q++) {
        double *pq = p + q * (d + 2);
        pq[0] = m[q];
        pq[1] = sum[q];
        memcpy(pq + 2, y + q * d, (size_t)d * sizeof(double));
    }
}

#undef HM_TILE
#undef HM_CAT
#undef HM_CAT2
#endif /* __GNUC__ */
