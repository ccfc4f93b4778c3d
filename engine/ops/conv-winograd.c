/* conv-winograd.c: 3x3 stride-1 convolutions as Winograd F(2x2, 3x3)
 * (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
 * 2015), f32 with AVX-512.
 *
 * Each 2x2 block of outputs ("tile") comes from a 4x4 input patch d:
 *   y = A^T [ U . V ] A,   U = G g G^T,   V = B^T d B
 * with the 16 element-wise products summed over input channels as 16
 * independent GEMMs (one per position of the 4x4 transformed tile), so a
 * tile costs 16 multiply-adds per channel pair instead of 36. Gradients:
 *   dX  is the same forward pass on gy padded by 2 - pad, with the kernel
 *       flipped and its channel axes swapped;
 *   dW  = G^T [ sum over tiles (A dy A^T) . V ] G  (the adjoint of U . V),
 *       16 GEMMs reducing over tiles, one partial per thread slot.
 * The matrices (exact in binary floating point):
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 *
 * Images go in chunks of CHUNK over the thread pool. A chunk's tiles are
 * numbered across its images (t = image * tiles_per_image + ty * TW + tx)
 * so the GEMMs are wide; patches are read with AVX-512 gathers from a
 * zero-padded copy of the chunk and outputs written with scatters. The
 * GEMM tiles are the micro-kernels of conv-kernel.c. The plain reference
 * of all this is conv-ref.c, which the tests compare against. */
#include "conv-private.h"

#include "em-pool.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && EM_CONV_NR == 32
#include <immintrin.h>

#define MR EM_CONV_MR
#define NR EM_CONV_NR
#define CHUNK 4 /* images per chunk: keeps a thread's transforms in its L2 */

static int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

bool em_conv_winograd_ok(const em_conv_geom *g) {
  return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 &&
         g->ph <= 2 && g->pw <= 2 && g->Cg >= 8 && g->Kg >= 8;
}

/* The first n lanes. */
static inline __mmask16 first_lanes(int64_t n) {
  return (__mmask16)(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1);
}

/* Lanes j of a 16-float load at column start + j that fall in [0, W). */
static inline __mmask16 col_lanes(int64_t start, int64_t W) {
  int64_t lo = start < 0 ? -start : 0, hi = W - start;
  return (__mmask16)(first_lanes(hi) & ~first_lanes(lo));
}

/* Masked load of 16 floats at row + col; masked lanes are never touched,
 * so col may lie outside the row (the address is formed as an integer). */
static inline __m512 load_cols(const float *row, int64_t col, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, (const void *)((uintptr_t)row + (uintptr_t)(col * 4)));
}

/* Geometry of one forward-like pass: dst (N, G*cout, OH, OW) from
 * src (N, G*cin, H, W), padding ph, pw. */
typedef struct {
  int64_t N, G, cin, cout, H, W, ph, pw, OH, OW;
  int64_t TH, TW, T1, Tp; /* tiles per image, per chunk padded to NR */
} wgeom;

/* The 16 per-position blocks of V, M and GYp are one cache line longer
 * than their data: at strides that are multiples of 4 KiB, the 16 rows a
 * transform writes at once would share one L1 set and evict each other. */
#define POS_PAD 16

static int64_t v_stride(const wgeom *w) { return w->cin * w->Tp + POS_PAD; }
static int64_t m_stride(const wgeom *w, int64_t mp) { return mp * w->Tp + POS_PAD; }

static void wgeom_tiles(wgeom *w) {
  w->TH = (w->OH + 1) / 2;
  w->TW = (w->OW + 1) / 2;
  w->T1 = w->TH * w->TW;
  w->Tp = round_up(CHUNK * w->T1, NR);
}

/* V (16, cin, Tp) = B^T d B of every tile of the nb images of a chunk,
 * channels [c0, c0 + cin) of src (nb, ctot, H, W). Row by row: a tile row
 * of up to 16 tiles is 4 input rows of 34 columns, loaded with masks (the
 * padding is the masked-out lanes), split into even and odd columns. Lanes
 * past the chunk's tiles are left as they are (their GEMM columns are
 * never read back). */
