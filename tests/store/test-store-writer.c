/* test-store-writer.c: the store writer (batching by size and by time,
 * flush, errors kept and returned), checkpoint rows and pruning, the
 * newest intact checkpoint, and a reader in another process while the
 * writer commits as fast as it can. */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store-test-util.h"

typedef st_fixture fixture; /* a fresh registry in a temporary folder */

static int64_t count_metrics(const char *dir) {
  sqlite3 *raw = st_raw_open(dir);
  int64_t n = st_raw_int(raw, "SELECT coalesce(sum(n), 0) FROM metric_chunks");
  sqlite3_close(raw);
  return n;
}

static void test_batching(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t run = st_make_run(f->s, "mlp", NULL);
  /* a 60 s timer: only the size rule can commit before a flush */
  em_store_writer *w = em_store_writer_new(f->dir, 60000, &err);
  g_assert_nonnull(w);
  for (int i = 0; i < 4096; i++) em_store_writer_metric(w, run, i, "train_loss", i, i);
  em_store_writer_stats st = {0};
  for (int t = 0; t < 500 && st.rows < 4096; t++) {
    g_usleep(10000);
    em_store_writer_get_stats(w, &st);
  }
  g_assert_cmpint(st.rows, ==, 4096);
  g_assert_cmpint(st.transactions, ==, 1);
  g_assert_cmpint(count_metrics(f->dir), ==, 4096);
  /* a few more rows wait: no size trigger, no timer yet */
  for (int i = 4096; i < 4106; i++) em_store_writer_metric(w, run, i, "train_loss", i, i);
  g_usleep(200000);
  em_store_writer_get_stats(w, &st);
  g_assert_cmpint(st.rows, ==, 4096);
  g_assert_cmpint(count_metrics(f->dir), ==, 4096);
  g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_OK);
  g_assert_cmpint(count_metrics(f->dir), ==, 4106);
  /* a big backlog goes in transactions of at most 4096 rows */
  const int n = 4106 + 3 * 4096;
  for (int i = 4106; i < n; i++) em_store_writer_metric(w, run, i, "train_loss", i, i);
  g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_OK);
  em_store_writer_get_stats(w, &st);
  g_assert_cmpint(st.rows, ==, n);
  g_assert_cmpint(st.transactions, >=, 5);
  g_assert_cmpfloat(st.commit_seconds, >, 0);
  g_assert_cmpfloat(st.enqueue_seconds, >, 0);
  g_assert_cmpint(count_metrics(f->dir), ==, n);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);

  /* the timer: a few rows appear without a flush */
  w = em_store_writer_new(f->dir, 50, &err);
  for (int i = 0; i < 10; i++) em_store_writer_metric(w, run, i, "lr", 0.1, i);
  int64_t seen = 0;
  for (int t = 0; t < 300 && seen < n + 10; t++) {
    g_usleep(10000);
    seen = count_metrics(f->dir);
  }
  g_assert_cmpint(seen, ==, n + 10);
  em_store_writer_event(w, run, 5, "rollback", "loss NaN at step 5");
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  sqlite3 *raw = st_raw_open(f->dir);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_events WHERE kind = 'rollback'"), ==, 1);
  sqlite3_close(raw);
  g_assert_cmpint(em_store_writer_free(NULL, &err), ==, EM_OK);
  g_assert_cmpint(em_store_writer_flush(NULL, &err), ==, EM_OK);
}

static void test_errors(fixture *f, gconstpointer data) {
  em_error err = {0};
  /* a folder that cannot be made: below a regular file */
  char *file = g_build_filename(f->dir, "plain-file", NULL);
  st_write_random(file, 10, 1);
  char *bad = g_build_filename(file, "registry", NULL);
  g_assert_null(em_store_writer_new(bad, 0, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_IO);
  g_assert_nonnull(strstr(err.msg, bad));
  g_test_message("bad dir: %s", err.msg);
  g_free(bad);
  g_free(file);

  int64_t run = st_make_run(f->s, "mlp", NULL);
  em_store_writer *w = em_store_writer_new(f->dir, 20, &err);
  for (int i = 0; i < 100; i++) em_store_writer_metric(w, run, i, "train_loss", 1.0, 0);
  em_store_writer_metric(w, 999, 7, "train_loss", 1.0, 0); /* no such run */
  for (int i = 100; i < 200; i++) em_store_writer_metric(w, run, i, "train_loss", 1.0, 0);
  em_store_writer_checkpoint(w, run, 10, 0, "/nonexistent/ember/ckpt.safetensors", "step", NAN,
                             true, 3);
  err = (em_error){0};
  g_assert_cmpint(em_store_writer_flush(w, &err), !=, EM_OK);
  g_test_message("writer error: %s", err.msg);
  g_assert_nonnull(strstr(err.msg, "run 999"));
  /* the good rows around the bad one were recorded */
  g_assert_cmpint(count_metrics(f->dir), ==, 200);
  /* the error was handed over once; then the writer goes on */
  g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_OK);
  em_store_writer_checkpoint(w, run, 10, 0, "/nonexistent/ember/ckpt.safetensors", "step", NAN,
                             true, 3);
  g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_ERR_IO);
  g_assert_nonnull(strstr(err.msg, "/nonexistent/ember/ckpt.safetensors"));
  em_store_writer_metric(w, run, 1, "", 1.0, 0);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "no key"));
}

