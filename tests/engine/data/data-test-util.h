/* data-test-util.h: small helpers the data and io tests share (header
 * only: each test is one .c file). */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

/* A fresh temporary folder, removed (with its files) by dt_tmpdir_free. */
static inline char *dt_tmpdir(void) {
  GError *e = NULL;
  char *d = g_dir_make_tmp("ember-data-XXXXXX", &e);
  g_assert_no_error(e);
  return d;
}

static inline void dt_tmpdir_free(char *dir) {
  GDir *d = g_dir_open(dir, 0, NULL);
  if (d) {
    const char *name;
    while ((name = g_dir_read_name(d))) {
      char *p = g_build_filename(dir, name, NULL);
      g_remove(p);
      g_free(p);
    }
    g_dir_close(d);
  }
  g_rmdir(dir);
  g_free(dir);
}

/* Writes n bytes to dir/name (gzip-compressed when gz); returns the path. */
static inline char *dt_write(const char *dir, const char *name, const void *data, size_t n,
                             bool gz) {
  char *p = g_build_filename(dir, name, NULL);
  if (gz) {
    g_remove(p);
    gzFile f = gzopen(p, "wb");
    g_assert_nonnull(f);
    if (n) g_assert_cmpint(gzwrite(f, data, (unsigned)n), ==, (int)n);
    g_assert_cmpint(gzclose(f), ==, Z_OK);
  } else {
    /* Plain stdio (g_file_set_contents would fsync every file), and a new
     * inode: truncating a written file makes ext4 flush it. */
    g_remove(p);
    FILE *f = fopen(p, "wb");
    g_assert_nonnull(f);
    if (n) g_assert_cmpuint(fwrite(data, 1, n, f), ==, n);
    g_assert_cmpint(fclose(f), ==, 0);
  }
  return p;
}

/* The file's bytes (g_free them). */
static inline guint8 *dt_read(const char *path, size_t *n) {
  char *data;
  gsize len;
  GError *e = NULL;
  g_file_get_contents(path, &data, &len, &e);
  g_assert_no_error(e);
  *n = len;
  return (guint8 *)data;
}

/* Asserts that msg contains every one of the NULL-terminated needles. */
static inline void dt_assert_msg(const char *msg, ...) {
  va_list ap;
  va_start(ap, msg);
  const char *needle;
  while ((needle = va_arg(ap, const char *))) {
    if (!strstr(msg, needle))
      g_error("message \"%s\" lacks \"%s\"", msg, needle);
  }
  va_end(ap);
}

/* True when /usr/bin/python3 can import torch (the reference peer). */
static inline bool dt_have_torch(void) {
  static int have = -1;
  if (have < 0) {
    char *argv[] = {"/usr/bin/python3", "-c", "import torch", NULL};
    int status = 1;
    have = g_spawn_sync(NULL, argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                        NULL, NULL, NULL, NULL, &status, NULL) &&
           g_spawn_check_wait_status(status, NULL);
  }
  return have;
}
