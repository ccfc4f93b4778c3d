/* test-ui-devices.c: the workbench's training device (issue 8). The Train
 * page's selector lists what em_device_count reports (the CPU, every CUDA
 * device, the reference device when offered), choosing an entry puts the
 * device into the run's config, a device that is not there is refused
 * with em_device_check's message; the Memory page's devices list renders
 * with the run device's allocator figures, and the page names the run's
 * device; a short run on the reference device trains there, is plotted
 * under its name and recorded with it. On a machine without a GPU this
 * checks the CPU and ref entries and the "No CUDA device found" line;
 * with one, the CUDA entries too. Run twice (meson): without and with
 * EMBER_WORKBENCH_REF_DEVICE. */
#include <stdlib.h>
#include <string.h>

#include "em-device.h"
#include "em-devices-panel.h"
#include "em-devices.h"
#include "em-memory-page.h"
#include "em-store.h"
#include "em-train-page.h"
#include "em-train.h"
#include "ui-test-util.h"

static char *tmp_dir;
/* EMBER_WORKBENCH_REF_DEVICE is set (the ui-devices-ref run): the
 * reference device is offered from the start. Read once, before GTK's
 * threads: the test never changes the environment. */
static gboolean ref_offered;

static char *check_message(em_device d) {
  em_error err = {0};
  if (em_device_check(d, &err) == EM_OK) return NULL;
  return g_strdup(err.msg);
}

static em_device config_device(EmTrainPage *page) {
  em_train_config cfg;
  char *error = NULL;
  gboolean ok = em_train_page_get_config(page, &cfg, &error);
  if (!ok) g_test_message("config: %s", error);
  g_assert_true(ok);
  g_free(error);
  return cfg.device;
}

static void assert_device_eq(em_device a, em_device b) {
  char x[16], y[16];
  g_assert_cmpstr(em_device_str(a, x, sizeof x), ==, em_device_str(b, y, sizeof y));
}

