/* run-columns.c: any setting or metric as a column of a runs table: one
 * value per run from one query ("config.optim.lr": json_extract over the
 * recorded config; "metrics.loss": the last point of that key), and the
 * columns there are to choose from. */
#include "store-private.h"

#include <math.h>

static void read_value(em_store *s, sqlite3_stmt *q, void *elem) {
  (void)s;
  em_run_value *v = elem;
  v->run = sqlite3_column_int64(q, 0);
  v->number = NAN;
  char buf[64];
  switch (sqlite3_column_type(q, 1)) {
  case SQLITE_INTEGER:
    v->number = (double)sqlite3_column_int64(q, 1);
    g_snprintf(buf, sizeof buf, "%lld", (long long)sqlite3_column_int64(q, 1));
    v->text = g_strdup(buf);
    break;
  case SQLITE_FLOAT:
    v->number = sqlite3_column_double(q, 1);
    g_snprintf(buf, sizeof buf, "%.6g", v->number);
    v->text = g_strdup(buf);
    break;
  case SQLITE_NULL: v->text = g_strdup(""); break;
  default: v->text = em_col_text(q, 1); break; /* a string, or an object/array as JSON */
  }
}

em_status em_store_run_values(em_store *s, const char *column, em_run_value **out, int *n,
                              em_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *q = NULL;
  em_status st;
  if (column && g_str_has_prefix(column, "config.") && column[7]) {
    char *path = g_strconcat("$.", column + 7, NULL);
    st = EM_SQL_PREPARE(s, "SELECT id, json_extract(config_json, ?1) FROM runs "
                           "WHERE json_valid(config_json) ORDER BY id DESC", &q, err);
    if (!st) st = EM_SQL_BIND(s, q, err, "t", path);
    g_free(path);
  } else if (column && g_str_has_prefix(column, "metrics.") && column[8]) {
    int64_t key = 0;
    st = em_store_metric_key_id(s, column + 8, false, &key, err);
    if (!st)
      st = EM_SQL_PREPARE(s, "SELECT r.id, (SELECT last_value FROM metric_chunks WHERE run = r.id "
                             "AND key_id = ?1 ORDER BY first_step DESC LIMIT 1) FROM runs r "
                             "ORDER BY r.id DESC", &q, err);
    if (!st) st = EM_SQL_BIND(s, q, err, "i", key);
  } else {
    return em_error_set(err, EM_ERR_INVALID,
                        "no such column '%s': a column is config.<setting> or metrics.<key>",
                        column ? column : "");
  }
  if (st) return st;
  em_run_value *res = NULL;
  int count = 0;
  st = EM_SQL_COLLECT(s, q, sizeof *res, read_value, &res, &count, err);
  if (st) {
    em_run_values_free(res, count);
    return st;
  }
  *out = res;
  *n = count;
  return EM_OK;
}

void em_run_values_free(em_run_value *v, int n) {
  for (int i = 0; v && i < n; i++) g_free(v[i].text);
  g_free(v);
}

static int cmp_str(gconstpointer a, gconstpointer b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

em_status em_store_run_columns(em_store *s, char ***keys, int *n, em_error *err) {
  *keys = NULL;
  *n = 0;
  GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  sqlite3_stmt *q = NULL;
  /* the settings of the newest runs (a sweep's runs share their keys) */
  em_status st = EM_SQL_PREPARE(s, "SELECT config_json FROM runs ORDER BY id DESC LIMIT 50", &q, err);
  bool row = false;
  while (!st && !(st = EM_SQL_STEP(s, q, &row, err)) && row) {
    json_t *cfg = json_loads((const char *)sqlite3_column_text(q, 0), 0, NULL);
    json_t *flat = json_object();
    if (cfg) em_json_flatten(cfg, "config", flat);
    const char *k;
    json_t *v;
    json_object_foreach(flat, k, v) if (!g_hash_table_contains(seen, k)) g_hash_table_add(seen, g_strdup(k));
    json_decref(flat);
    json_decref(cfg);
  }
  if (q) sqlite3_reset(q); /* the store's cached statement: reset, never finalised */
  q = NULL;
  if (!st) st = EM_SQL_PREPARE(s, "SELECT key FROM metric_keys", &q, err);
  while (!st && !(st = EM_SQL_STEP(s, q, &row, err)) && row) {
    char *k = g_strconcat("metrics.", (const char *)sqlite3_column_text(q, 0), NULL);
    if (!g_hash_table_contains(seen, k)) g_hash_table_add(seen, k);
    else g_free(k);
  }
  if (q) sqlite3_reset(q);
  if (st) {
    g_hash_table_unref(seen);
    return st;
  }
  GPtrArray *out = g_ptr_array_new();
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init(&it, seen);
  while (g_hash_table_iter_next(&it, &key, NULL)) g_ptr_array_add(out, g_strdup(key));
  g_ptr_array_sort(out, cmp_str);
  *n = (int)out->len;
  g_ptr_array_add(out, NULL);
  *keys = (char **)g_ptr_array_free(out, FALSE);
  g_hash_table_unref(seen);
  return EM_OK;
}
