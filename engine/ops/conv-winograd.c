/* conv-winograd.c: forward and dX of 3x3 stride-1 convolutions as
 * Winograd F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for
 * Convolutional Neural Networks", 2015), f32 with AVX-512 or AVX2+FMA.
 *
 * Each 2x2 block of outputs ("tile") comes from a 4x4 input patch d:
 *   y = A^T [ U . V ] A,   U = G g G^T,   V = B^T d B
 * with the 16 element-wise products summed over input channels as 16
 * independent GEMMs (one per position of the 4x4 transformed tile), so a
 * tile costs 16 multiply-adds per channel pair instead of 36. dX is the
 * same forward pass on gy padded by 2 - pad, with the kernel flipped and
 * its channel axes swapped. The matrices (exact in binary floating point):
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 *
 * Images go in chunks of CHUNK, taken by the pool's threads from a shared
 * counter. A chunk's tiles are numbered across its images
 * (t = image * tiles_per_image + ty * TW + tx) so that the GEMMs are wide
 * (V and M hold a chunk: (16 positions, channels, tiles)). The input and
 * output transforms go a tile row at a time, 16 tiles a vector (two tile
 * rows when they are 7 tiles or fewer; AVX2: 8 tiles, one tile row, a
 * vector): input rows are read with masked
 * loads straight from the unpadded tensor (the padding is the masked-out
 * lanes) and split into even and odd columns; output rows are
 * re-interleaved and written with masked stores. The GEMM tiles are the
 * micro-kernels of conv-kernel.c. On fmnist-cnn's conv2 (32 -> 64, 14x14)
 * at batch 128 the forward and dX take about 0.6 of the time of the direct
 * implicit GEMM of conv-fast.c (tests/bench/bench-conv). The plain
 * reference is conv-ref.c, which the tests compare against.
 *
 * dW stays on the direct path, on purpose. Its Winograd form,
 * G^T [ sum over tiles (A dy A^T) . V ] G, was built and measured: about
 * 40% less time for conv2's dW, with errors relative to the largest
 * element like the direct path's; but weights whose true gradient is
 * exactly zero (an input channel dead where an output channel is alive)
 * came out as rounding noise of ~1e-10, which Adam's normalisation turns
 * into steps of about 1% of the learning rate: after 10 Adam steps
 * fmnist-cnn's conv2 weights were 2.3e-3 away from PyTorch's
 * (tests/parity, tolerance 1e-4), against 3e-6 with the direct dW, which
 * sums plain products and keeps those zeros exact. */
#include "cpu-kernels.h"

#include <stdint.h>

#if (defined(__AVX512F__) && EM_CONV_NR == 32) || \
    (defined(__AVX2__) && defined(__FMA__) && EM_CONV_NR == 16)
#include <immintrin.h>
#include <string.h>

#define MR EM_CONV_MR
#define NR EM_CONV_NR
#define CHUNK 4 /* images per chunk: keeps a thread's transforms in its L2 */

static int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

bool em_conv_winograd_ok(const em_conv_geom *g) {
  return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 &&
         g->ph <= 2 && g->pw <= 2 && g->Cg >= 8 && g->Kg >= 8;
}

/* The instruction set's part of the transforms: a vector of WL floats
 * (lanes = tiles), lane masks (first_lanes, col_lanes), masked loads
 * that never touch the masked-out lanes (so the address may lie outside
 * the row: it is formed as an integer) and masked stores. */
