/* gemm-fast.c: an f32 GEMM on AVX-512 and on AVX2+FMA for the small,
 * skinny products of Linear layers (batch 128 by a few hundred
 * features), where OpenBLAS spends much of its time packing and
 * synchronising its threads.
 *
 * C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C, row-major, or
 * + bias (a row added to every row of C: a Linear layer's, added where
 * the first block of the reduction is stored, instead of a pass that
 * copies it into C first), and optionally max(C, 0) where the last block
 * is stored (a Linear layer followed by a ReLU: no pass over C after).
 * C is cut into tiles of MR x NR (AVX-512: 8 x 32, sixteen zmm
 * accumulators; AVX2: 6 x 16, twelve ymm accumulators) that one
 * micro-kernel computes with two loads of B and MR broadcasts of A per
 * step of the reduction, so it is bound by the FMA ports:
 *  - B is read in panels of NR columns by KC rows. A transposed B (the
 *    forward's w^T) is packed panel by panel with 16 x 16 (8 x 8)
 *    in-register transposes; a plain B is read where it lies (AVX-512:
 *    masked loads at the right edge; AVX2 copies an edge panel, its
 *    masked loads being slow) unless its row stride maps rows onto few
 *    cache sets, then it is copied into the panel too.
 *  - A is read through MR row pointers when plain, the next tile's
 *    rows prefetched as it goes; a transposed A (dW's gy^T) is packed
 *    once into (k, MR) panels.
 * C is split in a fixed way into items (column panels, times row groups
 * when there are too few panels to share, or when A is transposed), and
 * the items into one contiguous range per thread of the pool. Thread t
 * (em_parallel_each: always the same core's thread) takes the items of
 * its own range first, then those left in the others': a thread the
 * scheduler wakes late simply takes fewer. Which thread owns what follows
 * a Linear layer's weight through a step: the forward's columns of C are
 * the weight's rows (items ordered by column panel), dW's rows of C are
 * its rows (A transposed: items ordered by row group), and the optimiser
 * splits each parameter by rows the same way (engine/optim/pieces.c), so
 * each core mostly reads the half of the weight its own cache holds.
 * Every element of C is summed in the same order whoever computes it, so
 * the numbers do not depend on timing or on the thread count. Packing
 * buffers come from em_scratch (the caller's scope), one slot per
 * thread.
 *
 * The plain reference is the triple loop of tests/engine/ops-basic/
 * test-gemm-fast.c, and OpenBLAS (em_gemm's other path). This file is
 * compiled once per instruction set (cpu-kernels.h): the driver (job
 * split, packing, thread slots) is written once over a thin vector layer
 * (vf, vmask, v_*), and each instruction set brings its tile shape,
 * masks, loads and stores and B's transpose; where a variant has
 * no kernel here, em_gemm_f32_fast reports false and em_gemm stays on
 * OpenBLAS. */
#include "cpu-kernels.h"

#include "em-pool.h"

#include <stdatomic.h>

