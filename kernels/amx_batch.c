/* AMX bf16 tile products for batched reads; see amx_batch.h.
 *
 * Only the static functions marked HM_AMX_TARGET are compiled for AMX and
 * AVX-512 (a target attribute per function instead of per-file flags), and
 * the entry points call them only after hm_amx_available() said yes: the rest
 * of the extension stays portable (no -march flags), and a compiler without
 * AMX support (or another platform) gets stubs that return -1.
 */
#include "amx_batch.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && !defined(HM_PORTABLE) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define HM_HAVE_AMX 1
#endif

/* acc (nq x d, float64) = acc * alpha[q] + Y (row stride ldy, float32),
 * element by element in a fixed order: alpha NULL adds Y alone. */
void hm_amx_accumulate(double *acc, int64_t nq, int64_t d, const double *alpha, const float *Y,
                       int64_t ldy)
{
    for (int64_t q = 0; q < nq; q++) {
        double *a = acc + q * d;
        const float *y = Y + q * ldy;
        if (alpha) {
            const double f = alpha[q];
            for (int64_t i = 0; i < d; i++) {
                const double scaled = a[i] * f;  /* rounded, then the sum rounded */
                a[i] = scaled + (double)y[i];
            }
        } else {
            for (int64_t i = 0; i < d; i++)
                a[i] += (double)y[i];
        }
    }
}

#ifdef HM_HAVE_AMX

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HM_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_state = -1; /* -1 unknown, 0 no, 1 yes */

static int amx_probe(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, 0) < 7)
        return 0;
    __cpuid(1, a, b, c, d);
    if (!(c & (1u << 27)))            /* OSXSAVE */
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(d & (1u << 22)) || !(d & (1u << 24)))  /* AMX-BF16, AMX-TILE */
        return 0;
    if (!(b & (1u << 16)) || !(b & (1u << 30)))  /* AVX512F, AVX512BW */
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    /* XCR0: SSE, AVX, opmask, ZMM halves, tile config and data */
    const unsigned need = (1u << 1) | (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 17) | (1u << 18);
    if ((lo & need) != need)
        return 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return 0;
    return 1;
}

int hm_amx_available(void)
{
    int s = __atomic_load_n(&amx_state, __ATOMIC_ACQUIRE);
    if (s < 0) {  /* racing first calls probe twice, to the same answer */
        s = amx_probe();
        __atomic_store_n(&amx_state, s, __ATOMIC_RELEASE);
    }
    return s;
}

/* bf16 bits of x rounded to nearest even (x finite), and that value as float */
#define HM_BF16_SPLIT(x, bits, back)                                   \
    do {                                                               \
        uint32_t u_;                                                   \
        memcpy(&u_, &(x), 4);                                          \
        u_ = (u_ + 0x7FFFu + ((u_ >> 16) & 1u)) & 0xFFFF0000u;         \
        (bits) = (uint16_t)(u_ >> 16);                                 \
        memcpy(&(back), &u_, 4);                                       \
    } while (0)

HM_AMX_TARGET __attribute__((noinline))
static int split_a(const float *src, int64_t rows, int64_t cols, int64_t lds,
                   const float *colscale, int pieces, int64_t rows_p, int64_t cols_p,
                   uint16_t *out)
{
    if (pieces < 1 || pieces > 3 || rows > rows_p || cols > cols_p)
        return -1;
    const int64_t psz = rows_p * cols_p;
    for (int64_t r = 0; r < rows_p; r++) {
        uint16_t *o0 = out + r * cols_p;
        if (r >= rows) {
            for (int p = 0; p < pieces; p++)
                memset(o0 + p * psz, 0, (size_t)cols_p * 2);
            continue;
        }
        const float *s = src + r * lds;
        if (pieces == 2) {
            uint16_t *o1 = o0 + psz;
            for (int64_t c = 0; c < cols; c++) {
                float x = colscale ? s[c] * colscale[c] : s[c], h, l;
                uint16_t bh, bl;
                HM_BF16_SPLIT(x, bh, h);
                x = x - h;
                HM_BF16_SPLIT(x, bl, l);
                (void)l;
                o0[c] = bh;
                o1[c] = bl;
            }
        } else if (pieces == 3) {
            uint16_t *o1 = o0 + psz, *o2 = o0 + 2 * psz;
            for (int64_t c = 0; c < cols; c++) {
                float x = colscale ? s[c] * colscale[c] : s[c], v;
                uint16_t b0, b1, b2;
                HM_BF16_SPLIT(x, b0, v);
                x = x - v;
                HM_BF16_SPLIT(x, b1, v);
                x = x - v;
                HM_BF16_SPLIT(x, b2, v);
                o0[c] = b0;
                o1[c] = b1;
                o2[c] = b2;
            }
        } else {
            for (int64_t c = 0; c < cols; c++) {
                float x = colscale ? s[c] * colscale[c] : s[c], v;
                uint16_t b0;
                HM_BF16_SPLIT(x, b0, v);
                (void)v;
                o0[c] = b0;
            }
        }
        for (int p = 0; p < pieces; p++)
            memset(o0 + p * psz + cols, 0, (size_t)(cols_p - cols) * 2);
    }
    return 0;
}