#if defined(__AVX512F__)
#define WL 16
typedef __m512 wv;
typedef __mmask16 wmask;
/* The first n lanes. */
static inline wmask first_lanes(int64_t n) {
  return (wmask)(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1);
}
/* Lanes j of a 16-float load at column start + j that fall in [0, W). */
static inline wmask col_lanes(int64_t start, int64_t W) {
  int64_t lo = start < 0 ? -start : 0, hi = W - start;
  return (wmask)(first_lanes(hi) & ~first_lanes(lo));
}
static inline wv w_loadm(wmask m, const float *p) { return _mm512_maskz_loadu_ps(m, p); }
static inline void w_storem(float *p, wmask m, wv v) { _mm512_mask_storeu_ps(p, m, v); }
#define w_load(p) _mm512_loadu_ps(p)
#define w_store(p, v) _mm512_storeu_ps((p), (v))
#define TP_SLACK 0
#define w_zero() _mm512_setzero_ps()
#define w_set1(x) _mm512_set1_ps(x)
#define w_add(x, y) _mm512_add_ps((x), (y))
#define w_sub(x, y) _mm512_sub_ps((x), (y))
#else /* AVX2 */
#define WL 8
typedef __m256 wv;
typedef __m256i wmask;
static inline wmask first_lanes(int64_t n) {
  int32_t c = n >= 8 ? 8 : n <= 0 ? 0 : (int32_t)n;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* Lanes j of an 8-float load at column start + j that fall in [0, W). */
static inline wmask col_lanes(int64_t start, int64_t W) {
  int64_t lo = start < 0 ? -start : 0, hi = W - start;
  return _mm256_andnot_si256(first_lanes(lo), first_lanes(hi));
}
static inline wv w_loadm(wmask m, const float *p) { return _mm256_maskload_ps(p, m); }
static inline void w_storem(float *p, wmask m, wv v) { _mm256_maskstore_ps(p, m, v); }
#define w_load(p) _mm256_loadu_ps(p)
#define w_store(p, v) _mm256_storeu_ps((p), (v))
/* vmaskmovps stores are slow on AMD's processors (microcoded): the input
 * transform of a plane of at most 8 tiles a row stores whole vectors, the
 * lanes past a tile row landing in the next one (written after it) or,
 * after the chunk's last tile, in this slack of V's rows (zeroed or never
 * read). */
#define TP_SLACK WL
#define w_zero() _mm256_setzero_ps()
#define w_set1(x) _mm256_set1_ps(x)
#define w_add(x, y) _mm256_add_ps((x), (y))
#define w_sub(x, y) _mm256_sub_ps((x), (y))
#endif

/* Masked load of WL floats at row + col. */
static inline wv load_cols(const float *row, int64_t col, wmask m) {
  return w_loadm(m, (const float *)((uintptr_t)row + (uintptr_t)(col * 4)));
}

/* Geometry of one forward-like pass: dst (N, G*cout, OH, OW) from
 * src (N, G*cin, H, W), padding ph, pw. */
typedef struct {
  int64_t N, G, cin, cout, H, W, ph, pw, OH, OW;
  int64_t TH, TW, T1, Tp; /* tiles per image, per chunk padded to NR */
} wgeom;

/* The 16 per-position blocks of V and M are one cache line longer
 * than their data: at strides that are multiples of 4 KiB, the 16 rows a
 * transform writes at once would share one L1 set and evict each other. */
#define POS_PAD 16

static int64_t v_stride(const wgeom *w) { return w->cin * w->Tp + POS_PAD; }
static int64_t m_stride(const wgeom *w, int64_t mp) { return mp * w->Tp + POS_PAD; }

static void wgeom_tiles(wgeom *w) {
  w->TH = (w->OH + 1) / 2;
  w->TW = (w->OW + 1) / 2;
  w->T1 = w->TH * w->TW;
  w->Tp = round_up(CHUNK * w->T1 + TP_SLACK, NR);
}

/* The 4x4 patches' transform, d (4 rows of 4 columns, lanes = tiles) to
 * the 16 positions of V stored at o, lanes `out`. */
static inline void store_btdb(wv d[4][4], float *o, int64_t pos_stride, wmask out, bool full) {
  wv v[4][4];
  for (int i = 0; i < 4; i++) { /* d B, row i */
    v[i][0] = w_sub(d[i][0], d[i][2]);
    v[i][1] = w_add(d[i][1], d[i][2]);
    v[i][2] = w_sub(d[i][2], d[i][1]);
    v[i][3] = w_sub(d[i][1], d[i][3]);
  }
#define BT_STORE(i, x)                                                                     \
  (full ? w_store(o + ((i) * 4 + k) * pos_stride, (x))                                     \
        : w_storem(o + ((i) * 4 + k) * pos_stride, out, (x)))
  for (int k = 0; k < 4; k++) { /* B^T (d B), column k */
    BT_STORE(0, w_sub(v[0][k], v[2][k]));
    BT_STORE(1, w_add(v[1][k], v[2][k]));
    BT_STORE(2, w_sub(v[2][k], v[1][k]));
    BT_STORE(3, w_sub(v[1][k], v[3][k]));
  }
#undef BT_STORE
}

#if defined(__AVX512F__)
/* input_transform for narrow planes (TW <= 7): two tile rows share a
 * vector, lanes [0, TW) the first and [TW, 2 TW) the second (consecutive
 * tiles), each input row being one 16-column load. */
static void input_transform_pairs(const wgeom *w, const float *src, int64_t nb, int64_t ctot,
                                  int64_t c0, float *V) {
  const int64_t H = w->H, W = w->W, TW = w->TW, pos_stride = v_stride(w);
  int32_t ix[16];
  for (int l = 0; l < 16; l++)
    ix[l] = (int32_t)(l < TW ? 2 * l : l < 2 * TW ? 16 + 2 * (l - TW) : 0);
  const __m512i i0 = _mm512_loadu_si512(ix), one = _mm512_set1_epi32(1);
  const __m512i i1 = _mm512_add_epi32(i0, one), i2 = _mm512_add_epi32(i1, one),
                i3 = _mm512_add_epi32(i2, one);
  const __mmask16 m = col_lanes(-w->pw, W);
  for (int64_t b = 0; b < nb; b++)
    for (int64_t c = 0; c < w->cin; c++) {
      const float *plane = src + (b * ctot + c0 + c) * H * W;
      float *vb = V + c * w->Tp + b * w->T1;
      for (int64_t ty = 0; ty < w->TH; ty += 2) {
        int64_t rows = w->TH - ty < 2 ? 1 : 2;
        __m512 d[4][4];
        for (int i = 0; i < 4; i++) {
          __m512 l[2];
          for (int p = 0; p < 2; p++) {
            int64_t r = 2 * (ty + p) + i - w->ph;
            l[p] = p < rows && r >= 0 && r < H ? load_cols(plane + r * W, -w->pw, m)
                                               : _mm512_setzero_ps();
          }
          d[i][0] = _mm512_permutex2var_ps(l[0], i0, l[1]);
          d[i][1] = _mm512_permutex2var_ps(l[0], i1, l[1]);
          d[i][2] = _mm512_permutex2var_ps(l[0], i2, l[1]);
          d[i][3] = _mm512_permutex2var_ps(l[0], i3, l[1]);
        }
        store_btdb(d, vb + ty * TW, pos_stride, first_lanes(rows * TW), false);
      }
    }
}

/* V (16, cin, Tp) = B^T d B of every tile of the nb images of a chunk,
 * channels [c0, c0 + cin) of src (nb, ctot, H, W). Row by row: a tile row
 * of up to 16 tiles is 4 input rows of 34 columns, loaded with masks (the
 * padding is the masked-out lanes), split into even and odd columns. Lanes
 * past the chunk's tiles are left as they are (their GEMM columns are
 * never read back). */
static void input_transform(const wgeom *w, const float *src, int64_t nb, int64_t ctot,
                            int64_t c0, float *V) {
  if (w->TW <= 7) {
    input_transform_pairs(w, src, nb, ctot, c0, V);
    return;
  }
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
  const __m512i next1 = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17);
  const int64_t H = w->H, W = w->W, pos_stride = v_stride(w);
  for (int64_t tx0 = 0; tx0 < w->TW; tx0 += 16) {
    int64_t col = 2 * tx0 - w->pw;
    __mmask16 m0 = col_lanes(col, W), m1 = col_lanes(col + 16, W), m2 = col_lanes(col + 32, W) & 3;
    __mmask16 out = first_lanes(w->TW - tx0);
    for (int64_t b = 0; b < nb; b++)
      for (int64_t c = 0; c < w->cin; c++) {
        const float *plane = src + (b * ctot + c0 + c) * H * W;
        float *vb = V + c * w->Tp + b * w->T1 + tx0;
        for (int64_t ty = 0; ty < w->TH; ty++) {
          __m512 d[4][4];
          for (int i = 0; i < 4; i++) {
            int64_t r = 2 * ty + i - w->ph;
            if (r < 0 || r >= H) {
              d[i][0] = d[i][1] = d[i][2] = d[i][3] = _mm512_setzero_ps();
              continue;
            }
            const float *row = plane + r * W;
            __m512 lo = load_cols(row, col, m0), hi = load_cols(row, col + 16, m1);
            __m512 ex = load_cols(row, col + 32, m2);
            d[i][0] = _mm512_permutex2var_ps(lo, even, hi);       /* column 2 tx - pw */
            d[i][1] = _mm512_permutex2var_ps(lo, odd, hi);        /* + 1 */
            d[i][2] = _mm512_permutex2var_ps(d[i][0], next, ex);  /* + 2 */
            d[i][3] = _mm512_permutex2var_ps(d[i][1], next1, ex); /* + 3 */
          }
          store_btdb(d, vb + ty * w->TW, pos_stride, out, false);
        }
      }
  }
}