#if !defined(EM_GEMM_FAST_OFF) && \
    (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
#include <immintrin.h>
#include <string.h>

/* The instruction set's part: a vector of VL floats (vf), a lane mask
 * (vmask, mask_of(w): the first w lanes), loads and stores under a mask
 * that read and write nothing outside it (masked lanes load as 0), the
 * arithmetic the tile store needs, and the VL x VL transpose that packs a
 * transposed B. A tile is MR rows by NR = 2 VL columns (two vectors a
 * row: 2 MR accumulators, two loads of B and MR broadcasts of A a step).
 * EDGE_FREE: a masked load or store costs what a plain one does, so a
 * plain B's right edge is read where it lies and the tile store always
 * goes through its masks; where it is not (AVX2's vmaskmov), an edge
 * panel of B is copied into the panel buffer (zero-filled) and the
 * micro-kernel's loads of B are plain, and the tile store uses plain
 * loads and stores when the tile is NR columns wide. */
#if defined(__AVX512F__)
/* AVX-512: 8 x 32 tiles, sixteen zmm accumulators. */
#define MR 8
#define VL 16
#define EDGE_FREE 1
typedef __m512 vf;
typedef __mmask16 vmask;
static inline vmask mask_of(int64_t w) {
  return w >= 16 ? (vmask)0xFFFF : w <= 0 ? (vmask)0 : (vmask)((1u << w) - 1);
}
static inline bool mask_full(vmask m) { return m == (vmask)0xFFFF; }
#define v_zero() _mm512_setzero_ps()
#define v_set1(x) _mm512_set1_ps(x)
#define v_load(p) _mm512_loadu_ps(p)
#define v_loadm(m, p) _mm512_maskz_loadu_ps((m), (p))
#define v_store(p, v) _mm512_storeu_ps((p), (v))
#define v_storem(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define v_mul(x, y) _mm512_mul_ps((x), (y))
#define v_add(x, y) _mm512_add_ps((x), (y))
#define v_fmadd(x, y, z) _mm512_fmadd_ps((x), (y), (z))
#define v_max(x, y) _mm512_max_ps((x), (y))
/* B's rows in the micro-kernel: under the panel's masks */
#define v_load_b(m, p) _mm512_maskz_loadu_ps((m), (p))
#define KERNEL_INSTANCES(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)

/* r[s] (16 x 16 floats) becomes its transpose in place. */
static inline __attribute__((always_inline)) void transpose_vl(__m512 *r) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int p = 0; p < 8; p++) {
    t[2 * p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
  }
  /* u[4q + c], lane L: rows 4q..4q+3 of column 4L + c */
#pragma GCC unroll 4
  for (int q = 0; q < 4; q++) {
    u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    __m512 v = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    __m512 w = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    __m512 v2 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    __m512 w2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(v, w, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v, w, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(v2, w2, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v2, w2, 0xDD);
  }
}
#else
/* AVX2 + FMA: 6 x 16 tiles, twelve ymm accumulators (of sixteen: two
 * for B's row, one for A's broadcast). */
#define MR 6
#define VL 8
#define EDGE_FREE 0
typedef __m256 vf;
typedef __m256i vmask;
static inline vmask mask_of(int64_t w) {
  int32_t c = w >= 8 ? 8 : w <= 0 ? 0 : (int32_t)w;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline bool mask_full(vmask m) {
  return _mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xFF;
}
#define v_zero() _mm256_setzero_ps()
#define v_set1(x) _mm256_set1_ps(x)
#define v_load(p) _mm256_loadu_ps(p)
#define v_loadm(m, p) _mm256_maskload_ps((p), (m))
#define v_store(p, v) _mm256_storeu_ps((p), (v))
#define v_storem(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define v_mul(x, y) _mm256_mul_ps((x), (y))
#define v_add(x, y) _mm256_add_ps((x), (y))
#define v_fmadd(x, y, z) _mm256_fmadd_ps((x), (y), (z))
#define v_max(x, y) _mm256_max_ps((x), (y))
/* B's rows in the micro-kernel: always a full panel (see EDGE_FREE) */
#define v_load_b(m, p) ((void)(m), _mm256_loadu_ps(p))
#define KERNEL_INSTANCES(X) X(1) X(2) X(3) X(4) X(5) X(6)

/* r[s] (8 x 8 floats) becomes its transpose in place. */
static inline __attribute__((always_inline)) void transpose_vl(__m256 *r) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int p = 0; p < 4; p++) {
    t[2 * p] = _mm256_unpacklo_ps(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm256_unpackhi_ps(r[2 * p], r[2 * p + 1]);
  }
  /* u[4q + c], 128-bit lane L: rows 4q..4q+3 of column 4L + c */
#pragma GCC unroll 2
  for (int q = 0; q < 2; q++) {
    u[4 * q + 0] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}
#endif

#define NR (2 * VL)
#define KC 256 /* rows of a B panel: 32 KiB (AVX-512) or 16 KiB, stays in L1 while A streams */
/* Below this many flops (2 m n k) one thread does the whole product:
 * waking a pool worker costs more than it saves. */
#define PAR_FLOPS 3.0e6
/* Above this many multiply-adds (m n k) OpenBLAS takes the product: its
 * L2/L3 blocking wins on big squares (1024^3: 180 against 150 GFLOP/s
 * on 2 threads, AVX-512), while the layers' shapes stay here: at most
 * 128 x 128 x 3136 in the image zoo, and a GPT's at 2048 tokens (2048 x
 * 512 x 128 and its backward, 2^27: tests/bench/bench-gemm's gpt.*
 * rows; on the Zen 5 VM, whose OpenBLAS 0.3.21 runs its Haswell AVX2
 * kernels, these ran at 95-210 GFLOP/s here against 38-95 in OpenBLAS
 * on one thread). The CNN's whole-batch im2col products (462M) stay
 * with OpenBLAS. */
#define MAX_MACS (1 << 28)
#define MAX_SLOTS 64 /* the pool's thread limit */

typedef struct {
  bool ta, tb, pack_b;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  const float *bias; /* (n) or NULL */
  bool relu;         /* max(., 0) where the last reduction block is stored */
  const float *a, *b;
  float *c;
  int64_t kc, nkb;    /* reduction block and block count */
  int64_t n_mt, n_np; /* MR-row tiles, NR-column panels */
  /* The fixed split: item i is row group i / n_np by column panel
   * i % n_np when rows_first, else column panel i / n_rg by row group
   * i % n_rg (a row group is rg_tiles row tiles). Thread slot s owns
   * items [s * n_items / slots, (s + 1) * n_items / slots); cursor[s] is
   * the next of them not yet taken. */
  int64_t rg_tiles, n_rg, n_items;
  bool rows_first;
  int slots;
  _Atomic int64_t cursor[MAX_SLOTS];
  int64_t slot_floats; /* scratch per thread slot */
  float *scratch;
} gemm_job;

/* C tile rows [0, mr), columns under m0 | m1 = alpha * acc + bias when
 * there is a bias (its tile columns), else alpha * acc + beta * C (beta 0
 * overwrites whatever C held, NaN included); then max(., 0) when relu,
 * as em_relu has it: NaN and -0 pass (max_ps returns its second operand
 * when either is NaN or both are zeros). */
static inline __attribute__((always_inline)) void tile_store(vf *c0, vf *c1, float *c,
                                                             int64_t ldc, int mr, vmask m0,
                                                             vmask m1, float alpha,
                                                             float beta, const float *bias,
                                                             bool relu) {
  const vf va = v_set1(alpha), vb = v_set1(beta), zero = v_zero();
  const bool full = !EDGE_FREE && mask_full(m1); /* plain loads and stores */
  vf b0 = v_zero(), b1 = v_zero();
  if (bias) {
    b0 = full ? v_load(bias) : v_loadm(m0, bias);
    b1 = full ? v_load(bias + VL) : v_loadm(m1, bias + VL);
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    if (r >= mr) break;
    float *cr = c + r * ldc;
    vf v0 = v_mul(va, c0[r]), v1 = v_mul(va, c1[r]);
    if (bias) { /* what beta 1 over a C filled with the bias gives, bit for bit */
      v0 = v_add(b0, v0);
      v1 = v_add(b1, v1);
    } else if (beta != 0.f) {
      v0 = v_fmadd(vb, full ? v_load(cr) : v_loadm(m0, cr), v0);
      v1 = v_fmadd(vb, full ? v_load(cr + VL) : v_loadm(m1, cr + VL), v1);
    }
    if (relu) {
      v0 = v_max(zero, v0);
      v1 = v_max(zero, v1);
    }
    if (full) {
      v_store(cr, v0);
      v_store(cr + VL, v1);
    } else {
      v_storem(cr, m0, v0);
      v_storem(cr + VL, m1, v1);
    }
  }
}

/* The micro-kernels, for a tile of mr <= MR rows (mr a constant in each
 * instance, so an edge tile spends no work on missing rows).
 * kernel_arow: A plain, row r of the tile is the k floats at a + r * lda.
 * kernel_apack: A packed, step kk of the tile is the MR floats at
 * a + kk * MR. B row kk is the NR floats at b + kk * b_ks (loaded under
 * m0, m1 where EDGE_FREE, else all NR); C columns under s0, s1 are
 * stored (tile_store). */
static inline __attribute__((always_inline)) void kernel_body(
    int64_t k, const float *a, int64_t lda, bool packed, const float *b, int64_t b_ks,
    vmask m0, vmask m1, float *c /* (mr, NR, ldc) */, int64_t ldc, vmask s0,
    vmask s1, float alpha, float beta, const float *bias, bool relu, const float *pfa,
    const int mr) {
  vf c0[MR], c1[MR];
  const float *ap[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    c0[r] = c1[r] = v_zero();
    ap[r] = a + (packed ? r : r * lda);
  }
  const int64_t a_ks = packed ? MR : 1;
  for (int64_t k0 = 0; k0 < k; k0 += 16) {
    if (!packed && pfa) { /* the next tile's rows (at pfa), a cache line each per 16 steps */
#pragma GCC unroll 8
      for (int r = 0; r < MR; r++) _mm_prefetch((const char *)(pfa + r * lda + k0), _MM_HINT_T0);
    }
    const int64_t k1 = k - k0 < 16 ? k : k0 + 16;
    for (int64_t kk = k0; kk < k1; kk++) {
      vf b0 = v_load_b(m0, b), b1 = v_load_b(m1, b + VL);
      b += b_ks;
#pragma GCC unroll 8
      for (int r = 0; r < MR; r++) {
        if (r >= mr) break;
        vf av = v_set1(ap[r][kk * a_ks]);
        c0[r] = v_fmadd(av, b0, c0[r]);
        c1[r] = v_fmadd(av, b1, c1[r]);
      }
    }
  }
  tile_store(c0, c1, c, ldc, mr, s0, s1, alpha, beta, bias, relu);
}

#define KERNEL_DEF(R)                                                                            \
  static void kernel_arow_##R(int64_t k, const float *a, int64_t lda, const float *b,            \
                              int64_t b_ks, vmask m0, vmask m1, float *c, int64_t ldc,           \
                              vmask s0, vmask s1, float alpha, float beta,                       \
                              const float *bias, bool relu, const float *pfa) {                  \
    kernel_body(k, a, lda, false, b, b_ks, m0, m1, c, ldc, s0, s1, alpha, beta, bias, relu, pfa, \
                R);                                                                              \
  }                                                                                              \
  static void kernel_apack_##R(int64_t k, const float *a, int64_t lda, const float *b,           \
                               int64_t b_ks, vmask m0, vmask m1, float *c, int64_t ldc,          \
                               vmask s0, vmask s1, float alpha, float beta,                      \
                               const float *bias, bool relu, const float *pfa) {                 \
    kernel_body(k, a, lda, true, b, b_ks, m0, m1, c, ldc, s0, s1, alpha, beta, bias, relu, pfa,  \
                R);                                                                              \
  }
