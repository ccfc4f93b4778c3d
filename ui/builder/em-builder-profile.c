/* em-builder-profile.c: the selected layer's time and memory from the latest
 * profile, gathered in a worker. */
#include "em-builder-page-private.h"

#include <string.h>

#include "em-profile.h"
#include "em-spec-costs.h"

/* ---- profile of the selected layer ---------------------------------------- */

/* The layer's figures from the latest profile, found in a worker (the
 * records can be many): forward and backward time, allocations. */
typedef struct {
  char *layer, *text;
} profile_job;

static void profile_job_free(profile_job *j) {
  g_free(j->layer);
  g_free(j->text);
  g_free(j);
}

static void profile_thread(GTask *task, gpointer src, gpointer data, GCancellable *c) {
  (void)src;
  (void)c;
  profile_job *j = data;
  em_op_table t;
  em_error err = {0};
  if (em_profile_record_count() == 0 || em_op_table_build(&t, EM_OP_TABLE_BY_LAYER, &err) != EM_OK) {
    j->text = g_strdup("No profile yet: run \"Profile now\" on the Profiler page or train.");
    g_task_return_boolean(task, TRUE);
    return;
  }
  char *bwd = g_strdup_printf("%s (backward)", j->layer);
  double fwd_ms = 0, bwd_ms = 0, pct = 0;
  int64_t bytes = 0, count = 0;
  gboolean found = FALSE;
  for (int r = 0; r < t.n_rows; r++) {
    const em_op_row *row = &t.rows[r];
    if (!strcmp(row->name, j->layer)) {
      fwd_ms = row->total_ms;
      count = row->count;
    } else if (!strcmp(row->name, bwd)) {
      bwd_ms = row->total_ms;
    } else {
      continue;
    }
    found = TRUE;
    bytes += row->bytes;
    pct += row->percent;
  }
  int64_t steps = t.steps > 0 ? t.steps : 1;
  char b[32];
  j->text = found ? g_strdup_printf("'%s' over %lld profiled steps: forward %.3f ms, backward "
                                    "%.3f ms per step (%.1f%% of step time); %s allocated per "
                                    "step; %lld ops",
                                    j->layer, (long long)t.steps, fwd_ms / steps, bwd_ms / steps,
                                    pct, em_format_bytes(bytes / steps, b, sizeof b),
                                    (long long)count)
                  : g_strdup_printf("'%s' does not appear in the latest profile.", j->layer);
  g_free(bwd);
  em_op_table_free(&t);
  g_task_return_boolean(task, TRUE);
}

static void on_profile_text(GObject *src, GAsyncResult *res, gpointer data) {
  (void)data;
  EmBuilderPage *self = EM_BUILDER_PAGE(src);
  profile_job *j = g_task_get_task_data(G_TASK(res));
  g_task_propagate_boolean(G_TASK(res), NULL);
  if (g_cancellable_is_cancelled(g_task_get_cancellable(G_TASK(res)))) return;
  self->profile_pending = FALSE;
  if (!g_strcmp0(j->layer, em_builder_page_get_selected(self)))
    gtk_label_set_text(self->profile_label, j->text);
}

void em_builder_fill_profile(EmBuilderPage *self) {
  const char *layer = em_builder_page_get_selected(self);
  if (!layer) return;
  if (self->profile_cancel) g_cancellable_cancel(self->profile_cancel);
  g_clear_object(&self->profile_cancel);
  self->profile_cancel = g_cancellable_new();
  profile_job *j = g_new0(profile_job, 1);
  j->layer = g_strdup(layer);
  self->profile_pending = TRUE;
  GTask *task = g_task_new(self, self->profile_cancel, on_profile_text, NULL);
  g_task_set_task_data(task, j, (GDestroyNotify)profile_job_free);
  g_task_run_in_thread(task, profile_thread);
  g_object_unref(task);
}

gboolean em_builder_page_is_busy(EmBuilderPage *self) { return self->profile_pending; }
