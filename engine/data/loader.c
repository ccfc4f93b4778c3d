/* loader.c: the data loader. Batches of (x (N, ...sample) f32, y (N) i64,
 * or (N, T) for a dataset of T labels per sample)
 * from a dataset, filled by worker threads into a ring of preallocated
 * slots.
 *
 * Batch b of an epoch always holds samples order[b*B .. b*B + N) and
 * goes into slot b % n_slots, so the result does not depend on how many
 * workers there are or which one fills which batch. Workers claim
 * batches in order; batch b may be claimed once the consumer has let go
 * of batch b - n_slots (it asked for batch b - n_slots + 1), so at most
 * n_slots - 1 = prefetch batches are prepared ahead of the one the
 * consumer holds. The consumer waits for its slot to hold its batch.
 *
 * Starting an epoch (or freeing the loader) bumps a generation counter
 * that fills in progress check between samples, so they stop early;
 * the caller waits until no worker is inside a fill before it rewrites
 * the order and the slots. */
#include "data-private.h"

#include "em-device.h"
#include "em-rng.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  float *x;      /* (B, ...sample) */
  int64_t *y;    /* (B, T): T labels per sample, 1 for a class label */
  int64_t n;     /* samples in the batch it holds */
  int64_t batch; /* the batch it holds; -1: none */
  em_status status;
  em_error err;
} loader_slot;

struct em_loader {
  const em_dataset *ds;
  em_loader_config c;
  int64_t numel;     /* of one sample */
  int64_t n_labels;  /* T: of one sample */
  int64_t n_used;    /* samples after the limit */
  int64_t per_rank;  /* this rank's share of an epoch, padded */
  int64_t n_samples; /* delivered per epoch (after drop_last) */
  int64_t n_batches;
  int64_t *perm;     /* (n_used): the epoch's permutation */
  int64_t *order;    /* (per_rank): this rank's indices; perm itself when world == 1 */
  loader_slot *slots;
  int n_slots;
  pthread_t *threads;
  int n_threads;

  pthread_mutex_t mu;
  pthread_cond_t work_cv;  /* workers: a batch may be claimable, or stop */
  pthread_cond_t ready_cv; /* consumer: a batch is ready, or a worker went idle */
  bool stop;               /* free: workers exit */
  bool active;             /* an epoch is running and workers may claim */
  bool started;            /* some epoch was started */
  bool failed;             /* the epoch hit an error (kept in fail_err) */
  int64_t next_claim, released, next_deliver;
  int busy;                /* workers inside a fill */
  atomic_uint_fast64_t gen;
  em_error fail_err;
};

void em_loader_config_defaults(em_loader_config *c) {
  memset(c, 0, sizeof *c);
  c->batch_size = 64;
  c->shuffle = true;
  c->drop_last = false;
  c->workers = 2;
  c->prefetch = 0;
  c->seed = 0;
  c->limit = 0;
  c->rank = 0;
  c->world = 1;
}

int64_t em_loader_batches_per_epoch(const em_loader *l) { return l->n_batches; }
int64_t em_loader_samples_per_epoch(const em_loader *l) { return l->n_samples; }

/* Fills slot s with batch b; stops early (EM_ERR_CANCELLED) when the
 * generation moves on. */
static em_status loader_fill(em_loader *l, int64_t b, loader_slot *s, uint64_t gen) {
  int64_t first = b * l->c.batch_size;
  int64_t n = l->n_samples - first < l->c.batch_size ? l->n_samples - first : l->c.batch_size;
  for (int64_t j = 0; j < n && j < 2; j++) em_dataset_prefetch(l->ds, l->order[first + j]);
  for (int64_t j = 0; j < n; j++) {
    if (atomic_load_explicit(&l->gen, memory_order_relaxed) != gen) return EM_ERR_CANCELLED;
    if (j + 2 < n) em_dataset_prefetch(l->ds, l->order[first + j + 2]);
    em_status st = em_dataset_get(l->ds, l->order[first + j], s->x + j * l->numel,
                                  s->y + j * l->n_labels, &s->err);
    if (st != EM_OK) {
      em_error_prefix(&s->err, "loading sample %lld (batch %lld)",
                      (long long)l->order[first + j], (long long)b);
      return st;
    }
  }
  s->n = n;
  return EM_OK;
}