static void test_selector(void) {
  int n_cuda = em_device_count(EM_DEVICE_CUDA), n_ref = em_device_count(EM_DEVICE_REF);
  g_assert_cmpint(n_ref, >=, 1); /* the reference device is always built */
  EmAppState *state = em_app_state_new(tmp_dir);
  GtkWidget *w = em_train_page_new(state);
  EmTrainPage *page = EM_TRAIN_PAGE(w);
  GtkWindow *win = ui_test_show(w, 1200, 800);

  /* the CPU and each CUDA device (and the reference device only when offered) */
  guint n_listed = 1 + (guint)n_cuda + (ref_offered ? (guint)n_ref : 0);
  g_assert_cmpuint(em_train_page_get_n_devices(page), ==, n_listed);
  g_assert_cmpstr(em_train_page_get_device_label(page, 0), ==, "CPU");
  for (int i = 0; i < n_cuda; i++) {
    char id[16];
    g_snprintf(id, sizeof id, "cuda:%d", i);
    g_assert_true(g_str_has_prefix(em_train_page_get_device_label(page, 1 + (guint)i), id));
  }
  g_assert_null(em_train_page_get_device_label(page, n_listed));
  char *dev = em_train_page_get_device(page);
  g_assert_cmpstr(dev, ==, "cpu");
  g_free(dev);
  assert_device_eq(config_device(page), em_device_cpu());

  /* no CUDA device: the selector says why, in the engine's words */
  char *why = check_message((em_device){EM_DEVICE_CUDA, 0});
  if (n_cuda == 0) {
    g_assert_nonnull(why);
    const char *note = em_train_page_get_device_note(page);
    g_assert_nonnull(note);
    g_assert_true(g_str_has_prefix(note, "No CUDA device found: "));
    g_assert_nonnull(strstr(note, why));
    /* one line of the form, not four (issue 32): the reason is its tooltip */
    GtkWidget *nl = NULL;
    GPtrArray *labels = g_ptr_array_new();
    ui_test_collect(GTK_WIDGET(page), GTK_TYPE_LABEL, labels);
    for (guint i = 0; i < labels->len && !nl; i++)
      if (!g_strcmp0(gtk_widget_get_tooltip_text(labels->pdata[i]), note)) nl = labels->pdata[i];
    g_ptr_array_unref(labels);
    g_assert_nonnull(nl);
    g_assert_cmpint(pango_layout_get_line_count(gtk_label_get_layout(GTK_LABEL(nl))), ==, 1);
    /* asking for one is refused with that message; the CPU stays chosen */
    g_autoptr(GError) error = NULL;
    g_assert_false(em_train_page_set_device(page, "cuda", &error));
    g_assert_nonnull(strstr(error->message, why));
    dev = em_train_page_get_device(page);
    g_assert_cmpstr(dev, ==, "cpu");
    g_free(dev);
  } else {
    g_assert_null(em_train_page_get_device_note(page));
    for (int i = 0; i < n_cuda; i++) { /* each entry puts its device into the config */
      g_assert_true(em_train_page_select_device_index(page, 1 + (guint)i));
      em_device want = {EM_DEVICE_CUDA, (uint8_t)i};
      assert_device_eq(config_device(page), want);
      assert_device_eq(em_app_state_get_device(state), want);
    }
    g_autoptr(GError) error = NULL; /* one past the last */
    char beyond[16];
    g_snprintf(beyond, sizeof beyond, "cuda:%d", n_cuda);
    g_assert_false(em_train_page_set_device(page, beyond, &error));
    g_assert_nonnull(strstr(error->message, "does not exist"));
  }
  g_free(why);
  {
    g_autoptr(GError) error = NULL;
    g_assert_false(em_train_page_set_device(page, "tpu:0", &error));
    g_assert_nonnull(error);
  }

  /* --device ref (em_train_page_set_device) offers the reference device */
  g_assert_true(em_train_page_set_device(page, "ref", NULL));
  g_assert_cmpuint(em_train_page_get_n_devices(page), ==, 1 + (guint)(n_cuda + n_ref));
  dev = em_train_page_get_device(page);
  g_assert_cmpstr(dev, ==, "ref:0");
  g_free(dev);
  em_device ref0 = {EM_DEVICE_REF, 0};
  assert_device_eq(config_device(page), ref0);
  assert_device_eq(em_app_state_get_device(state), ref0);
  g_assert_true(g_str_has_prefix(em_train_page_get_device_label(page, 1 + (guint)n_cuda),
                                 "Reference device (ref:0)"));
  g_free(ui_test_screenshot(w, "train-device"));
  /* choosing the CPU entry: the config and the state follow */
  g_assert_true(em_train_page_select_device_index(page, 0));
  assert_device_eq(config_device(page), em_device_cpu());
  assert_device_eq(em_app_state_get_device(state), em_device_cpu());
  /* and the reference entry again */
  g_assert_true(em_train_page_select_device_index(page, 1 + (guint)n_cuda));
  assert_device_eq(config_device(page), ref0);
  /* "Halve the batch when device memory runs out" is the config's auto_batch */
  GtkWidget *auto_batch = ui_test_find_named(w, "auto-batch");
  g_assert_nonnull(auto_batch);
  em_train_config cfg;
  char *error = NULL;
  g_assert_true(em_train_page_get_config(page, &cfg, &error));
  g_assert_false(cfg.auto_batch);
  gtk_check_button_set_active(GTK_CHECK_BUTTON(auto_batch), TRUE);
  g_assert_true(em_train_page_get_config(page, &cfg, &error));
  g_assert_true(cfg.auto_batch);
  gtk_window_destroy(win);
  g_object_unref(state);
}

