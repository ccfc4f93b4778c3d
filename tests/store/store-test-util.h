/* store-test-util.h: what the registry tests share: scratch folders, file
 * hashes computed independently of the store, raw SQL on a registry. */
#pragma once

#include <glib.h>
#include <sqlite3.h>
#include <stdint.h>

#include "em-store.h"

/* A new empty folder under $TMPDIR; remove with st_rmrf. */
char *st_tmpdir(void);
void st_rmrf(const char *path);
/* SHA-256 of a file's bytes (GLib, whole file in memory); NULL if unreadable. */
char *st_file_sha256(const char *path);
/* Writes n pseudo-random bytes (from seed) to path. */
void st_write_random(const char *path, size_t n, uint32_t seed);
/* Sets a file's mtime to `age_s` seconds ago. */
void st_age_file(const char *path, double age_s);
/* A run of model with the given name (NULL: default name). */
int64_t st_make_run(em_store *s, const char *model, const char *name);
/* A second, raw connection to dir/registry.db (no Ember code involved). */
sqlite3 *st_raw_open(const char *dir);
/* The single integer a query returns. */
int64_t st_raw_int(sqlite3 *db, const char *sql);
/* Runs SQL; returns SQLite's result code (message into msg when given). */
int st_raw_exec(sqlite3 *db, const char *sql, char **msg);
/* Names of the files in a folder, sorted, joined by spaces. */
char *st_list_dir(const char *dir);

/* A fresh registry, opened for writing, in a temporary folder (GLib test
 * fixture: g_test_add(path, st_fixture, NULL, st_fixture_setup, fn,
 * st_fixture_teardown)). */
typedef struct {
  char *dir;
  em_store *s;
} st_fixture;
void st_fixture_setup(st_fixture *f, gconstpointer data);
void st_fixture_teardown(st_fixture *f, gconstpointer data);
