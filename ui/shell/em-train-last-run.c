/* em-train-last-run.c: after a restart, the Train page shows the newest
 * run of the registry (its loss, test loss and test accuracy curves, and
 * a line saying which run, how it ended and how to go on) until a run is
 * started; before, it was empty. The registry is read on a worker thread
 * (a connection of its own); the charts are filled on the main thread,
 * unless a run started meanwhile. */
#include "em-train-page.h"

#include <math.h>

#include "em-line-chart.h"
#include "em-store.h"

typedef struct {
  em_run run;
  gboolean found;
  em_metric_point *pts[3]; /* loss, test_loss, test_accuracy */
  int64_t n[3];
} last_run;

static const char *const keys[3] = {"loss", EM_METRIC_TEST_LOSS, EM_METRIC_TEST_ACCURACY};

static void last_run_free(gpointer p) {
  last_run *l = p;
  if (l->found) em_run_clear(&l->run);
  for (int k = 0; k < 3; k++) free(l->pts[k]);
  g_free(l);
}

static void read_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel) {
  (void)source;
  (void)cancel;
  last_run *l = g_new0(last_run, 1);
  em_error err = {0};
  em_store *s = em_store_open(data, true, &err);
  em_run_filter f = {.any_status = true, .limit = 1};
  em_run *runs = NULL;
  int n = 0;
  if (s && em_store_runs_list(s, &f, &runs, &n, &err) == EM_OK && n > 0 &&
      em_store_run_get(s, runs[0].id, &l->run, &err) == EM_OK) {
    l->found = TRUE;
    for (int k = 0; k < 3; k++)
      if (em_store_metrics_get(s, l->run.id, keys[k], &l->pts[k], &l->n[k], &err) != EM_OK)
        l->n[k] = 0;
  }
  em_runs_free(runs, n);
  em_store_close(s);
  g_task_return_pointer(task, l, last_run_free);
}

static void append(EmLineChart *c, const char *name, const em_metric_point *p, int64_t n) {
  int s = em_line_chart_add_series(c, name, NULL);
  double *x = g_new(double, n ? n : 1), *y = g_new(double, n ? n : 1);
  for (int64_t i = 0; i < n; i++) x[i] = (double)p[i].step, y[i] = p[i].value;
  em_line_chart_append(c, s, x, y, (int)n);
  g_free(x);
  g_free(y);
}

static void on_read(GObject *source, GAsyncResult *res, gpointer data) {
  (void)data;
  EmTrainPage *self = EM_TRAIN_PAGE(source);
  last_run *l = g_task_propagate_pointer(G_TASK(res), NULL);
  if (l && l->found && !em_train_page_is_running(self)) {
    EmLineChart *lc = EM_LINE_CHART(em_train_page_get_loss_chart(self));
    EmLineChart *ac = EM_LINE_CHART(em_train_page_get_accuracy_chart(self));
    em_line_chart_clear(lc);
    em_line_chart_clear(ac);
    char name[64];
    g_snprintf(name, sizeof name, "train loss (run %lld)", (long long)l->run.id);
    append(lc, name, l->pts[0], l->n[0]);
    g_snprintf(name, sizeof name, "test loss (run %lld)", (long long)l->run.id);
    append(lc, name, l->pts[1], l->n[1]);
    g_snprintf(name, sizeof name, "test accuracy (run %lld)", (long long)l->run.id);
    append(ac, name, l->pts[2], l->n[2]);
    em_line_chart_reset_view(lc);
    em_line_chart_reset_view(ac);
    GDateTime *dt = g_date_time_new_from_unix_local(
        (gint64)(l->run.ended > 0 ? l->run.ended : l->run.started));
    char *when = dt ? g_date_time_format(dt, "%Y-%m-%d %H:%M") : g_strdup("?");
    if (dt) g_date_time_unref(dt);
    char *acc = isnan(l->run.final_test_accuracy)
                    ? g_strdup("")
                    : g_strdup_printf(", test accuracy %.2f%%", 100 * l->run.final_test_accuracy);
    char *line = g_strdup_printf(
        "The last run: run %lld (%s), %s %s after %lld steps%s. Start trains a new one; "
        "the Runs page opens this one (double-click) to resume, register or export it.",
        (long long)l->run.id, l->run.model ? l->run.model : "?", em_run_status_name(l->run.status),
        l->run.ended > 0 ? when : "since", (long long)l->run.steps, acc);
    em_train_page_set_idle_status(self, line);
    g_free(line);
    g_free(acc);
    g_free(when);
  }
  last_run_free(l);
}

void em_train_page_show_last_run(EmTrainPage *self, const char *registry_dir) {
  g_return_if_fail(EM_IS_TRAIN_PAGE(self));
  GTask *t = g_task_new(self, NULL, on_read, NULL);
  g_task_set_task_data(t, g_strdup(registry_dir), g_free);
  g_task_run_in_thread(t, read_thread);
  g_object_unref(t);
}
