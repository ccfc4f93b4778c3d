/* trainer-ddp.c: the trainer's data-parallel half (em_trainer_set_comm).
 *
 * Each rank holds a replica and its own loader over its share of every
 * epoch (the loader's distributed sampler: rank r takes every world-th
 * index of the epoch's permutation). What keeps the replicas equal and
 * the ranks in step:
 * - at the start of a run, the ranks compare what drives their collectives
 *   (position, model size, gradient buckets, data lengths, metrics) and
 *   refuse to start when they differ; then every parameter and buffer is
 *   broadcast from rank 0;
 * - each micro-batch's loss is averaged over the ranks before backward,
 *   so the loss watchdog decides the same on every rank, and the loss
 *   reported is the global one;
 * - the micro-batch ending an optimiser step runs backward with the
 *   bucketer's hooks (engine/dist/ddp.c); before clipping, em_ddp_finish
 *   leaves the averaged gradients on every rank, so the norm, the
 *   watchdog and the step are the same everywhere;
 * - a stop request is agreed on (a sum of flags) between optimiser
 *   steps, so that all ranks stop at the same step;
 * - divergence stops the run (a rollback would need every rank to reach
 *   rank 0's checkpoints);
 * - evaluation: each rank evaluates its strided shard of the test set
 *   (sample rank, rank + world, ...; no padding, so every sample counts
 *   once), with rank 0's batch-norm buffers, and the loss and accuracy
 *   sums are all-reduced; the outputs the plugins' metrics need are
 *   gathered (each rank's rows put in their dataset places, zeros
 *   elsewhere, summed), so every metric sees the whole test set.
 * Batch norm uses each rank's batch statistics (PyTorch's default); its
 * running statistics follow rank 0's, as with DDP's broadcast_buffers.
 * On a CUDA device the bucketer reduces the gradients with NCCL (made
 * over this communicator by em_ddp_new, or at the start of a run when the
 * model moved since: em_ddp_prepare); everything above stays on MPI. */
#include "train-private.h"
#include "em-device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

em_status em_trainer_set_comm(em_trainer *t, em_comm *c, em_error *err) {
  if (t->running)
    return em_error_set(err, EM_ERR_INVALID, "the communicator is set before a run, not during");
  em_ddp_free(t->ddp);
  t->ddp = NULL;
  t->comm = NULL;
  if (!c || em_comm_world(c) == 1) return EM_OK;
  em_loader *ld = em_trainer_loader_new(t, c, t->cfg.batch_size, err); /* this rank's share */
  if (!ld) return err ? err->status : EM_ERR_INVALID;
  em_ddp_options o;
  em_ddp_options_defaults(&o);
  em_ddp *d = em_ddp_new(c, t->n_params, t->params, &o, err);
  if (!d) {
    em_loader_free(ld);
    return err ? err->status : EM_ERR_NOMEM;
  }
  em_loader_free(t->loader);
  t->loader = ld;
  t->ddp = d;
  t->comm = c;
  t->cfg.on_divergence = EM_DIVERGENCE_STOP;
  em_comm_set_cancel(c, &t->stop);
  return EM_OK;
}

bool em_trainer_ddp_stats(const em_trainer *t, em_ddp_stats *out) {
  if (!t->ddp) return false;
  em_ddp_get_stats(t->ddp, out);
  return true;
}

int em_trainer_world(const em_trainer *t) { return t->comm ? em_comm_world(t->comm) : 1; }

/* ---- what the ranks must agree on -------------------------------------------
 * Each rank's fingerprint of what drives the collectives: a rank whose
 * buckets, data or metrics differ would issue other all-reduces than its
 * peers (a crash inside MPI, or a truncated message steps later). */
enum { F_EPOCH, F_BATCH, F_STEP, F_NUMEL, F_TENSORS, F_BUCKETS, F_LAYOUT, F_TRAIN, F_TEST, F_BPE,
       F_METRICS, F_COUNT };

static uint32_t text_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static void fingerprint(const em_trainer *t, const char *metrics, double *f /* (F_COUNT) */) {
  int64_t numel = 0;
  for (int i = 0; i < t->n_params; i++) numel += em_tensor_numel(t->params[i]);
  em_ddp_stats ds = {0};
  if (t->ddp) em_ddp_get_stats(t->ddp, &ds);
  f[F_EPOCH] = (double)t->pos.epoch;
  f[F_BATCH] = (double)t->pos.batch;
  f[F_STEP] = (double)t->pos.step;
  f[F_NUMEL] = (double)numel;
  f[F_TENSORS] = em_model_tensor_count(t->model);
  f[F_BUCKETS] = ds.n_buckets;
  f[F_LAYOUT] = t->ddp ? em_ddp_layout_hash(t->ddp) : 0;
  f[F_TRAIN] = (double)em_dataset_len(t->train);
  f[F_TEST] = t->test ? (double)em_dataset_len(t->test) : -1;
  f[F_BPE] = (double)em_loader_batches_per_epoch(t->loader);
  f[F_METRICS] = text_hash(metrics);
}

