/* writer.c: records a training run without slowing it. Callers append
 * rows to an in-memory queue under a mutex (no SQLite in the caller); the
 * writer's own thread owns its own connection and commits the queue in
 * transactions every flush_ms, or as soon as 4096 rows wait.
 *
 * Transactions: metrics go in groups of up to 4096 rows, merged into the
 * metric chunks of their run and key (see metric-chunks.c); events in one;
 * each checkpoint in its own (hashed first, outside the lock; its rows,
 * then pruning, then after the commit the pruned files are unlinked). A
 * row the database refuses (a run that does not exist) is skipped and
 * reported; the other rows of its transaction are still committed. The
 * first error is kept and returned by flush/free; nothing is printed. */
#include "store-private.h"

#include <math.h>
#include <string.h>
#include <time.h>

typedef struct {
  int64_t run, step;
  double value, wall;
  int32_t key; /* index into the writer's key table */
} metric_item;

typedef struct {
  int64_t run, step, epoch;
  char *path, *kind;
  double metric;
  bool lower_is_better;
  int keep_last;
  /* filled in the writer thread */
  char sha[65];
  int64_t size;
} ckpt_item;

typedef struct {
  int64_t run, step;
  char *kind, *detail;
} event_item;

typedef struct {
  metric_item *m;
  size_t nm, cm;
  ckpt_item *c;
  size_t nc, cc;
  event_item *e;
  size_t ne, ce;
} batch;

struct em_store_writer {
  em_store *s; /* used by the writer thread only, after it starts */
  GThread *thread;
  int flush_ms;

  GMutex mu; /* guards everything below up to the thread-only part */
  GCond wake; /* to the thread: a full batch, a flush, stop */
  GCond done; /* to flushers: a batch committed */
  batch q;
  GHashTable *key_index; /* key -> index + 1 */
  GPtrArray *keys;       /* index -> key */
  uint64_t enqueued, committed;
  bool flush_req, stop;
  em_error error;
  em_store_writer_stats stats;

  /* thread only */
  batch spare;
  int64_t *key_ids; /* index -> metric_keys.id; 0: not looked up yet */
  size_t n_key_ids;
};

static double mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t pending(const batch *b) { return b->nm + b->nc + b->ne; }

static void batch_clear(batch *b) {
  for (size_t i = 0; i < b->nc; i++) {
    g_free(b->c[i].path);
    g_free(b->c[i].kind);
  }
  for (size_t i = 0; i < b->ne; i++) {
    g_free(b->e[i].kind);
    g_free(b->e[i].detail);
  }
  b->nm = b->nc = b->ne = 0;
}

static void batch_free(batch *b) {
  batch_clear(b);
  g_free(b->m);
  g_free(b->c);
  g_free(b->e);
  memset(b, 0, sizeof *b);
}

/* Grows an array of n elements of size sz to hold one more. */
static void *grow(void *p, size_t n, size_t *cap, size_t sz) {
  if (n < *cap) return p;
  *cap = *cap ? *cap * 2 : 1024;
  return g_realloc(p, *cap * sz);
}

/* Under mu: a caller that finds EM_STORE_WRITER_MAX_QUEUE rows waiting
 * waits until the thread takes them (SQLite cannot keep up; waiting
 * beats running out of memory or dropping rows). */
static void wait_for_room(em_store_writer *w) {
  while (pending(&w->q) >= EM_STORE_WRITER_MAX_QUEUE && !w->stop) {
    g_cond_signal(&w->wake);
    g_cond_wait(&w->done, &w->mu);
  }
}

/* Keeps the first error; under mu. */
static void keep_error(em_store_writer *w, const em_error *e) {
  if (w->error.status == EM_OK && e->status != EM_OK) w->error = *e;
}

/* ---- the writer thread ------------------------------------------------- */

typedef struct {
  em_error err; /* first error of this batch */
  int64_t rows, transactions;
  double commit_seconds;
} batch_result;

static void note(batch_result *r, const em_error *e) {
  if (r->err.status == EM_OK) r->err = *e;
}

