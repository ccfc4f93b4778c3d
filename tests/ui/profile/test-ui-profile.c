/* test-ui-profile.c: the Memory page plots a sequence of progress updates;
 * the Profiler page profiles real training steps through "Profile now",
 * fills its table and timeline, and selecting a row selects its layer. */
#include <glib/gstdio.h>
#include <string.h>

#include "em-builder-page.h"
#include "em-memory-page.h"
#include "em-profile.h"
#include "em-profiler-page.h"
#include "em-tensor.h"
#include "em-timeline.h"
#include "ui-test-util.h"

GResource *em_ui_profile_get_resource(void);

static char *tmp_dir;

static const char *mlp_spec =
    "{\"name\": \"tiny-mlp\", \"input\": {\"shape\": [1, 28, 28]},"
    " \"nodes\": [{\"name\": \"flatten\", \"type\": \"Flatten\"},"
    "  {\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 64},"
    "  {\"name\": \"relu1\", \"type\": \"ReLU\"},"
    "  {\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 10}],"
    " \"loss\": {\"type\": \"cross_entropy\"},"
    " \"training\": {\"dataset\": \"synthetic\", \"optimizer\": \"adam\", \"lr\": 0.001,"
    "  \"batch_size\": 32, \"epochs\": 1}}";

static void test_memory(void) {
  EmAppState *state = em_app_state_new(tmp_dir);
  GtkWidget *page = em_memory_page_new(state);
  GtkWindow *win = ui_test_show(page, 1100, 600);
  EmMemoryPage *mp = EM_MEMORY_PAGE(page);
  em_app_state_run_started(state, 0);
  /* three coalesced updates of 100 steps: a sawtooth over a slow climb */
  int64_t step[100], alloc[100], reserved[100], peak[100];
  double loss[100];
  int64_t pk = 0;
  for (int u = 0; u < 3; u++) {
    for (int i = 0; i < 100; i++) {
      int s = u * 100 + i;
      step[i] = s;
      alloc[i] = (int64_t)(20 << 20) + (int64_t)(s % 10) * (1 << 20) + (int64_t)s * 4096;
      reserved[i] = (int64_t)(40 << 20);
      pk = alloc[i] > pk ? alloc[i] : pk;
      peak[i] = pk;
      loss[i] = 1.0 / (1 + s);
    }
    EmTrainUpdate up = {.n = 100, .step = step, .loss = loss, .mem_allocated = alloc,
                        .mem_reserved = reserved, .mem_peak = peak, .total_steps = 300};
    em_app_state_run_progress(state, &up);
  }
  g_assert_cmpint(em_memory_page_get_n_points(mp), ==, 300);
  g_assert_cmpint(em_memory_page_get_last_allocated(mp), ==, alloc[99]);
  g_assert_cmpint(em_memory_page_get_last_peak(mp), ==, pk);
  em_app_state_run_finished(state, 0, 0, "done");
  ui_test_spin(300);
  g_free(ui_test_screenshot(page, "memory"));
  /* a steady climb (1 MiB kept per step) is reported as a probable leak */
  g_assert_null(em_memory_page_get_warning(mp));
  em_leak_reset();
  void *kept[12];
  for (int i = 0; i < 12; i++) {
    em_profile_step_begin();
    kept[i] = em_alloc(1 << 20);
    em_profile_step_end();
  }
  em_memory_page_refresh(mp);
  g_assert_nonnull(em_memory_page_get_warning(mp));
  for (int i = 0; i < 12; i++) em_free(kept[i], 1 << 20);
  em_leak_reset();
  /* a new run starts a new plot and clears the warning */
  em_app_state_run_started(state, 0);
  g_assert_cmpint(em_memory_page_get_n_points(mp), ==, 0);
  g_assert_null(em_memory_page_get_warning(mp));
  em_app_state_run_finished(state, 0, 0, "done");
  gtk_window_destroy(win);
  g_object_unref(state);
}

