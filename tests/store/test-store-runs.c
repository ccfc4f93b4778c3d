/* test-store-runs.c: runs (create with dataset lineage, list and filter,
 * get, finish, tags/notes/events, delete), metrics read back through the
 * writer, and runs of vanished processes marked killed. */
#include <glib/gstdio.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/stat.h>
#include "store-test-util.h"

typedef st_fixture fixture; /* a fresh registry in a temporary folder */

/* SHA-256 of the files' SHA-256s in path order, as the store documents. */
static char *dataset_sha(const char *const *files, int n) {
  GChecksum *sum = g_checksum_new(G_CHECKSUM_SHA256);
  for (int i = 0; i < n; i++) {
    char *h = st_file_sha256(files[i]);
    g_checksum_update(sum, (const guchar *)h, 64);
    g_free(h);
  }
  char *out = g_strdup(g_checksum_get_string(sum));
  g_checksum_free(sum);
  return out;
}

static int64_t run_with_dataset(em_store *s, const char *name, const char *const *files, int n,
                                const char *dir) {
  em_dataset_identity d = {.name = "toy", .path = dir, .n_files = n, .files = files};
  em_run_new r = {.name = name, .model = "mlp", .spec_json = "{\"name\": \"mlp\"}",
                  .config_json = "{\"epochs\": 1}", .seed = UINT64_MAX - 1, .device = "cpu",
                  .threads = 3, .engine_version = "0.1.0", .dataset = &d,
                  .kernels = "avx2 kernels (processor avx512_bf16, capped by EMBER_CPU_ISA=avx2), "
                             "OpenBLAS Haswell"};
  em_error err = {0};
  int64_t id = 0;
  if (em_store_run_create(s, &r, &id, &err)) g_error("%s", err.msg);
  return id;
}