#else /* AVX2 */
/* The even and the odd lanes of the 16 floats lo, hi, in order. */
static inline wv even_of(wv lo, wv hi) {
  return _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
}
static inline wv odd_of(wv lo, wv hi) {
  return _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

/* V (16, cin, Tp) = B^T d B of every tile of the nb images of a chunk,
 * channels [c0, c0 + cin) of src (nb, ctot, H, W), as the AVX-512 path's
 * input_transform with 8 tiles a vector: a tile row of up to 8 tiles is
 * 4 input rows of 18 columns (two 8-float loads and a 2-float one, under
 * masks: the padding is the masked-out lanes), split into even and odd
 * columns; columns + 2 and + 3 are those shifted down one tile. */
static void input_transform(const wgeom *w, const float *src, int64_t nb, int64_t ctot,
                            int64_t c0, float *V) {
  const __m256i next = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 7);
  const __m256i lane0 = _mm256_setzero_si256(), lane1 = _mm256_set1_epi32(1);
  const int64_t H = w->H, W = w->W, pos_stride = v_stride(w);
  for (int64_t tx0 = 0; tx0 < w->TW; tx0 += 8) {
    int64_t col = 2 * tx0 - w->pw;
    wmask m0 = col_lanes(col, W), m1 = col_lanes(col + 8, W),
          m2 = _mm256_and_si256(col_lanes(col + 16, W), first_lanes(2));
    wmask out = first_lanes(w->TW - tx0);
    const bool full = tx0 + 8 <= w->TW || w->TW <= 8; /* see TP_SLACK */
    for (int64_t b = 0; b < nb; b++)
      for (int64_t c = 0; c < w->cin; c++) {
        const float *plane = src + (b * ctot + c0 + c) * H * W;
        float *vb = V + c * w->Tp + b * w->T1 + tx0;
        for (int64_t ty = 0; ty < w->TH; ty++) {
          wv d[4][4];
          for (int i = 0; i < 4; i++) {
            int64_t r = 2 * ty + i - w->ph;
            if (r < 0 || r >= H) {
              d[i][0] = d[i][1] = d[i][2] = d[i][3] = w_zero();
              continue;
            }
            const float *row = plane + r * W;
            wv lo = load_cols(row, col, m0), hi = load_cols(row, col + 8, m1);
            wv ex = load_cols(row, col + 16, m2);
            d[i][0] = even_of(lo, hi); /* column 2 tx - pw */
            d[i][1] = odd_of(lo, hi);  /* + 1 */
            d[i][2] = _mm256_blend_ps(_mm256_permutevar8x32_ps(d[i][0], next),
                                      _mm256_permutevar8x32_ps(ex, lane0), 0x80); /* + 2 */
            d[i][3] = _mm256_blend_ps(_mm256_permutevar8x32_ps(d[i][1], next),
                                      _mm256_permutevar8x32_ps(ex, lane1), 0x80); /* + 3 */
          }
          store_btdb(d, vb + ty * w->TW, pos_stride, out, full);
        }
      }
  }
}
#endif

