/* store-test-util.c: helpers of the registry tests (see the header). */
#include "store-test-util.h"

#include <fcntl.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

char *st_tmpdir(void) {
  GError *e = NULL;
  char *d = g_dir_make_tmp("ember-store-XXXXXX", &e);
  g_assert_no_error(e);
  return d;
}

void st_rmrf(const char *path) {
  GDir *d = g_dir_open(path, 0, NULL);
  if (d) {
    const char *name;
    while ((name = g_dir_read_name(d))) {
      char *child = g_build_filename(path, name, NULL);
      if (g_file_test(child, G_FILE_TEST_IS_DIR) && !g_file_test(child, G_FILE_TEST_IS_SYMLINK))
        st_rmrf(child);
      else g_remove(child);
      g_free(child);
    }
    g_dir_close(d);
  }
  g_remove(path);
}

char *st_file_sha256(const char *path) {
  gchar *data = NULL;
  gsize n = 0;
  if (!g_file_get_contents(path, &data, &n, NULL)) return NULL;
  char *hex = g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)data, n);
  g_free(data);
  return hex;
}

void st_write_random(const char *path, size_t n, uint32_t seed) {
  guchar *buf = g_malloc(n ? n : 1);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    buf[i] = (guchar)x;
  }
  GError *e = NULL;
  g_file_set_contents(path, (const gchar *)buf, (gssize)n, &e);
  g_assert_no_error(e);
  g_free(buf);
}

void st_age_file(const char *path, double age_s) {
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= (time_t)age_s;
  ts[1] = ts[0];
  g_assert_cmpint(utimensat(AT_FDCWD, path, ts, 0), ==, 0);
}

int64_t st_make_run(em_store *s, const char *model, const char *name) {
  em_run_new r = {
      .name = name,
      .model = model,
      .spec_json = "{\"name\": \"tiny\"}",
      .config_json = "{\"lr\": 0.1}",
      .seed = 42,
      .device = "cpu",
      .threads = 2,
      .engine_version = "0.1.0",
  };
  em_error err = {0};
  int64_t id = 0;
  em_status st = em_store_run_create(s, &r, &id, &err);
  if (st) g_error("st_make_run: %s", err.msg);
  g_assert_cmpint(id, >, 0);
  return id;
}

sqlite3 *st_raw_open(const char *dir) {
  char *p = g_build_filename(dir, "registry.db", NULL);
  sqlite3 *db = NULL;
  g_assert_cmpint(sqlite3_open_v2(p, &db, SQLITE_OPEN_READWRITE, NULL), ==, SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  sqlite3_exec(db, "PRAGMA foreign_keys = ON", NULL, NULL, NULL);
  g_free(p);
  return db;
}

int64_t st_raw_int(sqlite3 *db, const char *sql) {
  sqlite3_stmt *q = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
  if (rc != SQLITE_OK) g_error("st_raw_int: %s: %s", sql, sqlite3_errmsg(db));
  g_assert_cmpint(sqlite3_step(q), ==, SQLITE_ROW);
  int64_t v = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return v;
}

int st_raw_exec(sqlite3 *db, const char *sql, char **msg) {
  char *m = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &m);
  if (msg) *msg = g_strdup(m ? m : "");
  sqlite3_free(m);
  return rc;
}

static gint cmp_str(gconstpointer a, gconstpointer b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

char *st_list_dir(const char *dir) {
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  GDir *d = g_dir_open(dir, 0, NULL);
  const char *n;
  while (d && (n = g_dir_read_name(d))) g_ptr_array_add(names, g_strdup(n));
  if (d) g_dir_close(d);
  g_ptr_array_sort(names, cmp_str);
  g_ptr_array_add(names, NULL);
  char *out = g_strjoinv(" ", (char **)names->pdata);
  g_ptr_array_unref(names);
  return out;
}

void st_fixture_setup(st_fixture *f, gconstpointer data) {
  (void)data;
  f->dir = st_tmpdir();
  em_error err = {0};
  f->s = em_store_open(f->dir, false, &err);
  g_assert_nonnull(f->s);
}

void st_fixture_teardown(st_fixture *f, gconstpointer data) {
  (void)data;
  em_store_close(f->s);
  st_rmrf(f->dir);
  g_free(f->dir);
}