static void test_devices_panel(void) {
  int n_cuda = em_device_count(EM_DEVICE_CUDA), n_ref = em_device_count(EM_DEVICE_REF);
  EmAppState *state = em_app_state_new(tmp_dir);
  GtkWidget *w = em_devices_panel_new(state);
  EmDevicesPanel *panel = EM_DEVICES_PANEL(w);
  GtkWindow *win = ui_test_show(w, 420, 520);
  g_assert_cmpuint(em_devices_panel_get_n_devices(panel), ==,
                   1 + (guint)n_cuda + (ref_offered ? (guint)n_ref : 0));
  /* the reference device is listed once it is chosen */
  em_device ref0 = {EM_DEVICE_REF, 0};
  em_app_state_set_device(state, ref0);
  guint n = em_devices_panel_get_n_devices(panel);
  g_assert_cmpuint(n, ==, 1 + (guint)(n_cuda + n_ref));
  g_assert_cmpstr(em_devices_panel_get_id(panel, 0), ==, "cpu");
  g_assert_cmpstr(em_devices_panel_get_id(panel, 1 + (guint)n_cuda), ==, "ref:0");
  g_assert_null(em_devices_panel_get_id(panel, n));
  char *cpu = em_devices_panel_get_text(panel, 0);
  g_test_message("%s", cpu);
  g_assert_true(g_str_has_prefix(cpu, "cpu · "));
  g_assert_nonnull(strstr(cpu, "total")); /* the host's memory */
  g_assert_null(strstr(cpu, "allocated")); /* no run yet */
  g_free(cpu);
  for (int i = 0; i < n_cuda; i++) { /* name, compute capability, memory */
    char *t = em_devices_panel_get_text(panel, 1 + (guint)i);
    g_test_message("%s", t);
    g_assert_nonnull(strstr(t, "compute capability"));
    g_assert_nonnull(strstr(t, "total"));
    g_assert_nonnull(strstr(t, "free"));
    g_free(t);
  }
  char *why = check_message((em_device){EM_DEVICE_CUDA, 0});
  if (n_cuda == 0) {
    g_assert_nonnull(em_devices_panel_get_note(panel));
    g_assert_true(g_str_has_prefix(em_devices_panel_get_note(panel), "No CUDA device found: "));
    g_assert_nonnull(strstr(em_devices_panel_get_note(panel), why));
  } else {
    g_assert_null(em_devices_panel_get_note(panel));
  }
  g_free(why);

  /* a run on ref:0 holding 4 MiB there: its row shows the allocator */
  em_memory_stats before;
  em_device_memory_stats(ref0, &before);
  em_error err = {0};
  int64_t shape[1] = {1 << 20}; /* (D) */
  em_tensor *t = em_tensor_new_on(ref0, EM_DTYPE_F32, 1, shape, &err);
  g_assert_nonnull(t);
  em_app_state_run_started(state, 0);
  char *row = em_devices_panel_get_text(panel, 1 + (guint)n_cuda);
  g_test_message("%s", row);
  g_assert_true(g_str_has_prefix(row, "ref:0 · reference device (host memory) — training now"));
  char *want = em_devices_format_bytes(before.allocated_bytes + (4 << 20));
  char *line = g_strdup_printf("this run: allocated %s", want);
  g_assert_nonnull(strstr(row, line));
  g_free(line);
  g_free(want);
  g_free(row);
  cpu = em_devices_panel_get_text(panel, 0);
  g_assert_null(strstr(cpu, "allocated")); /* the CPU is not the run's device */
  g_free(cpu);
  ui_test_spin(100);
  g_free(ui_test_screenshot(w, "devices"));
  em_app_state_run_finished(state, 0, 0, NULL);
  row = em_devices_panel_get_text(panel, 1 + (guint)n_cuda);
  g_assert_nonnull(strstr(row, "— last run"));
  g_assert_nonnull(strstr(row, "the last run: allocated"));
  g_free(row);
  em_tensor_free(t);
  gtk_window_destroy(win);
  g_object_unref(state);
}

static void test_memory_page_device(void) {
  EmAppState *state = em_app_state_new(tmp_dir);
  GtkWidget *w = em_memory_page_new(state);
  EmMemoryPage *mp = EM_MEMORY_PAGE(w);
  GtkWindow *win = ui_test_show(w, 1200, 700);
  g_assert_cmpstr(em_memory_page_get_device_name(mp), ==, "CPU");
  g_assert_true(g_str_has_prefix(em_memory_page_get_summary(mp), "Memory summary (cpu)"));
  /* choosing ref:0 before a run: the page shows it (the devices list offers it) */
  em_device ref0 = {EM_DEVICE_REF, 0};
  em_app_state_set_device(state, ref0);
  char *name = g_strdup(em_memory_page_get_device_name(mp)); /* the page's changes */
  g_assert_cmpstr(name, ==, "ref:0 · reference device (host memory)");
  g_assert_true(g_str_has_prefix(em_memory_page_get_summary(mp), "Memory summary (ref:0)"));
  EmDevicesPanel *panel = EM_DEVICES_PANEL(em_memory_page_get_devices_panel(mp));
  g_assert_cmpuint(em_devices_panel_get_n_devices(panel), ==,
                   1 + (guint)(em_device_count(EM_DEVICE_CUDA) + em_device_count(EM_DEVICE_REF)));

  /* a run on ref:0: its timeline is labelled with the device */
  em_app_state_run_started(state, 0);
  g_assert_true(g_str_has_prefix(em_memory_page_get_now_text(mp), name));
  int64_t step[50], alloc[50], reserved[50], peak[50];
  double loss[50];
  for (int i = 0; i < 50; i++) {
    step[i] = i + 1;
    alloc[i] = (int64_t)(8 << 20) + (int64_t)(i % 5) * (1 << 20);
    reserved[i] = (int64_t)16 << 20;
    peak[i] = (int64_t)12 << 20;
    loss[i] = 1.0 / (1 + i);
  }
  EmTrainUpdate up = {.n = 50, .step = step, .loss = loss, .mem_allocated = alloc,
                      .mem_reserved = reserved, .mem_peak = peak, .total_steps = 50};
  em_app_state_run_progress(state, &up);
  g_assert_cmpint(em_memory_page_get_n_points(mp), ==, 50);
  char *want = g_strdup_printf("%s · step 50 · allocated 12.0 MiB · reserved 16.0 MiB · "
                               "peak 12.0 MiB", name);
  g_assert_cmpstr(em_memory_page_get_now_text(mp), ==, want);
  g_free(want);
  /* the device chosen for the next run does not relabel the running one */
  em_app_state_set_device(state, em_device_cpu());
  g_assert_cmpstr(em_memory_page_get_device_name(mp), ==, name);
  em_app_state_run_finished(state, 0, 0, NULL);
  g_assert_true(g_str_has_prefix(em_memory_page_get_summary(mp), "Memory summary (ref:0)"));
  ui_test_spin(200);
  g_free(ui_test_screenshot(w, "memory-device"));
  g_free(name);
  gtk_window_destroy(win);
  g_object_unref(state);
}

