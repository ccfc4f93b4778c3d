/* aliases.c: aliases such as "production" point at a model version.
 * Promote and rollback move them and append to alias_audit, which no code
 * path changes (triggers refuse UPDATE and DELETE). Promotions form a
 * stack per alias, rebuilt from the log: promote pushes the version the
 * alias left, rollback pops it. */
#include "store-private.h"

#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *user_name(void) {
  const char *u = getenv("USER");
  if (u && *u) return u;
  struct passwd *pw = getpwuid(getuid());
  return pw && pw->pw_name ? pw->pw_name : "unknown";
}

/* The version the alias points at; 0 when unset. */
static em_status alias_current(em_store *s, int64_t model, const char *alias, int *version,
                               em_error *err) {
  sqlite3_stmt *q;
  bool row = false;
  em_status st = EM_SQL_PREPARE(s, "SELECT version FROM aliases WHERE model = ? AND alias = ?",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "it", model, alias);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  *version = !st && row ? sqlite3_column_int(q, 0) : 0;
  if (q) sqlite3_reset(q);
  return st;
}

static em_status alias_move(em_store *s, int64_t model, const char *alias, const char *action,
                            int from, int to, em_error *err) {
  double now = em_store_now();
  em_status st = EM_SQL_RUN(s, err,
                            "INSERT INTO aliases (model, alias, version, updated) "
                            "VALUES (?, ?, ?, ?) ON CONFLICT (model, alias) DO UPDATE SET "
                            "version = excluded.version, updated = excluded.updated",
                            "itnd", model, alias, to, now);
  if (!st)
    st = EM_SQL_RUN(s, err,
                    "INSERT INTO alias_audit (model, alias, action, from_version, to_version, "
                    "user, host, time) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    "ittnnttd", model, alias, action, from, to, user_name(), em_store_host(), now);
  return st;
}

em_status em_store_check_alias(const char *model, const char *alias, em_error *err) {
  em_status st = em_store_check_name("alias", alias, err);
  if (!st && em_store_selector_is_version(alias, NULL))
    st = em_error_set(err, EM_ERR_INVALID, "alias '%s' would read as a version number in "
                      "%s@%s; give the alias a word (e.g. release-%s)", alias, model, alias, alias);
  return st;
}

em_status em_store_model_promote(em_store *s, const char *name, int version, const char *alias,
                                 em_error *err) {
  em_status st = em_store_require_writable(s, "promoting a model", err);
  if (!st) st = em_store_check_alias(name, alias, err);
  if (st) return st;
  int64_t model = 0;
  int from = 0;
  sqlite3_stmt *q = NULL;
  bool row = false;
  st = EM_SQL_BEGIN(s, err);
  if (!st) st = em_store_model_id(s, name, &model, err);
  if (!st)
    st = EM_SQL_PREPARE(s,
                        "SELECT (SELECT 1 FROM model_versions WHERE model = ?1 AND version = ?2), "
                        "coalesce(max(version), 0) FROM model_versions WHERE model = ?1",
                        &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "in", model, version);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row && sqlite3_column_type(q, 0) == SQLITE_NULL)
    st = em_error_set(err, EM_ERR_INVALID, "model '%s' has no version %d (its versions are 1 to %d)",
                      name, version, sqlite3_column_int(q, 1));
  if (q) sqlite3_reset(q);
  if (!st) st = alias_current(s, model, alias, &from, err);
  /* already there: nothing moves, so nothing is logged (a v1 -> v1 entry
   * would also put v1 on the rollback stack, for a rollback that moves
   * nothing) */
  if (!st && from != version) st = alias_move(s, model, alias, "promote", from, version, err);
  if (!st) st = EM_SQL_COMMIT(s, err);
  if (st) em_db_rollback(s);
  return st;
}

