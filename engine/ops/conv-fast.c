/* conv-fast.c: the f32 fast path of conv2d, forward and backward, for
 * what Winograd (conv-winograd.c) does not take: dW always, and the
 * forward and dX of kernels other than 3x3, strides and dilations other
 * than 1, few channels.
 *
 * All three products are tiles of the micro-kernels in conv-kernel.c, one
 * image at a time (an image's operands stay in L2), images taken by the
 * pool's threads from a shared counter, each thread with its own scratch
 * slot.
 *
 * Stride 1 runs as implicit GEMMs in "q coordinates": each image is
 * copied once into a zero-padded plane (Hp, Wp), and output pixel
 * (oy, ox) is column q = oy * Wp + ox of the product. Row (c, ky, kx) of
 * the column matrix is then the padded image itself, shifted by
 * off = c*Hp*Wp + ky*dh*Wp + kx*dw, so the kernel reads it in place and
 * no im2col matrix is built. Columns with ox >= OW are junk (wasted work
 * of (Wp - OW) / Wp) and are dropped when a tile is stored.
 *   forward  y (K, q)    = w (K, C*kh*kw) @ X (C*kh*kw, q)
 *   dX       dx (C, q')  = w' (C, K*kh*kw) @ GY (K*kh*kw, q'), a stride-1
 *            convolution of gy padded by dil*(k-1) - pad with the flipped,
 *            transposed kernel w' (needs pad <= dil*(k-1))
 *   dW       dw^T (C*kh*kw, K) += X (C*kh*kw, q) @ gy^T (q, K), gy^T packed
 *            with zeros in the junk columns; one partial per thread slot,
 *            summed at the end. With few columns (a first layer on one
 *            channel) dw_small takes dot products instead, with no gy^T.
 * Other strides build an im2col matrix per image and group (and col2im
 * for dX) and use the same kernels. */
#include "cpu-kernels.h"

#include "em-pool.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
/* The AVX-512 helpers below assume two 16-float vectors per tile row. */
#define FAST_AVX512 (EM_CONV_NR == 32)
#else
#define FAST_AVX512 0
#endif

#define MR EM_CONV_MR
#define NR EM_CONV_NR

static int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }
static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- q coordinates and tile stores ------------------------------------------- */

/* A run of valid columns in one NR-column panel: tile columns
 * [col, col + len) go to output elements [dst, dst + len) of a plane. */
typedef struct {
  int32_t col, len;
  int64_t dst;
} run;

/* q = row * wpad + col for rows x wpad, valid where col < wvalid; the
 * runs of each NR-column panel j are runs[first[j] .. first[j + 1]). */
typedef struct {
  int64_t q, npanels;
  run *runs;
  int32_t *first;
} qmap;

static void qmap_init(qmap *m, int64_t rows, int64_t wvalid, int64_t wpad) {
  m->q = rows * wpad;
  m->npanels = (m->q + NR - 1) / NR;
  int64_t per = (NR - 1) / wpad + 2; /* rows a panel can touch */
  m->runs = em_scratch(sizeof(run) * (size_t)(m->npanels * per));
  m->first = em_scratch(sizeof(int32_t) * (size_t)(m->npanels + 1));
  int32_t nr = 0;
  for (int64_t j = 0; j < m->npanels; j++) {
    m->first[j] = nr;
    int64_t q0 = j * NR, q1 = imin(q0 + NR, m->q);
    for (int64_t q = q0; q < q1;) {
      int64_t row = q / wpad, col = q % wpad;
      if (col >= wvalid) {
        q = (row + 1) * wpad;
        continue;
      }
      int64_t end = imin(q1, row * wpad + wvalid), dst = row * wvalid + col;
      run *prev = nr > m->first[j] ? &m->runs[nr - 1] : NULL;
      if (prev && prev->dst + prev->len == dst && prev->col + prev->len == q - q0)
        prev->len += (int32_t)(end - q); /* wvalid == wpad: rows join up */
      else
        m->runs[nr++] = (run){(int32_t)(q - q0), (int32_t)(end - q), dst};
      q = end;
    }
  }
  m->first[m->npanels] = nr;
}

/* Rows [0, mrows) of tile (MR, NR) into out (rows ps apart) through one
 * panel's runs: out = tile + bias[r] (bias may be NULL), or out += tile.
 * With AVX-512 each run is one or two masked vector moves per row. */
static void tile_store(const float *tile, int64_t mrows, const run *rs, int32_t nrs, float *out,
                       int64_t ps, const float *bias, bool add) {
#if FAST_AVX512
  for (int32_t u = 0; u < nrs; u++) {
    uint32_t len = (uint32_t)rs[u].len;
    __mmask16 m0 = (__mmask16)(len >= 16 ? 0xFFFFu : (1u << len) - 1);
    __mmask16 m1 = (__mmask16)(len > 16 ? (1u << (len - 16)) - 1 : 0);
    const float *t = tile + rs[u].col;
    float *o = out + rs[u].dst;
    for (int64_t r = 0; r < mrows; r++, t += NR, o += ps) {
      __m512 v0 = _mm512_maskz_loadu_ps(m0, t), v1 = _mm512_maskz_loadu_ps(m1, t + 16);
      if (bias) {
        __m512 bv = _mm512_set1_ps(bias[r]);
        v0 = _mm512_add_ps(v0, bv);
        v1 = _mm512_add_ps(v1, bv);
      } else if (add) {
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, o));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, o + 16));
      }
      _mm512_mask_storeu_ps(o, m0, v0);
      if (m1) _mm512_mask_storeu_ps(o + 16, m1, v1);
    }
  }
