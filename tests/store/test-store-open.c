/* test-store-open.c: creating and opening a registry, the default folder,
 * refusing files that are not ours (left byte for byte as they were), and
 * migrations from every older schema version with their data kept. */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "store-test-util.h"

static void test_create(void) {
  char *dir = st_tmpdir();
  char *sub = g_build_filename(dir, "nested", "reg", NULL);
  em_error err = {0};
  em_store *s = em_store_open(sub, false, &err);
  g_assert_nonnull(s);
  char *db = g_build_filename(sub, "registry.db", NULL);
  char *art = g_build_filename(sub, "artifacts", NULL);
  g_assert_true(g_file_test(db, G_FILE_TEST_IS_REGULAR));
  g_assert_true(g_file_test(art, G_FILE_TEST_IS_DIR));
  g_assert_true(g_path_is_absolute(em_store_dir(s)));
  char p[4096];
  em_store_artifact_path(s, "ckpt/a.safetensors", p, sizeof p);
  g_assert_true(g_str_has_suffix(p, "/nested/reg/artifacts/ckpt/a.safetensors"));
  g_assert_cmpint(em_store_integrity_check(s, &err), ==, EM_OK);
  em_store_close(s);

  sqlite3 *raw = st_raw_open(sub);
  g_assert_cmpint(st_raw_int(raw, "PRAGMA user_version"), ==, em_store_schema_version());
  g_assert_cmpint(st_raw_int(raw, "PRAGMA application_id"), ==, 0x456d6272);
  g_assert_cmpint(st_raw_int(raw, "SELECT journal_mode = 'wal' FROM pragma_journal_mode"), ==, 1);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM sqlite_master WHERE name = 'metric_chunks'"),
                  ==, 1);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM sqlite_master WHERE name = 'metrics'"), ==, 0);
  sqlite3_close(raw);

  /* opening again keeps what is there */
  s = em_store_open(sub, false, &err);
  g_assert_nonnull(s);
  int64_t run = st_make_run(s, "mlp", NULL);
  em_store_close(s);
  s = em_store_open(sub, true, &err);
  g_assert_nonnull(s);
  em_run r;
  g_assert_cmpint(em_store_run_get(s, run, &r, &err), ==, EM_OK);
  char *want = g_strdup_printf("mlp-%lld", (long long)run);
  g_assert_cmpstr(r.name, ==, want);
  g_free(want);
  em_run_clear(&r);
  em_store_close(s);
  g_free(db);
  g_free(art);
  g_free(sub);
  st_rmrf(dir);
  g_free(dir);
}