em_status em_store_model_rollback(em_store *s, const char *name, const char *alias, int *version,
                                  em_error *err) {
  em_status st = em_store_require_writable(s, "rolling back an alias", err);
  if (!st) st = em_store_check_alias(name, alias, err);
  if (st) return st;
  int64_t model = 0;
  int cur = 0;
  sqlite3_stmt *q = NULL;
  bool row = false;
  GArray *stack = g_array_new(FALSE, FALSE, sizeof(int));
  st = EM_SQL_BEGIN(s, err);
  if (!st) st = em_store_model_id(s, name, &model, err);
  if (!st) st = alias_current(s, model, alias, &cur, err);
  if (!st)
    st = EM_SQL_PREPARE(s,
                        "SELECT action, from_version FROM alias_audit "
                        "WHERE model = ? AND alias = ? AND action IN ('promote', 'rollback') "
                        "ORDER BY id",
                        &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "it", model, alias);
  while (!st && !(st = EM_SQL_STEP(s, q, &row, err)) && row) {
    if (strcmp((const char *)sqlite3_column_text(q, 0), "promote") == 0) {
      int from = sqlite3_column_int(q, 1);
      g_array_append_val(stack, from);
    } else if (stack->len) {
      g_array_set_size(stack, stack->len - 1);
    }
  }
  if (q) sqlite3_reset(q);
  int to = stack->len ? g_array_index(stack, int, stack->len - 1) : 0;
  if (!st && cur == 0)
    st = em_error_set(err, EM_ERR_INVALID, "model '%s' has no alias '%s'; promote a version first",
                      name, alias);
  else if (!st && to == 0)
    st = em_error_set(err, EM_ERR_INVALID,
                      "alias '%s' of model '%s' (now version %d) has no earlier version to roll "
                      "back to; promote the version you want instead",
                      alias, name, cur);
  if (!st) st = alias_move(s, model, alias, "rollback", cur, to, err);
  if (!st) st = EM_SQL_COMMIT(s, err);
  if (st) em_db_rollback(s);
  else if (version) *version = to;
  g_array_free(stack, TRUE);
  return st;
}

static void read_audit_row(em_store *s, sqlite3_stmt *q, void *elem) {
  (void)s;
  em_audit_row *a = elem;
  *a = (em_audit_row){
      .id = sqlite3_column_int64(q, 0),
      .alias = em_col_text(q, 1),
      .action = em_col_text(q, 2),
      .from_version = sqlite3_column_int(q, 3),
      .to_version = sqlite3_column_int(q, 4),
      .user = em_col_text(q, 5),
      .host = em_col_text(q, 6),
      .time = sqlite3_column_double(q, 7),
      .detail = em_col_text(q, 8),
  };
}

em_status em_store_model_audit(em_store *s, const char *name, const char *alias,
                               const char *action, int from_version, int to_version,
                               const char *detail, em_error *err) {
  em_status st = em_store_require_writable(s, "recording a serving event", err);
  int64_t model = 0;
  if (!st) st = em_store_model_id(s, name, &model, err);
  if (!st)
    st = EM_SQL_RUN(s, err,
                    "INSERT INTO alias_audit (model, alias, action, from_version, to_version, "
                    "user, host, time, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    "ittnnttdt", model, alias, action, from_version, to_version, user_name(),
                    em_store_host(), em_store_now(), detail ? detail : "");
  return st;
}

em_status em_store_model_history(em_store *s, const char *name, em_audit_row **out, int *n,
                                 em_error *err) {
  *out = NULL;
  *n = 0;
  int64_t model = 0;
  em_status st = em_store_model_id(s, name, &model, err);
  if (st) return st;
  sqlite3_stmt *q;
  st = EM_SQL_PREPARE(s,
                      "SELECT id, alias, action, from_version, to_version, user, host, time, "
                      "detail FROM alias_audit WHERE model = ? ORDER BY id",
                      &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", model);
  if (st) return st;
  em_audit_row *rows = NULL;
  int count = 0;
  st = EM_SQL_COLLECT(s, q, sizeof *rows, read_audit_row, &rows, &count, err);
  if (st) {
    em_audit_rows_free(rows, count);
    return st;
  }
  *out = rows;
  *n = count;
  return EM_OK;
}

void em_audit_rows_free(em_audit_row *a, int n) {
  for (int i = 0; a && i < n; i++) {
    g_free(a[i].alias);
    g_free(a[i].action);
    g_free(a[i].user);
    g_free(a[i].host);
    g_free(a[i].detail);
  }
  g_free(a);
}
