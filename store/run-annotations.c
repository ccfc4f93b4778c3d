/* run-annotations.c: what people and the trainer add to a run besides its
 * metrics: tags (key -> value), free-text notes, and events (divergence
 * rollbacks, resumes, ...); every run's tags in one query for a table. */
#include "store-private.h"

em_status em_store_run_tag(em_store *s, int64_t run, const char *key, const char *value,
                           em_error *err) {
  /* "plugin.<name>" tags say which plugin file (and bytes: its SHA-256) a
   * run was trained with, and `ember train --resume` loads that file
   * again: only the trainer writes them (em_store_run_tag_plugins). */
  if (key && !strncmp(key, EM_RUN_PLUGIN_TAG, strlen(EM_RUN_PLUGIN_TAG)))
    return em_error_set(err, EM_ERR_INVALID,
                        "tags named " EM_RUN_PLUGIN_TAG "* are the trainer's record of the "
                        "plugins a run was trained with (what a resume loads again): they are "
                        "not set by hand; choose another key");
  return em_store_run_tag_any(s, run, key, value, err);
}

em_status em_store_run_tag_any(em_store *s, int64_t run, const char *key, const char *value,
                               em_error *err) {
  em_status st = em_store_require_writable(s, "tagging a run", err);
  if (st) return st;
  if (!key || !key[0] || !value)
    return em_error_set(err, EM_ERR_INVALID, "a tag needs a non-empty key and a value");
  st = em_store_run_require(s, run, err);
  if (!st)
    st = EM_SQL_RUN(s, err,
                    "INSERT INTO run_tags (run, key, value) VALUES (?, ?, ?) "
                    "ON CONFLICT (run, key) DO UPDATE SET value = excluded.value",
                    "itt", run, key, value);
  return st;
}

em_status em_store_run_note(em_store *s, int64_t run, const char *text, em_error *err) {
  em_status st = em_store_require_writable(s, "adding a note", err);
  if (st) return st;
  if (!text || !text[0]) return em_error_set(err, EM_ERR_INVALID, "a note needs some text");
  st = em_store_run_require(s, run, err);
  if (!st)
    st = EM_SQL_RUN(s, err, "INSERT INTO run_notes (run, text, created) VALUES (?, ?, ?)", "itd",
                    run, text, em_store_now());
  return st;
}

em_status em_store_run_event(em_store *s, int64_t run, int64_t step, const char *kind,
                             const char *detail, em_error *err) {
  em_status st = em_store_require_writable(s, "recording a run event", err);
  if (st) return st;
  if (!kind || !kind[0]) return em_error_set(err, EM_ERR_INVALID, "a run event needs a kind");
  st = em_store_run_require(s, run, err);
  if (!st)
    st = EM_SQL_RUN(s, err,
                    "INSERT INTO run_events (run, step, kind, detail, time) VALUES (?, ?, ?, ?, ?)",
                    "iittd", run, step, kind, detail, em_store_now());
  return st;
}

static void read_run_annotation(em_store *s, sqlite3_stmt *q, void *elem) {
  (void)s;
  em_run_annotation *a = elem;
  *a = (em_run_annotation){
      .kind = em_col_text(q, 1),
      .key = em_col_text(q, 2),
      .text = em_col_text(q, 3),
      .step = sqlite3_column_int64(q, 4),
      .time = sqlite3_column_double(q, 5),
  };
  if (!a->text) a->text = g_strdup("");
}

em_status em_store_run_annotations(em_store *s, int64_t run, em_run_annotation **out, int *n,
                                   em_error *err) {
  *out = NULL;
  *n = 0;
  em_status st = em_store_run_require(s, run, err);
  sqlite3_stmt *q = NULL;
  if (!st)
    st = EM_SQL_PREPARE(s,
                        "SELECT 0, 'tag', key, value, 0, 0.0, 0 FROM run_tags WHERE run = ?1 "
                        "UNION ALL SELECT 1, 'note', NULL, text, 0, created, id "
                        "FROM run_notes WHERE run = ?1 "
                        "UNION ALL SELECT 1, kind, NULL, COALESCE(detail, ''), step, time, id "
                        "FROM run_events WHERE run = ?1 "
                        "ORDER BY 1, 3, 6, 7",
                        &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", run);
  if (st) return st;
  em_run_annotation *res = NULL;
  int count = 0;
  st = EM_SQL_COLLECT(s, q, sizeof *res, read_run_annotation, &res, &count, err);
  if (st) {
    em_run_annotations_free(res, count);
    return st;
  }
  *out = res;
  *n = count;
  return EM_OK;
}

void em_run_annotations_free(em_run_annotation *a, int n) {
  for (int i = 0; a && i < n; i++) {
    g_free(a[i].kind);
    g_free(a[i].key);
    g_free(a[i].text);
  }
  g_free(a);
}

static void read_run_tag(em_store *s, sqlite3_stmt *q, void *elem) {
  (void)s;
  em_run_tag *t = elem;
  *t = (em_run_tag){
      .run = sqlite3_column_int64(q, 0),
      .key = em_col_text(q, 1),
      .value = em_col_text(q, 2),
  };
  if (!t->key) t->key = g_strdup("");
  if (!t->value) t->value = g_strdup("");
}

em_status em_store_run_tags_all(em_store *s, em_run_tag **out, int *n, em_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *q = NULL;
  em_status st =
      EM_SQL_PREPARE(s, "SELECT run, key, value FROM run_tags ORDER BY run, key", &q, err);
  if (st) return st;
  em_run_tag *res = NULL;
  int count = 0;
  st = EM_SQL_COLLECT(s, q, sizeof *res, read_run_tag, &res, &count, err);
  if (st) {
    em_run_tags_free(res, count);
    return st;
  }
  *out = res;
  *n = count;
  return EM_OK;
}

void em_run_tags_free(em_run_tag *t, int n) {
  for (int i = 0; t && i < n; i++) {
    g_free(t[i].key);
    g_free(t[i].value);
  }
  g_free(t);
}