static void input_transform(const wgeom *w, const float *src, int64_t nb, int64_t ctot,
                            int64_t c0, float *V) {
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
          __m512 v[4][4];
          for (int i = 0; i < 4; i++) {
            int64_t r = 2 * ty + i - w->ph;
            __m512 d0, d1, d2, d3;
            if (r < 0 || r >= H) {
              d0 = d1 = d2 = d3 = _mm512_setzero_ps();
            } else {
              const float *row = plane + r * W;
              __m512 lo = load_cols(row, col, m0), hi = load_cols(row, col + 16, m1);
              __m512 ex = load_cols(row, col + 32, m2);
              d0 = _mm512_permutex2var_ps(lo, even, hi); /* column 2 tx - pw */
              d1 = _mm512_permutex2var_ps(lo, odd, hi);  /* + 1 */
              d2 = _mm512_permutex2var_ps(d0, next, ex); /* + 2 */
              d3 = _mm512_permutex2var_ps(d1, next1, ex); /* + 3 */
            }
            v[i][0] = _mm512_sub_ps(d0, d2); /* d B, row i */
            v[i][1] = _mm512_add_ps(d1, d2);
            v[i][2] = _mm512_sub_ps(d2, d1);
            v[i][3] = _mm512_sub_ps(d1, d3);
          }
          float *o = vb + ty * w->TW;
          for (int k = 0; k < 4; k++) { /* B^T (d B), column k */
            _mm512_mask_storeu_ps(o + (0 * 4 + k) * pos_stride, out, _mm512_sub_ps(v[0][k], v[2][k]));
            _mm512_mask_storeu_ps(o + (1 * 4 + k) * pos_stride, out, _mm512_add_ps(v[1][k], v[2][k]));
            _mm512_mask_storeu_ps(o + (2 * 4 + k) * pos_stride, out, _mm512_sub_ps(v[2][k], v[1][k]));
            _mm512_mask_storeu_ps(o + (3 * 4 + k) * pos_stride, out, _mm512_sub_ps(v[1][k], v[3][k]));
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
          __m512 m[16], s[2][4];
          for (int pos = 0; pos < 16; pos++)
            m[pos] = _mm512_maskz_loadu_ps(in, mk + pos * pos_stride + ty * w->TW);
          for (int c = 0; c < 4; c++) { /* A^T M */
            s[0][c] = _mm512_add_ps(_mm512_add_ps(m[0 * 4 + c], m[1 * 4 + c]), m[2 * 4 + c]);
            s[1][c] = _mm512_sub_ps(_mm512_sub_ps(m[1 * 4 + c], m[2 * 4 + c]), m[3 * 4 + c]);
          }
          for (int dy = 0; dy < 2 && 2 * ty + dy < OH; dy++) { /* (A^T M) A */
            __m512 y0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[dy][0], s[dy][1]), s[dy][2]), bv);
            __m512 y1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s[dy][1], s[dy][2]), s[dy][3]), bv);
            __m512 r0 = _mm512_permutex2var_ps(y0, lo, y1), r1 = _mm512_permutex2var_ps(y0, hi, y1);
            float *row = plane + (2 * ty + dy) * OW;
            if (accumulate) {
              r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(s0, row));
              r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(s1, row + 16));
            }
            _mm512_mask_storeu_ps(row, s0, r0);
            _mm512_mask_storeu_ps(row + 16, s1, r1);
          }
        }
      }
    }
  }
}

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
          U[pos * per_pos + (grp * mp + k / MR * MR) * p->cin + c * MR + k % MR] = u[pos / 4][pos % 4];
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

/* ---- dW: G^T [ sum over tiles (A dy A^T) . V ] G ----------------------------------- */

typedef struct {
  wgeom w;           /* the forward geometry */
  const float *x;    /* (N, C, H, W) */
  const float *gy;   /* (N, K, OH, OW) */
  bool want_w, want_b;
  int64_t npk, mpc;  /* couts rounded up to NR, cins to MR */
  em_conv_queue q;   /* over chunks */
  float *slots;
  int64_t slot_floats, o_gy, o_dw, o_db;
} wgrad;

/* GYp (16, npk / NR, T, NR) = A dy A^T of every tile of the chunk, for
 * channels [k0, k0 + cout) of gy (nb, ktot, OH, OW), 16 channels a vector
 * (gathered); adds each channel's sum to db (may be NULL). */