static void test_read_only(void) {
  char *dir = st_tmpdir();
  em_error err = {0};
  g_assert_null(em_store_open(dir, true, &err));
  g_assert_nonnull(strstr(err.msg, "no registry"));
  char *db = g_build_filename(dir, "registry.db", NULL);
  g_assert_false(g_file_test(db, G_FILE_TEST_EXISTS)); /* nothing created */
  g_free(db);
  em_store *w = em_store_open(dir, false, &err);
  g_assert_nonnull(w);
  int64_t run = st_make_run(w, "mlp", "first");
  em_store *s = em_store_open(dir, true, &err);
  g_assert_nonnull(s);
  em_run_new r = {.model = "mlp"};
  int64_t id;
  g_assert_cmpint(em_store_run_create(s, &r, &id, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "read-only"));
  g_assert_cmpint(em_store_run_tag(s, run, "k", "v", &err), ==, EM_ERR_INVALID);
  em_run *runs;
  int n;
  g_assert_cmpint(em_store_runs_list(s, NULL, &runs, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 1);
  g_assert_cmpstr(runs[0].name, ==, "first");
  em_runs_free(runs, n);
  em_store_close(s);
  em_store_close(w);
  st_rmrf(dir);
  g_free(dir);
}

/* A registry path that is (or goes through) a file: reading and writing
 * say the same thing, and name the file (reading said "registry.db is
 * absent", writing "Not a directory"). */
static void test_dir_is_a_file(void) {
  char *dir = st_tmpdir();
  char *file = g_build_filename(dir, "plain", NULL);
  g_assert_true(g_file_set_contents(file, "x", 1, NULL));
  char *below = g_build_filename(file, "reg", NULL);
  const char *paths[] = {file, below};
  for (int i = 0; i < 2; i++)
    for (int ro = 0; ro < 2; ro++) {
      em_error err = {0};
      g_assert_null(em_store_open(paths[i], ro, &err));
      g_assert_nonnull(strstr(err.msg, "is a file, not a folder"));
      g_assert_nonnull(strstr(err.msg, file));
    }
  g_free(below);
  g_free(file);
  st_rmrf(dir);
  g_free(dir);
}

static void test_default_dir(void) {
  char *old_ember = g_strdup(g_getenv("EMBER_HOME"));
  char *old_xdg = g_strdup(g_getenv("XDG_DATA_HOME"));
  char *old_home = g_strdup(g_getenv("HOME"));
  char out[4096];
  em_error err = {0};

  g_setenv("EMBER_HOME", "/srv/ember-reg", TRUE);
  g_setenv("XDG_DATA_HOME", "/x/data", TRUE);
  g_setenv("HOME", "/home/someone", TRUE);
  g_assert_cmpint(em_store_default_dir(out, sizeof out, &err), ==, EM_OK);
  g_assert_cmpstr(out, ==, "/srv/ember-reg");

  g_setenv("EMBER_HOME", "", TRUE); /* empty counts as unset */
  g_assert_cmpint(em_store_default_dir(out, sizeof out, &err), ==, EM_OK);
  g_assert_cmpstr(out, ==, "/x/data/ember");

  g_unsetenv("EMBER_HOME");
  g_setenv("XDG_DATA_HOME", "relative/path", TRUE); /* the XDG spec ignores relative paths */
  g_assert_cmpint(em_store_default_dir(out, sizeof out, &err), ==, EM_OK);
  g_assert_cmpstr(out, ==, "/home/someone/.local/share/ember");

  g_unsetenv("XDG_DATA_HOME");
  g_assert_cmpint(em_store_default_dir(out, sizeof out, &err), ==, EM_OK);
  g_assert_cmpstr(out, ==, "/home/someone/.local/share/ember");

  char small[8];
  g_assert_cmpint(em_store_default_dir(small, sizeof small, &err), ==, EM_ERR_INVALID);

  g_unsetenv("HOME");
  g_assert_cmpint(em_store_default_dir(out, sizeof out, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "EMBER_HOME"));

  if (old_ember) g_setenv("EMBER_HOME", old_ember, TRUE);
  if (old_xdg) g_setenv("XDG_DATA_HOME", old_xdg, TRUE);
  if (old_home) g_setenv("HOME", old_home, TRUE);
  g_free(old_ember);
  g_free(old_xdg);
  g_free(old_home);
}

/* Opens dir for writing and for reading: both refused with a message
 * holding `expect`, and the folder and registry.db unchanged. */
static void expect_refused(const char *dir, const char *expect) {
  char *db = g_build_filename(dir, "registry.db", NULL);
  char *before = st_file_sha256(db);
  char *listing = st_list_dir(dir);
  for (int ro = 0; ro < 2; ro++) {
    em_error err = {0};
    em_store *s = em_store_open(dir, ro, &err);
    g_assert_null(s);
    g_test_message("refused (%s): %s", ro ? "read-only" : "read-write", err.msg);
    g_assert_nonnull(strstr(err.msg, expect));
    em_store_writer *w = em_store_writer_new(dir, 0, &err);
    g_assert_null(w);
    g_assert_nonnull(strstr(err.msg, expect));
  }
  char *after = st_file_sha256(db);
  g_assert_cmpstr(before, ==, after);
  char *listing_after = st_list_dir(dir);
  g_assert_cmpstr(listing, ==, listing_after);
  g_free(before);
  g_free(after);
  g_free(listing);
  g_free(listing_after);
  g_free(db);
}

static void test_refuse_random_bytes(void) {
  char *dir = st_tmpdir();
  char *db = g_build_filename(dir, "registry.db", NULL);
  st_write_random(db, 64 * 1024, 7);
  char *art = g_build_filename(dir, "artifacts", NULL);
  g_mkdir(art, 0755); /* so the listing does not change by the open's mkdir */
  expect_refused(dir, "not an SQLite database at all");
  g_free(art);
  g_free(db);
  st_rmrf(dir);
  g_free(dir);
}

static void test_refuse_foreign_sqlite(void) {
  char *dir = st_tmpdir();
  char *db = g_build_filename(dir, "registry.db", NULL);
  sqlite3 *raw;
  g_assert_cmpint(sqlite3_open(db, &raw), ==, SQLITE_OK);
  g_assert_cmpint(st_raw_exec(raw, "CREATE TABLE songs (title TEXT); "
                                   "INSERT INTO songs VALUES ('a'), ('b');", NULL), ==, SQLITE_OK);
  sqlite3_close(raw);
  char *art = g_build_filename(dir, "artifacts", NULL);
  g_mkdir(art, 0755);
  expect_refused(dir, "another program");
  g_free(art);
  g_free(db);
  st_rmrf(dir);
  g_free(dir);
}

static void test_refuse_newer_schema(void) {
  char *dir = st_tmpdir();
  char *db = g_build_filename(dir, "registry.db", NULL);
  em_error err = {0};
  g_assert_cmpint(em_store_create_at_version(db, em_store_schema_version(), &err), ==, EM_OK);
  sqlite3 *raw = st_raw_open(dir);
  /* back to a rollback journal so closing leaves no -wal file behind */
  char *sql = g_strdup_printf("PRAGMA journal_mode = DELETE; PRAGMA user_version = %d",
                              em_store_schema_version() + 5);
  g_assert_cmpint(st_raw_exec(raw, sql, NULL), ==, SQLITE_OK);
  g_free(sql);
  sqlite3_close(raw);
  char *art = g_build_filename(dir, "artifacts", NULL);
  g_mkdir(art, 0755);
  char expect[256];
  g_snprintf(expect, sizeof expect,
             "registry.db was written by a newer Ember (schema %d, this one knows up to %d); "
             "upgrade Ember",
             em_store_schema_version() + 5, em_store_schema_version());
  expect_refused(dir, expect);
  g_free(art);
  g_free(db);
  st_rmrf(dir);
  g_free(dir);
}

static void test_read_only_old_schema(void) {
  char *dir = st_tmpdir();
  char *db = g_build_filename(dir, "registry.db", NULL);
  em_error err = {0};
  g_assert_cmpint(em_store_create_at_version(db, 1, &err), ==, EM_OK);
  char *before = st_file_sha256(db);
  g_assert_null(em_store_open(dir, true, &err));
  g_assert_nonnull(strstr(err.msg, "open it once for writing"));
  char *after = st_file_sha256(db);
  g_assert_cmpstr(before, ==, after);
  /* bad arguments */
  g_assert_cmpint(em_store_create_at_version(db, 1, &err), ==, EM_ERR_INVALID); /* exists */
  char *db2 = g_build_filename(dir, "other.db", NULL);
  g_assert_cmpint(em_store_create_at_version(db2, 0, &err), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_store_create_at_version(db2, em_store_schema_version() + 1, &err), ==,
                  EM_ERR_INVALID);
  g_free(db2);
  g_free(before);
  g_free(after);
  g_free(db);
  st_rmrf(dir);
  g_free(dir);
}

/* ---- migrations ---------------------------------------------------------- */

#define CKPT_REL "ckpt/run1-step100.safetensors"

/* Data as a registry of schema v held it, written with that version's SQL. */
static void seed_at_version(const char *dir, int v, char **ckpt_sha) {
  sqlite3 *raw = st_raw_open(dir);
  char *err = NULL;
  int rc = st_raw_exec(raw,
                       "INSERT INTO runs (id, name, model, spec_json, spec_sha256, config_json, "
                       "seed, device, threads, status, started, ended, host, pid, engine_version, "
                       "message) VALUES (1, 'old-run', 'mlp', '{\"name\": \"mlp\"}', 'abc', '{}', "
                       "7, 'cpu', 2, 'completed', 1000.0, 2000.0, 'oldhost', 4242, '0.0.9', NULL);"
                       "INSERT INTO runs (id, name, model, spec_json, spec_sha256, config_json, "
                       "seed, device, threads, status, started, ended, host, pid, engine_version, "
                       "message) VALUES (2, 'crashed', 'cnn', '{}', 'def', '{}', 1, 'cpu', 1, "
                       "'failed', 3000.0, 3100.0, 'oldhost', 4243, '0.0.9', 'NaN loss');"
                       "INSERT INTO metric_keys (id, key) VALUES (1, 'train_loss'), "
                       "  (2, 'test_accuracy'), (3, 'test_loss');"
                       "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 100) "
                       "INSERT INTO metrics (run, key_id, step, value, wall) "
                       "  SELECT 1, 1, i, 1.0 / i, 1000.0 + i FROM s;"
                       "INSERT INTO metrics VALUES (1, 2, 100, 0.9, 1100.0), (1, 3, 100, 0.25, 1100.0);",
                       &err);
  if (rc != SQLITE_OK) g_error("seed v1: %s", err);
  g_free(err);
  if (v >= 2) {
    char *art_dir = g_build_filename(dir, "artifacts", "ckpt", NULL);
    g_mkdir_with_parents(art_dir, 0755);
    char *file = g_build_filename(dir, "artifacts", CKPT_REL, NULL);
    st_write_random(file, 4096, 11);
    *ckpt_sha = st_file_sha256(file);
    char *sql = g_strdup_printf(
        "UPDATE runs SET parent_run = 1 WHERE id = 2;"
        "INSERT INTO artifacts (id, rel_path, kind, sha256, size, run, created) "
        "  VALUES (1, '" CKPT_REL "', 'checkpoint', '%s', 4096, 1, 1100.0);"
        "INSERT INTO checkpoints (id, run, artifact, step, epoch, kind, metric, "
        "  lower_is_better, created) VALUES (1, 1, 1, 100, 1, 'final', 0.25, 1, 1100.0);"
        "INSERT INTO models (id, name, created) VALUES (1, 'mlp-prod', 1200.0);"
        "INSERT INTO model_versions (model, version, spec_json, weights, weights_sha256, run, "
        "  checkpoint, metrics_json, created) VALUES (1, 1, '{\"name\": \"mlp\"}', 1, '%s', 1, 1, "
        "  '{\"test_accuracy\": 0.9}', 1200.0);"
        "INSERT INTO aliases (model, alias, version, updated) VALUES (1, 'production', 1, 1300.0);"
        "%s",
        *ckpt_sha, *ckpt_sha,
        v >= 3 ? "INSERT INTO alias_audit (model, alias, action, from_version, to_version, user, "
                 "  host, time) VALUES (1, 'production', 'promote', 0, 1, 'alice', 'oldhost', 1300.0);"
               : "");
    rc = st_raw_exec(raw, sql, &err);
    if (rc != SQLITE_OK) g_error("seed v2: %s", err);
    g_free(err);
    g_free(sql);
    g_free(file);
    g_free(art_dir);
  }
  g_assert_cmpint(st_raw_int(raw, "PRAGMA user_version"), ==, v);
  sqlite3_close(raw);
}

static void test_migrate_from(gconstpointer data) {
  int v = GPOINTER_TO_INT(data);
  char *dir = st_tmpdir();
  char *db = g_build_filename(dir, "registry.db", NULL);
  char *ckpt_sha = NULL;
  em_error err = {0};
  /* A registry of v4 or later keeps its metric points in chunks, which
   * raw SQL cannot write: its data is seeded as v3 wrote it and migrated
   * through v4 (the chunks) to the rest. */
  int seed_v = v >= 4 ? 3 : v;
  g_assert_cmpint(em_store_create_at_version(db, seed_v, &err), ==, EM_OK);
  seed_at_version(dir, seed_v, &ckpt_sha);

  em_store *s = em_store_open(dir, false, &err);
  if (!s) g_error("open after seeding v%d: %s", v, err.msg);
  sqlite3 *raw = st_raw_open(dir);
  g_assert_cmpint(st_raw_int(raw, "PRAGMA user_version"), ==, em_store_schema_version());
  g_assert_cmpint(st_raw_int(raw, "PRAGMA application_id"), ==, 0x456d6272);
  g_assert_cmpint(em_store_integrity_check(s, &err), ==, EM_OK);

  /* v1 data: runs and metrics */
  em_run r;
  g_assert_cmpint(em_store_run_get(s, 1, &r, &err), ==, EM_OK);
  g_assert_cmpstr(r.name, ==, "old-run");
  g_assert_cmpint(r.status, ==, EM_RUN_COMPLETED); /* another host: not swept */
  g_assert_cmpuint(r.seed, ==, 7);
  g_assert_cmpfloat_with_epsilon(r.final_test_accuracy, 0.9, 1e-12);
  g_assert_cmpfloat_with_epsilon(r.final_test_loss, 0.25, 1e-12);
  g_assert_cmpfloat_with_epsilon(r.final_train_loss, 0.01, 1e-12);
  g_assert_cmpint(r.steps, ==, 100);
  g_assert_null(r.dataset_name);
  g_assert_null(r.kernels); /* v5: not known for runs recorded before */
  em_run_clear(&r);
  g_assert_cmpint(em_store_run_get(s, 2, &r, &err), ==, EM_OK);
  g_assert_cmpint(r.status, ==, EM_RUN_FAILED);
  g_assert_cmpstr(r.message, ==, "NaN loss");
  g_assert_cmpint(r.parent_run, ==, v >= 2 ? 1 : 0);
  em_run_clear(&r);
  em_metric_point *pts;
  int64_t n;
  g_assert_cmpint(em_store_metrics_get(s, 1, "train_loss", &pts, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 100);
  for (int i = 0; i < 100; i++) {
    g_assert_cmpint(pts[i].step, ==, i + 1);
    g_assert_cmpfloat(pts[i].value, ==, 1.0 / (i + 1));
    g_assert_cmpfloat(pts[i].wall, ==, 1000.0 + i + 1);
  }
  g_free(pts);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM sqlite_master WHERE name = 'metrics'"), ==, 0);
  g_assert_cmpint(st_raw_int(raw, "SELECT sum(n) FROM metric_chunks"), ==, 102);

  if (v >= 2) {
    em_checkpoint_row *c;
    int nc;
    g_assert_cmpint(em_store_checkpoints_list(s, 1, &c, &nc, &err), ==, EM_OK);
    g_assert_cmpint(nc, ==, 1);
    g_assert_true(g_str_has_suffix(c[0].path, "/artifacts/" CKPT_REL));
    g_assert_cmpstr(c[0].sha256, ==, ckpt_sha);
    em_checkpoint_rows_free(c, nc);
    em_model_row *m;
    int nm;
    g_assert_cmpint(em_store_models_list(s, &m, &nm, &err), ==, EM_OK);
    g_assert_cmpint(nm, ==, 1);
    g_assert_cmpstr(m[0].name, ==, "mlp-prod");
    g_assert_cmpstr(m[0].aliases, ==, "production=1");
    em_model_rows_free(m, nm);
    /* the alias set before the audit log existed starts the history */
    em_audit_row *a;
    int na;
    g_assert_cmpint(em_store_model_history(s, "mlp-prod", &a, &na, &err), ==, EM_OK);
    g_assert_cmpint(na, ==, 1);
    g_assert_cmpstr(a[0].action, ==, "promote");
    g_assert_cmpint(a[0].from_version, ==, 0);
    g_assert_cmpint(a[0].to_version, ==, 1);
    g_assert_cmpstr(a[0].user, ==, v >= 3 ? "alice" : "migration");
    em_audit_rows_free(a, na);
    int ver = 0;
    g_assert_cmpint(em_store_model_rollback(s, "mlp-prod", "production", &ver, &err), ==,
                    EM_ERR_INVALID);
    /* the old version's run cannot be deleted; a new version stacks */
    g_assert_cmpint(em_store_run_delete(s, 1, &err), ==, EM_ERR_INVALID);
    g_assert_cmpint(em_store_model_register(s, 1, "mlp-prod", EM_PICK_BEST, 0, &ver, &err), ==,
                    EM_OK);
    g_assert_cmpint(ver, ==, 2);
    g_assert_cmpint(em_store_model_promote(s, "mlp-prod", 2, "production", &err), ==, EM_OK);
    g_assert_cmpint(em_store_model_rollback(s, "mlp-prod", "production", &ver, &err), ==, EM_OK);
    g_assert_cmpint(ver, ==, 1);
  }

  /* what later versions added works on the migrated data */
  g_assert_cmpint(em_store_run_tag(s, 1, "dataset", "mnist", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_note(s, 1, "recorded before v3", &err), ==, EM_OK);
  g_assert_cmpint(em_store_run_event(s, 1, 50, "resume", "from step 50", &err), ==, EM_OK);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM run_tags WHERE run = 1"), ==, 1);
  g_assert_cmpint(st_raw_int(raw, "SELECT count(*) FROM alias_audit"), ==, v >= 2 ? 3 : 0);
  if (v >= 2) /* the migrated log is append-only too */
    g_assert_cmpint(st_raw_exec(raw, "UPDATE alias_audit SET to_version = 9", NULL), !=, SQLITE_OK);
  int64_t run3 = st_make_run(s, "mlp", NULL);
  g_assert_cmpint(run3, ==, 3);
  g_assert_cmpint(em_store_integrity_check(s, &err), ==, EM_OK);
  sqlite3_close(raw);
  em_store_close(s);

  /* and a second open finds nothing to do */
  s = em_store_open(dir, true, &err);
  g_assert_nonnull(s);
  em_store_close(s);
  g_free(ckpt_sha);
  g_free(db);
  st_rmrf(dir);
  g_free(dir);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/store/open/create", test_create);
  g_test_add_func("/store/open/read-only", test_read_only);
  g_test_add_func("/store/open/default-dir", test_default_dir);
  g_test_add_func("/store/open/dir-is-a-file", test_dir_is_a_file);
  g_test_add_func("/store/open/refuse/random-bytes", test_refuse_random_bytes);
  g_test_add_func("/store/open/refuse/foreign-sqlite", test_refuse_foreign_sqlite);
  g_test_add_func("/store/open/refuse/newer-schema", test_refuse_newer_schema);
  g_test_add_func("/store/open/refuse/read-only-old-schema", test_read_only_old_schema);
  for (int v = 1; v < em_store_schema_version(); v++) {
    char *path = g_strdup_printf("/store/migrate/from-v%d", v);
    g_test_add_data_func(path, GINT_TO_POINTER(v), test_migrate_from);
    g_free(path);
  }
  return g_test_run();
}