static gboolean has_label_prefix(GtkWidget *w, const char *prefix) {
  if (GTK_IS_LABEL(w) && g_str_has_prefix(gtk_label_get_text(GTK_LABEL(w)), prefix)) return TRUE;
  for (GtkWidget *c = gtk_widget_get_first_child(w); c; c = gtk_widget_get_next_sibling(c))
    if (has_label_prefix(c, prefix)) return TRUE;
  return FALSE;
}

static gboolean builder_idle(gpointer p) { return !em_builder_page_is_busy(p); }

static gboolean not_busy(gpointer p) { return !em_profiler_page_is_busy(p); }

static char *selected;
static void on_layer(EmAppState *s, const char *layer, gpointer d) {
  (void)s;
  (void)d;
  g_free(selected);
  selected = g_strdup(layer);
}

static int ready_count;
static void on_ready(EmAppState *s, const char *trace, gpointer d) {
  (void)s;
  (void)d;
  g_assert_true(g_file_test(trace, G_FILE_TEST_EXISTS));
  ready_count++;
}

static void test_profiler(void) {
  EmAppState *state = em_app_state_new(tmp_dir);
  g_signal_connect(state, "layer-selected", G_CALLBACK(on_layer), NULL);
  g_signal_connect(state, "profile-ready", G_CALLBACK(on_ready), NULL);
  GtkWidget *page = em_profiler_page_new(state);
  GtkWindow *win = ui_test_show(page, 1100, 640);
  GtkWidget *builder = NULL; /* made once there is a spec */
  EmProfilerPage *pp = EM_PROFILER_PAGE(page);
  g_assert_cmpuint(em_profiler_page_get_n_rows(pp), ==, 0);
  g_assert_false(em_profiler_page_profile_now(pp, 5)); /* no spec yet */

  em_app_state_set_spec(state, mlp_spec, NULL);
  em_app_state_set_dataset(state, "synthetic", NULL);
  builder = em_builder_page_new(state);
  GtkWindow *bwin = ui_test_show(builder, 1100, 640);
  GtkSpinButton *steps = NULL; /* "Profile now" with 5 steps, as a person would */
  for (GtkWidget *c = gtk_widget_get_first_child(gtk_widget_get_first_child(page)); c;
       c = gtk_widget_get_next_sibling(c))
    if (GTK_IS_SPIN_BUTTON(c)) steps = GTK_SPIN_BUTTON(c);
  g_assert_nonnull(steps);
  gtk_spin_button_set_value(steps, 5);
  g_assert_true(gtk_widget_activate_action(page, "profiler.run", NULL));
  g_assert_true(em_profiler_page_is_busy(pp));
  g_assert_false(em_profiler_page_profile_now(pp, 5)); /* one at a time */
  g_assert_true(ui_test_wait(not_busy, pp, 60000));
  g_assert_cmpint(ready_count, ==, 1);
  guint n = em_profiler_page_get_n_rows(pp);
  g_assert_cmpuint(n, >, 3);
  g_assert_cmpint(em_profiler_page_get_n_spans(pp), >, 10);
  /* by op: the linear op's row selects the layer it ran in */
  gboolean found = FALSE;
  for (guint i = 0; i < n && !found; i++)
    if (!g_strcmp0(em_profiler_page_get_row_name(pp, i), "linear")) {
      g_clear_pointer(&selected, g_free);
      em_profiler_page_select_row(pp, i);
      g_assert_nonnull(selected);
      g_assert_true(!strcmp(selected, "fc1") || !strcmp(selected, "fc2"));
      found = TRUE;
    }
  g_assert_true(found);
  ui_test_spin(300);
  /* the status names the trace's file, and bytes read as bytes (issue 32:
   * "trace written" said where, and the bytes column showed 1572864) */
  GPtrArray *labels = g_ptr_array_new();
  ui_test_collect(page, GTK_TYPE_LABEL, labels);
  gboolean trace_named = FALSE, bytes_unit = FALSE;
  for (guint i = 0; i < labels->len; i++) {
    const char *t = gtk_label_get_text(labels->pdata[i]);
    const char *w = strstr(t, "trace written to /");
    if (w) trace_named = g_file_test(w + strlen("trace written to "), G_FILE_TEST_IS_REGULAR);
    bytes_unit |= g_str_has_suffix(t, " KiB") || g_str_has_suffix(t, " MiB");
    g_assert_false(strlen(t) >= 5 && strspn(t, "0123456789") == strlen(t)); /* 12345: unformatted */
  }
  g_ptr_array_unref(labels);
  g_assert_true(trace_named);
  g_assert_true(bytes_unit);
  g_free(ui_test_screenshot(page, "profiler"));
  /* the timeline zooms and keeps its view */
  EmTimeline *tl = NULL;
  GPtrArray *stack = g_ptr_array_new();
  g_ptr_array_add(stack, page);
  while (stack->len && !tl) {
    GtkWidget *x = g_ptr_array_steal_index(stack, stack->len - 1);
    if (EM_IS_TIMELINE(x)) tl = EM_TIMELINE(x);
    for (GtkWidget *c = gtk_widget_get_first_child(x); c; c = gtk_widget_get_next_sibling(c))
      g_ptr_array_add(stack, c);
  }
  g_ptr_array_free(stack, TRUE);
  g_assert_nonnull(tl);
  double t0, t1;
  em_timeline_get_view(tl, &t0, &t1);
  g_assert_cmpfloat(t1, >, t0);
  em_timeline_set_view(tl, t0, t0 + (t1 - t0) / 8);
  ui_test_spin(100);
  double z0, z1;
  em_timeline_get_view(tl, &z0, &z1);
  g_assert_cmpfloat_with_epsilon(z1 - z0, (t1 - t0) / 8, 1e-6);

  /* by layer: fc2's backward row selects fc2 */
  em_profiler_page_set_by_layer(pp, TRUE);
  n = em_profiler_page_get_n_rows(pp);
  found = FALSE;
  for (guint i = 0; i < n && !found; i++)
    if (!g_strcmp0(em_profiler_page_get_row_name(pp, i), "fc2 (backward)")) {
      em_profiler_page_select_row(pp, i);
      g_assert_cmpstr(selected, ==, "fc2");
      /* the builder follows, and shows fc2's time from the profile */
      g_assert_cmpstr(em_builder_page_get_selected(EM_BUILDER_PAGE(builder)), ==, "fc2");
      g_assert_true(ui_test_wait(builder_idle, builder, 10000));
      g_assert_true(has_label_prefix(builder, "'fc2' over 5 profiled steps"));
      found = TRUE;
    }
  g_assert_true(found);
  /* and back: selecting fc1 in the builder selects fc1's row here */
  g_assert_true(em_builder_page_select(EM_BUILDER_PAGE(builder), "fc1"));
  guint sel = em_profiler_page_get_selected_row(pp);
  g_assert_cmpuint(sel, !=, GTK_INVALID_LIST_POSITION);
  g_assert_true(g_str_has_prefix(em_profiler_page_get_row_name(pp, sel), "fc1"));
  gtk_window_destroy(bwin);
  gtk_window_destroy(win);
  g_object_unref(state);
}

int main(int argc, char **argv) {
  ui_test_init(&argc, &argv);
  g_resources_register(em_ui_profile_get_resource());
  tmp_dir = g_dir_make_tmp("ember-ui-profile-XXXXXX", NULL);
  g_test_add_func("/ui/profile/memory", test_memory);
  g_test_add_func("/ui/profile/profiler", test_profiler);
  int rc = g_test_run();
  g_rmdir(tmp_dir);
  g_free(tmp_dir);
  return rc;
}
