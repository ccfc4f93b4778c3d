/* em-runs-read.c: the Runs page's reads of the registry: each on a worker
 * thread with a read-only connection of its own (or, for
 * em_runs_page_reload, on the caller's), merged into the rows on the main
 * thread so that an unchanged run keeps its row. */
#include "em-runs-page-private.h"

#include <math.h>
#include <string.h>

/* run id -> "key=value, ..." for every run with tags, from one query (a
 * query per run took 0.3 s on the main thread with 3000 runs). */
static GHashTable *tags_by_run(em_store *s) {
  GHashTable *by_run = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
  em_run_tag *t = NULL;
  int n = 0;
  em_error err = {0};
  if (em_store_run_tags_all(s, &t, &n, &err) != EM_OK) return by_run; /* tags stay blank */
  for (int i = 0; i < n;) {
    GString *out = g_string_new(NULL);
    int64_t run = t[i].run;
    for (; i < n && t[i].run == run; i++)
      g_string_append_printf(out, "%s%s=%s", out->len ? ", " : "", t[i].key, t[i].value);
    g_hash_table_insert(by_run, g_memdup2(&run, sizeof run), g_string_free(out, FALSE));
  }
  em_run_tags_free(t, n);
  return by_run;
}

/* What one read of the registry gives: made on a worker thread (its own
 * read-only connection), applied on the main thread. */
typedef struct {
  em_run *runs;       /* newest first */
  int n;
  GHashTable *tags;   /* run id -> "k=v, ..." */
  char **extra_keys;  /* the added columns asked for (NULL-terminated) */
  GPtrArray *extra;   /* per extra key: em_run_value *, n_extra[k] of them, newest first */
  int *n_extra;
  char **columns;     /* what there is to add */
  char *error;        /* NULL, or why there is nothing to show */
} runs_read;

static void runs_read_free(gpointer data) {
  runs_read *r = data;
  if (!r) return;
  em_runs_free(r->runs, r->n);
  if (r->tags) g_hash_table_unref(r->tags);
  for (guint k = 0; r->extra && k < r->extra->len; k++)
    em_run_values_free(r->extra->pdata[k], r->n_extra[k]);
  if (r->extra) g_ptr_array_unref(r->extra);
  g_free(r->n_extra);
  g_strfreev(r->extra_keys);
  g_strfreev(r->columns);
  g_free(r->error);
  g_free(r);
}

static runs_read *read_registry(const char *dir, char **extra_keys) {
  runs_read *r = g_new0(runs_read, 1);
  r->extra_keys = extra_keys; /* taken */
  em_error err = {0};
  em_store *s = em_store_open(dir, true, &err);
  em_run_filter f = {.any_status = true};
  if (!s) {
    r->error = g_strdup_printf("No runs to show: %s", err.msg);
  } else if (em_store_runs_list(s, &f, &r->runs, &r->n, &err) != EM_OK) {
    r->error = g_strdup(err.msg);
  } else {
    r->tags = tags_by_run(s);
    guint nk = r->extra_keys ? g_strv_length(r->extra_keys) : 0;
    r->extra = g_ptr_array_new();
    r->n_extra = g_new0(int, nk + 1);
    for (guint k = 0; k < nk; k++) {
      em_run_value *v = NULL;
      if (em_store_run_values(s, r->extra_keys[k], &v, &r->n_extra[k], &err) != EM_OK)
        r->n_extra[k] = 0; /* a column that reads nothing stays blank */
      g_ptr_array_add(r->extra, v);
    }
    int nc = 0;
    if (em_store_run_columns(s, &r->columns, &nc, &err) != EM_OK) r->columns = NULL;
  }
  em_store_close(s);
  return r;
}