/* A^T M A + bias for 16 lanes of tiles: out[dy][dx] (lanes = tiles). */
static inline void atma(const wv *m, wv bias, wv out[2][2]) {
  wv s[2][4];
  for (int c = 0; c < 4; c++) { /* A^T M */
    s[0][c] = w_add(w_add(m[0 * 4 + c], m[1 * 4 + c]), m[2 * 4 + c]);
    s[1][c] = w_sub(w_sub(m[1 * 4 + c], m[2 * 4 + c]), m[3 * 4 + c]);
  }
  for (int dy = 0; dy < 2; dy++) { /* (A^T M) A */
    out[dy][0] = w_add(w_add(w_add(s[dy][0], s[dy][1]), s[dy][2]), bias);
    out[dy][1] = w_add(w_sub(w_sub(s[dy][1], s[dy][2]), s[dy][3]), bias);
  }
}

/* Stores (or adds) the lanes under n of v at row (all of them: full). */
static inline void put_row(float *row, wv v, wmask n, bool full, bool accumulate) {
  if (accumulate) v = w_add(v, full ? w_load(row) : w_loadm(n, row));
  if (full) w_store(row, v);
  else w_storem(row, n, v);
}

#if defined(__AVX512F__)
/* output_transform for narrow planes (TW <= 7): two tile rows a vector,
 * as in input_transform_pairs. */