HM_AMX_TARGET __attribute__((noinline))
static int pack_b(const float *src, int64_t sk, int64_t sn, int64_t K, int64_t N,
                  int pieces, int64_t Kp, int64_t Np, uint16_t *out)
{
    if (pieces < 1 || pieces > 3 || K > Kp || N > Np || Kp % 32 || Np % 32)
        return -1;
    const int64_t psz = Kp * Np, nkc = Kp / 32;
    /* tile by tile (32 K by 16 N, 512 elements), each written in order */
    for (int64_t nb = 0; nb < Np / 16; nb++) {
        for (int64_t kc = 0; kc < nkc; kc++) {
            const int64_t base = (nb * nkc + kc) * 512;
            for (int64_t i = 0; i < 512; i++) {
                const int64_t k = kc * 32 + (i >> 5) * 2 + (i & 1), n = nb * 16 + ((i >> 1) & 15);
                float x = (k < K && n < N) ? src[k * sk + n * sn] : 0.0f, v;
                uint16_t bits;
                for (int p = 0; p < pieces; p++) {
                    HM_BF16_SPLIT(x, bits, v);
                    out[p * psz + base + i] = bits;
                    x = x - v;
                }
            }
        }
    }
    return 0;
}

/* exp(x) of 16 float32 x <= 0 (a logit minus its running maximum), in
 * float32, within 3 2^-24 of exp(x), relative, where that is a normal float32
 * (below 2^-126: within 2^-149 absolute). x below -150 gives 0 (exp(x) <
 * 2^-216). The error:
 * - n = round(x log2 e), |n| <= 217; r = x - n C1 exactly (C1 = ln 2 to 16
 *   bits, so n C1 is a float32, and x and n C1 are within a factor 2 of each
 *   other when n != 0: Sterbenz), then r - n C2 (C2 = ln 2 - C1 to float32)
 *   rounded once: |r - (x - n ln 2)| <= 2^-24 |r| + 2^-36, |r| <= 0.35, so
 *   exp(r) is off by at most 2^-25.5, relative;
 * - the degree-7 Taylor polynomial of exp at 0: truncation r^8 / 8! < 2^-27.5;
 * - Horner with fused multiply-adds, one rounding a step: the last (to p =
 *   1 + r p1) 2^-24 of p, the one before 2^-24 |r p1| <= 2^-24 0.35 1.2 p, and
 *   the rest, each scaled by another factor |r| <= 0.35, below 2^-24 0.3 p;
 * - 2^n by scalef: exact for a normal result.
 * In all below 2^-24 (1 + 0.42 + 0.3) + 2^-25.5 + 2^-27.5 < 2.2 2^-24. */
HM_AMX_TARGET static inline __m512 exp16(__m512 x)
{
    const __m512 log2e = _mm512_set1_ps(0x1.715476p0f);
    const __m512 c1 = _mm512_set1_ps(0x1.62e4p-1f);          /* 16 bits of ln 2 */
    const __m512 c2 = _mm512_set1_ps(0x1.7f7d1cp-20f);       /* ln 2 - c1, to float32 */
    x = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, c1, x);  /* exact */
    r = _mm512_fnmadd_ps(n, c2, r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* bf16 bits (round to nearest even) of 16 finite float32, in 16-bit lanes,
 * and those values as float32 */
HM_AMX_TARGET static inline __m256i bf16_16(__m512 x, __m512 *back)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    u = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
    u = _mm512_and_si512(u, _mm512_set1_epi32((int)0xFFFF0000u));
    *back = _mm512_castsi512_ps(u);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
}

HM_AMX_TARGET __attribute__((noinline))
static int exp_f32(const float *x, int64_t n, float *out)
{
    for (int64_t j = 0; j < n; j += 16) {
        const int64_t left = n - j;
        const __mmask16 k = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        _mm512_mask_storeu_ps(out + j, k, exp16(_mm512_maskz_loadu_ps(k, x + j)));
    }
    return 0;
}