#else
  for (int64_t r = 0; r < mrows; r++) {
    const float *t = tile + r * NR;
    float *o = out + r * ps;
    float bv = bias ? bias[r] : 0.f;
    for (int32_t u = 0; u < nrs; u++) {
      const float *s = t + rs[u].col;
      float *d = o + rs[u].dst;
      int32_t len = rs[u].len;
      if (add)
        for (int32_t i = 0; i < len; i++) d[i] += s[i];
      else
        for (int32_t i = 0; i < len; i++) d[i] = s[i] + bv;
    }
  }
#endif
}

/* Sum of n floats in 16 interleaved partial sums (so it vectorises). */
static float sum_floats(const float *s, int64_t n) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; l++) acc[l] += s[i + l];
  for (; i < n; i++) acc[0] += s[i];
  float t = 0.f;
  for (int l = 0; l < 16; l++) t += acc[l];
  return t;
}

/* ---- copies into scratch ------------------------------------------------------ */

/* out (C, Hp, Wp) = x (C, H, W) with ph, pw rows/columns of zeros around,
 * then `slack` zeros after it (reads past the last plane stay finite). */
static void pad_planes(const float *restrict x, int64_t C, int64_t H, int64_t W, int64_t ph,
                       int64_t pw, int64_t Hp, int64_t Wp, int64_t slack, float *restrict out) {
  for (int64_t c = 0; c < C; c++)
    for (int64_t iy = 0; iy < Hp; iy++) {
      float *restrict row = out + (c * Hp + iy) * Wp;
      int64_t sy = iy - ph;
      if (sy < 0 || sy >= H) {
        memset(row, 0, sizeof(float) * (size_t)Wp);
        continue;
      }
      const float *restrict src = x + (c * H + sy) * W;
      for (int64_t i = 0; i < pw; i++) row[i] = 0.f;
      for (int64_t i = 0; i < W; i++) row[pw + i] = src[i];
      for (int64_t i = pw + W; i < Wp; i++) row[i] = 0.f;
    }
  memset(out + C * Hp * Wp, 0, sizeof(float) * (size_t)slack);
}

/* col (Cg*kh*kw, ppad) = im2col of one group's planes xg (Cg, H, W); the
 * columns from OH*OW to ppad are zero. */
static void im2col(const em_conv_geom *g, const float *xg, int64_t ppad, float *col) {
  int64_t P = g->OH * g->OW;
  for (int64_t c = 0; c < g->Cg; c++)
    for (int64_t ky = 0; ky < g->kh; ky++)
      for (int64_t kx = 0; kx < g->kw; kx++) {
        float *row = col + ((c * g->kh + ky) * g->kw + kx) * ppad;
        const float *plane = xg + c * g->H * g->W;
        for (int64_t oy = 0; oy < g->OH; oy++) {
          int64_t iy = oy * g->sh - g->ph + ky * g->dh;
          float *d = row + oy * g->OW;
          if (iy < 0 || iy >= g->H) {
            memset(d, 0, sizeof(float) * (size_t)g->OW);
            continue;
          }
          for (int64_t ox = 0; ox < g->OW; ox++) {
            int64_t ix = ox * g->sw - g->pw + kx * g->dw;
            d[ox] = ix >= 0 && ix < g->W ? plane[iy * g->W + ix] : 0.f;
          }
        }
        memset(row + P, 0, sizeof(float) * (size_t)(ppad - P));
      }
}

/* dxg (Cg, H, W) += col2im of dcol (Cg*kh*kw, ppad). */
static void col2im(const em_conv_geom *g, const float *dcol, int64_t ppad, float *dxg) {
  for (int64_t c = 0; c < g->Cg; c++)
    for (int64_t ky = 0; ky < g->kh; ky++)
      for (int64_t kx = 0; kx < g->kw; kx++) {
        const float *row = dcol + ((c * g->kh + ky) * g->kw + kx) * ppad;
        float *plane = dxg + c * g->H * g->W;
        for (int64_t oy = 0; oy < g->OH; oy++) {
          int64_t iy = oy * g->sh - g->ph + ky * g->dh;
          if (iy < 0 || iy >= g->H) continue;
          for (int64_t ox = 0; ox < g->OW; ox++) {
            int64_t ix = ox * g->sw - g->pw + kx * g->dw;
            if (ix >= 0 && ix < g->W) plane[iy * g->W + ix] += row[oy * g->OW + ox];
          }
        }
      }
}