static void output_transform_pairs(const wgeom *w, const float *M, int64_t mp, int64_t nb,
                                   const float *bias, bool accumulate, float *dst, int64_t ktot,
                                   int64_t k0) {
  const int64_t OH = w->OH, OW = w->OW, TW = w->TW, pos_stride = m_stride(w, mp);
  int32_t ia[16], ib[16];
  for (int l = 0; l < 16; l++) { /* output column l of each row: tile l / 2, column l % 2 */
    ia[l] = (int32_t)(l < 2 * TW ? l / 2 + 16 * (l % 2) : 0);
    ib[l] = (int32_t)(l < 2 * TW ? TW + l / 2 + 16 * (l % 2) : 0);
  }
  const __m512i first = _mm512_loadu_si512(ia), second = _mm512_loadu_si512(ib);
  const __mmask16 cols = first_lanes(OW);
  for (int64_t k = 0; k < w->cout; k++) {
    __m512 bv = _mm512_set1_ps(bias ? bias[k0 + k] : 0.f);
    for (int64_t b = 0; b < nb; b++) {
      const float *mk = M + k * w->Tp + b * w->T1;
      float *plane = dst + (b * ktot + k0 + k) * OH * OW;
      for (int64_t ty = 0; ty < w->TH; ty += 2) {
        int64_t rows = w->TH - ty < 2 ? 1 : 2;
        __m512 m[16], y[2][2];
        for (int pos = 0; pos < 16; pos++)
          m[pos] = _mm512_maskz_loadu_ps(first_lanes(rows * TW), mk + pos * pos_stride + ty * TW);
        atma(m, bv, y);
        for (int dy = 0; dy < 2; dy++) {
          int64_t oy = 2 * ty + dy;
          if (oy < OH)
            put_row(plane + oy * OW, _mm512_permutex2var_ps(y[dy][0], first, y[dy][1]), cols,
                    false, accumulate);
          if (rows == 2 && oy + 2 < OH)
            put_row(plane + (oy + 2) * OW, _mm512_permutex2var_ps(y[dy][0], second, y[dy][1]),
                    cols, false, accumulate);
        }
      }
    }
  }
}

/* dst (nb, ktot, OH, OW), channels [k0, k0 + cout), = A^T M A + bias (or
 * += A^T M A) from M (16, mp, Tp): row by row, a tile row's 2x2 outputs
 * re-interleaved into two output rows with masked stores. */
