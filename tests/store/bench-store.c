/* bench-store.c: registry speed. Inserts 1,000,000 metric points through
 * the writer, lists 1,000 runs with their final metrics, and loads 10 runs
 * x 100,000 points with em_store_metrics_get; each measured 5 times, the
 * median reported in a small table and a final JSON line.
 *
 *   bench-store [folder]   (default: a new folder under $TMPDIR, removed) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store-test-util.h"

#define REPS 5

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp_double);
  return v[n / 2];
}

static void check(em_status st, const em_error *err, const char *what) {
  if (st != EM_OK) {
    fprintf(stderr, "bench-store: %s: %s\n", what, err->msg);
    exit(1);
  }
}

int main(int argc, char **argv) {
  char *dir = argc > 1 ? g_strdup(argv[1]) : st_tmpdir();
  bool remove_dir = argc <= 1;
  em_error err = {0};
  em_store *s = em_store_open(dir, false, &err);
  if (!s) check(EM_ERR_IO, &err, "open");

  /* 1. 1,000,000 points through the writer: 4 keys x 250,000 steps */
  const int64_t points = 1000000, steps = points / 4;
  static const char *const keys[4] = {"train_loss", "lr", "grad_norm", "samples_per_s"};
  double ins_s[REPS], ins_rate[REPS], enq_s[REPS];
  int64_t txs = 0;
  for (int r = 0; r < REPS; r++) {
    int64_t run = st_make_run(s, "bench", NULL);
    em_store_writer *w = em_store_writer_new(dir, 200, &err);
    if (!w) check(EM_ERR_IO, &err, "writer");
    double t0 = now_s();
    for (int64_t i = 0; i < steps; i++)
      for (int k = 0; k < 4; k++) em_store_writer_metric(w, run, i, keys[k], 1.0 / (i + k + 1), t0 + i);
    check(em_store_writer_flush(w, &err), &err, "flush");
    ins_s[r] = now_s() - t0;
    ins_rate[r] = points / ins_s[r];
    em_store_writer_stats st;
    em_store_writer_get_stats(w, &st);
    enq_s[r] = st.enqueue_seconds;
    txs = st.transactions;
    check(em_store_writer_free(w, &err), &err, "writer free");
  }

  /* 2. 1,000 runs with 100 train_loss points and 10 evaluations each */
  em_store_writer *w = em_store_writer_new(dir, 200, &err);
  int64_t first_small = 0;
  for (int i = 0; i < 1000; i++) {
    int64_t run = st_make_run(s, i % 2 ? "mlp" : "cnn", NULL);
    if (!first_small) first_small = run;
    for (int st = 1; st <= 100; st++) em_store_writer_metric(w, run, st, EM_METRIC_TRAIN_LOSS, 1.0 / st, st);
    for (int st = 10; st <= 100; st += 10) {
      em_store_writer_metric(w, run, st, EM_METRIC_TEST_LOSS, 2.0 / st, st);
      em_store_writer_metric(w, run, st, EM_METRIC_TEST_ACCURACY, 1.0 - 1.0 / st, st);
    }
  }
  /* 3. 10 runs x 100,000 points */
  int64_t big[10];
  for (int i = 0; i < 10; i++) {
    big[i] = st_make_run(s, "big", NULL);
    for (int64_t st = 0; st < 100000; st++)
      em_store_writer_metric(w, big[i], st, EM_METRIC_TRAIN_LOSS, 1.0 / (st + 1), st);
  }
  check(em_store_writer_free(w, &err), &err, "writer free");

  double list_ms[REPS], load_ms[REPS];
  int nruns = 0;
  int64_t loaded = 0;
  for (int r = 0; r < REPS; r++) {
    em_run *runs;
    double t0 = now_s();
    check(em_store_runs_list(s, NULL, &runs, &nruns, &err), &err, "list");
    list_ms[r] = (now_s() - t0) * 1e3;
    for (int i = 0; i < nruns; i++)
      if (runs[i].id >= first_small && runs[i].id < first_small + 1000 &&
          runs[i].final_test_accuracy != 0.99) {
        fprintf(stderr, "bench-store: run %lld: final accuracy %g, expected 0.99\n",
                (long long)runs[i].id, runs[i].final_test_accuracy);
        return 1;
      }
    em_runs_free(runs, nruns);
    t0 = now_s();
    loaded = 0;
    for (int i = 0; i < 10; i++) {
      em_metric_point *p;
      int64_t n;
      check(em_store_metrics_get(s, big[i], EM_METRIC_TRAIN_LOSS, &p, &n, &err), &err, "load");
      loaded += n;
      g_free(p);
    }
    load_ms[r] = (now_s() - t0) * 1e3;
  }
  if (loaded != 1000000) {
    fprintf(stderr, "bench-store: loaded %lld points, expected 1000000\n", (long long)loaded);
    return 1;
  }
  double ins = median(ins_s, REPS), rate = median(ins_rate, REPS), enq = median(enq_s, REPS);
  double list = median(list_ms, REPS), load = median(load_ms, REPS);
  printf("registry benchmark (median of %d), folder %s\n", REPS, dir);
  printf("  %-44s %12s\n", "what", "result");
  printf("  %-44s %9.2f s  (%.0f points/s, %lld transactions, %.3f s enqueueing)\n",
         "insert 1,000,000 points via the writer", ins, rate, (long long)txs, enq);
  printf("  %-44s %9.1f ms (%d runs)\n", "list 1,000 runs with final metrics", list, nruns);
  printf("  %-44s %9.1f ms\n", "load 10 runs x 100,000 points", load);
  printf("{\"bench\": \"store\", \"insert_points\": %lld, \"insert_s\": %.3f, "
         "\"insert_points_per_s\": %.0f, \"enqueue_s\": %.3f, \"list_runs\": %d, \"list_ms\": %.2f, "
         "\"load_points\": %lld, \"load_ms\": %.2f, \"reps\": %d}\n",
         (long long)points, ins, rate, enq, nruns, list, (long long)loaded, load, REPS);
  em_store_close(s);
  if (remove_dir) st_rmrf(dir);
  g_free(dir);
  return 0;
}
