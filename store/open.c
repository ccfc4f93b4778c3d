/* open.c: finding, opening, checking and closing a registry. A file that
 * is not SQLite, an SQLite database of another program, or a registry of
 * a newer Ember is refused before anything writes to it. */
#include "store-private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

em_status em_store_default_dir(char *out, size_t cap, em_error *err) {
  const char *home = getenv("EMBER_HOME");
  const char *xdg = getenv("XDG_DATA_HOME");
  const char *user_home = getenv("HOME");
  int n;
  if (home && *home) n = snprintf(out, cap, "%s", home);
  else if (xdg && xdg[0] == '/') n = snprintf(out, cap, "%s/ember", xdg); /* XDG: absolute only */
  else if (user_home && *user_home) n = snprintf(out, cap, "%s/.local/share/ember", user_home);
  else
    return em_error_set(err, EM_ERR_INVALID,
                        "cannot find the registry folder: neither EMBER_HOME, XDG_DATA_HOME nor "
                        "HOME is set; set EMBER_HOME to the folder to use");
  if (n < 0 || (size_t)n >= cap)
    return em_error_set(err, EM_ERR_INVALID, "registry folder path is too long (%d bytes)", n);
  return EM_OK;
}

static void stmt_finalize(gpointer p) { sqlite3_finalize(p); }

/* The URI that opens path as immutable: a read-only registry folder (an
 * archive, a shared copy) where SQLite cannot create the WAL's shared
 * memory file that a reader needs. */
static char *immutable_uri(const char *path) {
  GString *u = g_string_new("file:");
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    if (g_ascii_isalnum(*p) || strchr("/-._~", *p)) g_string_append_c(u, (char)*p);
    else g_string_append_printf(u, "%%%02X", *p);
  }
  g_string_append(u, "?immutable=1");
  return g_string_free(u, FALSE);
}

/* A reader that cannot write the folder, or registry.db itself (another
 * user's registry in a shared folder): immutable when registry.db holds
 * every change (no WAL left beside it), else an error saying why. Opened
 * the usual way, such a reader left registry.db-wal and -shm files owned
 * by it, which the owner could then not write: every later write of the
 * owner failed with "attempt to write a readonly database". */
static em_status read_only_folder(const char *db_path, bool *immutable, em_error *err) {
  char *dir = g_path_get_dirname(db_path), *wal = g_strconcat(db_path, "-wal", NULL);
  char *shm = g_strconcat(db_path, "-shm", NULL);
  struct stat sb;
  em_status st = EM_OK;
  *immutable = false;
  if ((access(dir, W_OK) != 0 || access(db_path, W_OK) != 0) && access(shm, F_OK) != 0) {
    if (stat(wal, &sb) == 0 && sb.st_size > 0)
      st = em_error_set(err, EM_ERR_IO,
                        "the registry in %s cannot be written by you, and its registry.db-wal holds "
                        "changes not yet in registry.db, which a reader cannot fold in there: "
                        "open it once where it can be written (any ember command), or copy the "
                        "folder somewhere writable", dir);
    else *immutable = true;
  }
  g_free(dir);
  g_free(wal);
  g_free(shm);
  return st;
}

em_store *em_store_connect(const char *db_path, bool read_only, em_error *err) {
  em_store *s = g_new0(em_store, 1);
  s->read_only = read_only;
  g_strlcpy(s->db_path, db_path, sizeof s->db_path);
  s->stmts = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, stmt_finalize);
  /* NOMUTEX: a connection has one owner thread (house style 14) */
  int flags = (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
              SQLITE_OPEN_NOMUTEX;
  bool immutable = false;
  em_status st = read_only ? read_only_folder(db_path, &immutable, err) : EM_OK;
  char *uri = immutable ? immutable_uri(db_path) : NULL;
  if (!st)
    st = EM_SQL_CHECK(s, sqlite3_open_v2(uri ? uri : db_path, &s->db,
                                         flags | (uri ? SQLITE_OPEN_URI : 0), NULL), err);
  g_free(uri);
  if (!st) st = EM_SQL_CHECK(s, sqlite3_busy_timeout(s->db, EM_STORE_BUSY_TIMEOUT_MS), err);
  if (!st) sqlite3_extended_result_codes(s->db, 1);
  /* foreign keys are per connection and only change outside transactions;
   * synchronous=NORMAL is safe with WAL (a power cut can lose the last
   * commits, never corrupt); a 64 MiB page cache and 1 GiB of mmap keep
   * metric reads off read() calls. */
  static const char *const pragmas =
      "PRAGMA foreign_keys = ON;"
      "PRAGMA synchronous = NORMAL;"
      "PRAGMA cache_size = -65536;"
      "PRAGMA mmap_size = 1073741824;"
      "PRAGMA temp_store = MEMORY;";
  if (!st) st = EM_SQL_CHECK(s, sqlite3_exec(s->db, pragmas, NULL, NULL, NULL), err);
  if (st) {
    em_error_prefix(err, "opening %s", db_path);
    em_store_close(s);
    return NULL;
  }
  return s;
}