static void output_transform(const wgeom *w, const float *M, int64_t mp, int64_t nb,
                             const float *bias, bool accumulate, float *dst, int64_t ktot,
                             int64_t k0) {
  if (w->TW <= 7) {
    output_transform_pairs(w, M, mp, nb, bias, accumulate, dst, ktot, k0);
    return;
  }
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  const int64_t OH = w->OH, OW = w->OW, pos_stride = m_stride(w, mp);
  for (int64_t tx0 = 0; tx0 < w->TW; tx0 += 16) {
    __mmask16 in = first_lanes(w->TW - tx0);
    int64_t ncol = OW - 2 * tx0 < 32 ? OW - 2 * tx0 : 32;
    __mmask16 s0 = first_lanes(ncol), s1 = first_lanes(ncol - 16);
    for (int64_t k = 0; k < w->cout; k++) {
      __m512 bv = _mm512_set1_ps(bias ? bias[k0 + k] : 0.f);
      for (int64_t b = 0; b < nb; b++) {
        const float *mk = M + k * w->Tp + b * w->T1 + tx0;
        float *plane = dst + (b * ktot + k0 + k) * OH * OW + 2 * tx0;
        for (int64_t ty = 0; ty < w->TH; ty++) {
          __m512 m[16], y[2][2];
          for (int pos = 0; pos < 16; pos++)
            m[pos] = _mm512_maskz_loadu_ps(in, mk + pos * pos_stride + ty * w->TW);
          atma(m, bv, y);
          for (int dy = 0; dy < 2 && 2 * ty + dy < OH; dy++) {
            float *row = plane + (2 * ty + dy) * OW;
            put_row(row, _mm512_permutex2var_ps(y[dy][0], lo, y[dy][1]), s0, false, accumulate);
            put_row(row + 16, _mm512_permutex2var_ps(y[dy][0], hi, y[dy][1]), s1, false,
                    accumulate);
          }
        }
      }
    }
  }
}

#else /* AVX2 */
/* dst (nb, ktot, OH, OW), channels [k0, k0 + cout), = A^T M A + bias (or
 * += A^T M A) from M (16, mp, Tp): as the AVX-512 path's, 8 tiles a
 * vector, a tile row's 2x2 outputs re-interleaved into two output rows of
 * 16 columns with masked stores. */
static void output_transform(const wgeom *w, const float *M, int64_t mp, int64_t nb,
                             const float *bias, bool accumulate, float *dst, int64_t ktot,
                             int64_t k0) {
  const int64_t OH = w->OH, OW = w->OW, pos_stride = m_stride(w, mp);
  for (int64_t tx0 = 0; tx0 < w->TW; tx0 += 8) {
    wmask in = first_lanes(w->TW - tx0);
    int64_t ncol = OW - 2 * tx0 < 16 ? OW - 2 * tx0 : 16;
    wmask s0 = first_lanes(ncol), s1 = first_lanes(ncol - 8);
    for (int64_t k = 0; k < w->cout; k++) {
      wv bv = w_set1(bias ? bias[k0 + k] : 0.f);
      for (int64_t b = 0; b < nb; b++) {
        const float *mk = M + k * w->Tp + b * w->T1 + tx0;
        float *plane = dst + (b * ktot + k0 + k) * OH * OW + 2 * tx0;
        for (int64_t ty = 0; ty < w->TH; ty++) {
          wv m[16], y[2][2];
          for (int pos = 0; pos < 16; pos++) m[pos] = w_loadm(in, mk + pos * pos_stride + ty * w->TW);
          atma(m, bv, y);
          for (int dy = 0; dy < 2 && 2 * ty + dy < OH; dy++) {
            float *row = plane + (2 * ty + dy) * OW;
            /* tiles 0, 1, 4, 5 and 2, 3, 6, 7, each as its two columns */
            wv lo = _mm256_unpacklo_ps(y[dy][0], y[dy][1]), hi = _mm256_unpackhi_ps(y[dy][0], y[dy][1]);
            put_row(row, _mm256_permute2f128_ps(lo, hi, 0x20), s0, ncol >= 8, accumulate);
            put_row(row + 8, _mm256_permute2f128_ps(lo, hi, 0x31), s1, ncol >= 16, accumulate);
          }
        }
      }
    }
  }
}
#endif

/* U (16, G, mp / MR, cin, MR) = G g G^T for g (cout, cin, 3, 3) of each
 * group, read through at(). */
typedef float (*w_at_fn)(const em_tensor *w, int64_t grp, int64_t k, int64_t c, int ky, int kx,
                         const em_conv_geom *g);