/* gy^T panels: out (npw / NR, OH * wpad, NR) from one group's gy rows
 * (kg, OH, OW): out[j][oy * wpad + ox][r] = gy[j * NR + r][oy][ox], zero
 * for ox >= OW and for channels >= kg. Adds each channel's sum to db
 * (may be NULL). With AVX-512, each column of a panel is two gathers,
 * and the gathered vectors also sum up db. */
static void pack_gyt(const float *gy, int64_t kg, int64_t OH, int64_t OW, int64_t wpad,
                     int64_t npw, float *out, double *db) {
  int64_t qd = OH * wpad, ohw = OH * OW;
#if FAST_AVX512
  if (ohw * NR < INT32_MAX) {
    const __m512i rows = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int32_t)ohw));
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t j = 0; j < npw; j += NR) {
      float *panel = out + j * qd;
      uint32_t nk = (uint32_t)(kg - j < NR ? kg - j : NR);
      __mmask16 m0 = (__mmask16)(nk >= 16 ? 0xFFFFu : (1u << nk) - 1);
      __mmask16 m1 = (__mmask16)(nk > 16 ? (1u << (nk - 16)) - 1 : 0);
      const float *g0 = gy + j * ohw, *g1 = g0 + 16 * ohw;
      __m512 s0 = zero, s1 = zero;
      for (int64_t oy = 0; oy < OH; oy++) {
        float *d = panel + oy * wpad * NR;
        for (int64_t ox = 0; ox < OW; ox++, d += NR) {
          int64_t p = oy * OW + ox;
          __m512 v0 = _mm512_mask_i32gather_ps(zero, m0, rows, g0 + p, 4);
          __m512 v1 = m1 ? _mm512_mask_i32gather_ps(zero, m1, rows, g1 + p, 4) : zero;
          _mm512_storeu_ps(d, v0);
          _mm512_storeu_ps(d + 16, v1);
          s0 = _mm512_add_ps(s0, v0);
          s1 = _mm512_add_ps(s1, v1);
        }
        for (int64_t ox = OW; ox < wpad; ox++, d += NR) {
          _mm512_storeu_ps(d, zero);
          _mm512_storeu_ps(d + 16, zero);
        }
      }
      if (db) {
        float sums[NR];
        _mm512_storeu_ps(sums, s0);
        _mm512_storeu_ps(sums + 16, s1);
        for (uint32_t r = 0; r < nk; r++) db[j + r] += sums[r];
      }
    }
    return;
  }
#endif
  for (int64_t j = 0; j < npw; j += NR) {
    float *panel = out + j * qd;
    int64_t nk = imin(NR, kg - j);
    for (int64_t oy = 0; oy < OH; oy++) {
      for (int64_t ox = 0; ox < OW; ox++) {
        float *d = panel + (oy * wpad + ox) * NR;
        const float *s = gy + j * ohw + oy * OW + ox;
        for (int64_t r = 0; r < nk; r++) d[r] = s[r * ohw];
        for (int64_t r = nk; r < NR; r++) d[r] = 0.f;
      }
      memset(panel + (oy * wpad + OW) * NR, 0, sizeof(float) * (size_t)((wpad - OW) * NR));
    }
  }
  if (db)
    for (int64_t k = 0; k < kg; k++) db[k] += sum_floats(gy + k * ohw, ohw);
}

/* ---- weight packing (once per call, on the calling thread) --------------------- */

#define W_AT(w, k, c, ky, kx)                                                         \
  em_f32(w)[(k) * (w)->stride[0] + (c) * (w)->stride[1] + (ky) * (w)->stride[2] + \
            (kx) * (w)->stride[3]]

/* Forward A: per group, rows k of Kg in MR-row panels over (c, ky, kx):
 * out (G, round_up(Kg, MR) / MR, Cg*kh*kw, MR). */
static float *pack_w_fwd(const em_conv_geom *g, const em_tensor *w) {
  int64_t ckk = g->Cg * g->kh * g->kw, mp = round_up(g->Kg, MR);
  float *out = em_scratch(sizeof(float) * (size_t)(g->G * mp * ckk));
  float *p = out;
  for (int64_t grp = 0; grp < g->G; grp++)
    for (int64_t i = 0; i < mp; i += MR)
      for (int64_t c = 0; c < g->Cg; c++)
        for (int64_t ky = 0; ky < g->kh; ky++)
          for (int64_t kx = 0; kx < g->kw; kx++)
            for (int64_t r = 0; r < MR; r++)
              *p++ = i + r < g->Kg ? W_AT(w, grp * g->Kg + i + r, c, ky, kx) : 0.f;
  return out;
}

/* Implicit dX A: per group, rows c of Cg over (k, ky', kx') with
 * w'[c][k][ky'][kx'] = w[k][c][kh-1-ky'][kw-1-kx']:
 * out (G, round_up(Cg, MR) / MR, Kg*kh*kw, MR). */