static em_status key_id(em_store_writer *w, int32_t idx, const char *const *names, int64_t *id,
                        em_error *err) {
  if ((size_t)idx < w->n_key_ids && w->key_ids[idx]) {
    *id = w->key_ids[idx];
    return EM_OK;
  }
  if ((size_t)idx >= w->n_key_ids) {
    size_t n = (size_t)idx + 16;
    w->key_ids = g_renew(int64_t, w->key_ids, n);
    memset(w->key_ids + w->n_key_ids, 0, (n - w->n_key_ids) * sizeof(int64_t));
    w->n_key_ids = n;
  }
  em_status st = em_store_metric_key_id(w->s, names[idx], true, id, err);
  if (!st) w->key_ids[idx] = *id;
  return st;
}

/* A transaction that failed on another process's lock, held past the
 * busy timeout: tried again, up to this many times more (a minute in
 * all), before its rows are reported lost. Meanwhile the queue fills and
 * then holds the trainer (wait_for_room): waiting beats losing rows. */
#define BUSY_RETRIES 5

/* Whether the connection's last failure was another process's lock. */
static bool was_busy(em_store *s) {
  int rc = sqlite3_errcode(s->db) & 0xff;
  return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

/* A transaction that failed as a whole: key ids it created are gone. */
static void forget_key_ids(em_store_writer *w) {
  if (w->key_ids) memset(w->key_ids, 0, w->n_key_ids * sizeof(int64_t));
}

typedef struct {
  int64_t run, step;
  double value, wall;
  int32_t key;
  uint32_t seq; /* order of arrival: the later of two points at one step wins */
} sorted_item;

static int by_run_key_step(const void *pa, const void *pb) {
  const sorted_item *a = pa, *b = pb;
  if (a->run != b->run) return a->run < b->run ? -1 : 1;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  if (a->step != b->step) return a->step < b->step ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* One transaction: the rows grouped by run and key, each group merged
 * into its chunks under a savepoint, so a group the database refuses (a
 * run that does not exist) is skipped and the others are kept. */
static bool commit_metrics(em_store_writer *w, const metric_item *m, size_t n,
                           const char *const *names, bool last_try, batch_result *r) {
  em_store *s = w->s;
  em_error err = {0};
  double t0 = mono_now();
  sorted_item *it = g_new(sorted_item, n);
  for (size_t i = 0; i < n; i++)
    it[i] = (sorted_item){m[i].run, m[i].step, m[i].value, m[i].wall, m[i].key, (uint32_t)i};
  qsort(it, n, sizeof *it, by_run_key_step);
  em_metric_point *pts = g_new(em_metric_point, n);
  size_t done = 0;
  em_status st = EM_SQL_BEGIN(s, &err);
  for (size_t g = 0; !st && g < n;) {
    size_t end = g, np = 0;
    while (end < n && it[end].run == it[g].run && it[end].key == it[g].key) {
      if (np && pts[np - 1].step == it[end].step) np--; /* same step again: the later wins */
      pts[np++] = (em_metric_point){it[end].step, it[end].value, it[end].wall};
      end++;
    }
    int64_t kid = 0;
    st = key_id(w, it[g].key, names, &kid, &err);
    if (!st) st = EM_SQL_RUN(s, &err, "SAVEPOINT metric_group", NULL);
    if (st) break;
    em_error gerr = {0};
    em_status gs = em_metric_chunks_merge(s, it[g].run, kid, pts, np, &gerr);
    if (gs == EM_OK) {
      st = EM_SQL_RUN(s, &err, "RELEASE metric_group", NULL);
      done += end - g;
    } else if (gs == EM_ERR_INVALID) {
      /* refused rows (a constraint): this group only */
      st = EM_SQL_RUN(s, &err, "ROLLBACK TO metric_group", NULL);
      if (!st) st = EM_SQL_RUN(s, &err, "RELEASE metric_group", NULL);
      em_error_prefix(&gerr, "%zu point(s) of metric '%s' of run %lld (steps %lld to %lld) not "
                      "recorded", end - g, names[it[g].key], (long long)it[g].run,
                      (long long)pts[0].step, (long long)pts[np - 1].step);
      note(r, &gerr);
    } else {
      st = gs;
      err = gerr;
    }
    g = end;
  }
  if (!st) st = EM_SQL_COMMIT(s, &err);
  bool retry = false;
  if (st) {
    retry = !last_try && was_busy(s);
    em_db_rollback(s);
    forget_key_ids(w);
    if (!retry) {
      em_error_prefix(&err, "the store writer lost %zu metric points", n);
      note(r, &err);
    }
  } else {
    r->rows += (int64_t)done;
    r->transactions++;
  }
  g_free(pts);
  g_free(it);
  r->commit_seconds += mono_now() - t0;
  return retry;
}

static bool commit_events(em_store_writer *w, const event_item *e, size_t n, bool last_try,
                          batch_result *r) {
  em_store *s = w->s;
  em_error err = {0};
  double t0 = mono_now();
  size_t done = 0;
  em_status st = EM_SQL_BEGIN(s, &err);
  for (size_t i = 0; !st && i < n; i++) {
    em_error row_err = {0};
    em_status rs = EM_SQL_RUN(s, &row_err,
                              "INSERT INTO run_events (run, step, kind, detail, time) "
                              "VALUES (?, ?, ?, ?, ?)",
                              "iittd", e[i].run, e[i].step, e[i].kind, e[i].detail, em_store_now());
    if (!rs) done++;
    else if ((sqlite3_extended_errcode(s->db) & 0xff) == SQLITE_CONSTRAINT) {
      em_error_prefix(&row_err, "event '%s' of run %lld was not recorded", e[i].kind,
                      (long long)e[i].run);
      note(r, &row_err);
    } else {
      st = rs;
      err = row_err;
    }
  }
  if (!st) st = EM_SQL_COMMIT(s, &err);
  bool retry = false;
  if (st) {
    retry = !last_try && was_busy(s);
    em_db_rollback(s);
    if (!retry) {
      em_error_prefix(&err, "the store writer lost %zu run events", n);
      note(r, &err);
    }
  } else {
    r->rows += (int64_t)done;
    r->transactions++;
  }
  r->commit_seconds += mono_now() - t0;
  return retry;
}

static bool commit_checkpoint(em_store_writer *w, const ckpt_item *c, bool last_try,
                              batch_result *r) {
  em_store *s = w->s;
  em_error err = {0};
  double t0 = mono_now();
  GPtrArray *unlink = g_ptr_array_new_with_free_func(g_free);
  em_status st = EM_SQL_BEGIN(s, &err);
  if (!st)
    st = em_store_checkpoint_insert(s, c->run, c->step, c->epoch, c->path, c->sha, c->size,
                                    c->kind, c->metric, c->lower_is_better, NULL, &err);
  if (!st)
    st = em_store_checkpoints_prune(s, c->run, c->keep_last, c->lower_is_better, unlink, &err);
  if (!st) st = EM_SQL_COMMIT(s, &err);
  bool retry = false;
  if (st) {
    retry = !last_try && was_busy(s);
    em_db_rollback(s);
    if (!retry) {
      em_error_prefix(&err, "checkpoint %s (run %lld, step %lld) was not recorded", c->path,
                      (long long)c->run, (long long)c->step);
      note(r, &err);
    }
  } else {
    em_store_unlink_files(unlink); /* after the commit that deleted their rows */
    r->rows++;
    r->transactions++;
  }
  g_ptr_array_unref(unlink);
  r->commit_seconds += mono_now() - t0;
  return retry;
}

static void commit_batch(em_store_writer *w, batch *b, const char *const *names,
                         batch_result *r) {
  for (size_t i = 0; i < b->nm; i += EM_STORE_WRITER_BATCH) {
    size_t n = MIN((size_t)EM_STORE_WRITER_BATCH, b->nm - i);
    for (int a = 0; commit_metrics(w, b->m + i, n, names, a == BUSY_RETRIES, r); a++) {}
  }
  for (int a = 0; b->ne && commit_events(w, b->e, b->ne, a == BUSY_RETRIES, r); a++) {}
  for (size_t i = 0; i < b->nc; i++) {
    /* hashed before taking the write lock: files can be large */
    em_error e = {0};
    ckpt_item *c = &b->c[i];
    if (em_store_file_sha256(c->path, c->sha, &c->size, &e) == EM_OK) {
      for (int a = 0; commit_checkpoint(w, c, a == BUSY_RETRIES, r); a++) {}
    } else {
      em_error_prefix(&e, "checkpoint of run %lld at step %lld was not recorded",
                      (long long)c->run, (long long)c->step);
      note(r, &e);
    }
  }
}

static gpointer writer_main(gpointer data) {
  em_store_writer *w = data;
  GPtrArray *names = g_ptr_array_new();
  g_mutex_lock(&w->mu);
  for (;;) {
    gint64 deadline = g_get_monotonic_time() + (gint64)w->flush_ms * 1000;
    while (!w->stop && !w->flush_req && pending(&w->q) < EM_STORE_WRITER_BATCH)
      if (!g_cond_wait_until(&w->wake, &w->mu, deadline)) break;
    w->flush_req = false;
    if (pending(&w->q) == 0) {
      w->committed = w->enqueued;
      g_cond_broadcast(&w->done);
      if (w->stop) break;
      continue;
    }
    /* take the queue; the callers get the spare (emptied, capacity kept) */
    batch b = w->q;
    w->q = w->spare;
    uint64_t target = w->enqueued;
    g_cond_broadcast(&w->done); /* callers waiting for room */
    g_ptr_array_set_size(names, 0);
    for (guint i = 0; i < w->keys->len; i++) g_ptr_array_add(names, w->keys->pdata[i]);
    g_mutex_unlock(&w->mu);

    batch_result r = {0};
    commit_batch(w, &b, (const char *const *)names->pdata, &r);
    batch_clear(&b);

    g_mutex_lock(&w->mu);
    w->spare = b;
    keep_error(w, &r.err);
    w->stats.rows += r.rows;
    w->stats.transactions += r.transactions;
    w->stats.commit_seconds += r.commit_seconds;
    w->committed = target;
    g_cond_broadcast(&w->done);
  }
  g_mutex_unlock(&w->mu);
  g_ptr_array_unref(names);
  return NULL;
}

/* ---- the callers' side ------------------------------------------------- */

em_store_writer *em_store_writer_new(const char *dir, int flush_ms, em_error *err) {
  em_store *s = em_store_open(dir, false, err);
  if (!s) {
    em_error_prefix(err, "starting the store writer");
    return NULL;
  }
  em_store_writer *w = g_new0(em_store_writer, 1);
  w->s = s;
  w->flush_ms = flush_ms > 0 ? flush_ms : 200;
  g_mutex_init(&w->mu);
  g_cond_init(&w->wake);
  g_cond_init(&w->done);
  w->key_index = g_hash_table_new(g_str_hash, g_str_equal);
  w->keys = g_ptr_array_new_with_free_func(g_free);
  GError *gerr = NULL;
  w->thread = g_thread_try_new("em-store-writer", writer_main, w, &gerr);
  if (!w->thread) {
    em_error_set(err, EM_ERR_NOMEM, "starting the store writer thread: %s", gerr->message);
    g_error_free(gerr);
    w->stop = true;
    em_store_writer_free(w, NULL);
    return NULL;
  }
  return w;
}

void em_store_writer_metric(em_store_writer *w, int64_t run, int64_t step, const char *key,
                            double value, double wall) {
  if (!w) return;
  double t0 = mono_now();
  g_mutex_lock(&w->mu);
  if (!key || !key[0]) {
    em_error e;
    em_error_set(&e, EM_ERR_INVALID, "store writer: a metric of run %lld at step %lld has no key",
                 (long long)run, (long long)step);
    keep_error(w, &e);
    g_mutex_unlock(&w->mu);
    return;
  }
  gpointer idx = g_hash_table_lookup(w->key_index, key);
  if (!idx) {
    char *copy = g_strdup(key);
    g_ptr_array_add(w->keys, copy);
    idx = GINT_TO_POINTER(w->keys->len);
    g_hash_table_insert(w->key_index, copy, idx);
  }
  wait_for_room(w);
  batch *b = &w->q;
  b->m = grow(b->m, b->nm, &b->cm, sizeof *b->m);
  b->m[b->nm++] = (metric_item){run, step, value, wall, GPOINTER_TO_INT(idx) - 1};
  w->enqueued++;
  if (pending(b) == EM_STORE_WRITER_BATCH || pending(b) >= EM_STORE_WRITER_MAX_QUEUE)
    g_cond_signal(&w->wake);
  w->stats.enqueue_seconds += mono_now() - t0;
  g_mutex_unlock(&w->mu);
}

void em_store_writer_checkpoint(em_store_writer *w, int64_t run, int64_t step, int64_t epoch,
                                const char *abs_path, const char *kind, double metric,
                                bool lower_is_better, int keep_last) {
  if (!w) return;
  double t0 = mono_now();
  g_mutex_lock(&w->mu);
  wait_for_room(w);
  batch *b = &w->q;
  b->c = grow(b->c, b->nc, &b->cc, sizeof *b->c);
  b->c[b->nc++] = (ckpt_item){
      .run = run,
      .step = step,
      .epoch = epoch,
      .path = g_strdup(abs_path ? abs_path : ""),
      .kind = g_strdup(kind ? kind : "step"),
      .metric = metric,
      .lower_is_better = lower_is_better,
      .keep_last = keep_last < 1 ? 1 : keep_last,
  };
  w->enqueued++;
  if (pending(b) == EM_STORE_WRITER_BATCH || pending(b) >= EM_STORE_WRITER_MAX_QUEUE)
    g_cond_signal(&w->wake);
  w->stats.enqueue_seconds += mono_now() - t0;
  g_mutex_unlock(&w->mu);
}

void em_store_writer_event(em_store_writer *w, int64_t run, int64_t step, const char *kind,
                           const char *detail) {
  if (!w) return;
  double t0 = mono_now();
  g_mutex_lock(&w->mu);
  wait_for_room(w);
  batch *b = &w->q;
  b->e = grow(b->e, b->ne, &b->ce, sizeof *b->e);
  b->e[b->ne++] = (event_item){run, step, g_strdup(kind ? kind : "event"), g_strdup(detail)};
  w->enqueued++;
  if (pending(b) == EM_STORE_WRITER_BATCH || pending(b) >= EM_STORE_WRITER_MAX_QUEUE)
    g_cond_signal(&w->wake);
  w->stats.enqueue_seconds += mono_now() - t0;
  g_mutex_unlock(&w->mu);
}

em_status em_store_writer_flush(em_store_writer *w, em_error *err) {
  if (!w) return EM_OK;
  g_mutex_lock(&w->mu);
  uint64_t target = w->enqueued;
  w->flush_req = true;
  g_cond_signal(&w->wake);
  while (w->committed < target) g_cond_wait(&w->done, &w->mu);
  em_error e = w->error;
  em_error_clear(&w->error);
  g_mutex_unlock(&w->mu);
  if (e.status != EM_OK && err) *err = e;
  return e.status;
}

em_status em_store_writer_free(em_store_writer *w, em_error *err) {
  if (!w) return EM_OK;
  em_status st = EM_OK;
  if (w->thread) {
    st = em_store_writer_flush(w, err);
    g_mutex_lock(&w->mu);
    w->stop = true;
    g_cond_signal(&w->wake);
    g_mutex_unlock(&w->mu);
    g_thread_join(w->thread);
  }
  em_store_close(w->s);
  batch_free(&w->q);
  batch_free(&w->spare);
  g_hash_table_destroy(w->key_index);
  g_ptr_array_unref(w->keys);
  g_free(w->key_ids);
  g_mutex_clear(&w->mu);
  g_cond_clear(&w->wake);
  g_cond_clear(&w->done);
  g_free(w);
  return st;
}

void em_store_writer_get_stats(em_store_writer *w, em_store_writer_stats *out) {
  memset(out, 0, sizeof *out);
  if (!w) return;
  g_mutex_lock(&w->mu);
  *out = w->stats;
  g_mutex_unlock(&w->mu);
}