static float *weight_transform(const wgeom *p, const em_tensor *w, const em_conv_geom *g,
                               w_at_fn at) {
  int64_t mp = round_up(p->cout, MR), per_pos = p->G * mp * p->cin;
  float *U = em_scratch(sizeof(float) * (size_t)(16 * per_pos));
  for (int64_t grp = 0; grp < p->G; grp++)
    for (int64_t k = 0; k < mp; k++)
      for (int64_t c = 0; c < p->cin; c++) {
        float u[4][4] = {{0}};
        if (k < p->cout) {
          float gg[3][3], t[4][3];
          for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) gg[a][b] = at(w, grp, k, c, a, b, g);
          for (int b = 0; b < 3; b++) { /* G g */
            t[0][b] = gg[0][b];
            t[1][b] = 0.5f * (gg[0][b] + gg[1][b] + gg[2][b]);
            t[2][b] = 0.5f * (gg[0][b] - gg[1][b] + gg[2][b]);
            t[3][b] = gg[2][b];
          }
          for (int a = 0; a < 4; a++) { /* (G g) G^T */
            u[a][0] = t[a][0];
            u[a][1] = 0.5f * (t[a][0] + t[a][1] + t[a][2]);
            u[a][2] = 0.5f * (t[a][0] - t[a][1] + t[a][2]);
            u[a][3] = t[a][2];
          }
        }
        for (int pos = 0; pos < 16; pos++)
          U[pos * per_pos + (grp * mp + k / MR * MR) * p->cin + c * MR + k % MR] =
              u[pos / 4][pos % 4];
      }
  return U;
}

static float w_fwd(const em_tensor *w, int64_t grp, int64_t k, int64_t c, int ky, int kx,
                   const em_conv_geom *g) {
  return em_f32(w)[(grp * g->Kg + k) * w->stride[0] + c * w->stride[1] + ky * w->stride[2] +
                   kx * w->stride[3]];
}

/* dX's kernel: output channel k of the pass is input channel k of the
 * conv, its input channel c the conv's output channel c, flipped. */
static float w_dx(const em_tensor *w, int64_t grp, int64_t k, int64_t c, int ky, int kx,
                  const em_conv_geom *g) {
  return em_f32(w)[(grp * g->Kg + c) * w->stride[0] + k * w->stride[1] + (2 - ky) * w->stride[2] +
                   (2 - kx) * w->stride[3]];
}

/* ---- forward-like passes ------------------------------------------------------------ */

typedef struct {
  wgeom w;
  const float *src;  /* (N, G*cin, H, W) */
  float *dst;        /* (N, G*cout, OH, OW) */
  bool accumulate;   /* dst += instead of = */
  const float *U;    /* weight_transform */
  const float *bias; /* (G*cout) or NULL */
  int64_t *row_off;  /* (cin): rows of V */
  em_conv_queue q;   /* over chunks */
  float *slots;
  int64_t slot_floats, o_m;
} wpass;

static void pass_chunks(void *vctx, int64_t unused0, int64_t unused1) {
  (void)unused0, (void)unused1;
  wpass *p = vctx;
  const wgeom *w = &p->w;
  float *V = p->slots + em_conv_queue_slot(&p->q) * p->slot_floats, *M = V + p->o_m;
  const int64_t mp = round_up(w->cout, MR), per_pos = w->G * mp * w->cin;
  const int64_t cin_tot = w->G * w->cin, cout_tot = w->G * w->cout;
  for (int64_t ch; (ch = em_conv_queue_take(&p->q)) >= 0;) {
    int64_t n0 = ch * CHUNK, nb = w->N - n0 < CHUNK ? w->N - n0 : CHUNK, T = nb * w->T1;
    const float *src = p->src + n0 * cin_tot * w->H * w->W;
    float *dst = p->dst + n0 * cout_tot * w->OH * w->OW;
    for (int64_t grp = 0; grp < w->G; grp++) {
      input_transform(w, src, nb, cin_tot, grp * w->cin, V);
      /* The last panel's lanes past T: zeros, not whatever the scratch held
       * (the products there are dropped, but a denormal among them made
       * every FMA of the panel take a microcode assist: evaluation inside
       * a recorded fmnist-cnn run took 8 times as long). */
      const int64_t Tr = round_up(T, NR);
      for (int pos = 0; pos < 16 && Tr > T; pos++)
        for (int64_t c = 0; c < w->cin; c++)
          memset(V + pos * v_stride(w) + p->row_off[c] + T, 0, sizeof(float) * (size_t)(Tr - T));
      for (int pos = 0; pos < 16; pos++) { /* M (16, mp, Tp) = U V, per position */
        const float *Up = p->U + pos * per_pos + grp * mp * w->cin;
        const float *Vp = V + pos * v_stride(w);
        float *Mp = M + pos * m_stride(w, mp);
        for (int64_t j = 0; j < T; j += NR)
          for (int64_t i = 0; i < mp; i += MR)
            em_conv_kernel_rows(w->cin, Up + i * w->cin, Vp + j, p->row_off, Mp + i * w->Tp + j,
                                w->Tp);
      }
      output_transform(w, M, mp, nb, p->bias, p->accumulate, dst, cout_tot, grp * w->cout);
    }
  }
}