static void test_create_get(fixture *f, gconstpointer data) {
  char *ddir = g_build_filename(f->dir, "data", NULL);
  g_mkdir(ddir, 0755);
  char *a = g_build_filename(ddir, "b-train.bin", NULL);
  char *b = g_build_filename(ddir, "a-labels.bin", NULL);
  st_write_random(a, 100000, 1);
  st_write_random(b, 3000, 2);
  const char *files[2] = {a, b};           /* given out of order */
  const char *sorted[2] = {b, a};
  int64_t id = run_with_dataset(f->s, "", files, 2, ddir);
  em_error err = {0};
  int64_t child = 0;
  em_run_new rn = {.name = "resumed", .model = "mlp", .parent_run = id};
  g_assert_cmpint(em_store_run_create(f->s, &rn, &child, &err), ==, EM_OK);
  rn.parent_run = 999;
  int64_t bad;
  g_assert_cmpint(em_store_run_create(f->s, &rn, &bad, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "no run 999"));
  em_run_new nomodel = {.name = "x"};
  g_assert_cmpint(em_store_run_create(f->s, &nomodel, &bad, &err), ==, EM_ERR_INVALID);

  /* a continuation is a child that loaded its checkpoint ("resumed"): an
   * attempt that failed before it is not one (the next --resume warned
   * "resumed before, as run N" about a run that trained nothing) */
  int64_t first = -1, second = 0;
  g_assert_cmpint(em_store_run_first_child(f->s, id, &first, &err), ==, EM_OK);
  g_assert_cmpint(first, ==, 0);
  g_assert_cmpint(em_store_run_create(f->s, &rn, &second, &err), ==, EM_ERR_INVALID);
  rn.parent_run = id;
  g_assert_cmpint(em_store_run_create(f->s, &rn, &second, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_event(f->s, second, 30, "resumed", "from step 30", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_first_child(f->s, id, &first, &err), ==, EM_OK);
  g_assert_cmpint(first, ==, second);
  g_assert_cmpint(em_store_run_event(f->s, child, 30, "resumed", "from step 30", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_first_child(f->s, id, &first, &err), ==, EM_OK);
  g_assert_cmpint(first, ==, child);

  em_run r;
  g_assert_cmpint(em_store_run_get(f->s, id, &r, &err), ==, EM_OK);
  char *name = g_strdup_printf("mlp-%lld", (long long)id);
  g_assert_cmpstr(r.name, ==, name);
  g_free(name);
  g_assert_cmpstr(r.model, ==, "mlp");
  g_assert_cmpint(r.status, ==, EM_RUN_RUNNING);
  g_assert_cmpuint(r.seed, ==, UINT64_MAX - 1);
  g_assert_cmpint(r.threads, ==, 3);
  g_assert_cmpstr(r.kernels, ==, "avx2 kernels (processor avx512_bf16, capped by EMBER_CPU_ISA=avx2), "
                                 "OpenBLAS Haswell");
  g_assert_cmpint(r.pid, ==, getpid());
  g_assert_cmpfloat(r.ended, ==, 0);
  g_assert_cmpfloat(fabs(r.started - g_get_real_time() / 1e6), <, 60);
  g_assert_true(isnan(r.final_test_accuracy) && isnan(r.final_train_loss));
  g_assert_cmpstr(r.spec_json, ==, "{\"name\": \"mlp\"}");
  g_assert_cmpstr(r.config_json, ==, "{\"epochs\": 1}");
  char *spec_sha = g_compute_checksum_for_string(G_CHECKSUM_SHA256, "{\"name\": \"mlp\"}", -1);
  g_assert_cmpstr(r.spec_sha256, ==, spec_sha);
  g_free(spec_sha);
  g_assert_cmpstr(r.dataset_name, ==, "toy");
  g_assert_cmpstr(r.dataset_path, ==, ddir);
  g_assert_cmpint(r.dataset_size, ==, 103000);
  char *dsha = dataset_sha(sorted, 2);
  g_assert_cmpstr(r.dataset_sha256, ==, dsha);
  em_run_clear(&r);
  g_assert_cmpint(em_store_run_get(f->s, child, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.parent_run, ==, id);
  g_assert_null(r.dataset_name);
  em_run_clear(&r);
  g_assert_cmpint(em_store_run_get(f->s, 12345, &r, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "no run 12345"));

  /* the hash cache: same path, size and mtime -> not hashed again. Change
   * a file's bytes but keep its size and mtime: the cached hash is used. */
  GStatBuf sb;
  g_assert_cmpint(g_stat(a, &sb), ==, 0);
  st_write_random(a, 100000, 99);
  struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
  g_assert_cmpint(utimensat(AT_FDCWD, a, ts, 0), ==, 0);
  int64_t id2 = run_with_dataset(f->s, "cached", files, 2, ddir);
  g_assert_cmpint(em_store_run_get(f->s, id2, &r, &err), ==, EM_OK);
  g_assert_cmpstr(r.dataset_sha256, ==, dsha);
  em_run_clear(&r);
  sqlite3 *raw = st_raw_open(f->dir);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM datasets"), ==, 1);
  /* a new mtime: hashed again, a new dataset identity */
  st_age_file(a, 10);
  int64_t id3 = run_with_dataset(f->s, "rehashed", files, 2, ddir);
  g_assert_cmpint(em_store_run_get(f->s, id3, &r, &err), ==, EM_OK);
  char *dsha2 = dataset_sha(sorted, 2);
  g_assert_cmpstr(r.dataset_sha256, ==, dsha2);
  g_assert_cmpstr(r.dataset_sha256, !=, dsha);
  em_run_clear(&r);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM datasets"), ==, 2);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM file_hashes"), ==, 2);
  sqlite3_close(raw);
  /* a dataset without files (synthetic, a plugin's kind): its contents are
   * not identified, not the SHA-256 of nothing that every such run shares */
  int64_t id4 = run_with_dataset(f->s, "no-files", NULL, 0, ddir);
  g_assert_cmpint(em_store_run_get(f->s, id4, &r, &err), ==, EM_OK);
  g_assert_cmpstr(r.dataset_sha256, ==, EM_DATASET_SHA_UNKNOWN);
  em_run_clear(&r);
  /* lineage backwards: the runs on a dataset (by name or SHA-256 prefix) */
  em_run *runs;
  int nr;
  em_run_filter by_name = {.any_status = true, .dataset = "toy"};
  g_assert_cmpint(em_store_runs_list(f->s, &by_name, &runs, &nr, &err), ==, EM_OK);
  g_assert_cmpint(nr, ==, 4);
  g_assert_cmpint(runs[0].id, ==, id4);
  g_assert_cmpint(runs[1].id, ==, id3);
  em_runs_free(runs, nr);
  char prefix[13];
  g_strlcpy(prefix, dsha2, sizeof prefix);
  em_run_filter by_sha = {.any_status = true, .dataset = prefix};
  g_assert_cmpint(em_store_runs_list(f->s, &by_sha, &runs, &nr, &err), ==, EM_OK);
  g_assert_cmpint(nr, ==, 1);
  g_assert_cmpint(runs[0].id, ==, id3);
  em_runs_free(runs, nr);
  em_run_filter none = {.any_status = true, .dataset = "cifar10"};
  g_assert_cmpint(em_store_runs_list(f->s, &none, &runs, &nr, &err), ==, EM_OK);
  g_assert_cmpint(nr, ==, 0);
  em_runs_free(runs, nr);
  /* "unknown" is not a SHA-256 prefix: runs on datasets without files are
   * not one dataset */
  const char *unknowns[] = {"u", "unknown"};
  for (int k = 0; k < 2; k++) {
    em_run_filter unk = {.any_status = true, .dataset = unknowns[k]};
    g_assert_cmpint(em_store_runs_list(f->s, &unk, &runs, &nr, &err), ==, EM_OK);
    g_assert_cmpint(nr, ==, 0);
    em_runs_free(runs, nr);
  }
  g_assert_cmpint(em_store_run_get(f->s, id3, &r, &err), ==, EM_OK);
  g_strlcpy(prefix, r.spec_sha256, sizeof prefix);
  em_run_clear(&r);
  em_run_filter by_spec = {.any_status = true, .spec_sha256 = prefix};
  g_assert_cmpint(em_store_runs_list(f->s, &by_spec, &runs, &nr, &err), ==, EM_OK);
  g_assert_cmpint(nr, >=, 3); /* the same spec text in every run of this test */
  em_runs_free(runs, nr);
  /* a missing dataset file is a clear error and no run */
  const char *missing[1] = {"/nonexistent/ember/file.bin"};
  em_dataset_identity d = {.name = "toy", .path = "/nonexistent", .n_files = 1, .files = missing};
  em_run_new rm = {.model = "mlp", .dataset = &d};
  g_assert_cmpint(em_store_run_create(f->s, &rm, &bad, &err), ==, EM_ERR_IO);
  g_assert_nonnull(strstr(err.msg, "/nonexistent/ember/file.bin"));
  g_free(dsha);
  g_free(dsha2);
  g_free(a);
  g_free(b);
  g_free(ddir);
}

static void test_list_filter(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t ids[6];
  const char *models[6] = {"mlp", "cnn", "mlp", "cnn", "mlp", "mlp"};
  for (int i = 0; i < 6; i++) ids[i] = st_make_run(f->s, models[i], NULL);
  g_assert_cmpint(em_store_run_finish(f->s, ids[0], EM_RUN_COMPLETED, NULL, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_finish(f->s, ids[1], EM_RUN_FAILED, "NaN loss at step 3", &err), ==,
                  EM_OK);
  g_assert_cmpint(em_store_run_finish(f->s, ids[2], EM_RUN_STOPPED, NULL, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_finish(f->s, 777, EM_RUN_STOPPED, NULL, &err), ==, EM_ERR_INVALID);

  /* final metrics come with the list */
  em_store_writer *w = em_store_writer_new(f->dir, 50, &err);
  g_assert_nonnull(w);
  for (int s = 1; s <= 10; s++) {
    em_store_writer_metric(w, ids[0], s, EM_METRIC_TRAIN_LOSS, 1.0 / s, 100.0 + s);
    em_store_writer_metric(w, ids[0], s, "lr", 0.1, 100.0 + s);
  }
  em_store_writer_metric(w, ids[0], 5, EM_METRIC_TEST_ACCURACY, 0.5, 105);
  em_store_writer_metric(w, ids[0], 10, EM_METRIC_TEST_ACCURACY, 0.75, 110);
  em_store_writer_metric(w, ids[0], 10, EM_METRIC_TEST_LOSS, 0.6, 110);
  em_store_writer_metric(w, ids[0], 12, "grad_norm", 3.0, 112); /* the last step of any key */
  em_store_writer_metric(w, ids[2], 3, EM_METRIC_TEST_ACCURACY, 0.4, 3);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);

  em_run *runs;
  int n;
  g_assert_cmpint(em_store_runs_list(f->s, NULL, &runs, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 6);
  for (int i = 0; i < 6; i++) g_assert_cmpint(runs[i].id, ==, ids[5 - i]); /* newest first */
  em_run *r0 = &runs[5];
  g_assert_cmpint(r0->status, ==, EM_RUN_COMPLETED);
  g_assert_cmpfloat(r0->ended, >=, r0->started);
  g_assert_cmpfloat(r0->final_test_accuracy, ==, 0.75);
  g_assert_cmpfloat(r0->final_test_loss, ==, 0.6);
  g_assert_cmpfloat(r0->final_train_loss, ==, 0.1);
  g_assert_cmpint(r0->steps, ==, 12);
  g_assert_null(r0->spec_json); /* only run_get fills it */
  g_assert_cmpstr(runs[4].message, ==, "NaN loss at step 3");
  g_assert_cmpfloat(runs[3].final_test_accuracy, ==, 0.4);
  g_assert_true(isnan(runs[3].final_test_loss));
  g_assert_cmpint(runs[0].steps, ==, 0);
  em_runs_free(runs, n);

  em_run_filter fl = {.model = "mlp", .any_status = true};
  g_assert_cmpint(em_store_runs_list(f->s, &fl, &runs, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 4);
  for (int i = 0; i < n; i++) g_assert_cmpstr(runs[i].model, ==, "mlp");
  em_runs_free(runs, n);
  fl = (em_run_filter){.any_status = false, .status = EM_RUN_RUNNING};
  g_assert_cmpint(em_store_runs_list(f->s, &fl, &runs, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 3);
  em_runs_free(runs, n);
  fl = (em_run_filter){.model = "cnn", .status = EM_RUN_FAILED};
  g_assert_cmpint(em_store_runs_list(f->s, &fl, &runs, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 1);
  g_assert_cmpint(runs[0].id, ==, ids[1]);
  em_runs_free(runs, n);
  fl = (em_run_filter){.any_status = true, .limit = 2};
  g_assert_cmpint(em_store_runs_list(f->s, &fl, &runs, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 2);
  g_assert_cmpint(runs[0].id, ==, ids[5]);
  em_runs_free(runs, n);
  fl = (em_run_filter){.model = "nope", .any_status = true};
  g_assert_cmpint(em_store_runs_list(f->s, &fl, &runs, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 0);
  em_runs_free(runs, n);
}

static void test_status_names(void) {
  em_error err = {0};
  for (int i = EM_RUN_RUNNING; i <= EM_RUN_KILLED; i++) {
    em_run_status st;
    g_assert_cmpint(em_run_status_parse(em_run_status_name(i), &st, &err), ==, EM_OK);
    g_assert_cmpint(st, ==, i);
  }
  em_run_status st;
  g_assert_cmpint(em_run_status_parse("done", &st, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "completed"));
}

/* Every run's tags at once (the Runs page's table), by run then key;
 * notes and events are not tags. */
static void test_tags_all(fixture *f, gconstpointer data) {
  (void)data;
  em_error err = {0};
  em_run_tag *t = NULL;
  int n = -1;
  g_assert_cmpint(em_store_run_tags_all(f->s, &t, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 0);
  em_run_tags_free(t, n);
  int64_t a = st_make_run(f->s, "mlp", "a"), b = st_make_run(f->s, "mlp", "b");
  g_assert_cmpint(em_store_run_tag(f->s, b, "z", "1", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_tag(f->s, b, "k", "2", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_tag(f->s, a, "k", "3", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_note(f->s, a, "a note", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_tags_all(f->s, &t, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 3);
  g_assert_cmpint(t[0].run, ==, a);
  g_assert_cmpstr(t[0].value, ==, "3");
  g_assert_cmpint(t[1].run, ==, b);
  g_assert_cmpstr(t[1].key, ==, "k");
  g_assert_cmpstr(t[2].key, ==, "z");
  em_run_tags_free(t, n);
}

static void test_annotations_and_delete(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t keep = st_make_run(f->s, "mlp", "keep");
  int64_t run = st_make_run(f->s, "mlp", "doomed");
  int64_t child = 0;
  em_run_new rn = {.model = "mlp", .parent_run = run};
  g_assert_cmpint(em_store_run_create(f->s, &rn, &child, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_tag(f->s, run, "dataset", "mnist", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_tag(f->s, run, "dataset", "fashion", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_tag(f->s, run, "", "x", &err), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_store_run_tag(f->s, 999, "k", "v", &err), ==, EM_ERR_INVALID);
  /* plugin.* tags are the trainer's (a resume loads the file they name):
   * not set by hand, in the CLI or the workbench */
  em_error_clear(&err);
  g_assert_cmpint(em_store_run_tag(f->s, run, "plugin.x", "1 /tmp/x.so", &err), ==,
                  EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "not set by hand"));
  g_assert_cmpint(em_store_run_note(f->s, run, "lr too high?", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_event(f->s, run, 40, "rollback", "NaN loss", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_event(f->s, 999, 40, "rollback", NULL, &err), ==, EM_ERR_INVALID);

  char *cdir = g_build_filename(f->dir, "artifacts", "ckpt", NULL);
  g_mkdir_with_parents(cdir, 0755);
  em_store_writer *w = em_store_writer_new(f->dir, 20, &err);
  char *paths[3];
  for (int i = 0; i < 3; i++) {
    paths[i] = g_strdup_printf("%s/run%lld-%d.safetensors", cdir, (long long)run, i);
    st_write_random(paths[i], 1000 + i, i);
    em_store_writer_checkpoint(w, run, 10 * (i + 1), i, paths[i], "step", NAN, true, 5);
    em_store_writer_metric(w, run, i, "train_loss", 1.0, 1.0);
    em_store_writer_metric(w, keep, i, "train_loss", 2.0, 1.0);
  }
  char *export = g_build_filename(f->dir, "artifacts", "export.onnx", NULL);
  st_write_random(export, 500, 5);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  int64_t art = 0;
  g_assert_cmpint(em_store_artifact_add(f->s, export, "export", run, &art, &err), ==, EM_OK);

  sqlite3 *raw = st_raw_open(f->dir);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_tags"), ==, 1);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_tags WHERE value = 'fashion'"), ==, 1);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_notes"), ==, 1);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_events"), ==, 1);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM checkpoints"), ==, 3);

  int64_t latest = 0;
  g_assert_cmpint(em_store_run_latest_with_checkpoint(f->s, &latest, &err), ==, EM_OK);
  g_assert_cmpint(latest, ==, run);

  /* a run still training (this process) is not deleted from under it */
  g_assert_cmpint(em_store_run_delete(f->s, run, &err), ==, EM_ERR_INVALID);
  if (!strstr(err.msg, "is still training (pid")) g_error("%s", err.msg);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM checkpoints"), ==, 3);
  g_assert_cmpint(em_store_run_finish(f->s, run, EM_RUN_STOPPED, NULL, &err), ==, EM_OK);
  /* its folder: a checkpoint written but not recorded, and a file another
   * row records (kept); both from a run of the same id */
  char rdir[PATH_MAX];
  g_snprintf(rdir, sizeof rdir, "%s/artifacts/runs/%lld/checkpoints", f->dir, (long long)run);
  g_mkdir_with_parents(rdir, 0755);
  char *unrecorded = g_build_filename(rdir, "step-000000040.safetensors", NULL);
  char *shared = g_build_filename(rdir, "shared.bin", NULL);
  st_write_random(unrecorded, 100, 7);
  st_write_random(shared, 100, 8);
  int64_t shared_art = 0;
  g_assert_cmpint(em_store_artifact_add(f->s, shared, "export", keep, &shared_art, &err), ==,
                  EM_OK);
  g_assert_cmpint(em_store_run_delete(f->s, run, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_delete(f->s, run, &err), ==, EM_ERR_INVALID);
  g_assert_false(g_file_test(unrecorded, G_FILE_TEST_EXISTS));
  g_assert_true(g_file_test(shared, G_FILE_TEST_EXISTS));
  g_free(unrecorded);
  g_free(shared);
  for (int i = 0; i < 3; i++) {
    g_assert_false(g_file_test(paths[i], G_FILE_TEST_EXISTS));
    g_free(paths[i]);
  }
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_tags"), ==, 0);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_notes"), ==, 0);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_events"), ==, 0);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM checkpoints"), ==, 0);
  g_assert_cmpint(st_raw_int(raw, "SELECT sum(n) FROM metric_chunks"), ==, 3); /* keep's */
  /* the export stays, no longer tied to the run; the child run loses its parent */
  g_assert_true(g_file_test(export, G_FILE_TEST_EXISTS));
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM artifacts WHERE run IS NULL"), ==, 1);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM artifacts WHERE run IS NOT NULL"), ==, 1);
  em_run r;
  g_assert_cmpint(em_store_run_get(f->s, child, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.parent_run, ==, 0);
  em_run_clear(&r);
  g_assert_cmpint(em_store_run_latest_with_checkpoint(f->s, &latest, &err), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_store_integrity_check(f->s, &err), ==, EM_OK);
  sqlite3_close(raw);
  g_free(export);
  g_free(cdir);
}

static void test_metrics_round_trip(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t run = st_make_run(f->s, "mlp", NULL);
  em_store_writer *w = em_store_writer_new(f->dir, 30, &err);
  g_assert_nonnull(w);
  for (int s = 0; s < 1000; s++) {
    em_store_writer_metric(w, run, s, "train_loss", 2.0 - s * 0.001, 1000.0 + s);
    if (s % 100 == 99) em_store_writer_metric(w, run, s, "test_accuracy", s / 1000.0, 1000.0 + s);
  }
  em_store_writer_metric(w, run, 500, "test_loss", NAN, 1.0);
  em_store_writer_metric(w, run, 600, "test_loss", INFINITY, 2.0);
  em_store_writer_metric(w, run, 700, "test_loss", 0.5, 3.0);
  g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_OK);
  /* a rollback re-records steps 900..999: the last write wins */
  for (int s = 900; s < 1000; s++) em_store_writer_metric(w, run, s, "train_loss", -1.0, 5000.0 + s);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);

  em_metric_point *p;
  int64_t n;
  g_assert_cmpint(em_store_metrics_get(f->s, run, "train_loss", &p, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 1000);
  for (int64_t i = 0; i < n; i++) {
    g_assert_cmpint(p[i].step, ==, i);
    g_assert_cmpfloat(p[i].value, ==, i < 900 ? 2.0 - i * 0.001 : -1.0);
    g_assert_cmpfloat(p[i].wall, ==, i < 900 ? 1000.0 + i : 5000.0 + i);
  }
  g_free(p);
  g_assert_cmpint(em_store_metrics_get(f->s, run, "test_loss", &p, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 3);
  g_assert_true(isnan(p[0].value));
  g_assert_true(isinf(p[1].value));
  g_assert_cmpfloat(p[2].value, ==, 0.5);
  g_free(p);
  g_assert_cmpint(em_store_metrics_get(f->s, run, "never", &p, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 0);
  g_assert_cmpint(em_store_metrics_get(f->s, 4242, "train_loss", &p, &n, &err), ==, EM_ERR_INVALID);

  em_metric_summary *m;
  int nm;
  g_assert_cmpint(em_store_metrics_summary(f->s, run, &m, &nm, &err), ==, EM_OK);
  g_assert_cmpint(nm, ==, 3);
  g_assert_cmpstr(m[0].key, ==, "test_accuracy");
  g_assert_cmpint(m[0].count, ==, 10);
  g_assert_cmpfloat(m[0].last, ==, 0.999);
  g_assert_cmpfloat(m[0].min, ==, 0.099);
  g_assert_cmpint(m[0].last_step, ==, 999);
  g_assert_cmpstr(m[1].key, ==, "test_loss");
  g_assert_cmpfloat(m[1].min, ==, 0.5); /* NaN is left out of min/max */
  g_assert_true(isinf(m[1].max));
  g_assert_cmpstr(m[2].key, ==, "train_loss");
  g_assert_cmpint(m[2].count, ==, 1000);
  g_assert_cmpfloat(m[2].last, ==, -1.0);
  g_assert_cmpfloat(m[2].min, ==, -1.0);
  g_assert_cmpfloat(m[2].max, ==, 2.0);
  em_metric_summaries_free(m, nm);
}

/* Metric chunks against a plain model: random step ranges written (and
 * written again, as rollbacks do) across chunk boundaries, with flushes in
 * between; what comes back is the last value written at each step, and
 * the chunks never overlap. */
static void test_metrics_merge(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t run = st_make_run(f->s, "mlp", NULL);
  enum { MAX_STEP = 3000 };
  double *ref = g_new(double, MAX_STEP);
  bool *has = g_new0(bool, MAX_STEP);
  GRand *rng = g_rand_new_with_seed(1234);
  em_store_writer *w = em_store_writer_new(f->dir, 1000, &err);
  int64_t written = 0;
  for (int op = 0; op < 300; op++) {
    int len = g_rand_int_range(rng, 1, op % 10 == 0 ? 700 : 60);
    int start = g_rand_int_range(rng, 0, MAX_STEP - len);
    bool backwards = g_rand_boolean(rng);
    for (int i = 0; i < len; i++) {
      int step = backwards ? start + len - 1 - i : start + i;
      double v = g_rand_double(rng);
      if (op % 37 == 0 && i == 0) v = NAN;
      em_store_writer_metric(w, run, step, "loss", v, op);
      ref[step] = v;
      has[step] = true;
      written++;
    }
    if (g_rand_int_range(rng, 0, 4) == 0) g_assert_cmpint(em_store_writer_flush(w, &err), ==, EM_OK);
  }
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);

  em_metric_point *p;
  int64_t n;
  g_assert_cmpint(em_store_metrics_get(f->s, run, "loss", &p, &n, &err), ==, EM_OK);
  int64_t want = 0, k = 0;
  double mn = INFINITY, mx = -INFINITY, last = NAN;
  for (int s = 0; s < MAX_STEP; s++) {
    if (!has[s]) continue;
    want++;
    g_assert_cmpint(k, <, n);
    g_assert_cmpint(p[k].step, ==, s);
    if (isnan(ref[s])) g_assert_true(isnan(p[k].value));
    else {
      g_assert_cmpfloat(p[k].value, ==, ref[s]);
      mn = MIN(mn, ref[s]);
      mx = MAX(mx, ref[s]);
    }
    last = ref[s];
    k++;
  }
  g_assert_cmpint(n, ==, want);
  g_free(p);
  em_metric_summary *m;
  int nm;
  g_assert_cmpint(em_store_metrics_summary(f->s, run, &m, &nm, &err), ==, EM_OK);
  g_assert_cmpint(nm, ==, 1);
  g_assert_cmpint(m[0].count, ==, want);
  g_assert_cmpfloat(m[0].min, ==, mn);
  g_assert_cmpfloat(m[0].max, ==, mx);
  if (isnan(last)) g_assert_true(isnan(m[0].last));
  else g_assert_cmpfloat(m[0].last, ==, last);
  em_metric_summaries_free(m, nm);
  sqlite3 *raw = st_raw_open(f->dir);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM metric_chunks a JOIN metric_chunks b "
                                  "ON a.run = b.run AND a.key_id = b.key_id AND a.id != b.id "
                                  "AND a.first_step <= b.last_step AND b.first_step <= a.last_step"),
                  ==, 0);
  g_assert_cmpint(st_raw_int(raw, "SELECT max(n) FROM metric_chunks"), <=, 256);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM metric_chunks WHERE length(points) != 24 * n"),
                  ==, 0);
  g_test_message("%lld points written, %lld distinct steps in %lld chunks", (long long)written,
                 (long long)want, (long long)st_raw_int(raw, "SELECT count(*) FROM metric_chunks"));
  /* a chunk whose count, times the point size, overflows: damaged, not UB */
  g_assert_cmpint(st_raw_exec(raw, "UPDATE metric_chunks SET n = 2305843009213693953 WHERE id = "
                                   "(SELECT min(id) FROM metric_chunks)", NULL), ==, SQLITE_OK);
  sqlite3_close(raw);
  g_assert_cmpint(em_store_metrics_get(f->s, run, "loss", &p, &n, &err), ==, EM_ERR_FORMAT);
  g_assert_nonnull(strstr(err.msg, "damaged"));
  g_rand_free(rng);
  g_free(ref);
  g_free(has);
}

/* A child creates a run and vanishes; the next writing open marks it
 * killed. Runs of live processes and of other hosts are left alone; a run
 * whose pid now belongs to another process (start time differs) is
 * killed too. */
static void test_stale_runs(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t mine = st_make_run(f->s, "mlp", "alive");
  em_store_close(f->s);
  f->s = NULL;
  int fds[2];
  g_assert_cmpint(pipe(fds), ==, 0);
  pid_t pid = fork();
  g_assert_cmpint(pid, >=, 0);
  if (pid == 0) {
    close(fds[0]);
    em_error e = {0};
    em_store *s = em_store_open(f->dir, false, &e);
    int64_t id = s ? st_make_run(s, "mlp", "crashing") : 0;
    if (write(fds[1], &id, sizeof id) != sizeof id) _exit(2);
    _exit(0); /* no finish, no close */
  }
  close(fds[1]);
  int64_t crashed = 0;
  g_assert_cmpint(read(fds[0], &crashed, sizeof crashed), ==, sizeof crashed);
  close(fds[0]);
  int status = 0;
  g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
  g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  g_assert_cmpint(crashed, >, 0);

  sqlite3 *raw = st_raw_open(f->dir);
  char host[256];
  gethostname(host, sizeof host);
  char *sql = g_strdup_printf(
      "INSERT INTO runs (id, name, model, spec_json, spec_sha256, config_json, seed, device, "
      "threads, status, started, host, pid, pid_start, engine_version) VALUES "
      "(100, 'elsewhere', 'mlp', '{}', '', '{}', 0, 'cpu', 1, 'running', 1.0, 'another-host', 1, "
      "NULL, ''), "
      "(101, 'reused-pid', 'mlp', '{}', '', '{}', 0, 'cpu', 1, 'running', 1.0, '%s', %d, 1, '')",
      host, (int)getpid());
  g_assert_cmpint(st_raw_exec(raw, sql, NULL), ==, SQLITE_OK);
  g_free(sql);
  sqlite3_close(raw);

  f->s = em_store_open(f->dir, false, &err);
  g_assert_nonnull(f->s);
  em_run r;
  g_assert_cmpint(em_store_run_get(f->s, crashed, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_KILLED);
  g_assert_nonnull(strstr(r.message, "ended without finishing"));
  g_assert_cmpfloat(r.ended, >, 0);
  em_run_clear(&r);
  g_assert_cmpint(em_store_run_get(f->s, mine, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_RUNNING);
  em_run_clear(&r);
  g_assert_cmpint(em_store_run_get(f->s, 100, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_RUNNING);
  em_run_clear(&r);
  g_assert_cmpint(em_store_run_get(f->s, 101, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_KILLED);
  em_run_clear(&r);
}

/* The ids of the runs em_store_runs_list gives for status, in a bitmask
 * of ids below 64. */
static uint64_t ids_with_status(em_store *s, em_run_status status) {
  em_run_filter flt = {.status = status};
  em_run *runs = NULL;
  int n = 0;
  em_error err = {0};
  g_assert_cmpint(em_store_runs_list(s, &flt, &runs, &n, &err), ==, EM_OK);
  uint64_t mask = 0;
  for (int i = 0; i < n; i++) {
    g_assert_cmpint(runs[i].status, ==, status);
    if (runs[i].id < 64) mask |= 1ull << runs[i].id;
  }
  em_runs_free(runs, n);
  return mask;
}

/* The status column of run id, as stored (g_free). */
static char *raw_status(const char *dir, int64_t id) {
  sqlite3 *raw = st_raw_open(dir);
  sqlite3_stmt *q = NULL;
  g_assert_cmpint(sqlite3_prepare_v2(raw, "SELECT status FROM runs WHERE id = ?", -1, &q, NULL),
                  ==, SQLITE_OK);
  sqlite3_bind_int64(q, 1, id);
  g_assert_cmpint(sqlite3_step(q), ==, SQLITE_ROW);
  char *out = g_strdup((const char *)sqlite3_column_text(q, 0));
  sqlite3_finalize(q);
  sqlite3_close(raw);
  return out;
}

static em_run_status status_of(em_store *s, int64_t id) {
  em_run r;
  em_error err = {0};
  g_assert_cmpint(em_store_run_get(s, id, &r, &err), ==, EM_OK);
  em_run_status st = r.status;
  if (st == EM_RUN_KILLED) g_assert_nonnull(strstr(r.message, "ended without finishing"));
  em_run_clear(&r);
  return st;
}

/* A run whose process is gone reads as killed before any writing open
 * marks it: through a read-only connection, and through one opened while
 * the process still ran (a workbench open all day). An exited child that
 * its parent has not reaped yet (a zombie) is gone too. */
static void test_vanished_read_as_killed(fixture *f, gconstpointer data) {
  em_error err = {0};
  int64_t mine = st_make_run(f->s, "mlp", "alive");
  int go[2], done[2];
  g_assert_cmpint(pipe(go), ==, 0);
  g_assert_cmpint(pipe(done), ==, 0);
  pid_t pid = fork();
  g_assert_cmpint(pid, >=, 0);
  if (pid == 0) {
    em_error e = {0};
    em_store *s = em_store_open(f->dir, false, &e);
    int64_t id = s ? st_make_run(s, "mlp", "vanishing") : 0;
    em_store_writer *w = em_store_writer_new(f->dir, 10, &e); /* a metric at wall time 1234.5 */
    if (w) em_store_writer_metric(w, id, 1, "loss", 0.5, 1234.5);
    if (!w || em_store_writer_free(w, &e) != EM_OK) _exit(3);
    char c;
    if (write(done[1], &id, sizeof id) != sizeof id || read(go[0], &c, 1) != 1) _exit(2);
    _exit(0); /* no finish, no close */
  }
  int64_t child = 0;
  g_assert_cmpint(read(done[0], &child, sizeof child), ==, sizeof child);
  g_assert_cmpint(child, >, mine);
  g_assert_cmpint(status_of(f->s, child), ==, EM_RUN_RUNNING); /* it still runs */
  g_assert_cmpint(write(go[1], "x", 1), ==, 1);
  /* exited, not reaped yet: wait until it is a zombie */
  for (int i = 0; i < 500; i++) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *fp = fopen(path, "r");
    size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
    if (fp) fclose(fp);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (p && p[1] == ' ' && p[2] == 'Z') break;
    g_usleep(10000);
  }
  /* the connection opened before it ended, and a read-only one; ended
   * when it last recorded a metric */
  g_assert_cmpint(status_of(f->s, child), ==, EM_RUN_KILLED);
  em_run got;
  g_assert_cmpint(em_store_run_get(f->s, child, &got, &err), ==, EM_OK);
  g_assert_cmpfloat(got.ended, ==, 1234.5);
  em_run_clear(&got);
  g_assert_cmpint(status_of(f->s, mine), ==, EM_RUN_RUNNING);
  em_store *ro = em_store_open(f->dir, true, &err);
  g_assert_nonnull(ro);
  g_assert_cmpint(status_of(ro, child), ==, EM_RUN_KILLED);
  g_assert_cmpuint(ids_with_status(ro, EM_RUN_KILLED), ==, 1ull << child);
  g_assert_cmpuint(ids_with_status(ro, EM_RUN_RUNNING), ==, 1ull << mine);
  em_store_close(ro);
  int status = 0;
  g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
  g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* the row itself says so from the next writing open */
  char *row = raw_status(f->dir, child);
  g_assert_cmpstr(row, ==, "running");
  g_free(row);
  em_store *w = em_store_open(f->dir, false, &err);
  g_assert_nonnull(w);
  em_store_close(w);
  row = raw_status(f->dir, child);
  g_assert_cmpstr(row, ==, "killed");
  g_free(row);
  for (int i = 0; i < 2; i++) {
    close(go[i]);
    close(done[i]);
  }
}

/* Plugin tags read back: with the file's hash, without (tags written
 * before hashes were), and values that name no file. */
static void test_plugin_tag_parse(void) {
  const char *hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  char *with = g_strdup_printf("1.2 sha256:%s /opt/my plugins/se.so", hex);
  em_run_plugin p;
  g_assert_true(em_run_plugin_parse(with, &p));
  g_assert_cmpstr(p.version, ==, "1.2");
  g_assert_cmpstr(p.sha256, ==, hex);
  g_assert_cmpstr(p.file, ==, "/opt/my plugins/se.so");
  g_assert_true(em_run_plugin_parse("- /opt/se.so", &p));
  g_assert_cmpstr(p.version, ==, "-");
  g_assert_cmpstr(p.sha256, ==, "");
  g_assert_cmpstr(p.file, ==, "/opt/se.so");
  static const char *const bad[] = {"", "1.0", "1.0 ", " /opt/se.so"};
  for (unsigned i = 0; i < G_N_ELEMENTS(bad); i++) g_assert_false(em_run_plugin_parse(bad[i], &p));
  char *bare = g_strdup_printf("1.2 sha256:%s", hex); /* the hash, no file */
  g_assert_false(em_run_plugin_parse(bare, &p));
  g_free(bare);
  g_free(with);
}

static void count_warning(void *user, const char *msg) {
  (void)msg;
  (*(int *)user)++;
}

/* em_store_run_start, the record `ember train` and the workbench share:
 * the row with its config, device and dataset identity (a CSV file read
 * for both splits is one file), the checkpoint folder made and written
 * into the config; a dataset whose files cannot be listed is a warning,
 * not a failure; em_store_run_end finishes it through its own
 * connection. */
static void test_run_start(fixture *f, gconstpointer data) {
  (void)data;
  char *csv = g_build_filename(f->dir, "rows.csv", NULL);
  g_assert_true(g_file_set_contents(csv, "1,2,0\n3,4,1\n", -1, NULL));
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  g_strlcpy(cfg.dataset, "csv", sizeof cfg.dataset);
  g_strlcpy(cfg.data_dir, csv, sizeof cfg.data_dir);
  int warnings = 0;
  em_run_start rs = {.model = "mlp", .spec_json = "{}", .engine_version = "test",
                     .warn = count_warning, .user = &warnings};
  int64_t run = 0;
  em_error err = {0};
  if (em_store_run_start(f->s, &rs, &cfg, &run, &err) != EM_OK) g_error("%s", err.msg);
  g_assert_cmpint(run, >, 0);
  g_assert_cmpint(warnings, ==, 0);
  g_assert_true(g_file_test(cfg.checkpoint_dir, G_FILE_TEST_IS_DIR));
  em_run r;
  g_assert_cmpint(em_store_run_get(f->s, run, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_RUNNING);
  g_assert_cmpstr(r.dataset_name, ==, "csv");
  g_assert_cmpstr(r.dataset_path, ==, csv);
  g_assert_true(em_dataset_sha_known(r.dataset_sha256));
  g_assert_cmpstr(r.device, ==, "cpu");
  g_assert_nonnull(strstr(r.config_json, "csv"));
  em_run_clear(&r);
  g_assert_cmpint(em_store_run_end(f->dir, run, EM_RUN_COMPLETED, NULL, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_get(f->s, run, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_COMPLETED);
  em_run_clear(&r);

  /* a csv dataset without its file: recorded without files, said once */
  em_train_config_defaults(&cfg);
  g_strlcpy(cfg.dataset, "csv", sizeof cfg.dataset);
  if (em_store_run_start(f->s, &rs, &cfg, &run, &err) != EM_OK) g_error("%s", err.msg);
  g_assert_cmpint(warnings, ==, 1);
  g_assert_cmpint(em_store_run_get(f->s, run, &r, &err), ==, EM_OK);
  g_assert_null(r.dataset_name);
  em_run_clear(&r);
  g_free(csv);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
#define ADD(path, fn) g_test_add(path, fixture, NULL, st_fixture_setup, fn, st_fixture_teardown)
  ADD("/store/runs/create-get", test_create_get);
  ADD("/store/runs/list-filter", test_list_filter);
  ADD("/store/runs/annotations-delete", test_annotations_and_delete);
  ADD("/store/runs/tags-all", test_tags_all);
  ADD("/store/runs/stale-killed", test_stale_runs);
  ADD("/store/runs/vanished-read-as-killed", test_vanished_read_as_killed);
  ADD("/store/runs/start", test_run_start);
  ADD("/store/metrics/round-trip", test_metrics_round_trip);
  ADD("/store/metrics/merge", test_metrics_merge);
  g_test_add_func("/store/runs/status-names", test_status_names);
  g_test_add_func("/store/runs/plugin-tag-parse", test_plugin_tag_parse);
  return g_test_run();
}
