/* em-sweeps-read.c: the Sweeps page's read of the registry, on a worker
 * thread (GTask), with a connection of its own opened read-only for each
 * read (house style 14: one owner thread per connection): the sweeps,
 * the shown sweep's trials, and what the charts need worked out there
 * (the table of the parallel coordinates, the best so far, the
 * importances), so that the main thread only fills widgets. */
#include "em-sweeps-page-private.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

void em_sweep_snapshot_free(EmSweepSnapshot *s) {
  if (!s) return;
  g_free(s->error);
  em_sweep_rows_free(s->sweeps, s->n_sweeps);
  em_trial_rows_free(s->trials, s->n_trials);
  if (s->have_desc) {
    em_tune_desc_clear(&s->d);
    em_sweep_table_clear(&s->table);
  }
  g_free(s->done_y);
  g_free(s->best_y);
  g_free(s->digest);
  g_free(s->sweeps_digest);
  g_free(s);
}

/* A runner on this host whose process is gone: Resume goes on. One on
 * another host cannot be looked at from here: it counts as there. */
static gboolean runner_alive(const em_sweep_row *sw) {
  if (sw->runner_pid <= 0) return FALSE;
  if (sw->runner_host && strcmp(sw->runner_host, em_store_this_host())) return TRUE;
  return kill((pid_t)sw->runner_pid, 0) == 0 || errno == EPERM;
}

static int by_end(const void *a, const void *b, void *data) {
  const em_trial_row *t = data;
  double x = t[*(const int *)a].ended, y = t[*(const int *)b].ended;
  return (x > y) - (x < y);
}

static void work_out(EmSweepSnapshot *s) {
  const char **params = g_new0(const char *, MAX(s->n_trials, 1));
  double *metric = g_new0(double, MAX(s->n_trials, 1));
  for (int i = 0; i < s->n_trials; i++) {
    params[i] = s->trials[i].params_json;
    metric[i] = s->trials[i].metric;
  }
  em_sweep_table_build(&s->table, &s->d, params, metric, s->n_trials);
  /* the completed trials, in the order they ended: the best so far, and
   * the importances (a pruned trial's metric is from an earlier epoch) */
  int *order = g_new0(int, MAX(s->n_trials, 1));
  bool *use = g_new0(bool, MAX(s->n_trials, 1));
  int k = 0;
  for (int i = 0; i < s->n_trials; i++)
    if (s->trials[i].status == EM_TRIAL_COMPLETED && isfinite(s->trials[i].metric)) {
      order[k++] = i;
      use[i] = true;
    }
  g_qsort_with_data(order, k, sizeof(int), by_end, s->trials);
  s->n_done = k;
  s->done_y = g_new0(double, MAX(k, 1));
  s->best_y = g_new0(double, MAX(k, 1));
  for (int j = 0; j < k; j++) s->done_y[j] = s->trials[order[j]].metric;
  em_sweep_best_so_far(s->done_y, k, s->d.maximize, s->best_y);
  s->best = -1;
  for (int j = 0; j < k; j++) {
    double v = s->trials[order[j]].metric;
    if (s->best < 0 || (s->d.maximize ? v > s->trials[s->best].metric
                                      : v < s->trials[s->best].metric))
      s->best = order[j];
  }
  s->n_eta = em_sweep_importance(&s->table, use, s->eta2);
  g_free(use);
  g_free(order);
  g_free(params);
  g_free(metric);
}

EmSweepSnapshot *em_sweep_snapshot_read(const char *dir, gint64 want, const char *want_name) {
  EmSweepSnapshot *s = g_new0(EmSweepSnapshot, 1);
  s->best = -1;
  s->sweep_index = -1;
  em_error err = {0};
  em_store *st = em_store_open(dir, true, &err);
  if (!st || em_store_sweeps_list(st, &s->sweeps, &s->n_sweeps, &err) != EM_OK) {
    s->error = g_strdup(err.msg);
    em_store_close(st);
    return s;
  }
  GString *list = g_string_new(NULL);
  for (int i = 0; i < s->n_sweeps; i++) {
    const em_sweep_row *sw = &s->sweeps[i];
    g_string_append_printf(list, "%lld:%s:%d;", (long long)sw->id, sw->name ? sw->name : "",
                           (int)sw->status);
    if (want_name && sw->name && !strcmp(sw->name, want_name)) s->sweep_index = i; /* the newest */
  }
  s->sweeps_digest = g_string_free(list, FALSE);
  for (int i = 0; i < s->n_sweeps && s->sweep_index < 0 && !want_name && want > 0; i++)
    if (s->sweeps[i].id == want) s->sweep_index = i;
  if (s->sweep_index < 0 && !want_name && s->n_sweeps) s->sweep_index = s->n_sweeps - 1;
  if (s->sweep_index >= 0) {
    const em_sweep_row *sw = &s->sweeps[s->sweep_index];
    s->sweep = sw->id;
    s->runner_alive = runner_alive(sw);
    if (em_store_trials_list(st, sw->id, &s->trials, &s->n_trials, &err) != EM_OK) {
      s->error = g_strdup(err.msg);
      s->n_trials = 0;
    }
    s->have_desc = em_tune_desc_parse(&s->d, sw->description_json, NULL, NULL) == EM_OK;
    if (s->have_desc) work_out(s);
    GString *d = g_string_new(NULL);
    g_string_append_printf(d, "%lld:%d:%d:%lld;", (long long)sw->id, (int)sw->status,
                           s->runner_alive, (long long)sw->runner_pid);
    for (int i = 0; i < s->n_trials; i++) {
      const em_trial_row *t = &s->trials[i];
      g_string_append_printf(d, "%d:%d:%.9g:%d:%lld:%lld:%s;", t->number, (int)t->status,
                             t->metric, t->epochs, (long long)t->steps, (long long)t->run,
                             t->decision ? t->decision : "");
    }
    s->digest = g_string_free(d, FALSE);
  }
  em_store_close(st);
  return s;
}

/* ---- the read, every second while the page is shown -------------------------------- */

typedef struct {
  char *dir, *want_name;
  gint64 want;
} ReadArgs;

static void read_args_free(gpointer p) {
  ReadArgs *a = p;
  g_free(a->dir);
  g_free(a->want_name);
  g_free(a);
}

static void read_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel) {
  (void)source;
  (void)cancel;
  ReadArgs *a = data;
  g_task_return_pointer(task, em_sweep_snapshot_read(a->dir, a->want, a->want_name),
                        (GDestroyNotify)em_sweep_snapshot_free);
}

static void read_done(GObject *source, GAsyncResult *res, gpointer data) {
  (void)data;
  EmSweepSnapshot *s = g_task_propagate_pointer(G_TASK(res), NULL);
  EmSweepsPage *self = EM_SWEEPS_PAGE(source);
  if (!s) return; /* cancelled: the page is going */
  self->reading = FALSE;
  em_sweeps_page_apply_(self, s);
}

void em_sweeps_page_read_now_(EmSweepsPage *self) {
  if (self->reading || !self->state) return;
  self->reading = TRUE;
  ReadArgs *a = g_new0(ReadArgs, 1);
  a->dir = g_strdup(em_app_state_get_registry_dir(self->state));
  a->want = self->sweep;
  a->want_name = g_strdup(self->want_name);
  GTask *t = g_task_new(self, self->cancel, read_done, NULL);
  g_task_set_task_data(t, a, read_args_free);
  g_task_run_in_thread(t, read_thread);
  g_object_unref(t);
}
