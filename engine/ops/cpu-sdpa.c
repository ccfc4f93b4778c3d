/* cpu-sdpa.c: the CPU backend's fused scaled dot-product attention (the
 * sdpa_forward and sdpa_backward entries of em-backend.h), f32 and f64.
 * The op front-end is sdpa.c; the formulas are those of
 * engine/device/kernels/kern-attention.h, the reference device's rows.
 *
 * FlashAttention-2's scheme, one (batch, head) per task of the pool:
 *  - forward walks the queries in tiles of BQ rows and, for each, the keys
 *    in tiles of BK: the score tile (BQ, BK) = Q K^T, the mask, then the
 *    online softmax (a running maximum and sum per row, the output rows
 *    rescaled when the maximum grows) and O += P V. It keeps the output
 *    and one log-sum-exp per query row; no (L, S) matrix exists at any
 *    time, only one tile per thread;
 *  - backward recomputes each tile's weights P = exp(s - lse) from Q, K
 *    and the saved lse, then dP = dO V^T, dS = P (dP - D) with D = rowsum
 *    (dO o), and accumulates dV += P^T dO, dK += dS^T Q (whole-head
 *    buffers) and dQ += dS K (one query tile);
 *  - dropout draws each weight's keep decision from the counter-based
 *    generator (kern-random.h, element ((n H + h) L + i) S + j of the
 *    stream), so backward regenerates the forward's mask bit for bit, and
 *    it is em_dropout's mask and the other devices' for the same draws;
 *  - causal tiles beyond a query tile's last visible key are skipped;
 *  - a forward of fewer than FEW queries (a KV-cache step: one query
 *    over the whole cache) packs nothing: each score is a dot product of
 *    q with a row of K where it lies, each output row accumulates P V
 *    from the rows of V, with the same online softmax over blocks of BK
 *    keys. Its sums run in another order than the tiles' (a step's output
 *    equals the full forward's to rounding, not bit for bit).
 * The head's K, K^T, V (and V^T) are packed once, padded with zeros to
 * multiples of 16, into per-thread buffers from the caching allocator;
 * the products are cpu-sdpa-tiles.h's register-blocked loop (8 x 16
 * blocks of the output, fma in reduction order; backward's transposed
 * operands read in place), the row work (mask, exp, sums in fixed lanes)
 * written to vectorise, all compiled for x86-64-v4, v3 and the baseline
 * (EM_CPU_CLONES): fma rounds once and no sum depends on the vector
 * width, so every clone gives the same bits (checked: v4, v3 and the
 * baseline's libm fma agree on f32 and f64, forward and backward), and a
 * head is computed by one thread in one order, so the numbers do not
 * depend on the thread count either.
 *
 * Numerics (f32): scores, products and the output accumulate in float
 * (E, Ev or a BK-long tile per step of the reduction); the softmax sums
 * and D are in double; exp is em_expf (about 2 ulp). */
#include "ops-private.h"
#include "em-cpu.h"

#include "em-pool.h"

#include "../device/kernels/kern-random.h"

#define BQ 64 /* queries per tile (a multiple of 8) */
#define BK 64 /* keys per tile (a multiple of 16) */
#define FEW 8 /* fewer queries than this: the forward's rows (fwd_rows), no packing */
#define RUP(x, a) (((x) + (a) - 1) / (a) * (a))

/* One (batch, head): its operands and outputs (rows, features; any
 * strides) and the scalars. */
typedef struct {
  const void *q, *k, *v, *g; /* g: backward's upstream gradient */
  void *o;                   /* the output forward writes, or the one backward reads */
  void *gq, *gk, *gv;        /* backward's gradients (NULL: not wanted) */
  int64_t qs[2], ks[2], vs[2], gs[2], os[2], gqs[2], gks[2], gvs[2];
  int64_t nh, L, S, E, Ev; /* nh = n H + h */
  bool causal, dropout;
  double scale, zscale;
  uint64_t threshold, seed, counter;
  const uint8_t *hidden; /* (Sp): the keys the padding mask hides, and those past S */
} sd_head;

/* A thread's buffers (elements of the call's dtype; sizes at sd_work_new). */
typedef struct {
  int64_t Sp, Ep, Evp;
  void *kt, *kk, *vv, *vt, *qt, *dot, *st, *dpt, *dq, *dk, *dv, *ot, *z, *m;
  double *l;
  uint8_t *hidden;
  void *base;
  size_t bytes;
} sd_work;