static gpointer release_lock_later(gpointer db) {
  g_usleep(12 * G_USEC_PER_SEC); /* past the writer's 10 s busy timeout */
  g_assert_cmpint(st_raw_exec(db, "COMMIT", NULL), ==, SQLITE_OK);
  return NULL;
}

/* Another process holds the registry's write lock past the busy timeout
 * (a long transaction, a tool, a backup): the writer tries the batch
 * again rather than losing it (910 metric points of a run were dropped,
 * its epoch's test_loss among them, and the run read "completed"). */
static void test_lock_held_past_timeout(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t run = st_make_run(f->s, "mlp", NULL);
  em_store_writer *w = em_store_writer_new(f->dir, 20, &err);
  g_assert_nonnull(w);
  sqlite3 *raw = st_raw_open(f->dir);
  g_assert_cmpint(st_raw_exec(raw, "BEGIN EXCLUSIVE", NULL), ==, SQLITE_OK);
  GThread *t = g_thread_new("lock", release_lock_later, raw);
  for (int i = 0; i < 300; i++) em_store_writer_metric(w, run, i, "loss", 1.0 / (i + 1), 0);
  em_store_writer_event(w, run, 299, "note", "while locked");
  g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_OK);
  g_thread_join(t);
  sqlite3_close(raw);
  g_assert_cmpint(count_metrics(f->dir), ==, 300);
  raw = st_raw_open(f->dir);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_events WHERE kind = 'note'"), ==, 1);
  sqlite3_close(raw);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
}

static char *ckpt_file(const char *dir, int64_t run, int step) {
  char *p = g_strdup_printf("%s/artifacts/ckpt/run%lld-step%d.safetensors", dir, (long long)run,
                            step);
  st_write_random(p, 2048 + step, (uint32_t)step);
  return p;
}

static bool ckpt_steps(em_store *s, int64_t run, const char *want) {
  em_checkpoint_row *c;
  int n;
  em_error err = {0};
  g_assert_cmpint(em_store_checkpoints_list(s, run, &c, &n, &err), ==, EM_OK);
  GString *got = g_string_new(NULL);
  for (int i = 0; i < n; i++) g_string_append_printf(got, "%s%lld", i ? " " : "", (long long)c[i].step);
  bool ok = strcmp(got->str, want) == 0;
  if (!ok) g_test_message("checkpoint steps: got '%s', want '%s'", got->str, want);
  g_string_free(got, TRUE);
  em_checkpoint_rows_free(c, n);
  return ok;
}

static void test_prune(fixture *f, gconstpointer data) {
  em_error err = {0};
  char *cdir = g_build_filename(f->dir, "artifacts", "ckpt", NULL);
  g_mkdir_with_parents(cdir, 0755);
  int64_t run = st_make_run(f->s, "mlp", NULL);
  em_store_writer *w = em_store_writer_new(f->dir, 20, &err);
  /* eval losses: the best (lowest) is at step 3 */
  const double loss[11] = {0, 0.9, 0.7, 0.2, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25};
  char *paths[11] = {0};
  for (int s = 1; s <= 5; s++) {
    paths[s] = ckpt_file(f->dir, run, s);
    em_store_writer_checkpoint(w, run, s, 0, paths[s], "eval", loss[s], true, 2);
  }
  g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_OK);
  g_assert_true(ckpt_steps(f->s, run, "3 4 5"));
  /* a version refers to step 4: pruning keeps it from now on */
  int ver = 0;
  g_assert_cmpint(em_store_model_register(f->s, run, "pinned", EM_PICK_STEP, 4, &ver, &err), ==,
                  EM_OK);
  for (int s = 6; s <= 10; s++) {
    paths[s] = ckpt_file(f->dir, run, s);
    em_store_writer_checkpoint(w, run, s, 0, paths[s], "eval", loss[s], true, 2);
  }
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  g_assert_true(ckpt_steps(f->s, run, "3 4 9 10"));
  for (int s = 1; s <= 10; s++) {
    bool kept = s == 3 || s == 4 || s >= 9;
    g_assert_cmpint(g_file_test(paths[s], G_FILE_TEST_EXISTS), ==, kept);
  }
  em_artifact *a;
  int na;
  g_assert_cmpint(em_store_artifacts_list(f->s, run, &a, &na, &err), ==, EM_OK);
  g_assert_cmpint(na, ==, 4);
  char *sha = st_file_sha256(paths[10]);
  g_assert_cmpstr(a[3].sha256, ==, sha);
  g_assert_cmpint(a[3].size, ==, 2048 + 10);
  g_assert_cmpstr(a[3].kind, ==, "checkpoint");
  g_assert_cmpstr(a[3].path, ==, paths[10]);
  g_free(sha);
  em_artifacts_free(a, na);

  /* higher is better (accuracy): the best is the largest */
  int64_t run2 = st_make_run(f->s, "mlp", NULL);
  w = em_store_writer_new(f->dir, 20, &err);
  const double acc[6] = {0, 0.5, 0.95, 0.6, 0.7, 0.8};
  char *p2[6];
  for (int s = 1; s <= 5; s++) {
    p2[s] = ckpt_file(f->dir, run2, s);
    em_store_writer_checkpoint(w, run2, s, 0, p2[s], s == 5 ? "final" : "eval", acc[s], false, 1);
  }
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  g_assert_true(ckpt_steps(f->s, run2, "2 5"));
  for (int s = 1; s <= 5; s++) g_free(p2[s]);
  for (int s = 1; s <= 10; s++) g_free(paths[s]);
  g_free(cdir);
}