/* ---- a real run on the reference device, through the Train page ---------- */

static const char *mlp_spec =
    "{\"name\": \"tiny-mlp\", \"input\": {\"shape\": [1, 28, 28]},"
    " \"nodes\": [{\"name\": \"flatten\", \"type\": \"Flatten\"},"
    "  {\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 32},"
    "  {\"name\": \"relu1\", \"type\": \"ReLU\"},"
    "  {\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 10}],"
    " \"loss\": {\"type\": \"cross_entropy\"},"
    " \"training\": {\"dataset\": \"synthetic\", \"optimizer\": \"adam\", \"lr\": 0.001,"
    "  \"batch_size\": 32, \"epochs\": 1}}";

typedef struct {
  gboolean finished;
  int status;
  gint64 run_id;
  char *message;
} run_watch;

static void on_finished(EmAppState *s, gint64 run_id, int status, const char *msg, run_watch *w) {
  (void)s;
  w->finished = TRUE;
  w->status = status;
  w->run_id = run_id;
  g_free(w->message);
  w->message = g_strdup(msg);
}

static gboolean is_finished(gpointer p) { return ((run_watch *)p)->finished; }

/* A Train page and a Memory page side by side on one state that
 * records in tmp_dir/name, with the tiny MLP on the synthetic data. */
typedef struct {
  char *registry;
  EmAppState *state;
  GtkWidget *box, *tw, *mw;
  GtkWindow *win;
} train_pages;

static void train_pages_show(train_pages *p, const char *name) {
  p->registry = g_build_filename(tmp_dir, name, NULL);
  p->state = em_app_state_new(p->registry);
  em_app_state_set_spec(p->state, mlp_spec, NULL);
  em_app_state_set_dataset(p->state, "synthetic", NULL);
  p->box = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 0);
  p->tw = em_train_page_new(p->state);
  p->mw = em_memory_page_new(p->state);
  gtk_widget_set_hexpand(p->tw, TRUE);
  gtk_widget_set_hexpand(p->mw, TRUE);
  gtk_box_append(GTK_BOX(p->box), p->tw);
  gtk_box_append(GTK_BOX(p->box), p->mw);
  p->win = ui_test_show(p->box, 1600, 800);
}

static void train_pages_close(train_pages *p, const char *screenshot) {
  g_free(ui_test_screenshot(p->box, screenshot));
  gtk_window_destroy(p->win);
  g_object_unref(p->state);
  g_free(p->registry);
}

static void test_train_on_ref(void) {
  train_pages p;
  train_pages_show(&p, "registry");
  EmAppState *state = p.state;
  GtkWidget *tw = p.tw, *mw = p.mw;
  EmTrainPage *page = EM_TRAIN_PAGE(tw);
  EmMemoryPage *mp = EM_MEMORY_PAGE(mw);
  g_assert_true(em_train_page_set_device(page, "ref:0", NULL));
  g_assert_true(em_train_page_set_value(page, "limit", 96));
  g_assert_true(em_train_page_set_value(page, "batch", 32));
  g_assert_true(em_train_page_set_value(page, "epochs", 1));
  g_assert_true(em_train_page_set_value(page, "threads", 1));
  run_watch w = {0};
  g_signal_connect(state, "run-finished", G_CALLBACK(on_finished), &w);
  g_assert_true(gtk_widget_activate_action(tw, "train.start", NULL));
  g_assert_true(ui_test_wait(is_finished, &w, 60000));
  if (w.message) g_test_message("run: %s", w.message);
  g_assert_cmpint(w.status, ==, EM_RUN_COMPLETED);
  g_assert_cmpint(w.run_id, >, 0);
  /* the Memory page plotted the device's allocator, named */
  g_assert_cmpint(em_memory_page_get_n_points(mp), ==, 3); /* 96 / 32 steps */
  g_assert_cmpint(em_memory_page_get_last_allocated(mp), >, 0);
  g_assert_true(g_str_has_prefix(em_memory_page_get_now_text(mp), "ref:0 · "));
  /* the registry recorded the device */
  em_error err = {0};
  em_store *st = em_store_open(p.registry, true, &err);
  g_assert_nonnull(st);
  em_run r;
  memset(&r, 0, sizeof r);
  g_assert_cmpint(em_store_run_get(st, w.run_id, &r, &err), ==, EM_OK);
  g_assert_cmpstr(r.device, ==, "ref:0");
  em_run_clear(&r);
  em_store_close(st);
  train_pages_close(&p, "train-on-ref");
  g_free(w.message);
}