void em_store_close(em_store *s) {
  if (!s) return;
  if (s->stmts) g_hash_table_destroy(s->stmts);
  if (s->db) sqlite3_close(s->db);
  g_free(s);
}

const char *em_store_dir(const em_store *s) { return s->dir; }

void em_store_artifact_path(const em_store *s, const char *rel, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", s->art_dir, rel);
}

void em_store_run_checkpoint_dir(const em_store *s, int64_t run, char *out, size_t cap) {
  snprintf(out, cap, "%s/runs/%lld/checkpoints", s->art_dir, (long long)run);
}

void em_store_path_to_row(const em_store *s, const char *abs_path, char *out, size_t cap) {
  size_t n = strlen(s->art_dir);
  if (strncmp(abs_path, s->art_dir, n) == 0 && abs_path[n] == '/' && abs_path[n + 1]) {
    g_strlcpy(out, abs_path + n + 1, cap);
    return;
  }
  /* the same folder reached through a symlink or a relative path */
  char real[PATH_MAX];
  if (realpath(abs_path, real) && strncmp(real, s->art_dir, n) == 0 && real[n] == '/') {
    g_strlcpy(out, real + n + 1, cap);
    return;
  }
  g_strlcpy(out, abs_path, cap);
}

void em_store_path_from_row(const em_store *s, const char *row_path, char *out, size_t cap) {
  if (row_path[0] == '/') g_strlcpy(out, row_path, cap);
  else snprintf(out, cap, "%s/%s", s->art_dir, row_path);
}

bool em_store_row_path_inside(const char *row_path) {
  if (!row_path[0] || row_path[0] == '/') return false;
  for (const char *p = row_path; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.') return false;
    p += n;
    if (*p == '/') p++;
  }
  return true;
}

static em_status make_dir(const char *path, em_error *err) {
  if (g_mkdir_with_parents(path, 0755) != 0)
    return em_error_set(err, EM_ERR_IO, "cannot create the registry folder %s: %s", path,
                        strerror(errno));
  return EM_OK;
}

typedef struct {
  int64_t app_id;
  int version, objects;
} db_identity;

static em_status read_identity(em_store *s, db_identity *id, em_error *err) {
  static const char *const sql[3] = {"PRAGMA application_id", "PRAGMA user_version",
                                     "SELECT count(*) FROM sqlite_master"};
  int64_t v[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) {
    sqlite3_stmt *q;
    bool row = false;
    em_status st = EM_SQL_PREPARE(s, sql[i], &q, err);
    if (!st) st = EM_SQL_STEP(s, q, &row, err);
    if (st) return st;
    if (row) v[i] = sqlite3_column_int64(q, 0);
    sqlite3_reset(q);
  }
  id->app_id = v[0];
  id->version = (int)v[1];
  id->objects = (int)v[2];
  return EM_OK;
}

/* Refuses anything that is not an Ember registry we can read. */
static em_status check_identity(em_store *s, const db_identity *id, em_error *err) {
  int cur = em_store_schema_version();
  bool fresh = id->app_id == 0 && id->version == 0 && id->objects == 0;
  if (fresh) return EM_OK;
  if (id->app_id != EM_STORE_APPLICATION_ID)
    return em_error_set(err, EM_ERR_FORMAT,
                        "%s is an SQLite database of another program (application_id %lld, %d "
                        "tables and indexes), not an Ember registry; it was left as it is: move "
                        "it aside, or point EMBER_HOME at another folder",
                        s->db_path, (long long)id->app_id, id->objects);
  if (id->version > cur)
    return em_error_set(err, EM_ERR_UNSUPPORTED,
                        "registry.db was written by a newer Ember (schema %d, this one knows up to "
                        "%d); upgrade Ember (%s was left as it is)",
                        id->version, cur, s->db_path);
  if (id->version < 1)
    return em_error_set(err, EM_ERR_FORMAT,
                        "%s has Ember's application_id but no schema version; it is damaged: move "
                        "it aside and restore a backup",
                        s->db_path);
  return EM_OK;
}