static void gy_transform(const wgrad *c, const float *gy, int64_t nb, int64_t ktot, int64_t k0,
                         float *GYp, double *db) {
  const wgeom *w = &c->w;
  const int64_t ohw = w->OH * w->OW, panels = c->npk / NR, T = nb * w->T1;
  const int64_t pos_stride = panels * T * NR + POS_PAD;
  const __m512 zero = _mm512_setzero_ps();
  const __m512i rows = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32((int32_t)ohw));
  for (int64_t kv = 0; kv < c->npk; kv += 16) {
    __mmask16 ks = first_lanes(w->cout - kv);
    __m512 sum = zero;
    for (int64_t b = 0; b < nb; b++) {
      const float *gb = gy + (b * ktot + k0 + kv) * ohw;
      for (int64_t ty = 0; ty < w->TH; ty++)
        for (int64_t tx = 0; tx < w->TW; tx++) {
          __mmask16 dx = 2 * tx + 1 < w->OW ? ks : 0, dy = 2 * ty + 1 < w->OH ? ks : 0;
          const float *o = gb + 2 * ty * w->OW + 2 * tx;
          __m512 y00 = ks ? _mm512_mask_i32gather_ps(zero, ks, rows, o, 4) : zero;
          __m512 y01 = dx ? _mm512_mask_i32gather_ps(zero, dx, rows, o + 1, 4) : zero;
          __m512 y10 = dy ? _mm512_mask_i32gather_ps(zero, dy, rows, o + w->OW, 4) : zero;
          __m512 y11 = dx & dy ? _mm512_mask_i32gather_ps(zero, dx & dy, rows, o + w->OW + 1, 4) : zero;
          sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(y00, y01), _mm512_add_ps(y10, y11)));
          /* A dy: rows (y0, y0 + y1, y0 - y1, -y1) of the 2x2, then the same on columns */
          __m512 r[4][2] = {{y00, y01},
                            {_mm512_add_ps(y00, y10), _mm512_add_ps(y01, y11)},
                            {_mm512_sub_ps(y00, y10), _mm512_sub_ps(y01, y11)},
                            {_mm512_sub_ps(zero, y10), _mm512_sub_ps(zero, y11)}};
          int64_t t = b * w->T1 + ty * w->TW + tx;
          float *d = GYp + (kv / NR * T + t) * NR + kv % NR;
          for (int i = 0; i < 4; i++) {
            _mm512_storeu_ps(d + (i * 4 + 0) * pos_stride, r[i][0]);
            _mm512_storeu_ps(d + (i * 4 + 1) * pos_stride, _mm512_add_ps(r[i][0], r[i][1]));
            _mm512_storeu_ps(d + (i * 4 + 2) * pos_stride, _mm512_sub_ps(r[i][0], r[i][1]));
            _mm512_storeu_ps(d + (i * 4 + 3) * pos_stride, _mm512_sub_ps(zero, r[i][1]));
          }
        }
    }
    if (db) {
      float s[16];
      _mm512_storeu_ps(s, sum);
      for (int l = 0; l < 16 && kv + l < w->cout; l++) db[kv + l] += s[l];
    }
  }
}

static void grad_chunks(void *vctx, int64_t unused0, int64_t unused1) {
  (void)unused0, (void)unused1;
  wgrad *c = vctx;
  const wgeom *w = &c->w;
  float *V = c->slots + em_conv_queue_slot(&c->q) * c->slot_floats;
  float *GYp = V + c->o_gy, *dw = V + c->o_dw; /* dw (G, 16, mpc, npk): dW^T per position */
  double *db = (double *)(V + c->o_db);
  const int64_t cin_tot = w->G * w->cin, cout_tot = w->G * w->cout, ohw = w->OH * w->OW;
  if (c->want_w) memset(dw, 0, sizeof(float) * (size_t)(w->G * 16 * c->mpc * c->npk));
  if (c->want_b) memset(db, 0, sizeof(double) * (size_t)cout_tot);
  for (int64_t ch; (ch = em_conv_queue_take(&c->q)) >= 0;) {
    int64_t n0 = ch * CHUNK, nb = w->N - n0 < CHUNK ? w->N - n0 : CHUNK, T = nb * w->T1;
    const float *xc = c->x + n0 * cin_tot * w->H * w->W, *gyc = c->gy + n0 * cout_tot * ohw;
    for (int64_t grp = 0; grp < w->G; grp++) {
      gy_transform(c, gyc, nb, cout_tot, grp * w->cout, GYp, c->want_b ? db + grp * w->cout : NULL);
      if (!c->want_w) continue;
      input_transform(w, xc, nb, cin_tot, grp * w->cin, V);
      for (int pos = 0; pos < 16; pos++) {
        float *dwp = dw + (grp * 16 + pos) * c->mpc * c->npk;
        for (int64_t i = 0; i < c->mpc; i += MR) {
          const float *arow[MR];
          for (int r = 0; r < MR; r++) {
            int64_t row = i + r < w->cin ? i + r : 0; /* rows past cin are never read back */
            arow[r] = V + pos * v_stride(w) + row * w->Tp;
          }
          for (int64_t jk = 0; jk < c->npk; jk += NR)
            em_conv_kernel_acc(T, arow, GYp + pos * (c->npk * T + POS_PAD) + jk * T,
                               dwp + i * c->npk + jk, c->npk);
        }
      }
    }
  }
}