/* The ranks in all (world rows) that differ from rank 0 in field k, as
 * "rank 1 has 12, rank 3 has 9" (or "rank 1, rank 3" when values mean
 * nothing to a reader). */
static void differing(const double *all, int world, int k, bool values, char *out, size_t cap) {
  size_t len = 0;
  out[0] = '\0';
  for (int r = 1; r < world && len < cap; r++) {
    double v = all[r * F_COUNT + k];
    if (v == all[k]) continue;
    int w = values ? snprintf(out + len, cap - len, "%srank %d has %.0f", len ? ", " : "", r, v)
                   : snprintf(out + len, cap - len, "%srank %d", len ? ", " : "", r);
    if (w > 0) len += (size_t)w;
  }
}

static em_status check_agreement(const em_trainer *t, const double *all, int world,
                                 const char *metrics, em_error *err) {
  int k = 0;
  for (; k < F_COUNT; k++) {
    bool same = true;
    for (int r = 1; r < world; r++) same &= all[r * F_COUNT + k] == all[k];
    if (!same) break;
  }
  if (k == F_COUNT) return EM_OK;
  char who[512];
  differing(all, world, k, k != F_LAYOUT && k != F_METRICS, who, sizeof who);
  const char *lead = "the ranks disagree on what they train, so their collectives would not "
                     "match";
  switch (k) {
  case F_EPOCH:
  case F_BATCH:
  case F_STEP: {
    char pos[512];
    size_t len = 0;
    pos[0] = '\0';
    for (int r = 1; r < world && len < sizeof pos; r++) {
      const double *p = all + r * F_COUNT;
      if (p[F_EPOCH] == all[F_EPOCH] && p[F_BATCH] == all[F_BATCH] && p[F_STEP] == all[F_STEP])
        continue;
      int w = snprintf(pos + len, sizeof pos - len, "%srank %d at epoch %.0f batch %.0f step %.0f",
                       len ? ", " : "", r, p[F_EPOCH], p[F_BATCH], p[F_STEP]);
      if (w > 0) len += (size_t)w;
    }
    return em_error_set(err, EM_ERR_INVALID,
                        "%s: rank 0 stands at epoch %.0f batch %.0f step %.0f, %s: every rank "
                        "must resume from the same checkpoint", lead, all[F_EPOCH], all[F_BATCH],
                        all[F_STEP], pos);
  }
  case F_NUMEL:
  case F_TENSORS:
    return em_error_set(err, EM_ERR_INVALID,
                        "%s: rank 0's model has %.0f %s, %s: every rank must build the same "
                        "model (the same plugins for its layers)", lead, all[k],
                        k == F_NUMEL ? "parameter values" : "tensors", who);
  case F_BUCKETS:
  case F_LAYOUT: {
    char counts[512];
    differing(all, world, F_BUCKETS, true, counts, sizeof counts);
    return em_error_set(err, EM_ERR_INVALID,
                        "%s: rank 0 reduces its gradients in %.0f buckets, %s%s: set "
                        "EMBER_DDP_BUCKET_MB, EMBER_DDP_COMM and EMBER_DDP_STAGING to the same "
                        "values on every rank (or on none)",
                        lead, all[F_BUCKETS], counts[0] ? counts : who,
                        counts[0] ? "" : " has buckets of other sizes");
  }
  case F_TRAIN:
  case F_TEST:
  case F_BPE:
    return em_error_set(err, EM_ERR_INVALID,
                        "%s: rank 0's %s has %.0f %s, %s: every rank must read the same "
                        "dataset (the same files under --data-dir, the same --limit)", lead,
                        k == F_TEST ? "test set" : "training set", all[k],
                        k == F_BPE ? "batches per epoch" : "samples", who);
  default:
    return em_error_set(err, EM_ERR_INVALID,
                        "%s: the plugin metrics an evaluation computes differ between rank 0 "
                        "and %s (this is rank %d, computing %s%s%s): load the same plugins and "
                        "--metric on every rank",
                        lead, who, em_comm_rank(t->comm), metrics[0] ? "'" : "",
                        metrics[0] ? metrics : "none", metrics[0] ? "'" : "");
  }
}