KERNEL_INSTANCES(KERNEL_DEF)

typedef void (*kernel_fn)(int64_t k, const float *a, int64_t lda, const float *b, int64_t b_ks,
                          vmask m0, vmask m1, float *c, int64_t ldc, vmask s0,
                          vmask s1, float alpha, float beta, const float *bias, bool relu,
                          const float *pfa);
#define KERNEL_AROW(R) kernel_arow_##R,
#define KERNEL_APACK(R) kernel_apack_##R,
static const kernel_fn kernels[2][MR] = {{KERNEL_INSTANCES(KERNEL_AROW)},
                                         {KERNEL_INSTANCES(KERNEL_APACK)}};

/* dst (kl, NR) = B rows [k0, k0 + kl), columns [j0, j0 + w), zero beyond w. */
static void pack_b_panel(const gemm_job *g, int64_t j0, int64_t w, int64_t k0, int64_t kl,
                         float *dst) {
  if (!g->tb) { /* B(kk, j) = b[kk * ldb + j] */
    vmask m0 = mask_of(w), m1 = mask_of(w - VL);
    const bool full = !EDGE_FREE && w >= NR;
    for (int64_t kk = 0; kk < kl; kk++) {
      const float *src = g->b + (k0 + kk) * g->ldb + j0;
      v_store(dst + kk * NR, full ? v_load(src) : v_loadm(m0, src));
      v_store(dst + kk * NR + VL, full ? v_load(src + VL) : v_loadm(m1, src + VL));
    }
    return;
  }
  /* B(kk, j) = b[j * ldb + kk]: VL columns by VL rows at a time */
  for (int h = 0; h < 2; h++) {
    int64_t rows = w - VL * h; /* columns of B = rows of the source */
    if (rows > VL) rows = VL;
    if (rows <= 0) {
      for (int64_t kk = 0; kk < kl; kk++) v_store(dst + kk * NR + VL * h, v_zero());
      continue;
    }
    const float *src = g->b + (j0 + VL * h) * g->ldb + k0;
    for (int64_t kk0 = 0; kk0 < kl; kk0 += VL) {
      int64_t rem = kl - kk0 < VL ? kl - kk0 : VL;
      vmask lm = mask_of(rem);
      const bool full = !EDGE_FREE && rem == VL;
      vf r[VL];
#pragma GCC unroll 16
      for (int s = 0; s < VL; s++)
        r[s] = s >= rows ? v_zero()
               : full    ? v_load(src + s * g->ldb + kk0)
                         : v_loadm(lm, src + s * g->ldb + kk0);
      transpose_vl(r);
#pragma GCC unroll 16
      for (int s = 0; s < VL; s++)
        if (s < rem) v_store(dst + (kk0 + s) * NR + VL * h, r[s]);
    }
  }
}