static int cmp_strp(gconstpointer a, gconstpointer b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void update_models(EmRunsPage *self, em_run *runs, int n) {
  GPtrArray *names = g_ptr_array_new();
  for (int i = 0; i < n; i++) {
    gboolean seen = FALSE;
    for (guint k = 0; k < names->len && !seen; k++) seen = strcmp(names->pdata[k], runs[i].model) == 0;
    if (!seen && runs[i].model && *runs[i].model) g_ptr_array_add(names, runs[i].model);
  }
  g_ptr_array_sort(names, cmp_strp);
  /* unchanged list: keep the dropdown as it is */
  guint have = g_list_model_get_n_items(G_LIST_MODEL(self->models));
  gboolean same = have == names->len + 1;
  for (guint k = 0; same && k < names->len; k++)
    same = strcmp(gtk_string_list_get_string(self->models, k + 1), names->pdata[k]) == 0;
  if (!same) {
    guint sel = gtk_drop_down_get_selected(self->model_dropdown);
    char *chosen = sel > 0 && sel != GTK_INVALID_LIST_POSITION
                       ? g_strdup(gtk_string_list_get_string(self->models, sel)) : NULL;
    g_ptr_array_add(names, NULL);
    gtk_string_list_splice(self->models, 1, have - 1, (const char *const *)names->pdata);
    guint pick = 0;
    for (guint k = 0; chosen && k + 1 < names->len; k++)
      if (strcmp(names->pdata[k], chosen) == 0) pick = k + 1;
    gtk_drop_down_set_selected(self->model_dropdown, pick);
    g_free(chosen);
  }
  g_ptr_array_free(names, TRUE);
}

/* The rows follow the read: a row whose run did not change is kept (so a
 * reload while one run trains replaces one row, not ten thousand, and
 * the selection, sort and scroll stay), new runs are inserted, gone ones
 * removed. Both lists are newest first. Past a few hundred changes one
 * splice replaces everything. */
/* The row of run i of the read, with its tags and added columns (the
 * extra values are newest first too: a cursor per column walks them). */
static EmRunRow *make_row(runs_read *r, int i, int *cursor) {
  EmRunRow *row = em_run_row_new(&r->runs[i]);
  gint64 id = r->runs[i].id;
  em_run_row_set_tags(row, g_hash_table_lookup(r->tags, &id));
  for (guint k = 0; r->extra && k < r->extra->len; k++) {
    em_run_value *v = r->extra->pdata[k];
    while (cursor[k] < r->n_extra[k] && v[cursor[k]].run > id) cursor[k]++;
    if (cursor[k] < r->n_extra[k] && v[cursor[k]].run == id)
      em_run_row_set_extra(row, r->extra_keys[k], v[cursor[k]].text, v[cursor[k]].number);
    else
      em_run_row_set_extra(row, r->extra_keys[k], "", NAN);
  }
  return row;
}

/* One merge of the rows (newest first) with the read's rows (newest
 * first, made once): with dry, only counts the rows it would insert,
 * replace or remove. */
static int merge_rows(EmRunsPage *self, GPtrArray *fresh, gboolean dry) {
  GListModel *m = G_LIST_MODEL(self->rows);
  guint j = 0, have = g_list_model_get_n_items(m);
  int ops = 0;
  for (guint i = 0; i < fresh->len;) {
    EmRunRow *row = fresh->pdata[i];
    gint64 id = em_run_row_get(row)->id;
    EmRunRow *old = j < have ? g_list_model_get_item(m, j) : NULL;
    gint64 oid = old ? em_run_row_get(old)->id : -1;
    if (old && oid > id) { /* gone from the registry */
      ops++;
      if (dry) j++;
      else g_list_store_remove(self->rows, j), have--;
    } else if (old && oid == id) {
      if (!em_run_row_equal(old, row)) {
        ops++;
        if (!dry) g_list_store_splice(self->rows, j, 1, (gpointer *)&row, 1);
      }
      i++, j++;
    } else { /* new */
      ops++;
      if (!dry) {
        g_list_store_insert(self->rows, j, row);
        have++, j++;
      }
      i++;
    }
    g_clear_object(&old);
  }
  if (have > j) {
    ops += (int)(have - j);
    if (!dry) g_list_store_splice(self->rows, j, have - j, NULL, 0);
  }
  return ops;
}

/* The rows follow the read: a row whose run did not change is kept (so a
 * reload while one run trains replaces one row, not ten thousand, and
 * the selection, sort and scroll stay), new runs are inserted, gone ones
 * removed. Past a few hundred changes one splice replaces everything. */
static void apply_rows(EmRunsPage *self, runs_read *r) {
  GPtrArray *fresh = g_ptr_array_new_with_free_func(g_object_unref);
  int *cursor = g_new0(int, (r->extra ? r->extra->len : 0) + 1);
  for (int i = 0; i < r->n; i++) g_ptr_array_add(fresh, make_row(r, i, cursor));
  g_free(cursor);
  guint have = g_list_model_get_n_items(G_LIST_MODEL(self->rows));
  if (have > 0 && merge_rows(self, fresh, TRUE) <= 256)
    merge_rows(self, fresh, FALSE);
  else
    g_list_store_splice(self->rows, 0, have, fresh->pdata, fresh->len);
  g_ptr_array_unref(fresh);
}

static void apply_read(EmRunsPage *self, runs_read *r) {
  self->stale = FALSE;
  self->reloads++;
  if (r->error) {
    em_runs_page_set_message_(self, r->error);
    if (g_str_has_prefix(r->error, "No runs to show")) g_list_store_remove_all(self->rows);
    em_runs_page_update_counts_(self);
    return;
  }
  int nsel = 0;
  gint64 *sel = em_runs_page_get_selected_ids(self, &nsel);
  update_models(self, r->runs, r->n);
  /* Thousands of rows are filtered and sorted in idle chunks, so that no
   * frame waits for all of them; a few hundred at once, as before (what a
   * filter shows is then there when its control returns). */
  gboolean many = r->n > 1000;
  gtk_sort_list_model_set_incremental(self->sorted, many);
  gtk_filter_list_model_set_incremental(self->filtered, many);
  apply_rows(self, r);
  if (r->columns && (!self->column_keys ||
                     !g_strv_equal((const char *const *)r->columns,
                                   (const char *const *)self->column_keys))) {
    g_strfreev(self->column_keys);
    self->column_keys = r->columns;
    r->columns = NULL;
    em_runs_page_fill_column_menu_(self);
  }
  if (nsel) em_runs_page_select_ids(self, sel, nsel);
  g_free(sel);
  if (*self->message && g_str_has_prefix(self->message, "No runs to show")) em_runs_page_set_message_(self, "");
  em_runs_page_update_counts_(self);
}

/* The added columns, for a read (g_strfreev). */
static char **extra_keys_copy(EmRunsPage *self) {
  char **k = g_new0(char *, self->extra_keys->len + 1);
  for (guint i = 0; i < self->extra_keys->len; i++) k[i] = g_strdup(self->extra_keys->pdata[i]);
  return k;
}

void em_runs_page_reload(EmRunsPage *self) {
  g_return_if_fail(EM_IS_RUNS_PAGE(self));
  runs_read *r = read_registry(em_app_state_get_registry_dir(self->state), extra_keys_copy(self));
  apply_read(self, r);
  runs_read_free(r);
}

typedef struct {
  char *dir;
  char **extra_keys;
} read_request;

static void read_request_free(gpointer p) {
  read_request *q = p;
  g_free(q->dir);
  g_strfreev(q->extra_keys);
  g_free(q);
}

static void read_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel) {
  (void)source;
  (void)cancel;
  read_request *q = data;
  char **keys = q->extra_keys;
  q->extra_keys = NULL; /* the read takes them */
  g_task_return_pointer(task, read_registry(q->dir, keys), runs_read_free);
}


static void on_read_done(GObject *source, GAsyncResult *res, gpointer data) {
  (void)data;
  EmRunsPage *self = EM_RUNS_PAGE(source);
  runs_read *r = g_task_propagate_pointer(G_TASK(res), NULL);
  self->reading = FALSE;
  if (r && !self->disposed) apply_read(self, r);
  runs_read_free(r);
  if (self->read_again && !self->disposed) {
    self->read_again = FALSE;
    em_runs_page_reload_async_(self);
  }
}

/* Reads on a worker thread and applies on the main one: the main loop
 * never waits on SQLite. A request while a read runs is queued (one). */
void em_runs_page_reload_async_(EmRunsPage *self) {
  if (self->reading) {
    self->read_again = TRUE;
    return;
  }
  self->reading = TRUE;
  GTask *t = g_task_new(self, NULL, on_read_done, NULL);
  read_request *q = g_new0(read_request, 1);
  q->dir = g_strdup(em_app_state_get_registry_dir(self->state));
  q->extra_keys = extra_keys_copy(self);
  g_task_set_task_data(t, q, read_request_free);
  g_task_run_in_thread(t, read_thread);
  g_object_unref(t);
}

