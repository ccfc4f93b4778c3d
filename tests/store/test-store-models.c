/* test-store-models.c: registering versions (best, last, step), promote
 * and rollback as a stack with an append-only history, runs that versions
 * keep, artifacts and gc. */
#include <glib/gstdio.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "store-test-util.h"

typedef struct {
  char *dir;
  em_store *s;
  int64_t run;
  char *paths[6];
} fixture;

/* A run with checkpoints at steps 100..500: eval losses with the best at
 * step 200, a final one at 500, and a "step" checkpoint at 300. */
static void fx_setup(fixture *f, gconstpointer data) {
  f->dir = st_tmpdir();
  em_error err = {0};
  f->s = em_store_open(f->dir, false, &err);
  g_assert_nonnull(f->s);
  f->run = st_make_run(f->s, "mlp", "source");
  char *cdir = g_build_filename(f->dir, "artifacts", "ckpt", NULL);
  g_mkdir_with_parents(cdir, 0755);
  em_store_writer *w = em_store_writer_new(f->dir, 20, &err);
  const double loss[6] = {0, 0.8, 0.3, NAN, 0.5, 0.4};
  const char *kind[6] = {"", "eval", "eval", "step", "eval", "final"};
  for (int i = 1; i <= 5; i++) {
    f->paths[i] = g_strdup_printf("%s/c%d.safetensors", cdir, i);
    st_write_random(f->paths[i], 1000 * i, i);
    em_store_writer_checkpoint(w, f->run, 100 * i, i, f->paths[i], kind[i], loss[i], true, 10);
    em_store_writer_metric(w, f->run, 100 * i, EM_METRIC_TEST_ACCURACY, 0.5 + i * 0.05, i);
  }
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  g_free(cdir);
}

static void fx_teardown(fixture *f, gconstpointer data) {
  em_store_close(f->s);
  for (int i = 1; i <= 5; i++) g_free(f->paths[i]);
  st_rmrf(f->dir);
  g_free(f->dir);
}