static float *pack_w_dx_flip(const em_conv_geom *g, const em_tensor *w) {
  int64_t kd = g->Kg * g->kh * g->kw, mp = round_up(g->Cg, MR);
  float *out = em_scratch(sizeof(float) * (size_t)(g->G * mp * kd));
  float *p = out;
  for (int64_t grp = 0; grp < g->G; grp++)
    for (int64_t i = 0; i < mp; i += MR)
      for (int64_t k = 0; k < g->Kg; k++)
        for (int64_t ky = 0; ky < g->kh; ky++)
          for (int64_t kx = 0; kx < g->kw; kx++)
            for (int64_t r = 0; r < MR; r++)
              *p++ = i + r < g->Cg
                         ? W_AT(w, grp * g->Kg + k, i + r, g->kh - 1 - ky, g->kw - 1 - kx)
                         : 0.f;
  return out;
}

/* im2col dX A = w^T: per group, rows (c, ky, kx) over k of Kg:
 * out (G, round_up(Cg*kh*kw, MR) / MR, Kg, MR). */
static float *pack_w_dx_t(const em_conv_geom *g, const em_tensor *w) {
  int64_t ckk = g->Cg * g->kh * g->kw, mp = round_up(ckk, MR);
  float *out = em_scratch(sizeof(float) * (size_t)(g->G * mp * g->Kg));
  float *p = out;
  for (int64_t grp = 0; grp < g->G; grp++)
    for (int64_t i = 0; i < mp; i += MR)
      for (int64_t k = 0; k < g->Kg; k++)
        for (int64_t r = 0; r < MR; r++) {
          int64_t row = i + r;
          *p++ = row < ckk ? W_AT(w, grp * g->Kg + k, row / (g->kh * g->kw),
                                  row / g->kw % g->kh, row % g->kw)
                           : 0.f;
        }
  return out;
}

/* Offsets of the shifted rows (c, ky, kx) in padded planes (Hp, wp):
 * c * plane + ky * dh * wp + kx * dw, for c < n. */
static int64_t *shift_offsets(int64_t n, int64_t kh, int64_t kw, int64_t dh, int64_t dw,
                              int64_t plane, int64_t wp) {
  int64_t *off = em_scratch(sizeof(int64_t) * (size_t)(n * kh * kw));
  for (int64_t c = 0; c < n; c++)
    for (int64_t ky = 0; ky < kh; ky++)
      for (int64_t kx = 0; kx < kw; kx++)
        off[(c * kh + ky) * kw + kx] = c * plane + ky * dh * wp + kx * dw;
  return off;
}

static int64_t *row_offsets(int64_t n, int64_t ld) {
  int64_t *off = em_scratch(sizeof(int64_t) * (size_t)n);
  for (int64_t k = 0; k < n; k++) off[k] = k * ld;
  return off;
}

/* ---- work split and thread slots ----------------------------------------------- */

void em_conv_queue_init(em_conv_queue *q, int64_t n_items) {
  atomic_init(&q->next_item, 0);
  q->n_items = n_items;
  atomic_init(&q->next_slot, 0);
  q->n_slots = em_get_num_threads();
}

int em_conv_queue_slot(em_conv_queue *q) {
  int i = atomic_fetch_add(&q->next_slot, 1);
  EM_ASSERT(i < q->n_slots);
  return i;
}

int64_t em_conv_queue_take(em_conv_queue *q) {
  int64_t i = atomic_fetch_add(&q->next_item, 1);
  return i < q->n_items ? i : -1;
}

void em_conv_queue_run(em_conv_queue *q, bool small, void (*fn)(void *ctx, int64_t, int64_t),
                       void *ctx) {
  if (small || q->n_slots == 1) fn(ctx, 0, 1);
  else em_parallel_for(q->n_slots, 1, fn, ctx);
}

/* Scratch for each thread slot: floats per slot rounded to 64 bytes. */
static float *slots_alloc(const em_conv_queue *q, int64_t *floats) {
  *floats = round_up(*floats > 0 ? *floats : 1, 16);
  return em_scratch(sizeof(float) * (size_t)(q->n_slots * *floats));
}

/* A call small enough to run inline (waking a worker costs microseconds). */
static bool small_call(const em_conv_geom *g) {
  double flops = 2.0 * (double)g->N * (double)g->K * (double)(g->OH * g->OW) *
                 (double)(g->Cg * g->kh * g->kw);
  return flops < 4e6;
}

/* ---- forward ------------------------------------------------------------------- */

typedef struct {
  const em_conv_geom *g;
  const float *x;     /* (N, C, H, W) */
  float *y;           /* (N, K, OH, OW) */
  const float *apack; /* pack_w_fwd */
  const float *bias;  /* (K) or NULL */
  const int64_t *off; /* (Cg*kh*kw) row offsets of the column matrix */
  qmap qm;
  bool implicit;
  int64_t Hp, Wp, slack, ppad;
  em_conv_queue q; /* over images */
  float *slots;
  int64_t slot_floats;
} fwd_ctx;