/* dst (n_t, k, MR) = row tiles [t0, t0 + n_t) of a transposed A,
 * A(i, kk) = a[kk * lda + i], zero below row m. */
static void pack_a(const gemm_job *g, int64_t t0, int64_t n_t, float *dst) {
  for (int64_t t = 0; t < n_t; t++) {
    int64_t i0 = (t0 + t) * MR, mr = g->m - i0 < MR ? g->m - i0 : MR;
    float *d = dst + t * g->k * MR;
    if (mr == MR) {
      for (int64_t kk = 0; kk < g->k; kk++)
        memcpy(d + kk * MR, g->a + kk * g->lda + i0, sizeof(float) * MR);
    } else {
      for (int64_t kk = 0; kk < g->k; kk++)
        for (int r = 0; r < MR; r++) d[kk * MR + r] = r < mr ? g->a[kk * g->lda + i0 + r] : 0.f;
    }
  }
}

/* A plain: the tile whose rows to prefetch while tile t of [t0, t1) runs
 * on columns [k0, k0 + kl): the next tile, or after the last one the
 * first tile of the next reduction block (when it is as long); NULL when
 * there is none, or when it is short of rows or columns (its kl floats a
 * row would reach past A). Each row's kl floats are a run too short for
 * the hardware prefetcher, and the first panel reads them from L3 (a
 * batch the loader just wrote). */
