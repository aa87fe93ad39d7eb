/* Template for the half-precision activation scan, included twice by
 * hopmem_kernel.c with HM_DOTS16_NAME, HM_DOTS16_ATTR and HM_LDH(p) (load 8
 * halves as a v8f) defined. out[q * ld + j] for n rows. Same 16-lane order as the float32 scan: four rows
 * share each load of the query, two 8-wide accumulators per row. */

HM_DOTS16_ATTR static void HM_DOTS16_NAME(const hm_half *A, int64_t n, int64_t dim,
                                          const float *X, int64_t nq, float *out,
                                          int64_t ld) {
    const int64_t full = dim - dim % LANES;
    hm_half pad[4][LANES];
    for (int64_t j = 0; j < n; j += 4) {
        const int64_t rows = n - j < 4 ? n - j : 4;
        const hm_half *a0 = A + j * dim;
        const hm_half *a1 = rows > 1 ? a0 + dim : a0;
        const hm_half *a2 = rows > 2 ? a0 + 2 * dim : a0;
        const hm_half *a3 = rows > 3 ? a0 + 3 * dim : a0;
        if (full < dim) {
            /* Ragged end: zero-padded copies keep the lanes aligned. */
            const hm_half *a[4] = {a0, a1, a2, a3};
            for (int r = 0; r < 4; r++)
                for (int l = 0; l < LANES; l++)
                    pad[r][l] = full + l < dim ? a[r][full + l] : (hm_half)0.0f;
        }
        for (int64_t q = 0; q < nq; q++) {
            const float *x = X + q * dim;
            v8f l0 = {0}, h0 = {0}, l1 = {0}, h1 = {0}, l2 = {0}, h2 = {0}, l3 = {0}, h3 = {0};
            for (int64_t i = 0; i < full; i += LANES) {
                if (nq == 1 && j + 12 <= n) {  /* stream rows 8 ahead in (see dot4) */
                    const hm_half *pf = a0 + 8 * dim + i;
                    HM_PREFETCH(pf);
                    HM_PREFETCH(pf + dim);
                    HM_PREFETCH(pf + 2 * dim);
                    HM_PREFETCH(pf + 3 * dim);
                }
                v8f xl = LD(x + i), xh = LD(x + i + 8);
                l0 += HM_LDH(a0 + i) * xl; h0 += HM_LDH(a0 + i + 8) * xh;
                l1 += HM_LDH(a1 + i) * xl; h1 += HM_LDH(a1 + i + 8) * xh;
                l2 += HM_LDH(a2 + i) * xl; h2 += HM_LDH(a2 + i + 8) * xh;
                l3 += HM_LDH(a3 + i) * xl; h3 += HM_LDH(a3 + i + 8) * xh;
            }
            if (full < dim) {
                float px[LANES] = {0};
                memcpy(px, x + full, (size_t)(dim - full) * sizeof(float));
                v8f xl = LD(px), xh = LD(px + 8);
                l0 += HM_LDH(pad[0]) * xl; h0 += HM_LDH(pad[0] + 8) * xh;
                l1 += HM_LDH(pad[1]) * xl; h1 += HM_LDH(pad[1] + 8) * xh;
                l2 += HM_LDH(pad[2]) * xl; h2 += HM_LDH(pad[2] + 8) * xh;
                l3 += HM_LDH(pad[3]) * xl; h3 += HM_LDH(pad[3] + 8) * xh;
            }
            float *o = out + q * ld + j;
            o[0] = hsum2(l0, h0);
            if (rows > 1) o[1] = hsum2(l1, h1);
            if (rows > 2) o[2] = hsum2(l2, h2);
            if (rows > 3) o[3] = hsum2(l3, h3);
        }
    }
}