/* With EMBER_REF_DEVICE_MEMORY=700000 (the ui-devices-preflight run): the
 * tiny MLP at batch 32 needs about 808 KiB on ref:0, so Start is refused
 * before anything is recorded, with the pre-flight's figures; with "Halve
 * the batch" checked the run starts at batch 16 and says so. */
static void test_preflight(void) {
  if (!g_getenv("EMBER_REF_DEVICE_MEMORY")) {
    g_test_skip("needs EMBER_REF_DEVICE_MEMORY (the ui-devices-preflight run)");
    return;
  }
  train_pages p;
  train_pages_show(&p, "registry-preflight");
  EmAppState *state = p.state;
  GtkWidget *tw = p.tw, *mw = p.mw;
  EmTrainPage *page = EM_TRAIN_PAGE(tw);
  g_assert_true(em_train_page_set_device(page, "ref", NULL));
  g_assert_true(em_train_page_set_value(page, "limit", 96));
  g_assert_true(em_train_page_set_value(page, "batch", 32));
  g_assert_true(em_train_page_set_value(page, "threads", 1));
  run_watch w = {0};
  g_signal_connect(state, "run-finished", G_CALLBACK(on_finished), &w);

  g_assert_true(gtk_widget_activate_action(tw, "train.start", NULL));
  g_assert_true(ui_test_wait(is_finished, &w, 30000));
  g_test_message("refused: %s", em_train_page_get_status(page));
  g_assert_cmpint(w.status, ==, EM_RUN_FAILED);
  g_assert_cmpint(w.run_id, ==, 0); /* nothing recorded */
  const char *st = em_train_page_get_status(page);
  g_assert_true(g_str_has_prefix(st, "Training failed: pre-flight: "));
  g_assert_nonnull(strstr(st, "on ref:0 needs about"));
  g_assert_nonnull(strstr(st, "the largest batch that fits"));
  g_assert_false(em_train_page_is_running(page));

  w.finished = FALSE;
  gtk_check_button_set_active(GTK_CHECK_BUTTON(ui_test_find_named(tw, "auto-batch")), TRUE);
  g_assert_true(gtk_widget_activate_action(tw, "train.start", NULL));
  g_assert_true(ui_test_wait(is_finished, &w, 60000));
  g_test_message("auto-batch: %s", em_train_page_get_status(page));
  g_assert_cmpint(w.status, ==, EM_RUN_COMPLETED);
  g_assert_cmpint(w.run_id, >, 0);
  g_assert_nonnull(strstr(em_train_page_get_status(page), "starting at batch 16"));
  g_assert_cmpint(em_memory_page_get_n_points(EM_MEMORY_PAGE(mw)), ==, 6); /* 96 / 16 */
  train_pages_close(&p, "train-preflight");
  g_free(w.message);
}

int main(int argc, char **argv) {
  ui_test_init(&argc, &argv);
  ref_offered = em_devices_show_ref();
  tmp_dir = g_dir_make_tmp("ember-ui-devices-XXXXXX", NULL);
  g_test_add_func("/ui/devices/selector", test_selector);
  g_test_add_func("/ui/devices/panel", test_devices_panel);
  g_test_add_func("/ui/devices/memory-page", test_memory_page_device);
  g_test_add_func("/ui/devices/train-ref", test_train_on_ref);
  g_test_add_func("/ui/devices/preflight", test_preflight);
  int rc = g_test_run();
  char *cmd = g_strdup_printf("rm -rf '%s'", tmp_dir);
  if (system(cmd) != 0) g_printerr("could not remove %s\n", tmp_dir);
  g_free(cmd);
  g_free(tmp_dir);
  return rc;
}