/* True when dir holds a regular file at any depth (up to 8 folders down). */
static bool has_files(const char *dir, int depth) {
  GDir *d = depth < 8 ? g_dir_open(dir, 0, NULL) : NULL;
  if (!d) return false;
  bool found = false;
  const char *name;
  while (!found && (name = g_dir_read_name(d))) {
    char *child = g_build_filename(dir, name, NULL);
    struct stat sb;
    if (lstat(child, &sb) == 0)
      found = S_ISREG(sb.st_mode) || (S_ISDIR(sb.st_mode) && has_files(child, depth + 1));
    g_free(child);
  }
  g_dir_close(d);
  return found;
}

static em_status set_wal(em_store *s, em_error *err) {
  sqlite3_stmt *q;
  bool row = false;
  em_status st = EM_SQL_PREPARE(s, "PRAGMA journal_mode = WAL", &q, err);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (st) return st;
  const char *mode = row ? (const char *)sqlite3_column_text(q, 0) : NULL;
  bool wal = mode && g_ascii_strcasecmp(mode, "wal") == 0;
  char got[32];
  g_strlcpy(got, mode ? mode : "(none)", sizeof got);
  sqlite3_reset(q);
  if (!wal)
    return em_error_set(err, EM_ERR_UNSUPPORTED,
                        "%s: SQLite could not switch to WAL mode (journal mode is %s); the "
                        "registry needs a local filesystem that supports shared memory (not NFS)",
                        s->db_path, got);
  return EM_OK;
}

/* The nearest of dir and its parents that exists, when it is not a folder
 * (g_free), else NULL. Reading and writing must say the same thing about
 * a registry path that goes through a file: reading said "registry.db is
 * absent", creating "Not a directory". */
static char *file_in_the_way(const char *dir) {
  char *p = g_strdup(dir);
  while (!g_file_test(p, G_FILE_TEST_EXISTS)) {
    char *up = g_path_get_dirname(p);
    gboolean top = strcmp(up, p) == 0;
    g_free(p);
    p = up;
    if (top) break;
  }
  if (g_file_test(p, G_FILE_TEST_EXISTS) && !g_file_test(p, G_FILE_TEST_IS_DIR)) return p;
  g_free(p);
  return NULL;
}

/* registry.db missing or empty beside recorded files: said to readers
 * and writers alike (readers said "no runs yet") */
#define LOST_DB                                                                                 \
  "%s is missing or empty, but %s holds recorded files: the registry's database was lost or " \
  "moved, and nothing was changed. Restore registry.db from a backup, or move artifacts/ "    \
  "aside to start a new registry here"