em_status em_trainer_ddp_begin_run(em_trainer *t, em_error *err) {
  if (!t->comm) return EM_OK;
  em_comm *c = t->comm;
  int world = em_comm_world(c), rank = em_comm_rank(c);
  /* every rank's fingerprint, each in its row of a sum */
  char metrics[512];
  em_eval_metrics_names(em_model_spec(t->model), metrics, sizeof metrics);
  double *all = calloc((size_t)world * F_COUNT, sizeof *all); /* (world, F_COUNT) */
  if (!all) return em_error_set(err, EM_ERR_NOMEM, "out of memory comparing the ranks");
  fingerprint(t, metrics, all + (size_t)rank * F_COUNT);
  em_status st = em_comm_allreduce_sum_f64(c, all, (int64_t)world * F_COUNT, err);
  if (st == EM_OK) st = check_agreement(t, all, world, metrics, err);
  free(all);
  EM_TRY(st);
  int n = em_model_tensor_count(t->model);
  for (int i = 0; i < n; i++) {
    em_tensor *w = em_model_tensor(t->model, i, NULL);
    EM_TRY(em_ddp_broadcast_tensors(c, 1, &w, err));
  }
  /* the buckets where the model now lives; NCCL for CUDA gradients */
  return t->ddp ? em_ddp_prepare(t->ddp, err) : EM_OK;
}

em_status em_trainer_ddp_agree_stop(em_trainer *t, em_error *err) {
  bool mine = atomic_load(&t->stop);
  if (!t->comm) {
    t->stop_agreed = mine;
    return EM_OK;
  }
  float f = mine ? 1.0f : 0.0f;
  EM_TRY(em_comm_allreduce_sum_f32(t->comm, &f, 1, err));
  t->stop_agreed = f > 0;
  if (t->stop_agreed) atomic_store(&t->stop, true);
  return EM_OK;
}

em_status em_trainer_ddp_mean_loss(em_trainer *t, double *loss, em_error *err) {
  if (!t->comm) return EM_OK;
  double sum = *loss;
  EM_TRY(em_comm_allreduce_sum_f64(t->comm, &sum, 1, err));
  *loss = sum / em_comm_world(t->comm);
  return EM_OK;
}

/* ---- a strided shard of the test set ---------------------------------------- */
typedef struct {
  const em_dataset *base;
  int64_t rank, world;
  em_dataset_vtable vt; /* shard_vtable, with the base's labels and samples */
} shard;

static int64_t shard_len(const void *impl) {
  const shard *s = impl;
  int64_t n = em_dataset_len(s->base);
  return n > s->rank ? (n - s->rank + s->world - 1) / s->world : 0;
}
static int shard_shape(const void *impl, int64_t *shape) {
  return em_dataset_sample_shape(((const shard *)impl)->base, shape);
}
static int shard_classes(const void *impl) {
  return em_dataset_num_classes(((const shard *)impl)->base);
}
static em_status shard_get(const void *impl, int64_t i, float *x, int64_t *y, em_error *err) {
  const shard *s = impl;
  return em_dataset_get(s->base, s->rank + i * s->world, x, y, err);
}
static void shard_prefetch(const void *impl, int64_t i) {
  const shard *s = impl;
  em_dataset_prefetch(s->base, s->rank + i * s->world);
}
static int64_t shard_target_len(const void *impl) {
  return em_dataset_target_len(((const shard *)impl)->base);
}
static const em_dataset_vtable shard_vtable = {
    .kind = "shard", .len = shard_len, .sample_shape = shard_shape,
    .num_classes = shard_classes, .get = shard_get, .free = free, .prefetch = shard_prefetch};

/* The shard's outputs into the whole test set's: row i of rank r is
 * sample r + i * world. Labels travel as floats (exact below 2^24). */
typedef struct {
  em_comm *comm;
  int64_t total; /* the test set's length */
} gather_ctx;

