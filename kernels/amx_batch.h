/* Matrix products on Intel AMX bf16 tiles with float32-like accuracy, for
 * batched full-activation reads (hopmem/_batched.py).
 *
 * A float32 operand is split into bf16 pieces, x = p0 + p1 (+ p2), each the
 * round-to-nearest-even bf16 of what the pieces before it leave; products of
 * pieces are exact in float32 and the tiles accumulate them in float32:
 *   precision 3: p0 q0 + p0 q1 + p1 q0 (two pieces per operand; each product
 *                within ~3 2^-18 of x y, relative),
 *   precision 6: those and p0 q2 + p1 q1 + p2 q0 (three pieces; float32-like).
 *
 * Layouts (uint16 bf16 bit patterns):
 *   A operand (M x K): pieces one after another, each row-major
 *     rows_p x cols_p (rows_p a multiple of 32, cols_p of 32), zero padding.
 *   B operand (K x N): pieces one after another, each in tiles of 32 K by 16
 *     N, tile (nb, kc) at ((nb * Kp/32) + kc) * 512, within a tile k pairs
 *     (VNNI): element (k, n) at (k % 32 / 2) * 32 + n * 2 + k % 2.
 *
 * Everything but hm_amx_available returns -1 (and does nothing) where this
 * build has no AMX code; callers check hm_amx_available first, once.
 */
#ifndef HOPMEM_AMX_BATCH_H
#define HOPMEM_AMX_BATCH_H

#include <stdint.h>

/* 1 when the CPU has AMX-TILE, AMX-BF16 and AVX-512 (F, BW), the OS enables
 * their state, and Linux grants this process the tile data (asked once). */
int hm_amx_available(void);

/* out (pieces x rows_p x cols_p) = the bf16 pieces of src (rows x cols, row
 * stride lds floats), each element first multiplied by colscale[c] in float32
 * when colscale is not NULL; zero outside rows x cols. */
int hm_amx_split_a(const float *src, int64_t rows, int64_t cols, int64_t lds,
                   const float *colscale, int pieces, int64_t rows_p, int64_t cols_p,
                   uint16_t *out);

/* out = the bf16 pieces of the K x N matrix whose (k, n) element is
 * src[k * sk + n * sn], in the B layout with Kp x Np (multiples of 32). */
int hm_amx_pack_b(const float *src, int64_t sk, int64_t sn, int64_t K, int64_t N,
                  int pieces, int64_t Kp, int64_t Np, uint16_t *out);

/* C (Mp x Np, row stride ldc floats) = A (Mp x Kp, a_pieces) times B (Kp x
 * Np, b_pieces) at the given precision (3 or 6; 6 needs three pieces each, 3
 * two or more). Mp, Np, Kp multiples of 32. Deterministic: a fixed order of
 * tile operations, one thread. */
int hm_amx_gemm(const uint16_t *A, int a_pieces, const uint16_t *B, int b_pieces,
                float *C, int64_t ldc, int64_t Mp, int64_t Np, int64_t Kp, int precision);

/* out[j] = exp(x[j]) for x[j] <= 0 as the softmax pass computes it (float32,
 * within 3 2^-24 of exp, relative, for normal results): for tests. */
int hm_amx_exp(const float *x, int64_t n, float *out);

/* The softmax weights of a tile of logits, split for the read-out product.
 * S: nq x nt float32 logits (row stride lds); m_old[q]: each query's running
 * maximum so far (a float32 value or -inf). Sets m_new[q] = max(m_old[q],
 * max_j S[q, j]) and writes the two bf16 pieces of w = exp(S[q, j] - m_new[q])
 * (float32 subtraction, exp rounded once to float32, times scale[j] in float32
 * when scale is not NULL) in the A layout, per block of sub columns (sub a
 * multiple of 32): block b (columns b sub .. , ns of them) at W + b * 2 *
 * rows_p * sub, as 2 x rows_p x pad32(ns), zero padding. One pass a row. */
int hm_amx_softmax_split(const float *S, int64_t lds, int64_t nq, int64_t nt, const double *m_old,
                         double *m_new, const float *scale, int64_t sub, int64_t rows_p, uint16_t *W);

/* acc (nq x d float64) = acc * alpha[q] + Y[q] (float32 rows, stride ldy
 * floats), or acc + Y where alpha is NULL: the read-out's running sums
 * rescaled to a new maximum and a tile added, in one pass. Plain C: runs
 * everywhere. */
void hm_amx_accumulate(double *acc, int64_t nq, int64_t d, const double *alpha, const float *Y,
                       int64_t ldy);

/* hm_amx_gemm (C = A B) with hm_amx_softmax_split of another tile (S, ...,
 * W; S must not be C) run in slices between its tile products, so the
 * vector work overlaps the tiles'; the same bits as the two calls. */
int hm_amx_gemm_softmax(const uint16_t *A, int a_pieces, const uint16_t *B, int b_pieces, float *C,
                        int64_t ldc, int64_t Mp, int64_t Np, int64_t Kp, int precision, const float *S,
                        int64_t lds, int64_t nq, int64_t nt, const double *m_old, double *m_new,
                        const float *scale, int64_t sub, int64_t rows_p, uint16_t *W);

#endif