em_store *em_store_open(const char *dir, bool read_only, em_error *err) {
  if (!dir || !*dir) {
    em_error_set(err, EM_ERR_INVALID, "no registry folder given");
    return NULL;
  }
  char *file = file_in_the_way(dir);
  if (file) {
    em_error_set(err, EM_ERR_IO,
                 "the registry folder %s cannot be used: %s is a file, not a folder; move it "
                 "aside, or point EMBER_HOME (or --registry, or the workbench's Preferences) at "
                 "a folder",
                 dir, file);
    g_free(file);
    return NULL;
  }
  char db_path[PATH_MAX], art_dir[PATH_MAX];
  snprintf(db_path, sizeof db_path, "%s/registry.db", dir);
  bool exists = g_file_test(db_path, G_FILE_TEST_EXISTS);
  if (exists && !g_file_test(db_path, G_FILE_TEST_IS_REGULAR)) {
    em_error_set(err, EM_ERR_IO, "%s is not a file (a folder or a device?): it was left as it "
                 "is; move it aside, or point EMBER_HOME (or --registry) at another folder",
                 db_path);
    return NULL;
  }
  snprintf(art_dir, sizeof art_dir, "%s/artifacts", dir);
  if (read_only && !exists && has_files(art_dir, 0)) { /* as a writer is told (below) */
    em_error_set(err, EM_ERR_FORMAT, LOST_DB, db_path, art_dir);
    return NULL;
  }
  if (read_only && !exists) {
    em_error_set(err, EM_ERR_IO,
                 "no registry in %s (registry.db is absent); record a run first, or point "
                 "EMBER_HOME at the folder that holds it",
                 dir);
    return NULL;
  }
  if (!read_only) {
    if (make_dir(dir, err) || make_dir(art_dir, err)) return NULL;
  }
  /* The file's identity is read through SQLite, never with open()/close()
   * of our own: on POSIX, closing any descriptor of a file drops every
   * lock this process holds on it, including other connections' locks. */

  em_store *s = em_store_connect(db_path, read_only, err);
  if (!s) return NULL;
  if (!realpath(dir, s->dir)) g_strlcpy(s->dir, dir, sizeof s->dir);
  snprintf(s->art_dir, sizeof s->art_dir, "%s/artifacts", s->dir);
  snprintf(s->db_path, sizeof s->db_path, "%s/registry.db", s->dir);

  db_identity id = {0};
  em_status st = read_identity(s, &id, err);

  if (!st) st = check_identity(s, &id, err);
  /* A new database beside artifacts already recorded means registry.db
   * was lost, emptied or moved: starting afresh there would let gc remove
   * every file as unreferenced, and new runs reuse the old runs' folders. */
  if (!st && id.app_id == 0 && id.version == 0 && id.objects == 0 && has_files(s->art_dir, 0))
    st = em_error_set(err, EM_ERR_FORMAT, LOST_DB, s->db_path, s->art_dir);
  int cur = em_store_schema_version();
  if (!st && read_only && id.version < cur) {
    if (id.version == 0)
      st = em_error_set(err, EM_ERR_IO, "no registry in %s (registry.db is empty); record a run "
                        "first", s->dir);
    else
      st = em_error_set(err, EM_ERR_UNSUPPORTED,
                        "%s has schema %d and this Ember reads schema %d; open it once for "
                        "writing (any command that records, e.g. ember train) to migrate it",
                        s->db_path, id.version, cur);
  }
  if (!st && !read_only) {
    st = set_wal(s, err);
    if (!st) st = em_store_migrate(s, cur, err);
    if (!st) st = em_store_sweep_stale_runs(s, err);
  }
  if (st) {
    em_store_close(s);
    /* a file this open created and left empty goes again */
    struct stat sb;
    if (!exists && stat(db_path, &sb) == 0 && sb.st_size == 0) unlink(db_path);
    return NULL;
  }
  return s;
}

em_status em_store_integrity_check(em_store *s, em_error *err) {
  sqlite3_stmt *q;
  bool row = false;
  em_status st = EM_SQL_PREPARE(s, "PRAGMA integrity_check", &q, err);
  if (st) return st;
  GString *msg = g_string_new(NULL);
  bool ok = false;
  while (!(st = EM_SQL_STEP(s, q, &row, err)) && row) {
    const char *t = (const char *)sqlite3_column_text(q, 0);
    if (t && strcmp(t, "ok") == 0) ok = true;
    else if (msg->len < 600) g_string_append_printf(msg, "%s%s", msg->len ? "; " : "", t ? t : "");
  }
  sqlite3_reset(q);
  if (!st && (!ok || msg->len))
    st = em_error_set(err, EM_ERR_FORMAT,
                      "%s fails SQLite's integrity check: %s; copy it aside and restore a backup",
                      s->db_path, msg->str);
  if (!st) {
    /* foreign keys too: a row naming a run or model that is gone */
    st = EM_SQL_PREPARE(s, "PRAGMA foreign_key_check", &q, err);
    if (!st) st = EM_SQL_STEP(s, q, &row, err);
    if (!st && row) {
      char *table = em_col_text(q, 0);
      st = em_error_set(err, EM_ERR_FORMAT,
                        "%s: table %s has a row (rowid %lld) referring to a missing %s row",
                        s->db_path, table ? table : "?", (long long)sqlite3_column_int64(q, 1),
                        sqlite3_column_text(q, 2) ? (const char *)sqlite3_column_text(q, 2) : "?");
      g_free(table);
    }
    if (q) sqlite3_reset(q);
  }
  g_string_free(msg, TRUE);
  return st;
}