static void fwd_images(void *vctx, int64_t unused0, int64_t unused1) {
  (void)unused0, (void)unused1;
  fwd_ctx *c = vctx;
  const em_conv_geom *g = c->g;
  float *buf = c->slots + em_conv_queue_slot(&c->q) * c->slot_floats;
  float tile[MR * NR] __attribute__((aligned(64)));
  int64_t ckk = g->Cg * g->kh * g->kw, mp = round_up(g->Kg, MR);
  int64_t HW = g->H * g->W, OHW = g->OH * g->OW, plane = c->Hp * c->Wp;
  for (int64_t n; (n = em_conv_queue_take(&c->q)) >= 0;) {
    const float *xn = c->x + n * g->C * HW;
    float *yn = c->y + n * g->K * OHW;
    if (c->implicit) pad_planes(xn, g->C, g->H, g->W, g->ph, g->pw, c->Hp, c->Wp, c->slack, buf);
    for (int64_t grp = 0; grp < g->G; grp++) {
      const float *bsrc = buf + grp * g->Cg * plane;
      if (!c->implicit) {
        im2col(g, xn + grp * g->Cg * HW, c->ppad, buf);
        bsrc = buf;
      }
      const float *ag = c->apack + grp * mp * ckk;
      for (int64_t j = 0; j < c->qm.npanels; j++) {
        const run *rs = c->qm.runs + c->qm.first[j];
        int32_t nrs = c->qm.first[j + 1] - c->qm.first[j];
        if (nrs == 0) continue;
        for (int64_t i = 0; i < mp; i += MR) {
          em_conv_kernel_rows(ckk, ag + i * ckk, bsrc + j * NR, c->off, tile, NR);
          tile_store(tile, imin(MR, g->Kg - i), rs, nrs, yn + (grp * g->Kg + i) * OHW, OHW,
                     c->bias ? c->bias + grp * g->Kg + i : NULL, false);
        }
      }
    }
  }
}

void em_conv2d_fast_forward(const em_conv_geom *g, const em_tensor *x /* (N, C, H, W) */,
                            const em_tensor *w /* (K, C/G, kh, kw) */,
                            const em_tensor *b /* (K) or NULL */,
                            em_tensor *y /* (N, K, OH, OW) */) {
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y));
  if (g->N == 0) return;
  if (em_conv_winograd_ok(g)) {
    em_conv_winograd_forward(g, x, w, b, y);
    return;
  }
  fwd_ctx c = {.g = g, .x = em_f32(x), .y = em_f32(y)};
  int64_t ckk = g->Cg * g->kh * g->kw;
  c.apack = pack_w_fwd(g, w);
  if (b) {
    float *bc = em_scratch(sizeof(float) * (size_t)g->K);
    for (int64_t k = 0; k < g->K; k++) bc[k] = em_f32(b)[k * b->stride[0]];
    c.bias = bc;
  }
  c.implicit = g->sh == 1 && g->sw == 1;
  int64_t need;
  if (c.implicit) {
    c.Hp = g->H + 2 * g->ph;
    c.Wp = g->W + 2 * g->pw;
    c.slack = (g->kw - 1) * g->dw + NR;
    c.off = shift_offsets(g->Cg, g->kh, g->kw, g->dh, g->dw, c.Hp * c.Wp, c.Wp);
    qmap_init(&c.qm, g->OH, g->OW, c.Wp);
    need = g->C * c.Hp * c.Wp + c.slack;
  } else {
    c.ppad = round_up(g->OH * g->OW, NR);
    c.off = row_offsets(ckk, c.ppad);
    qmap_init(&c.qm, g->OH, g->OW, g->OW);
    need = ckk * c.ppad;
  }
  em_conv_queue_init(&c.q, g->N);
  c.slot_floats = need;
  c.slots = slots_alloc(&c.q, &c.slot_floats);
  em_conv_queue_run(&c.q, small_call(g), fwd_images, &c);
}

/* ---- backward ------------------------------------------------------------------ */

/* dW with few columns (Cg*kh*kw <= SMALL_CKK, as in a first layer on one
 * channel), stride 1: dw[k][e] is the dot product, over output pixels, of
 * gy's row k and the padded image shifted by off[e]; no gy^T is packed.
 * Two rows of k at a time hold 2 x (SMALL_CKK + 1) vector partial sums
 * (the last is db) in acc (round_up(kg, 2), SMALL_CKK + 1, 16), which are
 * summed across lanes once at the end. Entries past ckk compute junk that
 * is never read back. */