static void *loader_worker(void *arg) {
  em_loader *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && !(l->active && l->next_claim < l->n_batches &&
                         l->next_claim < l->released + l->n_slots))
      pthread_cond_wait(&l->work_cv, &l->mu);
    if (l->stop) break;
    int64_t b = l->next_claim++;
    uint64_t gen = atomic_load(&l->gen);
    loader_slot *s = &l->slots[b % l->n_slots];
    l->busy++;
    pthread_mutex_unlock(&l->mu);
    em_status st = loader_fill(l, b, s, gen);
    pthread_mutex_lock(&l->mu);
    l->busy--;
    if (gen == atomic_load(&l->gen)) {
      s->status = st;
      s->batch = b;
    }
    pthread_cond_broadcast(&l->ready_cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The epoch's order: a permutation from (seed, epoch) alone, then this
 * rank's strided share, wrapped around to a multiple of world. */
static void loader_make_order(em_loader *l, int64_t epoch) {
  int64_t n = l->n_used;
  for (int64_t i = 0; i < n; i++) l->perm[i] = i;
  if (l->c.shuffle) {
    em_rng r;
    em_rng_seed(&r, mix64(l->c.seed + 0x9E3779B97F4A7C15ull) ^
                        mix64((uint64_t)epoch * 0xD1B54A32D192ED03ull + 1));
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
      int64_t j = (int64_t)em_rng_below(&r, (uint64_t)i + 1);
      int64_t t = l->perm[i];
      l->perm[i] = l->perm[j];
      l->perm[j] = t;
    }
  }
  if (l->order != l->perm)
    for (int64_t j = 0; j < l->per_rank; j++)
      l->order[j] = l->perm[(l->c.rank + j * l->c.world) % n];
}

void em_loader_start_epoch(em_loader *l, int64_t epoch) { em_loader_start_epoch_at(l, epoch, 0); }

/* Batch b always comes from order[b*B ...] and lands in slot b % n_slots,
 * so skipping is only a matter of where claiming and delivery begin. */
void em_loader_start_epoch_at(em_loader *l, int64_t epoch, int64_t first_batch) {
  EM_ASSERT(epoch >= 0 && first_batch >= 0);
  if (first_batch > l->n_batches) first_batch = l->n_batches;
  pthread_mutex_lock(&l->mu);
  atomic_fetch_add(&l->gen, 1);
  l->active = false;
  while (l->busy > 0) pthread_cond_wait(&l->ready_cv, &l->mu);
  pthread_mutex_unlock(&l->mu);

  loader_make_order(l, epoch); /* no worker reads the order now */

  pthread_mutex_lock(&l->mu);
  for (int i = 0; i < l->n_slots; i++) l->slots[i].batch = -1;
  l->next_claim = l->released = l->next_deliver = first_batch;
  l->failed = false;
  l->started = true;
  l->active = true;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
}

bool em_loader_next(em_loader *l, em_batch *out, em_error *err) {
  if (!l->started) em_loader_start_epoch(l, 0);
  if (l->failed) {
    if (err) *err = l->fail_err;
    return false;
  }
  int64_t k = l->next_deliver;
  if (k >= l->n_batches) {
    em_error_clear(err);
    return false;
  }
  loader_slot *s;
  if (l->n_threads == 0) {
    s = &l->slots[0];
    s->status = loader_fill(l, k, s, atomic_load(&l->gen));
    s->batch = k;
  } else {
    s = &l->slots[k % l->n_slots];
    pthread_mutex_lock(&l->mu);
    l->released = k; /* batch k - 1 is the caller's no more */
    pthread_cond_broadcast(&l->work_cv);
    while (s->batch != k) pthread_cond_wait(&l->ready_cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
  }
  if (s->status != EM_OK) {
    pthread_mutex_lock(&l->mu);
    l->failed = true;
    l->active = false;
    l->fail_err = s->err;
    l->fail_err.status = s->status;
    pthread_mutex_unlock(&l->mu);
    if (err) *err = l->fail_err;
    return false;
  }
  l->next_deliver = k + 1;
  out->x = s->x;
  out->y = s->y;
  out->n = s->n;
  return true;
}

static void loader_stop_workers(em_loader *l) {
  pthread_mutex_lock(&l->mu);
  l->stop = true;
  atomic_fetch_add(&l->gen, 1);
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->n_threads; i++) pthread_join(l->threads[i], NULL);
  l->n_threads = 0;
}

void em_loader_free(em_loader *l) {
  if (!l) return;
  loader_stop_workers(l);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->ready_cv);
  if (l->slots)
    for (int i = 0; i < l->n_slots; i++) {
      if (l->c.pinned) {
        em_host_pinned_free(l->slots[i].x);
        em_host_pinned_free(l->slots[i].y);
      } else {
        free(l->slots[i].x);
        free(l->slots[i].y);
      }
    }
  free(l->slots);
  if (l->order != l->perm) free(l->order);
  free(l->perm);
  free(l->threads);
  free(l);
}