static const float *next_a_tile(const gemm_job *g, int64_t t, int64_t t0, int64_t t1, int64_t k0,
                                int64_t kl) {
  if (t + 1 < t1) return (t + 2) * MR <= g->m ? g->a + (t + 1) * MR * g->lda + k0 : NULL;
  if (g->k - (k0 + kl) < kl || (t0 + 1) * MR > g->m) return NULL;
  return g->a + t0 * MR * g->lda + k0 + kl;
}

/* C rows of tiles [t0, t1) by columns of panel p, A packed in apan
 * (from tile t0) when transposed, B panels packed into bpan. */
static void run_item(const gemm_job *g, int64_t t0, int64_t t1, int64_t p, float *bpan,
                     const float *apan) {
  int64_t j0 = p * NR, w = g->n - j0 < NR ? g->n - j0 : NR;
  vmask s0 = mask_of(w), s1 = mask_of(w - VL);
  /* B is copied into bpan when g->pack_b says so, and for a right-edge
   * panel where masked loads cost (EDGE_FREE 0): the micro-kernel then
   * reads B unmasked */
  const bool pack = g->pack_b || (!EDGE_FREE && w < NR);
  for (int64_t kb = 0; kb < g->nkb; kb++) {
    int64_t k0 = kb * g->kc, kl = g->k - k0 < g->kc ? g->k - k0 : g->kc;
    const float *bp;
    int64_t b_ks;
    vmask m0 = mask_of(VL), m1 = mask_of(VL);
    if (pack) {
      pack_b_panel(g, j0, w, k0, kl, bpan);
      bp = bpan;
      b_ks = NR;
    } else {
      bp = g->b + k0 * g->ldb + j0;
      b_ks = g->ldb;
      m0 = s0;
      m1 = s1;
    }
    float beta = kb == 0 ? g->beta : 1.f;
    const float *bias = kb == 0 && g->bias ? g->bias + j0 : NULL;
    bool relu = g->relu && kb == g->nkb - 1;
    for (int64_t t = t0; t < t1; t++) {
      int64_t i0 = t * MR;
      int mr = g->m - i0 < MR ? (int)(g->m - i0) : MR;
      float *ct = g->c + i0 * g->ldc + j0;
      const float *at = g->ta ? apan + (t - t0) * g->k * MR + k0 * MR : g->a + i0 * g->lda + k0;
      const float *pfa = g->ta ? NULL : next_a_tile(g, t, t0, t1, k0, kl);
      kernels[g->ta][mr - 1](kl, at, g->lda, bp, b_ks, m0, m1, ct, g->ldc, s0, s1, g->alpha,
                             beta, bias, relu, pfa);
    }
  }
}