void em_conv_winograd_backward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                               const em_tensor *gy, const em_conv_grads *out) {
  if (g->N == 0) {
    if (out->gx && out->gx_fresh) em_tensor_fill_(out->gx, 0.0);
    if (out->gw && out->gw_fresh) em_tensor_fill_(out->gw, 0.0);
    if (out->gb && out->gb_fresh) em_tensor_fill_(out->gb, 0.0);
    return;
  }
  if (out->gx) { /* dX: a forward pass over gy padded by 2 - pad with the flipped kernel */
    wpass p = {.w = {.N = g->N, .G = g->G, .cin = g->Kg, .cout = g->Cg, .H = g->OH, .W = g->OW,
                     .ph = 2 - g->ph, .pw = 2 - g->pw, .OH = g->H, .OW = g->W},
               .src = em_f32(gy), .dst = em_f32(out->gx), .accumulate = !out->gx_fresh};
    pass_run(&p, g, w, w_dx);
  }
  if (!out->gw && !out->gb) return;
  wgrad c = {.w = {.N = g->N, .G = g->G, .cin = g->Cg, .cout = g->Kg, .H = g->H, .W = g->W,
                   .ph = g->ph, .pw = g->pw, .OH = g->OH, .OW = g->OW},
             .x = em_f32(x), .gy = em_f32(gy), .want_w = out->gw != NULL, .want_b = out->gb != NULL};
  wgeom_tiles(&c.w);
  c.npk = round_up(c.w.cout, NR);
  c.mpc = round_up(c.w.cin, MR);
  c.o_gy = round_up(16 * v_stride(&c.w), 16);
  c.o_dw = c.o_gy + round_up(16 * (c.npk * c.w.Tp + POS_PAD), 16);
  c.o_db = c.o_dw + round_up(g->G * 16 * c.mpc * c.npk, 16);
  c.slot_floats = round_up(c.o_db + 2 * g->K, 16);
  em_conv_queue_init(&c.q, (g->N + CHUNK - 1) / CHUNK);
  c.slots = em_scratch(sizeof(float) * (size_t)(c.q.n_slots * c.slot_floats));
  em_conv_queue_run(&c.q, false, grad_chunks, &c);

  int used = atomic_load(&c.q.next_slot);
  if (out->gw) { /* dW (K, Cg, 3, 3) = G^T (sum of the slots' dW^T) G */
    float *gw = em_f32(out->gw);
    for (int64_t grp = 0; grp < g->G; grp++)
      for (int64_t k = 0; k < g->Kg; k++)
        for (int64_t ci = 0; ci < g->Cg; ci++) {
          float m[4][4];
          for (int pos = 0; pos < 16; pos++) {
            float acc = 0.f;
            for (int s = 0; s < used; s++)
              acc += c.slots[s * c.slot_floats + c.o_dw + ((grp * 16 + pos) * c.mpc + ci) * c.npk + k];
            m[pos / 4][pos % 4] = acc;
          }
          float t[3][4], r[3][3];
          for (int b = 0; b < 4; b++) { /* G^T m */
            t[0][b] = m[0][b] + 0.5f * (m[1][b] + m[2][b]);
            t[1][b] = 0.5f * (m[1][b] - m[2][b]);
            t[2][b] = 0.5f * (m[1][b] + m[2][b]) + m[3][b];
          }
          for (int a = 0; a < 3; a++) { /* (G^T m) G */
            r[a][0] = t[a][0] + 0.5f * (t[a][1] + t[a][2]);
            r[a][1] = 0.5f * (t[a][1] - t[a][2]);
            r[a][2] = 0.5f * (t[a][1] + t[a][2]) + t[a][3];
          }
          float *d = gw + ((grp * g->Kg + k) * g->Cg + ci) * 9;
          for (int e = 0; e < 9; e++) d[e] = out->gw_fresh ? r[e / 3][e % 3] : d[e] + r[e / 3][e % 3];
        }
  }
  if (out->gb) {
    float *gb = em_f32(out->gb);
    for (int64_t k = 0; k < g->K; k++) {
      double acc = 0;
      for (int s = 0; s < used; s++) acc += ((double *)(c.slots + s * c.slot_floats + c.o_db))[k];
      gb[k] = out->gb_fresh ? (float)acc : gb[k] + (float)acc;
    }
  }
}

#else /* no AVX-512: the direct path serves every convolution */

bool em_conv_winograd_ok(const em_conv_geom *g) {
  (void)g;
  return false;
}

void em_conv_winograd_forward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                              const em_tensor *b, em_tensor *y) {
  (void)g, (void)x, (void)w, (void)b, (void)y;
  EM_ASSERT(!"winograd needs AVX-512");
}

void em_conv_winograd_backward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                               const em_tensor *gy, const em_conv_grads *out) {
  (void)g, (void)x, (void)w, (void)gy, (void)out;
  EM_ASSERT(!"winograd needs AVX-512");
}

#endif
