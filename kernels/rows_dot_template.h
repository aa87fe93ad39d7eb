/* Template for the iterations' similarity pass, included twice by
 * hopmem_kernel.c with HM_ROWS_NAME, HM_ROWS_T (the rows' type: float or
 * double), HM_ROWS_LD4(p) (four of them as a v4d) and HM_ROWS_ONE (the
 * one-row dot with the same lanes: fddot or ddot) defined. A float widens to
 * double exactly, so both versions give the same bits for the same values.
 *
 * out[j] = HM_ROWS_ONE(rows[j], x) / norm for j < n (0 everywhere when
 * norm < TINY), four rows in flight at once. */

HM_INLINE void HM_ROWS_NAME(const HM_ROWS_T *const *rows, int64_t n, const double *x,
                            double norm, int64_t dim, double *out) {
    int64_t j = 0;
    if (norm < HM_TINY) {
        for (; j < n; j++) out[j] = 0.0;
        return;
    }
#if defined(__GNUC__)
    for (; j + 4 <= n; j += 4) {
        const HM_ROWS_T *r0 = rows[j], *r1 = rows[j + 1], *r2 = rows[j + 2], *r3 = rows[j + 3];
        v4d l0 = {0}, h0 = {0}, l1 = {0}, h1 = {0}, l2 = {0}, h2 = {0}, l3 = {0}, h3 = {0};
        int64_t i = 0;
        for (; i + 8 <= dim; i += 8) {
            v4d xl = LDD(x + i), xh = LDD(x + i + 4);
            l0 += HM_ROWS_LD4(r0 + i) * xl; h0 += HM_ROWS_LD4(r0 + i + 4) * xh;
            l1 += HM_ROWS_LD4(r1 + i) * xl; h1 += HM_ROWS_LD4(r1 + i + 4) * xh;
            l2 += HM_ROWS_LD4(r2 + i) * xl; h2 += HM_ROWS_LD4(r2 + i + 4) * xh;
            l3 += HM_ROWS_LD4(r3 + i) * xl; h3 += HM_ROWS_LD4(r3 + i + 4) * xh;
        }
        double t0 = 0.0, t1 = 0.0, t2 = 0.0, t3 = 0.0;
        for (; i < dim; i++) {
            t0 += (double)r0[i] * x[i]; t1 += (double)r1[i] * x[i];
            t2 += (double)r2[i] * x[i]; t3 += (double)r3[i] * x[i];
        }
        out[j] = lanes_sum(l0, h0, t0) / norm;
        out[j + 1] = lanes_sum(l1, h1, t1) / norm;
        out[j + 2] = lanes_sum(l2, h2, t2) / norm;
        out[j + 3] = lanes_sum(l3, h3, t3) / norm;
    }
#endif
    for (; j < n; j++) out[j] = HM_ROWS_ONE(rows[j], x, dim) / norm;
}