static int64_t range_start(const gemm_job *g, int s) { return g->n_items * s / g->slots; }

/* Thread slot t: its own items, then whatever is left in the others'
 * ranges (each item's numbers do not depend on who computes it). */
static void run_slots(void *ctx, int64_t t, int64_t end) {
  gemm_job *g = ctx;
  float *bpan = g->scratch + t * g->slot_floats; /* (KC, NR) */
  float *apan = bpan + KC * NR;                  /* (rg_tiles, k, MR) when A is packed */
  int64_t packed_rg = -1;
  (void)end;
  for (int d = 0; d < g->slots; d++) {
    int s = (int)((t + d) % g->slots);
    int64_t stop = range_start(g, s + 1);
    for (;;) {
      int64_t it = atomic_fetch_add_explicit(&g->cursor[s], 1, memory_order_relaxed);
      if (it >= stop) break;
      int64_t rg = g->rows_first ? it / g->n_np : it % g->n_rg;
      int64_t p = g->rows_first ? it % g->n_np : it / g->n_rg;
      int64_t t0 = rg * g->rg_tiles, t1 = t0 + g->rg_tiles < g->n_mt ? t0 + g->rg_tiles : g->n_mt;
      if (g->ta && rg != packed_rg) {
        pack_a(g, t0, t1 - t0, apan);
        packed_rg = rg;
      }
      run_item(g, t0, t1, p, bpan, apan);
    }
  }
}

bool em_gemm_f32_fast(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      const float *bias, bool relu, float *c, int64_t ldc) {
  if (m < 1 || n < 1 || k < 1 || (double)m * (double)n * (double)k > MAX_MACS ||
      !em_scope_current())
    return false;
  gemm_job g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                .alpha = alpha, .beta = beta, .bias = bias, .relu = relu, .a = a, .b = b,
                .c = c};
  g.nkb = (k + KC - 1) / KC;
  g.kc = (k + g.nkb - 1) / g.nkb;
  g.n_mt = (m + MR - 1) / MR;
  g.n_np = (n + NR - 1) / NR;
  /* A plain B whose rows are a multiple of 512 bytes apart would fall
   * into a few L1 sets: copy it into panels as well. */
  g.pack_b = tb || (ldb % 128 == 0 && k > 16);
  int slots = 2.0 * (double)m * (double)n * (double)k >= PAR_FLOPS ? em_parallel_threads() : 1;
  if (slots > MAX_SLOTS) slots = MAX_SLOTS;
  /* Row groups when there are too few column panels to share, and one
   * per thread when A is transposed (dW: C's rows are the weight's). */
  g.rows_first = ta;
  int64_t n_rg = ta ? slots : (4 * slots + g.n_np - 1) / g.n_np;
  if (slots == 1 || n_rg < 1) n_rg = 1;
  if (n_rg > g.n_mt) n_rg = g.n_mt;
  g.rg_tiles = (g.n_mt + n_rg - 1) / n_rg;
  g.n_rg = (g.n_mt + g.rg_tiles - 1) / g.rg_tiles;
  g.n_items = g.n_rg * g.n_np;
  g.slots = slots;
  for (int s = 0; s < slots; s++) atomic_init(&g.cursor[s], range_start(&g, s));
  g.slot_floats = KC * NR + (ta ? g.rg_tiles * k * MR : 0);
  g.slot_floats = (g.slot_floats + 15) & ~(int64_t)15; /* 64-byte aligned slots */
  g.scratch = em_scratch(sizeof(float) * (size_t)(g.slot_floats * slots));
  if (slots == 1) run_slots(&g, 0, 1);
  else em_parallel_each(run_slots, &g);
  em_scratch_done(g.scratch);
  return true;
}

#else /* no AVX-512 nor AVX2+FMA (or EM_GEMM_FAST_OFF, for comparisons): em_gemm stays on OpenBLAS */

bool em_gemm_f32_fast(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      const float *bias, bool relu, float *c, int64_t ldc) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
  (void)ldb, (void)beta, (void)bias, (void)relu, (void)c, (void)ldc;
  return false;
}

#endif