/* The exclusive end of the keys query i sees (0: none). */
static inline int64_t key_end(const sd_head *hd, int64_t i) {
  if (!hd->causal) return hd->S;
  int64_t e = i + hd->S - hd->L + 1;
  return e < 0 ? 0 : e < hd->S ? e : hd->S;
}

#define SD_T float
#define SD_FN(f) f##_f32
#define SD_FMA fmaf
#define SD_EXP em_expf
#include "cpu-sdpa-tiles.h"
#undef SD_T
#undef SD_FN
#undef SD_FMA
#undef SD_EXP
#define SD_T double
#define SD_FN(f) f##_f64
#define SD_FMA fma
#define SD_EXP exp
#include "cpu-sdpa-tiles.h"
#undef SD_T
#undef SD_FN
#undef SD_FMA
#undef SD_EXP

/* One call: the tensors and what every head shares. */
typedef struct {
  const em_tensor *q, *k, *v, *g, *kpm, *o, *lse;
  em_tensor *out, *out_lse, *gq, *gk, *gv;
  const em_sdpa_args *a;
  bool backward, f64;
  int64_t N, H, L, S, E, Ev;
} sd_call;

static sd_work sd_work_new(const sd_call *c) {
  sd_work w = {.Sp = RUP(c->S, 16), .Ep = RUP(c->E, 16), .Evp = RUP(c->Ev, 16)};
  const size_t es = c->f64 ? sizeof(double) : sizeof(float);
  const bool few = !c->backward && c->L < FEW;
  /* element counts, in the order of the pointers */
  const int64_t n[14] = {
      few ? 0 : c->E * w.Sp,             /* kt (E, Sp) */
      c->backward ? w.Sp * w.Ep : 0,     /* kk (Sp, Ep) */
      c->backward || few ? 0 : w.Sp * w.Evp, /* vv (Sp, Evp) */
      c->backward ? c->Ev * w.Sp : 0,    /* vt (Ev, Sp) */
      BQ * w.Ep,                         /* qt (BQ, Ep) */
      c->backward ? BQ * w.Evp : 0,      /* dot (BQ, Evp) */
      BQ * BK,                           /* st */
      c->backward ? BQ * BK : 0,         /* dpt */
      c->backward ? BQ * w.Ep : 0,       /* dq */
      c->backward ? w.Sp * w.Ep : 0,     /* dk */
      c->backward ? w.Sp * w.Evp : 0,    /* dv */
      c->backward ? 0 : BQ * w.Evp,      /* ot */
      BK,                                /* z */
      BQ,                                /* m (forward) or D (backward) */
  };
  size_t off[14], total = 0;
  for (int i = 0; i < 14; i++) {
    off[i] = total;
    total += RUP((size_t)n[i] * es, 64);
  }
  const size_t tail = total;
  total += RUP(sizeof(double) * BQ, 64) + RUP((size_t)w.Sp + 1, 64);
  w.bytes = total;
  w.base = em_alloc(total);
  EM_ASSERT(w.base && "sdpa: out of memory for the attention tiles");
  char *b = w.base;
  void **ptrs[14] = {&w.kt, &w.kk, &w.vv, &w.vt, &w.qt, &w.dot, &w.st,
                     &w.dpt, &w.dq, &w.dk, &w.dv, &w.ot, &w.z, &w.m};
  for (int i = 0; i < 14; i++) *ptrs[i] = b + off[i];
  w.l = (double *)(b + tail);
  w.hidden = (uint8_t *)(b + tail + RUP(sizeof(double) * BQ, 64));
  return w;
}

/* Head (n, h) of t (N, H, rows, features): its first element, and its
 * row and feature strides into s (NULL for NULL). */
static void *head_of(const em_tensor *t, int64_t n, int64_t h, int64_t *s) {
  if (!t) return NULL;
  s[0] = t->stride[2];
  s[1] = t->stride[3];
  return (char *)em_tensor_ptr(t) +
         (size_t)(n * t->stride[0] + h * t->stride[1]) * em_dtype_size(t->dtype);
}