#define SMALL_CKK 12
#if FAST_AVX512
static void dw_small(const float *gy /* (kg, OH, OW) */, int64_t kg, int64_t OH, int64_t OW,
                     const float *xs, int64_t wp, const int64_t *off, int64_t ckk, float *acc) {
  enum { E = SMALL_CKK + 1 };
  const float *xe[SMALL_CKK];
  for (int e = 0; e < SMALL_CKK; e++) xe[e] = xs + off[e < ckk ? e : 0];
  for (int64_t k = 0; k < kg; k += 2) {
    const float *g0 = gy + k * OH * OW, *g1 = k + 1 < kg ? g0 + OH * OW : g0;
    float *ak = acc + k * E * 16;
    __m512 a0[E], a1[E];
    for (int e = 0; e < E; e++) {
      a0[e] = _mm512_loadu_ps(ak + e * 16);
      a1[e] = _mm512_loadu_ps(ak + (E + e) * 16);
    }
    for (int64_t oy = 0; oy < OH; oy++)
      for (int64_t ox = 0; ox < OW; ox += 16) {
        __mmask16 m = (__mmask16)(OW - ox >= 16 ? 0xFFFFu : (1u << (OW - ox)) - 1);
        _mm_prefetch((const char *)(g0 + oy * OW + ox + 256), _MM_HINT_T0);
        _mm_prefetch((const char *)(g1 + oy * OW + ox + 256), _MM_HINT_T0);
        __m512 v0 = _mm512_maskz_loadu_ps(m, g0 + oy * OW + ox);
        __m512 v1 = _mm512_maskz_loadu_ps(m, g1 + oy * OW + ox);
        for (int e = 0; e < SMALL_CKK; e++) {
          __m512 xv = _mm512_loadu_ps(xe[e] + oy * wp + ox);
          a0[e] = _mm512_fmadd_ps(v0, xv, a0[e]);
          a1[e] = _mm512_fmadd_ps(v1, xv, a1[e]);
        }
        a0[SMALL_CKK] = _mm512_add_ps(a0[SMALL_CKK], v0);
        a1[SMALL_CKK] = _mm512_add_ps(a1[SMALL_CKK], v1);
      }
    for (int e = 0; e < E; e++) {
      _mm512_storeu_ps(ak + e * 16, a0[e]);
      _mm512_storeu_ps(ak + (E + e) * 16, a1[e]);
    }
  }
}
#endif

typedef struct {
  const em_conv_geom *g;
  const float *x, *gy; /* (N, C, H, W), (N, K, OH, OW) */
  float *gx;           /* (N, C, H, W) or NULL */
  bool gx_fresh, want_w, want_b;
  /* dX: implicit (stride 1, pad <= dil*(k-1)) or through col2im */
  bool dx_implicit;
  const float *apx;    /* pack_w_dx_flip or pack_w_dx_t */
  const int64_t *offx; /* row offsets into the padded gy planes or gyb */
  qmap qx;
  int64_t Hq, Wq, slackq;
  /* dW: implicit (stride 1) or on an im2col matrix */
  bool w_implicit, w_small; /* w_small: dw_small */
  const int64_t *offw; /* row offsets of the column matrix (implicit) */
  int64_t Hp, Wp, slack, ppad, qd, mpw, npw;
  /* slot layout, in floats */
  em_conv_queue q; /* over images */
  float *slots;
  int64_t slot_floats;
  int64_t o_x, o_gy, o_dcol, o_gyt, o_dw, o_db;
} bwd_ctx;

/* Backward gives slot s the images [s*N/S, (s+1)*N/S), whichever thread
 * runs it, and the slots' partial dW/db are summed in slot order: the
 * same numbers for the same thread count, run after run (a shared counter
 * would balance load, but make the sums' order depend on timing). */