static void pass_run(wpass *p, const em_conv_geom *g, const em_tensor *wt, w_at_fn at) {
  wgeom *w = &p->w;
  wgeom_tiles(w);
  p->U = weight_transform(w, wt, g, at);
  p->row_off = em_scratch(sizeof(int64_t) * (size_t)w->cin);
  for (int64_t c = 0; c < w->cin; c++) p->row_off[c] = c * w->Tp;
  int64_t mp = round_up(w->cout, MR);
  p->o_m = round_up(16 * v_stride(w), 16);
  p->slot_floats = round_up(p->o_m + 16 * m_stride(w, mp), 16);
  em_conv_queue_init(&p->q, (w->N + CHUNK - 1) / CHUNK);
  p->slots = em_scratch(sizeof(float) * (size_t)(p->q.n_slots * p->slot_floats));
  em_conv_queue_run(&p->q, false, pass_chunks, p);
}

void em_conv_winograd_forward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                              const em_tensor *b, em_tensor *y) {
  if (g->N == 0) return;
  wpass p = {.w = {.N = g->N, .G = g->G, .cin = g->Cg, .cout = g->Kg, .H = g->H, .W = g->W,
                   .ph = g->ph, .pw = g->pw, .OH = g->OH, .OW = g->OW},
             .src = em_f32(x), .dst = em_f32(y)};
  if (b) {
    float *bc = em_scratch(sizeof(float) * (size_t)g->K);
    for (int64_t k = 0; k < g->K; k++) bc[k] = em_f32(b)[k * b->stride[0]];
    p.bias = bc;
  }
  pass_run(&p, g, w, w_fwd);
}

void em_conv_winograd_backward_x(const em_conv_geom *g, const em_tensor *w,
                                 const em_tensor *gy, em_tensor *gx, bool fresh) {
  if (g->N == 0) {
    if (fresh) em_tensor_fill_(gx, 0.0);
    return;
  }
  /* a forward pass over gy padded by 2 - pad with the flipped kernel */
  wpass p = {.w = {.N = g->N, .G = g->G, .cin = g->Kg, .cout = g->Cg, .H = g->OH, .W = g->OW,
                   .ph = 2 - g->ph, .pw = 2 - g->pw, .OH = g->H, .OW = g->W},
             .src = em_f32(gy), .dst = em_f32(gx), .accumulate = !fresh};
  pass_run(&p, g, w, w_dx);
}

#else /* no AVX-512 nor AVX2+FMA: the direct path serves every convolution */

bool em_conv_winograd_ok(const em_conv_geom *g) {
  (void)g;
  return false;
}

void em_conv_winograd_forward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                              const em_tensor *b, em_tensor *y) {
  (void)g, (void)x, (void)w, (void)b, (void)y;
  EM_ASSERT(!"winograd needs AVX-512 or AVX2");
}

void em_conv_winograd_backward_x(const em_conv_geom *g, const em_tensor *w,
                                 const em_tensor *gy, em_tensor *gx, bool fresh) {
  (void)g, (void)w, (void)gy, (void)gx, (void)fresh;
  EM_ASSERT(!"winograd needs AVX-512 or AVX2");
}

#endif