/* Head t = n H + h of the call. */
static sd_head sd_head_of(const sd_call *c, sd_work *w, int64_t t) {
  const int64_t n = t / c->H, h = t % c->H;
  const em_sdpa_args *a = c->a;
  sd_head hd = {
      .nh = t, .L = c->L, .S = c->S, .E = c->E, .Ev = c->Ev,
      .causal = a->causal, .dropout = a->dropout_p > 0, .scale = a->scale,
      .zscale = a->dropout_p < 1 ? 1.0 / (1.0 - a->dropout_p) : 0.0,
      .threshold = em_kdropout_threshold(a->dropout_p), .seed = a->seed, .counter = a->counter,
      .hidden = w->hidden,
  };
  if (!c->f64) hd.zscale = em_kdropout_scale(a->dropout_p); /* em_dropout's f32 factor */
  hd.q = head_of(c->q, n, h, hd.qs);
  hd.k = head_of(c->k, n, h, hd.ks);
  hd.v = head_of(c->v, n, h, hd.vs);
  hd.g = head_of(c->g, n, h, hd.gs);
  hd.o = head_of(c->backward ? c->o : c->out, n, h, hd.os);
  hd.gq = head_of(c->gq, n, h, hd.gqs);
  hd.gk = head_of(c->gk, n, h, hd.gks);
  hd.gv = head_of(c->gv, n, h, hd.gvs);
  const uint8_t *km = c->kpm ? (const uint8_t *)em_tensor_ptr(c->kpm) + n * c->kpm->stride[0] : NULL;
  for (int64_t j = 0; j < w->Sp; j++)
    w->hidden[j] = j >= c->S || (km && km[j * c->kpm->stride[1]] != 0);
  return hd;
}

/* Heads [t0, t1) with one set of buffers. */
static void sd_heads(void *ctx, int64_t t0, int64_t t1) {
  const sd_call *c = ctx;
  sd_work w = sd_work_new(c);
  for (int64_t t = t0; t < t1; t++) {
    const sd_head hd = sd_head_of(c, &w, t);
    const int64_t qrow = t * c->L; /* lse is contiguous (N, H, L) */
    if (!c->backward && !c->f64)
      (c->L < FEW ? fwd_rows_f32 : fwd_head_f32)(&hd, &w, em_f32(c->out_lse) + qrow);
    else if (!c->backward)
      (c->L < FEW ? fwd_rows_f64 : fwd_head_f64)(&hd, &w, em_f64(c->out_lse) + qrow);
    else if (!c->f64)
      bwd_head_f32(&hd, &w, em_f32(c->lse) + qrow);
    else
      bwd_head_f64(&hd, &w, em_f64(c->lse) + qrow);
  }
  em_free(w.base, w.bytes);
}

/* The heads over the pool: one task per head once the call is worth
 * sharing (about a million multiply-adds), else inline. */
static void sd_run(sd_call *c) {
  const int64_t heads = c->N * c->H;
  const double work = (double)heads * (double)c->L * (double)c->S * (double)(c->E + c->Ev);
  if (heads == 0) return;
  em_parallel_for(heads, work >= 1e6 ? 1 : heads, sd_heads, c);
}

static sd_call sd_call_of(const em_tensor *q, const em_tensor *k, const em_tensor *v,
                          const em_tensor *kpm, const em_sdpa_args *a) {
  EM_ASSERT(EM_IS_FLOAT(q) && k->dtype == q->dtype && v->dtype == q->dtype);
  EM_ASSERT(!kpm || (kpm->dtype == EM_DTYPE_U8 && kpm->ndim == 2));
  sd_call c = {.q = q, .k = k, .v = v, .kpm = kpm, .a = a, .f64 = q->dtype == EM_DTYPE_F64,
               .N = q->shape[0], .H = q->shape[1], .L = q->shape[2], .S = k->shape[2],
               .E = q->shape[3], .Ev = v->shape[3]};
  return c;
}

em_status em_cpu_sdpa_forward(em_tensor *o, em_tensor *lse, const em_tensor *q, const em_tensor *k,
                              const em_tensor *v, const em_tensor *kpm, const em_sdpa_args *a) {
  EM_ASSERT(em_tensor_is_contiguous(lse) && o->dtype == q->dtype);
  sd_call c = sd_call_of(q, k, v, kpm, a);
  c.out = o;
  c.out_lse = lse;
  sd_run(&c);
  return EM_OK;
}

em_status em_cpu_sdpa_backward(em_tensor *gq, em_tensor *gk, em_tensor *gv, const em_tensor *g,
                               const em_tensor *q, const em_tensor *k, const em_tensor *v,
                               const em_tensor *o, const em_tensor *lse, const em_tensor *kpm,
                               const em_sdpa_args *a) {
  EM_ASSERT(em_tensor_is_contiguous(lse));
  sd_call c = sd_call_of(q, k, v, kpm, a);
  c.backward = true;
  c.g = g;
  c.o = o;
  c.lse = lse;
  c.gq = gq;
  c.gk = gk;
  c.gv = gv;
  sd_run(&c);
  return EM_OK;
}