static em_status loader_check(const em_dataset *ds, const em_loader_config *c, em_error *err) {
  if (c->batch_size < 1)
    return em_error_set(err, EM_ERR_INVALID, "loader: batch_size %d must be >= 1", c->batch_size);
  if (c->workers < 0 || c->workers > 256)
    return em_error_set(err, EM_ERR_INVALID, "loader: workers %d must be in [0, 256]",
                        c->workers);
  if (c->prefetch < 0 || c->prefetch > 4096)
    return em_error_set(err, EM_ERR_INVALID, "loader: prefetch %d must be in [0, 4096]",
                        c->prefetch);
  if (c->limit < 0)
    return em_error_set(err, EM_ERR_INVALID, "loader: limit %lld must be >= 0 (0: all samples)",
                        (long long)c->limit);
  if (c->world < 1 || c->rank < 0 || c->rank >= c->world)
    return em_error_set(err, EM_ERR_INVALID, "loader: rank %d of world %d: need 0 <= rank < "
                        "world", c->rank, c->world);
  if (em_dataset_len(ds) == 0)
    return em_error_set(err, EM_ERR_INVALID, "loader: the %s dataset is empty",
                        em_dataset_kind(ds));
  if ((int64_t)c->batch_size > ((int64_t)1 << 34) / em_dataset_sample_numel(ds) ||
      (int64_t)c->batch_size > ((int64_t)1 << 34) / em_dataset_labels_per_sample(ds))
    return em_error_set(err, EM_ERR_INVALID, "loader: batches of %d samples of %lld values are "
                        "too large", c->batch_size, (long long)em_dataset_sample_numel(ds));
  return EM_OK;
}

em_loader *em_loader_new(const em_dataset *ds, const em_loader_config *c, em_error *err) {
  em_loader_config defaults;
  if (!c) {
    em_loader_config_defaults(&defaults);
    c = &defaults;
  }
  if (loader_check(ds, c, err) != EM_OK) return NULL;
  em_loader *l = calloc(1, sizeof *l);
  if (!l) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  l->ds = ds;
  l->c = *c;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->work_cv, NULL);
  pthread_cond_init(&l->ready_cv, NULL);
  atomic_init(&l->gen, 0);
  l->numel = em_dataset_sample_numel(ds);
  l->n_labels = em_dataset_labels_per_sample(ds);
  l->n_used = em_dataset_len(ds);
  if (c->limit > 0 && c->limit < l->n_used) l->n_used = c->limit;
  l->per_rank = (l->n_used + c->world - 1) / c->world;
  l->n_samples = c->drop_last ? l->per_rank / c->batch_size * c->batch_size : l->per_rank;
  l->n_batches = (l->n_samples + c->batch_size - 1) / c->batch_size;
  l->n_slots = c->workers == 0 ? 1 : (c->prefetch > 0 ? c->prefetch : 2 * c->workers) + 1;

  l->perm = malloc(sizeof(int64_t) * (size_t)l->n_used);
  l->order = c->world == 1 ? l->perm : malloc(sizeof(int64_t) * (size_t)l->per_rank);
  l->slots = calloc((size_t)l->n_slots, sizeof *l->slots);
  l->threads = c->workers ? calloc((size_t)c->workers, sizeof *l->threads) : NULL;
  bool ok = l->perm && l->order && l->slots && (l->threads || !c->workers);
  size_t xbytes = (sizeof(float) * (size_t)(c->batch_size * l->numel) + 63) / 64 * 64;
  for (int i = 0; ok && i < l->n_slots; i++) {
    loader_slot *s = &l->slots[i];
    s->batch = -1;
    if (c->pinned) {
      s->x = em_host_pinned_alloc(xbytes);
      s->y = em_host_pinned_alloc(sizeof(int64_t) * (size_t)(c->batch_size * l->n_labels));
    } else {
      if (posix_memalign((void **)&s->x, 64, xbytes) != 0) s->x = NULL;
      s->y = malloc(sizeof(int64_t) * (size_t)(c->batch_size * l->n_labels));
    }
    ok = s->x && s->y;
  }
  if (!ok) {
    em_error_set(err, EM_ERR_NOMEM, "loader: out of memory for %d batches of %d samples",
                 l->n_slots, c->batch_size);
    em_loader_free(l);
    return NULL;
  }
  for (int i = 0; i < c->workers; i++) {
    if (pthread_create(&l->threads[i], NULL, loader_worker, l) != 0) {
      em_error_set(err, EM_ERR_NOMEM, "loader: cannot start worker thread %d", i + 1);
      em_loader_free(l);
      return NULL;
    }
    l->n_threads++;
  }
  return l;
}