/* The softmax pass of a tile (hm_amx_softmax_split) as resumable work, so
 * that its vector instructions can run between the tile products of the next
 * tile's scores (the AMX unit works through its queue meanwhile). The same
 * operations on the same values whatever the slices: the same bits. */
typedef struct {
    const float *S, *scale;
    const double *m_old;
    double *m_new;
    uint16_t *W;
    int64_t lds, nq, nt, sub, rows_p, nsub;
    int64_t q, b, j; /* row, block, column within the block (or within the row: the max) */
    int phase;       /* 0: the row's maximum, 1: its weights */
    __m512 mx;
    float shift;
} sm_work;

static int sm_init(sm_work *st, const float *S, int64_t lds, int64_t nq, int64_t nt, const double *m_old,
                   double *m_new, const float *scale, int64_t sub, int64_t rows_p, uint16_t *W)
{
    if (nq > rows_p || nq < 1 || nt < 1 || sub < 32 || sub % 32)
        return -1;
    st->S = S;
    st->scale = scale;
    st->m_old = m_old;
    st->m_new = m_new;
    st->W = W;
    st->lds = lds;
    st->nq = nq;
    st->nt = nt;
    st->sub = sub;
    st->rows_p = rows_p;
    st->nsub = (nt + sub - 1) / sub;
    st->q = st->b = st->j = 0;
    st->phase = 0;
    st->shift = 0.0f;
    /* the padding rows' weights: zero */
    for (int64_t b = 0; b < st->nsub; b++) {
        const int64_t lo = b * sub, ns = (nt - lo < sub) ? nt - lo : sub, pw = (ns + 31) / 32 * 32;
        for (int p = 0; p < 2; p++)
            if (rows_p > nq)
                memset(W + b * 2 * rows_p * sub + p * rows_p * pw + nq * pw, 0, (size_t)((rows_p - nq) * pw) * 2);
    }
    return 0;
}

/* up to `budget` vectors of 16 columns; returns 1 while work is left */
HM_AMX_TARGET static inline int sm_run(sm_work *st, int64_t budget)
{
    while (st->q < st->nq && budget > 0) {
        const float *s = st->S + st->q * st->lds;
        if (st->phase == 0) {
            if (st->j == 0)
                st->mx = _mm512_set1_ps(-INFINITY);
            __m512 m = st->mx;
            int64_t j = st->j;
            for (; j + 16 <= st->nt && budget > 0; j += 16, budget--)
                m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));
            if (j < st->nt && j + 16 > st->nt && budget > 0) {
                __mmask16 k = (__mmask16)((1u << (st->nt - j)) - 1u);
                m = _mm512_max_ps(m, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + j));
                j = st->nt;
                budget--;
            }
            st->mx = m;
            st->j = j;
            if (j >= st->nt) {
                float top = _mm512_reduce_max_ps(m);
                double nm = st->m_old[st->q] > (double)top ? st->m_old[st->q] : (double)top;
                st->m_new[st->q] = nm;
                st->shift = (float)nm; /* a float32 value (or -inf): exact */
                st->phase = 1;
                st->b = st->j = 0;
            }
            continue;
        }
        const __m512 shift = _mm512_set1_ps(st->shift);
        const int64_t lo = st->b * st->sub, ns = (st->nt - lo < st->sub) ? st->nt - lo : st->sub,
                      pw = (ns + 31) / 32 * 32;
        uint16_t *w0 = st->W + st->b * 2 * st->rows_p * st->sub + st->q * pw, *w1 = w0 + st->rows_p * pw;
        int64_t j = st->j;
        for (; j < pw && budget > 0; j += 16, budget--) {
            const int64_t left = ns - j;
            __mmask16 k = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u);
            __m512 x = _mm512_maskz_loadu_ps(k, s + lo + j);
            __m512 w = exp16(_mm512_sub_ps(x, shift));
            if (st->scale)
                w = _mm512_mul_ps(w, _mm512_maskz_loadu_ps(k, st->scale + lo + j));
            w = _mm512_maskz_mov_ps(k, w);
            __m512 hi, lo2;
            _mm256_storeu_si256((__m256i *)(w0 + j), bf16_16(w, &hi));
            _mm256_storeu_si256((__m256i *)(w1 + j), bf16_16(_mm512_sub_ps(w, hi), &lo2));
        }
        st->j = j;
        if (j >= pw) {
            st->j = 0;
            if (++st->b == st->nsub) {
                st->b = 0;
                st->phase = 0;
                st->q++;
            }
        }
    }
    return st->q < st->nq;
}

