/* sdpa.c: em_sdpa, fused scaled dot-product attention with its backward,
 * one front-end for every device (op-frontend.h). The contract is
 * em-ops.h's: softmax(q k^T * scale + mask) v over q (N, H, L, E), k (N,
 * H, S, E), v (N, H, S, Ev), the causal mask aligned to the last query,
 * an optional key padding mask (N, S), dropout on the weights when
 * training; a row with every key masked gives zeros (and passes no
 * gradient).
 *
 * Forward is the backend's sdpa_forward: the output and one log-sum-exp
 * per query row (N, H, L), nothing of size L x S; backward is its
 * sdpa_backward, which recomputes the weights from q, k and the
 * log-sum-exps (FlashAttention-2's scheme) and the dropout mask from its
 * counter. The dropout stream is one (seed, counter) pair drawn from the
 * caller's rng, two em_rng_next calls as em_dropout makes, and weight
 * (n, h, i, j) takes element ((n H + h) L + i) S + j of it: the mask is
 * the one em_dropout would draw over the (N, H, L, S) weights from the
 * same rng state (kern-random.h), on every device. The kernels: the CPU's
 * tiled one (cpu-sdpa.c), the reference device's rows (ref-attention.c)
 * and CUDA's (cuda-sdpa.cu), both over kernels/kern-attention.h.
 *
 * em_sdpa_packed is the same attention over the heads of a packed
 * in-projection, qkv (N, L, 3 H E) -> (N, L, H E): self-attention (S =
 * L), its q, k and v the views of qkv's three column blocks as (N, H, L,
 * E), its output written through an (N, H, L, E) view of the (N, L, H E)
 * result, and its backward writing the three gradients through views of
 * qkv's one gradient buffer. The same kernels compute the same numbers
 * (bit for bit those of em_sdpa over the views of em_slice, em_reshape
 * and em_transpose, merged back by em_transpose, em_contiguous and
 * em_reshape: tests/engine/ops-nn/test-sdpa.c) without the copies those
 * cost: the merge's forward copy, the gradients' way back through
 * permute, reshape and slice (a zero fill and three adds).
 *
 * The tape node: in = q, k, v (em_sdpa) or qkv (em_sdpa_packed); saved[0]
 * = the output, saved[1] = lse, saved[2] = the key padding mask on the
 * op's device (or NULL); i[0] = causal, i[1], i[2] = the dropout seed and
 * counter, i[3] = the heads (packed; 0 for em_sdpa); f[0] = scale, f[1] =
 * the dropout probability (0 when not training). */
#include "op-frontend.h"
#include "ops-private.h"

static em_sdpa_args args_of(const em_node *n) {
  em_sdpa_args a = {.causal = n->i[0] != 0, .scale = n->f[0], .dropout_p = n->f[1],
                    .seed = (uint64_t)n->i[1], .counter = (uint64_t)n->i[2]};
  return a;
}

/* Columns [at, at + H E) of t (N, L, C), any strides, seen as (N, H, L,
 * E): a head's features are E adjacent columns (PyTorch's in_proj and
 * merge layout). */
static em_tensor *heads_view(const em_tensor *t, int64_t H, int64_t E, int64_t at) {
  const int64_t shape[4] = {t->shape[0], H, t->shape[1], E};
  const int64_t stride[4] = {t->stride[0], E * t->stride[2], t->stride[1], t->stride[2]};
  return em_view_raw(t, 4, shape, stride, t->offset + at * t->stride[2]);
}

/* The kernel's views of a node's tensors: q, k, v and the output it saved. */
static void node_views(const em_node *n, em_tensor **q, em_tensor **k, em_tensor **v,
                       em_tensor **o) {
  const int64_t H = n->i[3];
  if (!H) {
    *q = n->in[0];
    *k = n->in[1];
    *v = n->in[2];
    *o = n->saved[0];
    return;
  }
  const int64_t E = n->in[0]->shape[2] / (3 * H);
  *q = heads_view(n->in[0], H, E, 0);
  *k = heads_view(n->in[0], H, E, H * E);
  *v = heads_view(n->in[0], H, E, 2 * H * E);
  *o = heads_view(n->saved[0], H, E, 0);
}

static void sdpa_backward(em_node *n) {
  em_tensor *q, *k, *v, *o, *lse = n->saved[1], *kpm = n->saved[2], *g = n->out->grad;
  node_views(n, &q, &k, &v, &o);
  const char *prev = op_backward_begin(n);
  const int64_t H = n->i[3];
  em_grad_buffer bq, bk, bv;
  em_tensor *gq, *gk, *gv;
  if (H) { /* one buffer for qkv, written through the heads' views */
    em_tensor *gqkv = em_grad_buffer_begin(n->in[0], &bq);
    const int64_t E = q->shape[3];
    gq = gqkv ? heads_view(gqkv, H, E, 0) : NULL;
    gk = gqkv ? heads_view(gqkv, H, E, H * E) : NULL;
    gv = gqkv ? heads_view(gqkv, H, E, 2 * H * E) : NULL;
    g = heads_view(g, H, E, 0);
  } else {
    gq = em_grad_buffer_begin(q, &bq);
    gk = em_grad_buffer_begin(k, &bk);
    gv = em_grad_buffer_begin(v, &bv);
  }
  if ((gq || gk || gv) && op_live(g, q, k, v, o, lse, kpm, gq, gk, gv)) {
    em_sdpa_args a = args_of(n);
    EM_KCALL(op_k(g), sdpa_backward, gq, gk, gv, g, q, k, v, o, lse, kpm, &a);
    em_grad_buffer_end(&bq);
    if (!H) {
      em_grad_buffer_end(&bk);
      em_grad_buffer_end(&bv);
    }
  }
  em_device_set_op(prev);
}