static void test_register(fixture *f, gconstpointer data) {
  em_error err = {0};
  int v = 0;
  g_assert_cmpint(em_store_model_register(f->s, f->run, "mnist-mlp", EM_PICK_BEST, 0, &v, &err), ==,
                  EM_OK);
  g_assert_cmpint(v, ==, 1);
  g_assert_cmpint(em_store_model_register(f->s, f->run, "mnist-mlp", EM_PICK_LAST, 0, &v, &err), ==,
                  EM_OK);
  g_assert_cmpint(v, ==, 2);
  g_assert_cmpint(em_store_model_register(f->s, f->run, "mnist-mlp", EM_PICK_STEP, 300, &v, &err),
                  ==, EM_OK);
  g_assert_cmpint(v, ==, 3);
  g_assert_cmpint(em_store_model_register(f->s, f->run, "mnist-mlp", EM_PICK_STEP, 250, &v, &err),
                  ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "no checkpoint at step 250"));
  g_assert_nonnull(strstr(err.msg, "100, 200, 300, 400, 500"));
  g_assert_cmpint(em_store_model_register(f->s, f->run, "bad name", EM_PICK_LAST, 0, &v, &err), ==,
                  EM_ERR_INVALID);
  g_assert_cmpint(em_store_model_register(f->s, 999, "x", EM_PICK_LAST, 0, &v, &err), ==,
                  EM_ERR_INVALID);
  /* a run without checkpoints, and one without evaluated checkpoints */
  int64_t bare = st_make_run(f->s, "mlp", NULL);
  g_assert_cmpint(em_store_model_register(f->s, bare, "x", EM_PICK_LAST, 0, &v, &err), ==,
                  EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "no checkpoints"));
  em_store_writer *w = em_store_writer_new(f->dir, 20, &err);
  char *p = g_build_filename(f->dir, "artifacts", "bare.safetensors", NULL);
  st_write_random(p, 100, 3);
  em_store_writer_checkpoint(w, bare, 7, 0, p, "step", NAN, true, 3);
  g_assert_cmpint(em_store_writer_free(w, &err), ==, EM_OK);
  g_assert_cmpint(em_store_model_register(f->s, bare, "x", EM_PICK_BEST, 0, &v, &err), ==,
                  EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "no evaluated checkpoint"));
  /* a checkpoint changed on disk since it was recorded is refused */
  st_write_random(p, 100, 4);
  g_assert_cmpint(em_store_model_register(f->s, bare, "x", EM_PICK_LAST, 0, &v, &err), ==,
                  EM_ERR_FORMAT);
  g_assert_nonnull(strstr(err.msg, "changed since it was recorded"));
  g_free(p);

  em_version_row *vr;
  int n;
  g_assert_cmpint(em_store_model_versions(f->s, "mnist-mlp", &vr, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 3);
  const int want_ckpt[3] = {2, 5, 3}; /* best = step 200, last = 500, step 300 */
  em_checkpoint_row *c;
  int nc;
  g_assert_cmpint(em_store_checkpoints_list(f->s, f->run, &c, &nc, &err), ==, EM_OK);
  for (int i = 0; i < 3; i++) {
    g_assert_cmpint(vr[i].version, ==, i + 1);
    g_assert_cmpint(vr[i].run, ==, f->run);
    g_assert_cmpint(vr[i].checkpoint, ==, c[want_ckpt[i] - 1].id);
    g_assert_cmpstr(vr[i].weights_path, ==, f->paths[want_ckpt[i]]);
    char *sha = st_file_sha256(f->paths[want_ckpt[i]]);
    g_assert_cmpstr(vr[i].sha256, ==, sha);
    g_free(sha);
    /* the run's accuracy at the checkpoint's step, not its last (0.75) */
    json_t *mj = json_loads(vr[i].metrics_json, 0, NULL);
    g_assert_nonnull(mj);
    g_assert_cmpfloat(json_real_value(json_object_get(mj, "test_accuracy")), ==,
                      0.5 + want_ckpt[i] * 0.05);
    json_decref(mj);
    g_assert_cmpstr(vr[i].aliases, ==, "");
  }
  g_assert_nonnull(strstr(vr[0].metrics_json, "\"step\":200"));
  em_checkpoint_rows_free(c, nc);
  em_version_rows_free(vr, n);
  g_assert_cmpint(em_store_model_versions(f->s, "nope", &vr, &n, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "mnist-mlp"));

  em_model_row *m;
  g_assert_cmpint(em_store_models_list(f->s, &m, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 1);
  g_assert_cmpstr(m[0].name, ==, "mnist-mlp");
  g_assert_cmpint(m[0].versions, ==, 3);
  g_assert_cmpint(m[0].latest, ==, 3);
  em_model_rows_free(m, n);

  /* the source run is kept, with its checkpoints */
  g_assert_cmpint(em_store_run_delete(f->s, f->run, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "'mnist-mlp' v1"));
  em_run r;
  g_assert_cmpint(em_store_run_get(f->s, f->run, &r, &err), ==, EM_OK);
  em_run_clear(&r);
  for (int i = 1; i <= 5; i++) g_assert_true(g_file_test(f->paths[i], G_FILE_TEST_EXISTS));
}

static void test_promote_rollback(fixture *f, gconstpointer data) {
  em_error err = {0};
  int v = 0;
  for (int i = 0; i < 3; i++)
    g_assert_cmpint(em_store_model_register(f->s, f->run, "m", EM_PICK_LAST, 0, &v, &err), ==, EM_OK);
  g_assert_cmpint(em_store_model_rollback(f->s, "m", "production", &v, &err), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_store_model_promote(f->s, "m", 4, "production", &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "no version 4"));
  g_assert_cmpint(em_store_model_promote(f->s, "zzz", 1, "production", &err), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_store_model_promote(f->s, "m", 1, "pro duction", &err), ==, EM_ERR_INVALID);
  /* an alias that reads as a version number could never be named by m@3 */
  g_assert_cmpint(em_store_model_promote(f->s, "m", 1, "3", &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "version number"));
  g_assert_cmpint(em_store_model_promote(f->s, "m", 1, "007", &err), ==, EM_ERR_INVALID);

  g_assert_cmpint(em_store_model_promote(f->s, "m", 1, "production", &err), ==, EM_OK);
  g_assert_cmpint(em_store_model_promote(f->s, "m", 2, "production", &err), ==, EM_OK);
  g_assert_cmpint(em_store_model_promote(f->s, "m", 3, "production", &err), ==, EM_OK);
  g_assert_cmpint(em_store_model_promote(f->s, "m", 3, "staging", &err), ==, EM_OK);
  /* promoting where the alias points already: nothing moves or is logged */
  g_assert_cmpint(em_store_model_promote(f->s, "m", 3, "staging", &err), ==, EM_OK);
  g_assert_cmpint(em_store_model_rollback(f->s, "m", "production", &v, &err), ==, EM_OK);
  g_assert_cmpint(v, ==, 2);
  g_assert_cmpint(em_store_model_rollback(f->s, "m", "production", &v, &err), ==, EM_OK);
  g_assert_cmpint(v, ==, 1);
  g_assert_cmpint(em_store_model_rollback(f->s, "m", "production", &v, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "no earlier version"));
  /* promote pushes on what is left: 1 -> 3, rollback returns to 1 */
  g_assert_cmpint(em_store_model_promote(f->s, "m", 3, "production", &err), ==, EM_OK);
  g_assert_cmpint(em_store_model_rollback(f->s, "m", "production", &v, &err), ==, EM_OK);
  g_assert_cmpint(v, ==, 1);

  em_model_row *m;
  int n;
  g_assert_cmpint(em_store_models_list(f->s, &m, &n, &err), ==, EM_OK);
  g_assert_cmpstr(m[0].aliases, ==, "production=1, staging=3");
  em_model_rows_free(m, n);
  em_version_row *vr;
  g_assert_cmpint(em_store_model_versions(f->s, "m", &vr, &n, &err), ==, EM_OK);
  g_assert_cmpstr(vr[0].aliases, ==, "production");
  g_assert_cmpstr(vr[1].aliases, ==, "");
  g_assert_cmpstr(vr[2].aliases, ==, "staging");
  em_version_rows_free(vr, n);

  em_audit_row *a;
  g_assert_cmpint(em_store_model_history(f->s, "m", &a, &n, &err), ==, EM_OK);
  const char *want[8][4] = {{"production", "promote", "0", "1"},  {"production", "promote", "1", "2"},
                            {"production", "promote", "2", "3"},  {"staging", "promote", "0", "3"},
                            {"production", "rollback", "3", "2"}, {"production", "rollback", "2", "1"},
                            {"production", "promote", "1", "3"},  {"production", "rollback", "3", "1"}};
  g_assert_cmpint(n, ==, 8);
  for (int i = 0; i < n; i++) {
    g_assert_cmpstr(a[i].alias, ==, want[i][0]);
    g_assert_cmpstr(a[i].action, ==, want[i][1]);
    g_assert_cmpint(a[i].from_version, ==, atoi(want[i][2]));
    g_assert_cmpint(a[i].to_version, ==, atoi(want[i][3]));
    g_assert_nonnull(a[i].user);
    g_assert_cmpstr(a[i].host, !=, "");
    if (i) g_assert_cmpint(a[i].id, >, a[i - 1].id);
  }
  em_audit_rows_free(a, n);

  /* the log is append-only, even for raw SQL */
  sqlite3 *raw = st_raw_open(f->dir);
  char *msg = NULL;
  g_assert_cmpint(st_raw_exec(raw, "UPDATE alias_audit SET to_version = 2 WHERE id = 1", &msg), ==,
                  SQLITE_CONSTRAINT);
  g_assert_nonnull(strstr(msg, "append-only"));
  g_free(msg);
  g_assert_cmpint(st_raw_exec(raw, "DELETE FROM alias_audit", &msg), ==, SQLITE_CONSTRAINT);
  g_free(msg);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM alias_audit"), ==, 8);
  g_assert_cmpint(st_raw_int(raw, "SELECT to_version FROM alias_audit WHERE id = 1"), ==, 1);
  sqlite3_close(raw);
}

static void test_gc(fixture *f, gconstpointer data) {
  em_error err = {0};
  char *art = g_build_filename(f->dir, "artifacts", NULL);
  char *old1 = g_build_filename(art, "orphan.bin", NULL);
  char *sub = g_build_filename(art, "exports", NULL);
  g_mkdir(sub, 0755);
  char *old2 = g_build_filename(sub, "stale.onnx", NULL);
  char *young = g_build_filename(art, "being-written.safetensors.tmp", NULL);
  char *export = g_build_filename(sub, "model.onnx", NULL);
  st_write_random(old1, 1000, 1);
  st_write_random(old2, 234, 2);
  st_write_random(young, 50, 3);
  st_write_random(export, 77, 4);
  st_age_file(old1, 3600);
  st_age_file(old2, 3600);
  st_age_file(export, 3600);
  for (int i = 1; i <= 5; i++) st_age_file(f->paths[i], 3600);
  int64_t id = 0;
  g_assert_cmpint(em_store_artifact_add(f->s, export, "export", f->run, &id, &err), ==, EM_OK);
  g_assert_cmpint(id, >, 0);
  g_assert_cmpint(em_store_artifact_add(f->s, "/nonexistent/x.onnx", "export", 0, &id, &err), ==,
                  EM_ERR_IO);
  em_artifact *a;
  int n;
  g_assert_cmpint(em_store_artifacts_list(f->s, 0, &a, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 6);
  g_assert_cmpstr(a[5].kind, ==, "export");
  g_assert_cmpstr(a[5].path, ==, export);
  g_assert_cmpint(a[5].size, ==, 77);
  g_assert_cmpint(a[5].run, ==, f->run);
  em_artifacts_free(a, n);
  g_remove(f->paths[1]); /* a row whose file is gone */

  em_gc_report rep;
  g_assert_cmpint(em_store_gc(f->s, true, &rep, &err), ==, EM_OK);
  g_assert_cmpint(rep.files_removed, ==, 2);
  g_assert_cmpint(rep.bytes_removed, ==, 1234);
  g_assert_cmpint(rep.rows_missing_file, ==, 1);
  g_assert_cmpint(rep.files_too_new, ==, 1);
  g_assert_true(g_file_test(old1, G_FILE_TEST_EXISTS)); /* dry run */
  g_assert_cmpint(em_store_gc(f->s, false, &rep, &err), ==, EM_OK);
  g_assert_cmpint(rep.files_removed, ==, 2);
  g_assert_false(g_file_test(old1, G_FILE_TEST_EXISTS));
  g_assert_false(g_file_test(old2, G_FILE_TEST_EXISTS));
  g_assert_true(g_file_test(young, G_FILE_TEST_EXISTS));
  g_assert_true(g_file_test(export, G_FILE_TEST_EXISTS));
  for (int i = 2; i <= 5; i++) g_assert_true(g_file_test(f->paths[i], G_FILE_TEST_EXISTS));
  g_assert_cmpint(em_store_gc(f->s, false, &rep, &err), ==, EM_OK);
  g_assert_cmpint(rep.files_removed, ==, 0);
  g_free(art);
  g_free(old1);
  g_free(old2);
  g_free(sub);
  g_free(young);
  g_free(export);
}

/* Rows that point outside artifacts/ (up through "..", or absolute) lose
 * their row with the run, but the files are not the registry's to remove. */
static void test_delete_keeps_outside_files(fixture *f, gconstpointer data) {
  em_error err = {0};
  char *up = g_build_filename(f->dir, "victim.txt", NULL);
  char *other = st_tmpdir();
  char *abs = g_build_filename(other, "precious.bin", NULL);
  st_write_random(up, 10, 1);
  st_write_random(abs, 10, 2);
  sqlite3 *raw = st_raw_open(f->dir);
  char *sql = g_strdup_printf("UPDATE artifacts SET rel_path = '../victim.txt' WHERE rel_path = "
                              "'ckpt/c1.safetensors'; UPDATE artifacts SET rel_path = '%s' WHERE "
                              "rel_path = 'ckpt/c2.safetensors'", abs);
  g_assert_cmpint(st_raw_exec(raw, sql, NULL), ==, SQLITE_OK);
  sqlite3_close(raw);
  g_assert_cmpint(em_store_run_finish(f->s, f->run, EM_RUN_COMPLETED, NULL, &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_delete(f->s, f->run, &err), ==, EM_OK);
  g_assert_true(g_file_test(up, G_FILE_TEST_EXISTS));
  g_assert_true(g_file_test(abs, G_FILE_TEST_EXISTS));
  for (int i = 3; i <= 5; i++) g_assert_false(g_file_test(f->paths[i], G_FILE_TEST_EXISTS));
  g_free(sql);
  g_free(up);
  g_free(abs);
  st_rmrf(other);
  g_free(other);
}

/* registry.db gone or emptied beside recorded files: opening for writing
 * refuses (a fresh database there would make every file unreferenced to
 * gc) and creates nothing; the files stay. */
static void test_lost_database(fixture *f, gconstpointer data) {
  em_store_close(f->s);
  f->s = NULL;
  static const char *const names[] = {"registry.db", "registry.db-wal", "registry.db-shm"};
  char *db = g_build_filename(f->dir, "registry.db", NULL);
  for (int i = 0; i < 3; i++) {
    char *p = g_build_filename(f->dir, names[i], NULL);
    g_remove(p);
    g_free(p);
  }
  em_error err = {0};
  for (int round = 0; round < 2; round++) { /* missing, then 0 bytes */
    g_assert_null(em_store_open(f->dir, false, &err));
    g_assert_nonnull(strstr(err.msg, "missing or empty"));
    g_assert_nonnull(strstr(err.msg, "holds recorded files"));
    g_assert_cmpint(g_file_test(db, G_FILE_TEST_EXISTS), ==, round == 1);
    for (int i = 1; i <= 5; i++) g_assert_true(g_file_test(f->paths[i], G_FILE_TEST_EXISTS));
    g_assert_true(g_file_set_contents(db, "", 0, NULL));
  }
  g_free(db);
}

/* what serve watches (an alias can move) and what resolution reads as a
 * version number agree; v3 is version 3, as the workbench writes it
 * (issue 32, item 7) */
static void test_ref_names_alias(void) {
  g_assert_true(em_version_ref_names_alias("m@production"));
  g_assert_false(em_version_ref_names_alias("m@v3"));
  g_assert_false(em_version_ref_names_alias("m@V3"));
  g_assert_true(em_version_ref_names_alias("m@v"));
  g_assert_true(em_version_ref_names_alias("m@v-3"));
  g_assert_true(em_version_ref_names_alias("m@vv3"));
  g_assert_true(em_version_ref_names_alias("m@ 3"));
  g_assert_true(em_version_ref_names_alias("m@0")); /* versions start at 1 */
  g_assert_true(em_version_ref_names_alias("m@-1"));
  g_assert_true(em_version_ref_names_alias("m@3a"));
  g_assert_false(em_version_ref_names_alias("m@3"));
  g_assert_false(em_version_ref_names_alias("m@007"));
  g_assert_false(em_version_ref_names_alias("no-at-sign"));
  int v = 0;
  g_assert_true(em_version_parse("v12", &v));
  g_assert_cmpint(v, ==, 12);
  g_assert_true(em_version_parse("12", &v));
  g_assert_cmpint(v, ==, 12);
  g_assert_false(em_version_parse("v0", &v));
  g_assert_false(em_version_parse("+1", &v));
  g_assert_false(em_version_parse("production", &v));
  /* an alias spelled as a version is refused */
  em_error err = {0};
  g_assert_cmpint(em_store_check_alias("m", "v2", &err), !=, EM_OK);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
#define ADD(path, fn) g_test_add(path, fixture, NULL, fx_setup, fn, fx_teardown)
  ADD("/store/models/register", test_register);
  ADD("/store/models/promote-rollback", test_promote_rollback);
  g_test_add_func("/store/models/ref-names-alias", test_ref_names_alias);
  ADD("/store/artifacts/gc", test_gc);
  ADD("/store/artifacts/delete-keeps-outside-files", test_delete_keeps_outside_files);
  ADD("/store/open/lost-database", test_lost_database);
  return g_test_run();
}
