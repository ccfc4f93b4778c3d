/* db.c: the SQLite plumbing every file of the store uses: error messages
 * that say what to do, the per-connection cache of prepared statements,
 * parameter binding, stepping and transactions. */
#include "store-private.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static const char *hint_for(sqlite3 *db, int rc) {
  int ext = db ? sqlite3_extended_errcode(db) : rc;
  switch (rc & 0xff) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return "another process held the registry longer than the 10 s busy timeout; retry, or "
           "find the process holding registry.db (fuser registry.db)";
  case SQLITE_FULL: return "the disk is full; free some space and retry";
  case SQLITE_READONLY:
  case SQLITE_PERM:
  case SQLITE_CANTOPEN:
    return "check that the registry folder and registry.db exist and are writable by you";
  case SQLITE_NOTADB:
    return "this file is not an Ember registry (not an SQLite database at all) and was left as "
           "it is: move it aside, or point EMBER_HOME (or --registry) at another folder";
  case SQLITE_CORRUPT:
    return "registry.db is damaged; move it aside and restore a backup (ember can start a new "
           "registry in an empty folder)";
  case SQLITE_IOERR: return "the disk or filesystem reported an error; check it and retry";
  case SQLITE_NOMEM: return "out of memory";
  case SQLITE_CONSTRAINT:
    if (ext == SQLITE_CONSTRAINT_FOREIGNKEY)
      return "a row names a run, model, version or checkpoint that does not exist";
    if (ext == SQLITE_CONSTRAINT_TRIGGER) return "the registry refuses this change";
    return "the row conflicts with what the registry holds";
  case SQLITE_ERROR:
    if (db && (strstr(sqlite3_errmsg(db), "no such table") ||
               strstr(sqlite3_errmsg(db), "no such column")))
      return "registry.db lacks a table or column that its schema version has: the file was "
             "altered or damaged; move it aside and restore a backup";
    return "this is a bug in Ember's registry code; please report it with this message";
  default: return "this is a bug in Ember's registry code; please report it with this message";
  }
}

em_status em_sql_fail(em_store *s, int rc, const char *call, const char *func, int line,
                      em_error *err) {
  sqlite3 *db = s ? s->db : NULL;
  const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  em_status st = EM_ERR_IO;
  switch (rc & 0xff) {
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB: st = EM_ERR_FORMAT; break;
  case SQLITE_NOMEM: st = EM_ERR_NOMEM; break;
  case SQLITE_CONSTRAINT:
  case SQLITE_MISUSE:
  case SQLITE_RANGE:
  case SQLITE_ERROR: st = EM_ERR_INVALID; break;
  default: break;
  }
  return em_error_set(err, st, "registry %s: %s (SQLite %s, %s in %s line %d); %s",
                      s ? s->db_path : "(none)", msg, sqlite3_errstr(rc), call, func, line,
                      hint_for(db, rc));
}

em_status em_db_prepare(em_store *s, const char *sql, sqlite3_stmt **q, const char *func,
                        int line, em_error *err) {
  sqlite3_stmt *st = g_hash_table_lookup(s->stmts, sql);
  if (st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    *q = st;
    return EM_OK;
  }
  int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
  if (rc != SQLITE_OK) {
    *q = NULL;
    return em_sql_fail(s, rc, "sqlite3_prepare_v3", func, line, err);
  }
  g_hash_table_insert(s->stmts, (gpointer)sql, st);
  *q = st;
  return EM_OK;
}

static int bind_one(sqlite3_stmt *q, int i, char f, va_list *ap) {
  switch (f) {
  case 'i': return sqlite3_bind_int64(q, i, va_arg(*ap, int64_t));
  case 'n': return sqlite3_bind_int(q, i, va_arg(*ap, int));
  case 'z': {
    int64_t v = va_arg(*ap, int64_t);
    return v ? sqlite3_bind_int64(q, i, v) : sqlite3_bind_null(q, i);
  }
  case 'd': {
    double v = va_arg(*ap, double);
    return isnan(v) ? sqlite3_bind_null(q, i) : sqlite3_bind_double(q, i, v);
  }
  case 't': {
    const char *v = va_arg(*ap, const char *);
    return v ? sqlite3_bind_text(q, i, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(q, i);
  }
  default: return SQLITE_MISUSE;
  }
}

static em_status bind_va(em_store *s, sqlite3_stmt *q, const char *func, int line, em_error *err,
                         const char *fmt, va_list *ap) {
  for (int i = 0; fmt && fmt[i]; i++) {
    int rc = bind_one(q, i + 1, fmt[i], ap);
    if (rc != SQLITE_OK) {
      sqlite3_reset(q);
      return em_sql_fail(s, rc, "sqlite3_bind", func, line, err);
    }
  }
  return EM_OK;
}

em_status em_db_bind(em_store *s, sqlite3_stmt *q, const char *func, int line, em_error *err,
                     const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  em_status st = bind_va(s, q, func, line, err, fmt, &ap);
  va_end(ap);
  return st;
}

em_status em_db_step(em_store *s, sqlite3_stmt *q, bool *row, const char *func, int line,
                     em_error *err) {
  int rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) {
    *row = true;
    return EM_OK;
  }
  *row = false;
  if (rc == SQLITE_DONE) return EM_OK;
  em_status st = em_sql_fail(s, rc, "sqlite3_step", func, line, err);
  sqlite3_reset(q);
  return st;
}

em_status em_db_collect(em_store *s, sqlite3_stmt *q, size_t elem_size, em_sql_row_fn read_row,
                        void **rows, int *n, const char *func, int line, em_error *err) {
  GArray *arr = g_array_new(FALSE, TRUE, (guint)elem_size);
  em_status st = EM_OK;
  bool row = false;
  while (!(st = em_db_step(s, q, &row, func, line, err)) && row) {
    g_array_set_size(arr, arr->len + 1);
    read_row(s, q, arr->data + (size_t)(arr->len - 1) * elem_size);
  }
  sqlite3_reset(q);
  *n = (int)arr->len;
  *rows = g_array_free(arr, FALSE);
  return st;
}

em_status em_db_run(em_store *s, const char *func, int line, em_error *err, const char *sql,
                    const char *fmt, ...) {
  sqlite3_stmt *q;
  em_status st = em_db_prepare(s, sql, &q, func, line, err);
  if (st) return st;
  va_list ap;
  va_start(ap, fmt);
  st = bind_va(s, q, func, line, err, fmt, &ap);
  va_end(ap);
  if (st) return st;
  bool row = true;
  while (row && !st) st = em_db_step(s, q, &row, func, line, err);
  sqlite3_reset(q);
  return st;
}

void em_db_rollback(em_store *s) {
  if (s && s->db && !sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

char *em_col_text(sqlite3_stmt *q, int i) {
  const unsigned char *t = sqlite3_column_text(q, i);
  return t ? g_strdup((const char *)t) : NULL;
}

double em_col_double(sqlite3_stmt *q, int i) {
  return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

em_status em_store_require_writable(em_store *s, const char *what, em_error *err) {
  if (!s) return em_error_set(err, EM_ERR_INVALID, "%s: no registry (NULL store)", what);
  if (s->read_only)
    return em_error_set(err, EM_ERR_INVALID,
                        "%s: the registry in %s was opened read-only; open it for writing", what,
                        s->dir);
  return EM_OK;
}