static int warnings;
static void count_warnings(em_log_level level, const char *msg, void *user) {
  if (level == EM_LOG_WARNING) warnings++;
}

static void test_latest_valid(fixture *f, gconstpointer data) {
  em_error err = {0};
  char *cdir = g_build_filename(f->dir, "artifacts", "ckpt", NULL);
  g_mkdir_with_parents(cdir, 0755);
  int64_t run = st_make_run(f->s, "mlp", NULL);
  em_checkpoint_row c;
  g_assert_cmpint(em_store_checkpoint_latest_valid(f->s, run, &c, &err), ==, EM_ERR_INVALID);
  em_store_writer *w = em_store_writer_new(f->dir, 20, &err);
  char *p[4];
  for (int s = 1; s <= 3; s++) {
    p[s] = ckpt_file(f->dir, run, s);
    em_store_writer_checkpoint(w, run, s * 100, s, p[s], "step", NAN, true, 5);
  }
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  em_log_set_handler(count_warnings, NULL);
  warnings = 0;
  g_assert_cmpint(em_store_checkpoint_latest_valid(f->s, run, &c, &err), ==, EM_OK);
  g_assert_cmpint(c.step, ==, 300);
  em_checkpoint_row_clear(&c);
  /* same size, other bytes: the hash tells */
  st_write_random(p[3], 2048 + 3, 77);
  g_assert_cmpint(em_store_checkpoint_latest_valid(f->s, run, &c, &err), ==, EM_OK);
  g_assert_cmpint(c.step, ==, 200);
  g_assert_cmpint(c.epoch, ==, 2);
  g_assert_cmpstr(c.path, ==, p[2]);
  em_checkpoint_row_clear(&c);
  g_assert_cmpint(warnings, ==, 1);
  g_remove(p[2]);
  g_assert_cmpint(em_store_checkpoint_latest_valid(f->s, run, &c, &err), ==, EM_OK);
  g_assert_cmpint(c.step, ==, 100);
  em_checkpoint_row_clear(&c);
  st_write_random(p[1], 10, 1);
  g_assert_cmpint(em_store_checkpoint_latest_valid(f->s, run, &c, &err), ==, EM_ERR_FORMAT);
  g_assert_nonnull(strstr(err.msg, "none of its 3 checkpoints"));
  em_log_set_handler(NULL, NULL);
  for (int s = 1; s <= 3; s++) g_free(p[s]);
  g_free(cdir);
}

/* A child process writes metrics through a writer as fast as it can for
 * about 2 s; this process reads (lists runs, loads metrics) meanwhile
 * through its own connection. No read may fail. */