/* vectors of work in a pass: the maxima and the weights of every row */
static int64_t sm_size(const sm_work *st)
{
    int64_t w = 0;
    for (int64_t b = 0; b < st->nsub; b++) {
        const int64_t lo = b * st->sub, ns = (st->nt - lo < st->sub) ? st->nt - lo : st->sub;
        w += (ns + 31) / 32 * 2;
    }
    return st->nq * ((st->nt + 15) / 16 + w);
}

HM_AMX_TARGET __attribute__((noinline))
static int softmax_split(const float *S, int64_t lds, int64_t nq, int64_t nt, const double *m_old,
                         double *m_new, const float *scale, int64_t sub, int64_t rows_p, uint16_t *W)
{
    sm_work st;
    if (sm_init(&st, S, lds, nq, nt, m_old, m_new, scale, sub, rows_p, W) < 0)
        return -1;
    sm_run(&st, INT64_MAX);
    return 0;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} hm_tilecfg;

HM_AMX_TARGET __attribute__((noinline))
static int gemm(const uint16_t *A, int a_pieces, const uint16_t *B, int b_pieces,
                float *C, int64_t ldc, int64_t Mp, int64_t Np, int64_t Kp, int precision, sm_work *sm)
{
    int top; /* the products a_i b_j with i + j <= top */
    if (precision == 6 && a_pieces >= 3 && b_pieces >= 3)
        top = 2;
    else if (precision == 3 && a_pieces >= 2 && b_pieces >= 2)
        top = 1;
    else
        return -1;
    if (Mp % 32 || Np % 32 || Kp % 32 || ldc < Np)
        return -1;
    hm_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    const int64_t asz = Mp * Kp, bsz = Kp * Np, nkc = Kp / 32;
    const int64_t lda_b = Kp * 2, ldc_b = ldc * 4;
    /* another tile's softmax pass, if any, in even slices between the K steps */
    const int64_t sm_slice = sm ? sm_size(sm) / ((Np / 32) * (Mp / 32) * nkc) + 1 : 0;
    /* n0 outer: each strip of B streams in once and serves every block of
     * rows while it is in cache (the packed addresses, streamed once a batch,
     * are what bounds a batch: blocking K or prefetching measured slower) */
    for (int64_t n0 = 0; n0 < Np; n0 += 32) {
        for (int64_t m0 = 0; m0 < Mp; m0 += 32) {
            float *c = C + m0 * ldc + n0;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t kc = 0; kc < nkc; kc++) {
                const uint16_t *a = A + m0 * Kp + kc * 32;
                const uint16_t *b = B + ((n0 / 16) * nkc + kc) * 512;
                if (sm)
                    sm_run(sm, sm_slice);
                if (top == 1) {
                    /* a1 b0, a0 b0, a0 b1: each piece loaded once */
                    _tile_loadd(6, b, 64);
                    _tile_loadd(7, b + nkc * 512, 64);
                    _tile_loadd(4, a + asz, lda_b);
                    _tile_loadd(5, a + asz + 16 * Kp, lda_b);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                    _tile_loadd(4, a, lda_b);
                    _tile_loadd(5, a + 16 * Kp, lda_b);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                    _tile_loadd(6, b + bsz, 64);
                    _tile_loadd(7, b + bsz + nkc * 512, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                    continue;
                }
                /* each A piece loaded once, then the B pieces it multiplies,
                 * smallest products first (a2 b0, a1 b1, a1 b0, a0 b2, a0 b1, a0 b0) */
                for (int ap = top; ap >= 0; ap--) {
                    _tile_loadd(4, a + ap * asz, lda_b);
                    _tile_loadd(5, a + ap * asz + 16 * Kp, lda_b);
                    for (int bp = top - ap; bp >= 0; bp--) {
                        _tile_loadd(6, b + bp * bsz, 64);
                        _tile_loadd(7, b + bp * bsz + nkc * 512, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                }
            }
            _tile_stored(0, c, ldc_b);
            _tile_stored(1, c + 16, ldc_b);
            _tile_stored(2, c + 16 * ldc, ldc_b);
            _tile_stored(3, c + 16 * ldc + 16, ldc_b);
        }
    }
    _tile_release();
    if (sm)
        sm_run(sm, INT64_MAX);
    return 0;
}

/* The entry points check for AMX before anything runs an AMX or AVX-512
 * instruction (the functions above are compiled for them). */
int hm_amx_split_a(const float *src, int64_t rows, int64_t cols, int64_t lds,
                   const float *colscale, int pieces, int64_t rows_p, int64_t cols_p,
                   uint16_t *out)
{
    if (!hm_amx_available())
        return -1;
    return split_a(src, rows, cols, lds, colscale, pieces, rows_p, cols_p, out);
}

int hm_amx_pack_b(const float *src, int64_t sk, int64_t sn, int64_t K, int64_t N,
                  int pieces, int64_t Kp, int64_t Np, uint16_t *out)
{
    if (!hm_amx_available())
        return -1;
    return pack_b(src, sk, sn, K, N, pieces, Kp, Np, out);
}

int hm_amx_gemm_softmax(const uint16_t *A, int a_pieces, const uint16_t *B, int b_pieces, float *C,
                        int64_t ldc, int64_t Mp, int64_t Np, int64_t Kp, int precision, const float *S,
                        int64_t lds, int64_t nq, int64_t nt, const double *m_old, double *m_new,
                        const float *scale, int64_t sub, int64_t rows_p, uint16_t *W)
{
    if (!hm_amx_available())
        return -1;
    sm_work st;
    if (sm_init(&st, S, lds, nq, nt, m_old, m_new, scale, sub, rows_p, W) < 0)
        return -1;
    return gemm(A, a_pieces, B, b_pieces, C, ldc, Mp, Np, Kp, precision, &st);
}

int hm_amx_exp(const float *x, int64_t n, float *out)
{
    if (!hm_amx_available())
        return -1;
    return exp_f32(x, n, out);
}

int hm_amx_softmax_split(const float *S, int64_t lds, int64_t nq, int64_t nt, const double *m_old,
                        double *m_new, const float *scale, int64_t sub, int64_t rows_p, uint16_t *W)
{
    if (!hm_amx_available())
        return -1;
    return softmax_split(S, lds, nq, nt, m_old, m_new, scale, sub, rows_p, W);
}

int hm_amx_gemm(const uint16_t *A, int a_pieces, const uint16_t *B, int b_pieces,
                float *C, int64_t ldc, int64_t Mp, int64_t Np, int64_t Kp, int precision)
{
    if (!hm_amx_available())
        return -1;
    return gemm(A, a_pieces, B, b_pieces, C, ldc, Mp, Np, Kp, precision, NULL);
}

#else /* no AMX in this build */

int hm_amx_available(void) { return 0; }

int hm_amx_split_a(const float *src, int64_t rows, int64_t cols, int64_t lds,
                   const float *colscale, int pieces, int64_t rows_p, int64_t cols_p,
                   uint16_t *out)
{
    (void)src; (void)rows; (void)cols; (void)lds; (void)colscale; (void)pieces;
    (void)rows_p; (void)cols_p; (void)out;
    return -1;
}

int hm_amx_pack_b(const float *src, int64_t sk, int64_t sn, int64_t K, int64_t N,
                  int pieces, int64_t Kp, int64_t Np, uint16_t *out)
{
    (void)src; (void)sk; (void)sn; (void)K; (void)N; (void)pieces; (void)Kp; (void)Np; (void)out;
    return -1;
}

int hm_amx_gemm_softmax(const uint16_t *A, int a_pieces, const uint16_t *B, int b_pieces, float *C,
                        int64_t ldc, int64_t Mp, int64_t Np, int64_t Kp, int precision, const float *S,
                        int64_t lds, int64_t nq, int64_t nt, const double *m_old, double *m_new,
                        const float *scale, int64_t sub, int64_t rows_p, uint16_t *W)
{
    (void)A; (void)a_pieces; (void)B; (void)b_pieces; (void)C; (void)ldc; (void)Mp; (void)Np; (void)Kp;
    (void)precision; (void)S; (void)lds; (void)nq; (void)nt; (void)m_old; (void)m_new; (void)scale;
    (void)sub; (void)rows_p; (void)W;
    return -1;
}

int hm_amx_exp(const float *x, int64_t n, float *out)
{
    (void)x; (void)n; (void)out;
    return -1;
}

int hm_amx_softmax_split(const float *S, int64_t lds, int64_t nq, int64_t nt, const double *m_old,
                        double *m_new, const float *scale, int64_t sub, int64_t rows_p, uint16_t *W)
{
    (void)S; (void)lds; (void)nq; (void)nt; (void)m_old; (void)m_new; (void)scale; (void)sub;
    (void)rows_p; (void)W;
    return -1;
}

int hm_amx_gemm(const uint16_t *A, int a_pieces, const uint16_t *B, int b_pieces,
                float *C, int64_t ldc, int64_t Mp, int64_t Np, int64_t Kp, int precision)
{
    (void)A; (void)a_pieces; (void)B; (void)b_pieces; (void)C; (void)ldc; (void)Mp; (void)Np;
    (void)Kp; (void)precision;
    return -1;
}

#endif