static void bwd_slot(bwd_ctx *c, int64_t slot) {
  const em_conv_geom *g = c->g;
  float *buf = c->slots + slot * c->slot_floats;
  float *xbuf = buf + c->o_x, *gybuf = buf + c->o_gy, *dcol = buf + c->o_dcol;
  float *gyt = buf + c->o_gyt, *dwp = buf + c->o_dw;
  double *db = (double *)(buf + c->o_db);
  if (c->want_w) memset(dwp, 0, sizeof(float) * (size_t)(g->G * c->mpw * c->npw));
  if (c->want_b) memset(db, 0, sizeof(double) * (size_t)g->K);
  float tile[MR * NR] __attribute__((aligned(64)));
  int64_t ckk = g->Cg * g->kh * g->kw, kd = g->Kg * g->kh * g->kw;
  int64_t HW = g->H * g->W, OHW = g->OH * g->OW;
  int64_t plane = c->Hp * c->Wp, planeq = c->Hq * c->Wq;
  int64_t n_lo = slot * g->N / c->q.n_slots, n_hi = (slot + 1) * g->N / c->q.n_slots;
  for (int64_t n = n_lo; n < n_hi; n++) {
    const float *xn = c->x + n * g->C * HW, *gyn = c->gy + n * g->K * OHW;
    if (c->want_w && c->w_implicit)
      pad_planes(xn, g->C, g->H, g->W, g->ph, g->pw, c->Hp, c->Wp, c->slack, xbuf);
    if (c->gx && c->dx_implicit) {
      int64_t qh = g->dh * (g->kh - 1) - g->ph, qw = g->dw * (g->kw - 1) - g->pw;
      pad_planes(gyn, g->K, g->OH, g->OW, qh, qw, c->Hq, c->Wq, c->slackq, gybuf);
    }
    for (int64_t grp = 0; grp < g->G; grp++) {
      const float *gyg = gyn + grp * g->Kg * OHW;
#if FAST_AVX512
      if (c->w_small) {
        dw_small(gyg, g->Kg, g->OH, g->OW, xbuf + grp * g->Cg * plane, c->Wp, c->offw, ckk,
                 dwp + grp * c->mpw * c->npw);
      } else
#endif
      if (c->want_w) { /* dw^T (ckk, Kg) += X (ckk, qd) @ gy^T (qd, Kg) */
        pack_gyt(gyg, g->Kg, g->OH, g->OW, c->w_implicit ? c->Wp : g->OW, c->npw, gyt,
                 c->want_b ? db + grp * g->Kg : NULL);
        const float *xs = xbuf + grp * g->Cg * plane;
        if (!c->w_implicit) {
          im2col(g, xn + grp * g->Cg * HW, c->ppad, xbuf);
          xs = xbuf;
        }
        float *dwg = dwp + grp * c->mpw * c->npw;
        for (int64_t i = 0; i < c->mpw; i += MR) {
          const float *arow[MR];
          for (int64_t r = 0; r < MR; r++) {
            int64_t row = i + r < ckk ? i + r : 0; /* rows past ckk are never read back */
            arow[r] = xs + (c->w_implicit ? c->offw[row] : row * c->ppad);
          }
          for (int64_t j = 0; j < c->npw; j += NR)
            em_conv_kernel_acc(c->qd, arow, gyt + j * c->qd, dwg + i * c->npw + j, c->npw);
        }
      } else if (c->want_b) {
        for (int64_t k = 0; k < g->Kg; k++) db[grp * g->Kg + k] += sum_floats(gyg + k * OHW, OHW);
      }
      if (!c->gx) continue;
      float *dxg = c->gx + (n * g->C + grp * g->Cg) * HW;
      if (c->dx_implicit) { /* dx (Cg, q') = w' (Cg, kd) @ GY (kd, q') */
        int64_t mp = round_up(g->Cg, MR);
        const float *ag = c->apx + grp * mp * kd, *bsrc = gybuf + grp * g->Kg * planeq;
        for (int64_t j = 0; j < c->qx.npanels; j++) {
          const run *rs = c->qx.runs + c->qx.first[j];
          int32_t nrs = c->qx.first[j + 1] - c->qx.first[j];
          if (nrs == 0) continue;
          for (int64_t i = 0; i < mp; i += MR) {
            em_conv_kernel_rows(kd, ag + i * kd, bsrc + j * NR, c->offx, tile, NR);
            tile_store(tile, imin(MR, g->Cg - i), rs, nrs, dxg + i * HW, HW, NULL, !c->gx_fresh);
          }
        }
      } else { /* dcol (ckk, P) = w^T (ckk, Kg) @ gy (Kg, P), then col2im */
        int64_t mp = round_up(ckk, MR);
        for (int64_t k = 0; k < g->Kg; k++) {
          memcpy(gybuf + k * c->ppad, gyg + k * OHW, sizeof(float) * (size_t)OHW);
          memset(gybuf + k * c->ppad + OHW, 0, sizeof(float) * (size_t)(c->ppad - OHW));
        }
        const float *ag = c->apx + grp * mp * g->Kg;
        for (int64_t j = 0; j < c->ppad; j += NR)
          for (int64_t i = 0; i < mp; i += MR) {
            em_conv_kernel_rows(g->Kg, ag + i * g->Kg, gybuf + j, c->offx, dcol + i * c->ppad + j,
                                c->ppad);
          }
        if (c->gx_fresh) memset(dxg, 0, sizeof(float) * (size_t)(g->Cg * HW));
        col2im(g, dcol, c->ppad, dxg);
      }
    }
  }
}

static void bwd_images(void *vctx, int64_t s0, int64_t s1) {
  for (int64_t s = s0; s < s1; s++) bwd_slot(vctx, s);
}

