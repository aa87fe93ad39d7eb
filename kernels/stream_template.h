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
 * lanes per pair: a * x = x * a), out[0], out[stride], ... No software
 * prefetch here: the hardware's streamer follows these rows (asking for each
 * line as well measured slower, in cache and from memory alike). */
HM_STREAM_ATTR static inline void HM_CAT(HM_STREAM_NAME, _dot4)(
        const float *a0, const float *a1, const float *a2, const float *a3, const float *x,
        int64_t dim, float *out, int64_t stride) {
    v8f l0 = {0}, h0 = {0}, l1 = {0}, h1 = {0}, l2 = {0}, h2 = {0}, l3 = {0}, h3 = {0};
    int64_t i = 0;
    for (; i + LANES <= dim; i += LANES) {
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

/* exp(x) of four doubles, x <= HM_STREAM_SLACK (a logit minus its block's
 * reference; correct for any x up to ~709, where 2^n stays normal): the
 * same operations in every build (HM_FMA4D is one rounding everywhere), so
 * the AVX2 and portable blocks give the same bits, and within about 2 ulp of
 * exp (Cody-Waite reduction to |r| <= ln 2 / 2 with fused multiply-adds, the
 * degree-12 Taylor polynomial, whose truncation is below 2^-52 there, then
 * 2^n as two exact factors so that results down to the smallest subnormal
 * round once). x below -746 gives 0, as exp does. Four lanes at a time cost a
 * fraction of one call to the C library's exp per lane. */
HM_STREAM_ATTR static inline v4d HM_CAT(HM_STREAM_NAME, _exp4)(v4d x) {
    const v4d floor_ = {-746.0, -746.0, -746.0, -746.0};
    const v4d shifter = {0x1.8p52, 0x1.8p52, 0x1.8p52, 0x1.8p52};
    const v4d log2e = {0x1.71547652b82fep0, 0x1.71547652b82fep0, 0x1.71547652b82fep0,
                       0x1.71547652b82fep0};
    const v4d mln2hi = {-0x1.62e42fefa3800p-1, -0x1.62e42fefa3800p-1, -0x1.62e42fefa3800p-1,
                        -0x1.62e42fefa3800p-1};
    const v4d mln2lo = {-0x1.ef35793c76730p-45, -0x1.ef35793c76730p-45, -0x1.ef35793c76730p-45,
                        -0x1.ef35793c76730p-45};
    static const double coef[13] = {  /* 1 / k!, k = 12 .. 0 */
        1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
        1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0};
    v4di low = (v4di)(x < floor_);
    x = (v4d)(((v4di)x & ~low) | ((v4di)floor_ & low));
    v4d k = x * log2e + shifter;   /* round(x log2 e) in the low bits (no contraction) */
    v4d n = k - shifter;
    v4di ni = (v4di)k - (v4di)shifter;
    v4d r = HM_FMA4D(n, mln2hi, x);
    r = HM_FMA4D(n, mln2lo, r);
    v4d p = {coef[0], coef[0], coef[0], coef[0]};
    for (int i = 1; i < 13; i++) {
        v4d c = {coef[i], coef[i], coef[i], coef[i]};
        p = HM_FMA4D(p, r, c);
    }
    v4di n1 = ni >> 1, n2 = ni - n1;  /* each >= -539: two normal powers of two */
    v4d s1 = (v4d)((n1 + 1023) << 52), s2 = (v4d)((n2 + 1023) << 52);
    return (p * s2) * s1;
}

/* acc_q[i] += sum over a tile of up to 16 float32 rows of f_q[j] * row_j[i]:
 * the tile summed in float32 from 0 by fused multiply-adds in row order, then
 * widened and added to the float64 acc; one query or four (acc + q * dim,
 * f + q * HM_TILE). Each acc_q[i] sees the same operations whatever nq is. A
 * tile's sum is within 16 * 2^-24 of exact, relative to the sum of its terms'
 * sizes. One query: while the rows (in L1) are read out, the cache is asked
 * for the first pf_lines lines from pf on, one line per row and 64 columns
 * (the next tile's first rows): the read-out does not load from memory, and
 * without these requests memory would idle until the next tile's scores
 * miss (measured: a step over 10,000 rows from L3 ~15% faster; the
 * streamer alone does not run that far ahead). */
#define HM_TILE 16
HM_STREAM_ATTR static inline void HM_CAT(HM_STREAM_NAME, _axpy_f)(
        double *acc, const float *f, const float *R, int64_t n, int64_t dim, int64_t nq,
        const float *pf, int64_t pf_lines) {
    int64_t i = 0;
    if (nq == 1) {
        /* 64 columns at a time: eight independent chains of fused
         * multiply-adds hide their latency, where 16 columns (two chains)
         * wait on it. Each column's chain, and so its bits, is the same. */
        for (; i + 64 <= dim; i += 64) {
            v8f t0 = {0}, t1 = {0}, t2 = {0}, t3 = {0}, t4 = {0}, t5 = {0}, t6 = {0}, t7 = {0};
            for (int64_t j = 0; j < n; j++) {
                v8f fv = {f[j], f[j], f[j], f[j], f[j], f[j], f[j], f[j]};
                const float *x = R + j * dim + i;
                int64_t k = (i >> 6) * n + j;  /* one line a row and 64 columns */
                if (k < pf_lines) HM_PREFETCH(pf + 16 * k);
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
            for (int64_t j = 0; j < n; j++) {
                v8f fv = {f[j], f[j], f[j], f[j], f[j], f[j], f[j], f[j]};
                const float *x = R + j * dim + i;
                t0 = HM_FMA8(fv, LD(x), t0);
                t1 = HM_FMA8(fv, LD(x + 8), t1);
            }
            HM_ADD_WIDE(acc + i, t0);
            HM_ADD_WIDE(acc + i + 8, t1);
        }
    } else {
        for (; i + 16 <= dim; i += 16) {
            v8f t0 = {0}, u0 = {0}, t1 = {0}, u1 = {0}, t2 = {0}, u2 = {0}, t3 = {0}, u3 = {0};
            for (int64_t j = 0; j < n; j++) {
                const float *x = R + j * dim + i;
                v8f lo = LD(x), hi = LD(x + 8);
                float g0 = f[j], g1 = f[HM_TILE + j], g2 = f[2 * HM_TILE + j],
                      g3 = f[3 * HM_TILE + j];
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
            for (int64_t j = 0; j < n; j++) t = fmaf(f[q * HM_TILE + j], R[j * dim + i], t);
            acc[q * dim + i] += (double)t;
        }
}

/* Float64 rows (counters): acc_q[i] = fma(f_q[j], row_j[i], acc_q[i]) in row
 * order, every value in float64, for a tile's rows (f + q * HM_TILE). */
HM_STREAM_ATTR static inline void HM_CAT(HM_STREAM_NAME, _axpy_d)(
        double *acc, const double *f, const double *R, int64_t n, int64_t dim, int64_t nq,
        const double *end) {
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8)
        for (int64_t q = 0; q < nq; q++) {
            double *a = acc + q * dim;
            const double *fq = f + q * HM_TILE;
            v4d y0 = LDD(a + i), y1 = LDD(a + i + 4);
            for (int64_t j = 0; j < n; j++) {
                v4d fv = {fq[j], fq[j], fq[j], fq[j]};
                const double *x = R + j * dim + i;
                /* the next tile's counters, asked for meanwhile */
                if (q == 0 && x + HM_TILE * dim + 8 <= end) HM_PREFETCH(x + HM_TILE * dim);
                y0 = HM_FMA4D(fv, LDD(x), y0);
                y1 = HM_FMA4D(fv, LDD(x + 4), y1);
            }
            *(v4d_u *)(a + i) = y0;
            *(v4d_u *)(a + i + 4) = y1;
        }
    for (; i < dim; i++)
        for (int64_t q = 0; q < nq; q++) {
            double t = acc[q * dim + i];
            for (int64_t j = 0; j < n; j++) t = fma(f[q * HM_TILE + j], R[j * dim + i], t);
            acc[q * dim + i] = t;
        }
}

/* One block of up to HM_STREAM_BLOCK rows, in tiles of HM_TILE rows: a tile
 * scores its rows (which come into L1), and reads them out with the weights
 * exp(logit - M) while they are still in L1: one transfer of each row from
 * L2, L3 or memory a step. M, the block's reference logit, is its first
 * tile's largest logit, and stays until a tile's largest logit exceeds it by
 * more than HM_STREAM_SLACK: then that logit becomes M and what the block has
 * summed so far is rescaled by exp(M_old - M). So a tile's weights are at
 * most exp(HM_STREAM_SLACK), and one query's weights can be computed while
 * its tile is still being scored, a group of four rows at a time (redone for
 * the tile in the rare case that it raises M): the read-out does not wait on
 * the tile's largest logit and then on its exps, a wait during which memory
 * would idle. The arithmetic is the same however the weights are scheduled
 * (one query, or four side by side), so the bits are too. The partial
 * (M_b, sum_b, acc_b) of each query goes to jb->part. */
HM_STREAM_ATTR static void HM_STREAM_NAME(const stream_job *jb, int64_t b) {
    int64_t d = jb->dim, n = jb->n, nq = jb->nq;
    int64_t lo = b * HM_STREAM_BLOCK, hi = lo + HM_STREAM_BLOCK < n ? lo + HM_STREAM_BLOCK : n;
    int64_t nr = hi - lo, w = nq == 1 ? 1 : 4;  /* several queries: four lanes, padded */
    const float *A = jb->A + lo * d;
    double *p = jb->part + (b - jb->b0) * nq * (d + 2);
    double beta = jb->beta;
    /* the block's sums: straight into the partial for one query (or long
     * rows, a query at a time), else four queries side by side in y */
    int side = w == 4 && d <= 512;
    int64_t wq = side ? w : nq;  /* the queries summed (padded lanes too, side by side) */
    double y[4 * 512];
    double *accs[4];
    for (int64_t q = 0; q < wq; q++) {
        accs[q] = side ? y + q * d : p + q * (d + 2) + 2;
        memset(accs[q], 0, (size_t)d * sizeof(double));
    }
    double M[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, S[4] = {0.0, 0.0, 0.0, 0.0};
    float sc[4 * HM_TILE];
    double lg[4 * HM_TILE];  /* logits, query-major */
    double ex[4 * HM_TILE];  /* their weights, then read-out factors */
    float lf[4 * HM_TILE];   /* the factors in float32, for float32 rows */
    for (int64_t t0 = 0; t0 < nr; t0 += HM_TILE) {
        int64_t nt = nr - t0 < HM_TILE ? nr - t0 : HM_TILE;
        const float *T = A + t0 * d;
        /* the lines after this tile's rows, asked for while it is read out */
        const float *pf = T + HM_TILE * d, *end = jb->A + n * d;
        if (jb->reverse && t0 + HM_TILE >= nr)  /* the next block to run is the one before */
            pf = b > jb->b0 ? jb->A + (b - 1) * HM_STREAM_BLOCK * d : end;
        int64_t pf_lines = pf < end ? (int64_t)(end - pf) / 16 : 0;
        /* One query: rows [0, done) have their logits in lg, the largest of
         * them in mx0, and their weights by the block's reference so far
         * (none in its first tile) in ex and lf, summed onto S[0] in t0. */
        int64_t done = 0;
        double mx0 = -INFINITY, t0s = S[0];
        if (w == 1) {
            int spec = M[0] != -INFINITY;
            v4d m4 = {M[0], M[0], M[0], M[0]};
            for (; done + 4 <= nt; done += 4) {
                const float *R = T + done * d;
                HM_CAT(HM_STREAM_NAME, _dot4)(R, R + d, R + 2 * d, R + 3 * d, jb->q[0], d,
                                              sc + done, 1);
                v4d l = {beta * (double)sc[done], beta * (double)sc[done + 1],
                         beta * (double)sc[done + 2], beta * (double)sc[done + 3]};
                *(v4d_u *)(lg + done) = l;
                for (int k = 0; k < 4; k++) if (l[k] > mx0) mx0 = l[k];
                if (!spec) {  /* the block's first rows: its reference */
                    if (done > 0 || mx0 == -INFINITY) continue;
                    M[0] = mx0;
                    m4 = (v4d){mx0, mx0, mx0, mx0};
                    spec = 1;
                }
                v4d e = HM_CAT(HM_STREAM_NAME, _exp4)(l - m4);
                for (int k = 0; k < 4; k++) t0s += e[k];
                if (jb->W) for (int k = 0; k < 4; k++) e[k] /= jb->W[lo + t0 + done + k];
                if (jb->N) for (int k = 0; k < 4; k++) e[k] *= jb->N[lo + t0 + done + k];
                *(v4d_u *)(ex + done) = e;
                if (!jb->C) for (int k = 0; k < 4; k++) lf[done + k] = (float)e[k];
            }
            for (int64_t r = done; r < nt; r++)
                sc[r] = HM_CAT(HM_STREAM_NAME, _dot)(T + r * d, jb->q[0], d);
            if (!spec) done = 0;
        } else {
            for (int64_t r = 0; r < nt; r++)
                HM_CAT(HM_STREAM_NAME, _dot4)(jb->q[0], jb->q[1], jb->q[2], jb->q[3], T + r * d,
                                              d, sc + r, HM_TILE);
        }
        for (int64_t q = 0; q < wq; q++) {
            double *x = lg + q * HM_TILE, *e = ex + q * HM_TILE;
            const float *v = sc + q * HM_TILE;
            int64_t from = q == 0 ? done : 0;  /* the rows whose weights are still to come */
            double mx = q == 0 ? mx0 : -INFINITY, t = from > 0 ? t0s : S[q];
            for (int64_t r = from; r < nt; r++) x[r] = beta * (double)v[r];
            for (int64_t r = from; r < nt; r++) if (x[r] > mx) mx = x[r];
            if (M[q] == -INFINITY) {  /* the block's first rows: its reference */
                double m = -INFINITY;
                for (int64_t r = 0; r < nt && r < 4; r++) if (x[r] > m) m = x[r];
                M[q] = m;
            }
            if (M[q] == -INFINITY || mx > M[q] + HM_STREAM_SLACK) {
                /* a new reference: what the block has so far, rescaled */
                if (M[q] != -INFINITY) {
                    v4d g = {M[q] - mx, 0.0, 0.0, 0.0};
                    double a = HM_CAT(HM_STREAM_NAME, _exp4)(g)[0], *acc = accs[q];
                    S[q] *= a;
                    for (int64_t i = 0; i < d; i++) acc[i] *= a;
                }
                M[q] = mx;
                from = 0;
                t = S[q];
            }
            for (int64_t r = nt; r < HM_TILE; r++) x[r] = M[q];  /* padding, unused */
            v4d m4 = {M[q], M[q], M[q], M[q]};
            for (int64_t r = from; r < nt; r += 4)  /* from: a multiple of four */
                *(v4d_u *)(e + r) = HM_CAT(HM_STREAM_NAME, _exp4)(LDD(x + r) - m4);
            for (int64_t r = from; r < nt; r++) t += e[r];
            S[q] = t;
            if (jb->W) for (int64_t r = from; r < nt; r++) e[r] /= jb->W[lo + t0 + r];
            if (jb->N) for (int64_t r = from; r < nt; r++) e[r] *= jb->N[lo + t0 + r];
            if (!jb->C)
                for (int64_t r = from; r < nt; r++) lf[q * HM_TILE + r] = (float)e[r];
        }
        if (!side) {  /* one query, or long rows: a query at a time */
            for (int64_t q = 0; q < nq; q++) {
                if (jb->C) HM_CAT(HM_STREAM_NAME, _axpy_d)(accs[q], ex + q * HM_TILE,
                                                           jb->C + (lo + t0) * d, nt, d, 1,
                                                           jb->C + n * d);
                else HM_CAT(HM_STREAM_NAME, _axpy_f)(accs[q], lf + q * HM_TILE, T, nt, d, 1,
                                                     pf, pf_lines);
            }
        } else if (jb->C) {
            HM_CAT(HM_STREAM_NAME, _axpy_d)(y, ex, jb->C + (lo + t0) * d, nt, d, 4, jb->C + n * d);
        } else {
            HM_CAT(HM_STREAM_NAME, _axpy_f)(y, lf, T, nt, d, 4, NULL, 0);
        }
    }
    for (int64_t q = 0; q < nq; q++) {
        double *pq = p + q * (d + 2);
        pq[0] = M[q];
        pq[1] = S[q];
        if (side) memcpy(pq + 2, y + q * d, (size_t)d * sizeof(double));
    }
}

#undef HM_TILE
#undef HM_CAT
#undef HM_CAT2
#endif /* __GNUC__ */