static void test_concurrency(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t run = st_make_run(f->s, "mlp", "busy");
  for (int i = 0; i < 20; i++) st_make_run(f->s, "other", NULL);
  em_store_close(f->s); /* nothing open across the fork */
  f->s = NULL;
  pid_t pid = fork();
  g_assert_cmpint(pid, >=, 0);
  if (pid == 0) {
    em_error e = {0};
    em_store_writer *w = em_store_writer_new(f->dir, 50, &e);
    if (!w) _exit(3);
    gint64 end = g_get_monotonic_time() + 2 * G_USEC_PER_SEC;
    int64_t step = 0;
    while (g_get_monotonic_time() < end) {
      for (int i = 0; i < 1000; i++, step++) {
        em_store_writer_metric(w, run, step, "train_loss", 1.0 / (step + 1), step);
        if (step % 10 == 0) em_store_writer_metric(w, run, step, "test_accuracy", 0.5, step);
      }
      /* keep what waits bounded, so the child stops about on time */
      if (step % 50000 == 0 && em_store_writer_flush(w, &e) != EM_OK) _exit(5);
    }
    _exit(em_store_writer_free(w, &e) == EM_OK ? 0 : 4);
  }
  f->s = em_store_open(f->dir, false, &err);
  g_assert_nonnull(f->s);
  int64_t reads = 0, failures = 0, last_n = 0, max_n = 0;
  char last_err[1024] = "";
  int status = 0;
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    em_run *runs;
    int n;
    em_metric_point *p;
    int64_t np;
    em_error e = {0};
    if (em_store_runs_list(f->s, NULL, &runs, &n, &e) == EM_OK && n == 21) {
      em_runs_free(runs, n);
      reads++;
    } else {
      failures++;
      g_strlcpy(last_err, e.msg, sizeof last_err);
    }
    if (em_store_metrics_get(f->s, run, "train_loss", &p, &np, &e) == EM_OK && np >= last_n) {
      /* a snapshot: steps 0..np-1 in order, never going back */
      if (np > 0 && p[np - 1].step != np - 1) failures++;
      last_n = np;
      max_n = MAX(max_n, np);
      g_free(p);
      reads++;
    } else {
      failures++;
      g_strlcpy(last_err, e.msg, sizeof last_err);
    }
    if (done == pid) break;
  }
  g_assert_true(WIFEXITED(status));
  g_assert_cmpint(WEXITSTATUS(status), ==, 0);
  g_test_message("concurrency: %lld reads, %lld failures, up to %lld points seen while writing",
                 (long long)reads, (long long)failures, (long long)max_n);
  if (failures) g_test_message("last failure: %s", last_err);
  g_assert_cmpint(failures, ==, 0);
  g_assert_cmpint(reads, >, 20);
  g_assert_cmpint(max_n, >, 0);
  em_metric_point *p;
  int64_t np;
  g_assert_cmpint(em_store_metrics_get(f->s, run, "train_loss", &p, &np, &err), ==, EM_OK);
  g_test_message("concurrency: the child wrote %lld points of train_loss", (long long)np);
  g_assert_cmpint(np, >=, max_n);
  g_free(p);
  if (g_getenv("EMBER_STORE_TEST_REPORT"))
    g_printerr("concurrency: %lld reads, %lld failures, %lld points written\n", (long long)reads,
               (long long)failures, (long long)np);
}

/* Connections opened and closed in the writer's own process (the GUI keeps
 * a reader beside the recording writer) must not take the writer's locks
 * away: on POSIX, closing any descriptor of a file drops all the process's
 * locks on it. Another process must go on seeing every commit. */
static void test_one_process(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t run = st_make_run(f->s, "mlp", NULL);
  em_store_writer *w = em_store_writer_new(f->dir, 20, &err);
  g_assert_nonnull(w);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 100; i++)
      em_store_writer_metric(w, run, round * 100 + i, "loss", i, i);
    g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_OK);
    for (int ro = 0; ro < 2; ro++) {
      em_store *r = em_store_open(f->dir, ro, &err);
      g_assert_nonnull(r);
      em_run *runs = NULL;
      int n = 0;
      g_assert_cmpint(em_store_runs_list(r, &(em_run_filter){.any_status = true}, &runs, &n, &err),
                      ==, EM_OK);
      em_runs_free(runs, n);
      em_store_close(r);
    }
    /* the WAL is still there (no connection believed itself the last) */
    char *wal = g_strdup_printf("%s/registry.db-wal", f->dir);
    g_assert_true(g_file_test(wal, G_FILE_TEST_EXISTS));
    g_free(wal);
    pid_t pid = fork();
    if (pid == 0) _exit(count_metrics(f->dir) == (round + 1) * 100 ? 0 : 1);
    int status = 0;
    waitpid(pid, &status, 0);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
  }
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
#define ADD(path, fn) g_test_add(path, fixture, NULL, st_fixture_setup, fn, st_fixture_teardown)
  ADD("/store/writer/batching", test_batching);
  ADD("/store/writer/errors", test_errors);
  ADD("/store/writer/lock-held-past-timeout", test_lock_held_past_timeout);
  ADD("/store/checkpoints/prune", test_prune);
  ADD("/store/checkpoints/latest-valid", test_latest_valid);
  ADD("/store/writer/concurrency", test_concurrency);
  ADD("/store/writer/one-process", test_one_process);
  return g_test_run();
}
