/* Template for the half-precision activation scan, included twice by
 * hopmem_kernel.c with HM_DOTS16_NAME, HM_DOTS16_ATTR and HM_LDH(p) (load 8
 * halves as a v8f) defined. Same 16-lane order as the float32 scan. */

HM_DOTS16_ATTR static void HM_DOTS16_NAME(const hm_half *A, int64_t n, int64_t dim,
                                          const float *X, int64_t nq, float *out) {
    const int64_t full = dim - dim % LANES;
    for (int64_t j = 0; j < n; j += 4) {
        const int64_t rows = n - j < 4 ? n - j : 4;
        const hm_half *a[4];
        for (int r = 0; r < 4; r++) a[r] = A + (j + (r < rows ? r : 0)) * dim;
        for (int64_t q = 0; q < nq; q++) {
            const float *x = X + q * dim;
            v8f lo[4] = {{0}}, hi[4] = {{0}};
            for (int64_t i = 0; i < full; i += LANES) {
                v8f xl = LD(x + i), xh = LD(x + i + 8);
                for (int r = 0; r < 4; r++) {
                    lo[r] += HM_LDH(a[r] + i) * xl;
                    hi[r] += HM_LDH(a[r] + i + 8) * xh;
                }
            }
            if (full < dim) {
                /* Ragged end: zero-padded copies keep the lanes aligned. */
                float px[LANES] = {0};
                memcpy(px, x + full, (size_t)(dim - full) * sizeof(float));
                for (int r = 0; r < 4; r++) {
                    hm_half pa[LANES];
                    for (int l = 0; l < LANES; l++)
                        pa[l] = full + l < dim ? a[r][full + l] : (hm_half)0.0f;
                    lo[r] += HM_LDH(pa) * LD(px);
                    hi[r] += HM_LDH(pa + 8) * LD(px + 8);
                }
            }
            for (int r = 0; r < rows; r++) out[q * n + j + r] = hsum2(lo[r], hi[r]);
        }
    }
}