void em_conv2d_fast_backward(const em_conv_geom *g, const em_tensor *x /* (N, C, H, W) */,
                             const em_tensor *w /* (K, C/G, kh, kw) */,
                             const em_tensor *gy /* (N, K, OH, OW) */,
                             const em_conv_grads *out) {
  EM_ASSERT(x->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(x) && em_tensor_is_contiguous(gy));
  em_conv_grads rest = *out; /* what the direct path below computes */
  if (out->gx && em_conv_winograd_ok(g)) {
    em_conv_winograd_backward_x(g, w, gy, out->gx, out->gx_fresh);
    rest.gx = NULL;
    if (!rest.gw && !rest.gb) return;
  }
  out = &rest;
  bwd_ctx c = {.g = g, .x = em_f32(x), .gy = em_f32(gy)};
  c.gx = out->gx ? em_f32(out->gx) : NULL;
  c.gx_fresh = out->gx_fresh;
  c.want_w = out->gw != NULL;
  c.want_b = out->gb != NULL;
  if (g->N == 0) { /* an empty batch: fresh gradients are zero */
    if (out->gx && out->gx_fresh) em_tensor_fill_(out->gx, 0.0);
    if (out->gw && out->gw_fresh) em_tensor_fill_(out->gw, 0.0);
    if (out->gb && out->gb_fresh) em_tensor_fill_(out->gb, 0.0);
    return;
  }
  int64_t ckk = g->Cg * g->kh * g->kw, OHW = g->OH * g->OW;
  bool stride1 = g->sh == 1 && g->sw == 1;
  c.ppad = round_up(OHW, NR);
  c.Hp = g->H + 2 * g->ph;
  c.Wp = g->W + 2 * g->pw;
  c.slack = (g->kw - 1) * g->dw + NR;
  int64_t o = 0; /* slot layout */
  if (c.want_w) {
    c.w_implicit = stride1;
    c.w_small = FAST_AVX512 && stride1 && ckk <= SMALL_CKK;
    c.mpw = round_up(ckk, MR);
    c.npw = round_up(g->Kg, NR);
    if (c.w_small) { /* dw_small's partials: (G, round_up(Kg, 2), SMALL_CKK + 1, 16) */
      c.mpw = round_up(g->Kg, 2);
      c.npw = (SMALL_CKK + 1) * 16;
    }
    if (c.w_implicit) {
      c.offw = shift_offsets(g->Cg, g->kh, g->kw, g->dh, g->dw, c.Hp * c.Wp, c.Wp);
      c.qd = g->OH * c.Wp;
    } else {
      c.qd = OHW;
    }
    c.o_x = o;
    o += round_up(c.w_implicit ? g->C * c.Hp * c.Wp + c.slack : ckk * c.ppad, 16);
    c.o_gyt = o;
    if (!c.w_small) o += round_up(c.npw * c.qd, 16);
    c.o_dw = o;
    o += round_up(g->G * c.mpw * c.npw, 16);
  }
  if (c.gx) {
    c.dx_implicit = stride1 && g->ph <= g->dh * (g->kh - 1) && g->pw <= g->dw * (g->kw - 1);
    c.o_gy = o;
    if (c.dx_implicit) {
      c.Hq = g->OH + 2 * (g->dh * (g->kh - 1) - g->ph);
      c.Wq = g->OW + 2 * (g->dw * (g->kw - 1) - g->pw);
      c.slackq = (g->kw - 1) * g->dw + NR;
      c.apx = pack_w_dx_flip(g, w);
      c.offx = shift_offsets(g->Kg, g->kh, g->kw, g->dh, g->dw, c.Hq * c.Wq, c.Wq);
      qmap_init(&c.qx, g->H, g->W, c.Wq);
      o += round_up(g->K * c.Hq * c.Wq + c.slackq, 16);
    } else {
      c.apx = pack_w_dx_t(g, w);
      c.offx = row_offsets(g->Kg, c.ppad);
      o += round_up(g->Kg * c.ppad, 16);
      c.o_dcol = o;
      o += round_up(round_up(ckk, MR) * c.ppad, 16);
    }
  }
  if (c.want_b) {
    c.o_db = o;
    o += round_up(2 * g->K, 16); /* doubles */
  }
  em_conv_queue_init(&c.q, g->N);
  c.slot_floats = o;
  c.slots = slots_alloc(&c.q, &c.slot_floats);
  if (small_call(g) || c.q.n_slots == 1) bwd_images(&c, 0, c.q.n_slots);
  else em_parallel_for(c.q.n_slots, 1, bwd_images, &c);

  /* Sum the slots' partials into the gradients, in slot order. */
  int used = c.q.n_slots;
  if (c.w_small) { /* lanes and slots of dw_small's partials; db is entry SMALL_CKK */
    float *gw = em_f32(out->gw), *gb = out->gb ? em_f32(out->gb) : NULL;
    for (int64_t grp = 0; grp < g->G; grp++)
      for (int64_t k = 0; k < g->Kg; k++)
        for (int64_t e = 0; e <= SMALL_CKK; e++) {
          if (e >= ckk && e < SMALL_CKK) continue;
          if (e == SMALL_CKK && !gb) continue;
          double acc = 0;
          for (int s = 0; s < used; s++) {
            const float *v = c.slots + s * c.slot_floats + c.o_dw +
                             (grp * c.mpw + k) * c.npw + e * 16;
            for (int l = 0; l < 16; l++) acc += v[l];
          }
          bool fresh = e == SMALL_CKK ? out->gb_fresh : out->gw_fresh;
          float *d = e == SMALL_CKK ? gb + grp * g->Kg + k : gw + (grp * g->Kg + k) * ckk + e;
          *d = fresh ? (float)acc : *d + (float)acc;
        }
    return;
  }
  if (c.want_w) {
    float *gw = em_f32(out->gw); /* (K, Cg*kh*kw) */
    for (int64_t grp = 0; grp < g->G; grp++)
      for (int64_t k = 0; k < g->Kg; k++)
        for (int64_t r = 0; r < ckk; r++) {
          float acc = 0.f;
          for (int s = 0; s < used; s++)
            acc += c.slots[s * c.slot_floats + c.o_dw + (grp * c.mpw + r) * c.npw + k];
          float *d = gw + (grp * g->Kg + k) * ckk + r;
          *d = out->gw_fresh ? acc : *d + acc;
        }
  }
  if (c.want_b) {
    float *gb = em_f32(out->gb);
    for (int64_t k = 0; k < g->K; k++) {
      double acc = 0;
      for (int s = 0; s < used; s++) acc += ((double *)(c.slots + s * c.slot_floats + c.o_db))[k];
      gb[k] = out->gb_fresh ? (float)acc : gb[k] + (float)acc;
    }
  }
}