/* The key padding mask on q's device: (N, S) u8. */
static em_tensor *padding_mask(const em_tensor *q, const em_tensor *kpm, int64_t N, int64_t S) {
  if (!kpm) return NULL;
  EM_ASSERT(kpm->dtype == EM_DTYPE_U8 && "sdpa: key_padding_mask must be u8");
  EM_ASSERT(kpm->ndim == 2 && kpm->shape[0] == N && kpm->shape[1] == S &&
            "sdpa: key_padding_mask must be (N, S)");
  em_tensor *m = (em_tensor *)kpm;
  return em_device_eq(m->device, q->device) ? m : em_to_device(m, q->device);
}

/* Both ops once their output y exists: the kernel on the views q, k, v
 * (N, H, L|S, E|Ev) and yv (y seen as (N, H, L, Ev)), then the node for
 * the inputs in (q, k, v, or qkv with heads > 0). */
static void sdpa_run(em_tensor *y, em_tensor *yv, em_tensor *q, em_tensor *k, em_tensor *v,
                     const em_sdpa_params *p, int n_in, em_tensor **in, int64_t heads) {
  const int64_t N = q->shape[0], H = q->shape[1], L = q->shape[2], E = q->shape[3];
  const int64_t S = k->shape[2], Ev = v->shape[3];
  em_tensor *kpm = padding_mask(q, p->key_padding_mask, N, S);
  const bool drop = p->training && p->dropout_p > 0;
  EM_ASSERT(p->dropout_p >= 0 && p->dropout_p <= 1 && (!drop || p->rng));
  em_sdpa_args a = {.causal = p->causal,
                    .scale = p->scale > 0 ? p->scale : 1.0 / sqrt((double)E),
                    .dropout_p = drop ? p->dropout_p : 0.0};
  if (drop) {
    a.seed = em_rng_next(p->rng);
    a.counter = em_rng_next(p->rng);
  }
  const int64_t ls[3] = {N, H, L};
  em_tensor *lse = em_empty_on(q->device, q->dtype, 3, ls);
  const em_kernels *kt = op_k(q);
  if (!op_live(q, k, v, kpm, y, lse) || !OP_HAS(kt, sdpa_forward, "sdpa", q) ||
      !OP_HAS(kt, sdpa_backward, "sdpa", q))
    return;
  if (em_tensor_numel(y) > 0) {
    em_op_add_flops(2.0 * (double)(N * H) * (double)L * (double)S * (double)(E + Ev));
    EM_KCALL(kt, sdpa_forward, yv, lse, q, k, v, kpm, &a);
  }
  if (em_needs_grad(n_in, in)) {
    em_node *nd = em_record(heads ? "sdpa_packed" : "sdpa", sdpa_backward, y, n_in, in);
    nd->saved[0] = y;
    nd->saved[1] = lse;
    nd->saved[2] = kpm;
    nd->i[0] = a.causal;
    nd->i[1] = (int64_t)a.seed;
    nd->i[2] = (int64_t)a.counter;
    nd->i[3] = heads;
    nd->f[0] = a.scale;
    nd->f[1] = a.dropout_p;
  }
}

em_tensor *em_sdpa(em_tensor *q, em_tensor *k, em_tensor *v, const em_sdpa_params *p) {
  EM_ASSERT(em_dtype_is_float(q->dtype) && q->ndim == 4 && k->ndim == 4 && v->ndim == 4 &&
            "sdpa: q, k, v must be 4-D float tensors");
  OP_BEGIN("sdpa", 3, q, k, v);
  const int64_t N = q->shape[0], H = q->shape[1], L = q->shape[2], E = q->shape[3];
  const int64_t S = k->shape[2], Ev = v->shape[3];
  EM_ASSERT(k->dtype == q->dtype && v->dtype == q->dtype && "sdpa: q, k, v of one dtype");
  EM_ASSERT(k->shape[0] == N && k->shape[1] == H && k->shape[3] == E &&
            "sdpa: k must be (N, H, S, E)");
  EM_ASSERT(v->shape[0] == N && v->shape[1] == H && v->shape[2] == S &&
            "sdpa: v must be (N, H, S, Ev)");
  const int64_t os[4] = {N, H, L, Ev};
  em_tensor *y = em_empty_on(q->device, q->dtype, 4, os);
  em_tensor *in[3] = {q, k, v};
  sdpa_run(y, y, q, k, v, p, 3, in, 0);
  return OP_END(y);
}

em_tensor *em_sdpa_packed(em_tensor *qkv, int heads, const em_sdpa_params *p) {
  EM_ASSERT(em_dtype_is_float(qkv->dtype) && qkv->ndim == 3 && heads > 0 &&
            qkv->shape[2] % (3 * (int64_t)heads) == 0 &&
            "sdpa_packed: qkv must be (N, L, 3 H E) floats");
  OP_BEGIN("sdpa_packed", 1, qkv);
  const int64_t N = qkv->shape[0], L = qkv->shape[1], D = qkv->shape[2] / 3, E = D / heads;
  const int64_t ys[3] = {N, L, D};
  em_tensor *y = em_empty_on(qkv->device, qkv->dtype, 3, ys);
  em_tensor *q = heads_view(qkv, heads, E, 0), *k = heads_view(qkv, heads, E, D);
  em_tensor *v = heads_view(qkv, heads, E, 2 * D);
  sdpa_run(y, heads_view(y, heads, E, 0), q, k, v, p, 1, &qkv, heads);
  return OP_END(y);
}