static em_status gather_outputs(void *user, int k, int64_t *rows, float **logits,
                                int64_t **labels, em_error *err) {
  gather_ctx *g = user;
  int rank = em_comm_rank(g->comm), world = em_comm_world(g->comm);
  int64_t w = (int64_t)k + 1; /* k logits and the label */
  if (g->total > ((int64_t)1 << 40) / w)
    return em_error_set(err, EM_ERR_NOMEM, "a test set of %lld samples is too large to gather "
                        "for the metrics", (long long)g->total);
  float *all = calloc((size_t)(g->total * w), sizeof *all); /* (total, k + 1) */
  int64_t *lab = malloc((size_t)(g->total ? g->total : 1) * sizeof *lab);
  if (!all || !lab) {
    free(all);
    free(lab);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory gathering the outputs for the metrics");
  }
  for (int64_t i = 0; i < *rows; i++) {
    int64_t at = rank + i * world;
    if (at >= g->total) break;
    memcpy(all + at * w, *logits + i * k, (size_t)k * sizeof *all);
    all[at * w + k] = (float)(*labels)[i];
  }
  em_status st = em_comm_allreduce_sum_f32(g->comm, all, g->total * w, err);
  if (st == EM_OK) {
    for (int64_t i = 0; i < g->total; i++) {
      lab[i] = (int64_t)all[i * w + k];
      memmove(all + i * k, all + i * w, (size_t)k * sizeof *all); /* drop the label column */
    }
    free(*logits);
    free(*labels);
    *logits = all;
    *labels = lab;
    *rows = g->total;
  } else {
    free(all);
    free(lab);
  }
  return st;
}

typedef struct {
  em_trainer *t;
  unsigned requests; /* the stop requests made before the evaluation began */
} eval_watch;

static bool no_new_stop(void *user) {
  eval_watch *w = user;
  return atomic_load(&w->t->stop_requests) == w->requests;
}

em_status em_trainer_evaluate(em_trainer *t, double *loss, double *accuracy, bool *cut_short,
                              em_error *err) {
  const em_train_config *c = &t->cfg;
  *cut_short = false;
  if (!t->comm) {
    eval_watch w = {t, atomic_load(&t->stop_requests)};
    return em_evaluate_until(t->model, t->test, c->batch_size, c->loss, 0.0, no_new_stop, &w,
                             cut_short, loss, accuracy, err);
  }
  em_comm *cm = t->comm;
  int n = em_model_tensor_count(t->model);
  for (int i = 0; i < n; i++) /* batch-norm running statistics: rank 0's */
    if (em_model_tensor_is_buffer(t->model, i)) {
      em_tensor *w = em_model_tensor(t->model, i, NULL);
      EM_TRY(em_ddp_broadcast_tensors(cm, 1, &w, err));
    }
  shard *s = malloc(sizeof *s);
  if (!s) return em_error_set(err, EM_ERR_NOMEM, "out of memory for the evaluation shard");
  *s = (shard){t->test, em_comm_rank(cm), em_comm_world(cm), shard_vtable};
  if (em_dataset_target_len(t->test)) s->vt.target_len = shard_target_len;
  s->vt.token_samples = em_dataset_token_samples(t->test);
  int64_t len = shard_len(s), per = em_dataset_labels_per_sample(t->test);
  double sums[3] = {0, 0, (double)len}; /* loss sum, correct, samples: exact in doubles */
  if (len > 0) {
    em_dataset *ds = em_dataset_new(&s->vt, s, err);
    if (!ds) return err ? err->status : EM_ERR_INVALID;
    double l = 0, a = 0;
    gather_ctx g = {cm, em_dataset_len(t->test)};
    em_status st = em_evaluate_gathered(t->model, ds, c->batch_size, c->loss, 0.0, gather_outputs,
                                        &g, &l, &a, err);
    em_dataset_free(ds);
    EM_TRY(st);
    sums[0] = l * (double)len;
    sums[1] = round(a * (double)(len * per)); /* correct predictions (tokens) */
  } else { /* fewer test samples than ranks: this one has none, but the
              * metrics' gather is a collective it must join */
    free(s);
    em_status mst;
    em_eval_metrics *metrics = em_eval_metrics_begin(em_model_spec(t->model), &mst, err);
    EM_TRY(mst);
    if (metrics) {
      int64_t out[EM_MAX_DIMS];
      em_spec_output_shape(em_model_spec(t->model), out);
      gather_ctx g = {cm, em_dataset_len(t->test)};
      mst = em_eval_metrics_gather(metrics, (int)out[0], gather_outputs, &g, err);
      if (mst == EM_OK) mst = em_eval_metrics_end(metrics, err);
      else em_eval_metrics_free(metrics);
      EM_TRY(mst);
    }
  }
  EM_TRY(em_comm_allreduce_sum_f64(cm, sums, 3, err));
  *loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
  *accuracy = sums[2] > 0 ? sums[1] / (sums[2] * (double)per) : 0;
  return EM_OK;
}
