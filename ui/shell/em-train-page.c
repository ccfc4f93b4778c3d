/* em-train-page.c: the Train page (see the header). */
#include "em-train-page.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "em-devices.h"
#include "em-data-dirs.h"
#include "em-store.h"
#include "em-train-session.h"
#include "em-train.h"
#include "em-line-chart.h"
#include "em-wheel-guard.h"

struct _EmTrainPage {
  GtkWidget parent_instance;
  EmAppState *state;
  em_train_session *session;
  guint tick_id;
  gboolean started_emitted, pause_requested, worker_paused;
  double run_lr, run_clip; /* the values the worker runs with */
  int n_profiles;
  gint64 labels_at; /* when the figures were last written (text changes relayout) */
  GArray *devices;  /* EmDeviceEntry, the device selector's entries */
  gboolean filling_devices; /* the selector's model is being replaced */
  em_device run_device;     /* the device of the session */
  char *last_warning;       /* the run's latest warning, kept under the status */
  /* the model or the dataset changed while a run held the form: reloaded
   * when it ends (the next Start must not train them with the old form) */
  gboolean spec_stale, dataset_stale;
  /* charts and their series */
  GtkWidget *loss_chart, *acc_chart;
  int s_loss, s_test_loss, s_acc;
  /* template children */
  GtkWidget *paned, *model_label, *form, *optimizer, *lr, *schedule, *batch, *epochs, *seed;
  GtkWidget *device, *device_choice, *device_note, *threads, *clip, *ckpt_every, *limit;
  GtkWidget *profile_check, *auto_batch_check;
  GtkWidget *start_button, *pause_button, *resume_button, *stop_button;
  GtkWidget *status_label, *throughput_label, *eta_label, *chart_box;
};

G_DEFINE_FINAL_TYPE(EmTrainPage, em_train_page, GTK_TYPE_WIDGET)

static const char *const schedules[] = {"constant", "cosine", "onecycle"};

/* ---- the spec ------------------------------------------------------------ */

/* The state's spec, or the zoo's MLP; *name gets a name for the run. */
static char *current_spec(EmTrainPage *self, char **name, GError **error) {
  const char *json = em_app_state_get_spec_json(self->state);
  if (json) {
    const char *path = em_app_state_get_spec_path(self->state);
    if (path) {
      char *base = g_path_get_basename(path);
      char *dot = strrchr(base, '.');
      if (dot && dot != base) *dot = '\0';
      *name = base;
    } else {
      *name = NULL;
    }
    return g_strdup(json);
  }
  char *dir = em_data_dir_find("models");
  char *text = NULL;
  if (dir) {
    char *path = g_build_filename(dir, "fmnist-mlp.json", NULL);
    g_file_get_contents(path, &text, NULL, error);
    g_free(path);
    g_free(dir);
  } else {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOENT,
                "no model to train: build one on the Builder page or open a spec (Ctrl+O)");
  }
  *name = text ? g_strdup("fmnist-mlp") : NULL;
  return text;
}

/* ---- the form ------------------------------------------------------------ */

static GtkWidget *field_widget(EmTrainPage *self, const char *field) {
  static const struct {
    const char *name;
    size_t off;
  } fields[] = {
      {"lr", G_STRUCT_OFFSET(EmTrainPage, lr)},
      {"batch", G_STRUCT_OFFSET(EmTrainPage, batch)},
      {"epochs", G_STRUCT_OFFSET(EmTrainPage, epochs)},
      {"seed", G_STRUCT_OFFSET(EmTrainPage, seed)},
      {"threads", G_STRUCT_OFFSET(EmTrainPage, threads)},
      {"clip", G_STRUCT_OFFSET(EmTrainPage, clip)},
      {"checkpoint-every", G_STRUCT_OFFSET(EmTrainPage, ckpt_every)},
      {"limit", G_STRUCT_OFFSET(EmTrainPage, limit)},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(fields); i++)
    if (strcmp(fields[i].name, field) == 0)
      return G_STRUCT_MEMBER(GtkWidget *, self, fields[i].off);
  return NULL;
}

gboolean em_train_page_set_value(EmTrainPage *self, const char *field, double value) {
  GtkWidget *w = field_widget(self, field);
  if (!w) return FALSE;
  gtk_spin_button_set_value(GTK_SPIN_BUTTON(w), value);
  return TRUE;
}

double em_train_page_get_value(EmTrainPage *self, const char *field) {
  GtkWidget *w = field_widget(self, field);
  return w ? gtk_spin_button_get_value(GTK_SPIN_BUTTON(w)) : NAN;
}

static double spin(GtkWidget *w) { return gtk_spin_button_get_value(GTK_SPIN_BUTTON(w)); }

static int index_of(const char *const *names, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return i;
  return 0;
}

/* Fills the model line and, with fill_form, the form from the spec's
 * "training" section (when the spec reads). */
static void load_spec(EmTrainPage *self, gboolean fill_form) {
  g_autoptr(GError) gerr = NULL;
  char *name = NULL;
  char *json = current_spec(self, &name, &gerr);
  if (!json) {
    gtk_label_set_text(GTK_LABEL(self->model_label), gerr ? gerr->message : "no model");
    return;
  }
  em_error err = {0};
  em_spec *spec = em_spec_parse(json, "the model", &err);
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  if (!spec || em_train_config_from_spec(&cfg, spec, &err) != EM_OK) {
    char *label = g_strdup_printf("The model cannot be trained: %s", err.msg);
    gtk_label_set_text(GTK_LABEL(self->model_label), label);
    g_free(label);
  } else {
    char pc[32];
    char *label = g_strdup_printf("Model: %s · %s parameters · dataset: %s",
                                  name ? name : em_spec_name(spec),
                                  em_format_count(em_spec_param_count(spec), pc, sizeof pc),
                                  em_app_state_get_dataset_name(self->state));
    gtk_label_set_text(GTK_LABEL(self->model_label), label);
    g_free(label);
    if (fill_form) {
      /* the list is the settings table's, in the enum's order */
      gtk_drop_down_set_selected(GTK_DROP_DOWN(self->optimizer), (guint)cfg.optim.kind);
      gtk_drop_down_set_selected(GTK_DROP_DOWN(self->schedule),
                                 (guint)index_of(schedules, 3,
                                                 em_schedule_kind_name(cfg.schedule.kind)));
      gtk_spin_button_set_value(GTK_SPIN_BUTTON(self->lr), cfg.optim.lr);
      gtk_spin_button_set_value(GTK_SPIN_BUTTON(self->batch), cfg.batch_size);
      gtk_spin_button_set_value(GTK_SPIN_BUTTON(self->epochs), cfg.epochs);
      gtk_spin_button_set_value(GTK_SPIN_BUTTON(self->clip), cfg.clip_grad_norm);
      gtk_spin_button_set_value(GTK_SPIN_BUTTON(self->seed), (double)cfg.seed);
    }
  }
  em_spec_free(spec);
  g_free(json);
  g_free(name);
}

/* ---- the device selector ------------------------------------------------------ */

static int device_index(EmTrainPage *self, em_device d) {
  for (guint i = 0; self->devices && i < self->devices->len; i++)
    if (em_device_eq(g_array_index(self->devices, EmDeviceEntry, i).device, d)) return (int)i;
  return -1;
}

/* The selector's entries: the CPU, each CUDA device, and the reference
 * device when it is offered (em-devices.h) or asked for (with_ref). */
static void fill_devices(EmTrainPage *self, gboolean with_ref) {
  if (self->devices) g_array_unref(self->devices);
  self->devices = em_devices_list(with_ref || em_devices_show_ref());
  GtkStringList *model = GTK_STRING_LIST(
      gtk_drop_down_get_model(GTK_DROP_DOWN(self->device_choice)));
  const char **labels = g_new0(const char *, self->devices->len + 1);
  for (guint i = 0; i < self->devices->len; i++)
    labels[i] = g_array_index(self->devices, EmDeviceEntry, i).label;
  self->filling_devices = TRUE;
  gtk_string_list_splice(model, 0, g_list_model_get_n_items(G_LIST_MODEL(model)), labels);
  g_free(labels);
  int k = device_index(self, em_app_state_get_device(self->state));
  gtk_drop_down_set_selected(GTK_DROP_DOWN(self->device_choice), (guint)MAX(k, 0));
  self->filling_devices = FALSE;
  char *why = em_devices_cuda_note();
  if (why) { /* one line in the form; the engine's reason in its tooltip */
    char *note = g_strdup_printf("No CUDA device found: %s", why);
    gtk_label_set_text(GTK_LABEL(self->device_note), "No CUDA device (hover for why)");
    gtk_widget_set_tooltip_text(self->device_note, note);
    g_free(note);
  }
  gtk_widget_set_visible(self->device_note, why != NULL);
  g_free(why);
}

static em_device selected_device(EmTrainPage *self) {
  guint i = gtk_drop_down_get_selected(GTK_DROP_DOWN(self->device_choice));
  if (!self->devices || i >= self->devices->len) return em_device_cpu();
  return g_array_index(self->devices, EmDeviceEntry, i).device;
}

static void on_device_selected(GObject *dd, GParamSpec *ps, EmTrainPage *self) {
  (void)dd;
  (void)ps;
  if (!self->filling_devices && self->state)
    em_app_state_set_device(self->state, selected_device(self));
}

static void on_state_device_changed(EmAppState *state, EmTrainPage *self) {
  em_device d = em_app_state_get_device(state);
  if (device_index(self, d) < 0) fill_devices(self, d.kind == EM_DEVICE_REF);
  int k = device_index(self, d);
  if (k < 0) /* not a device of this machine: the state follows the selector back */
    em_app_state_set_device(state, selected_device(self));
  else if ((guint)k != gtk_drop_down_get_selected(GTK_DROP_DOWN(self->device_choice)))
    gtk_drop_down_set_selected(GTK_DROP_DOWN(self->device_choice), (guint)k);
}

static void set_status(EmTrainPage *self, const char *text);

gboolean em_train_page_set_device(EmTrainPage *self, const char *device, GError **error) {
  em_error err = {0};
  em_device d;
  if (em_device_parse(device, &d, &err) != EM_OK || em_device_check(d, &err) != EM_OK) {
    char id[16];
    em_device cur = selected_device(self);
    const char *stays = em_device_is_cpu(cur) ? "the CPU" : em_device_str(cur, id, sizeof id);
    char *msg = g_strdup_printf("Device '%s': %s. Training stays on %s.", device, err.msg, stays);
    set_status(self, msg);
    g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, msg);
    g_free(msg);
    return FALSE;
  }
  em_app_state_set_device(self->state, d); /* the selector follows (on_state_device_changed) */
  if (!self->session) {
    char id[16], *msg = g_strdup_printf("Ready: press Start to train on %s.",
                                        em_device_is_cpu(d) ? "the CPU"
                                                            : em_device_str(d, id, sizeof id));
    set_status(self, msg);
    g_free(msg);
  }
  return TRUE;
}

char *em_train_page_get_device(EmTrainPage *self) {
  char id[16];
  return g_strdup(em_device_str(selected_device(self), id, sizeof id));
}

guint em_train_page_get_n_devices(EmTrainPage *self) { return self->devices->len; }

const char *em_train_page_get_device_label(EmTrainPage *self, guint i) {
  return i < self->devices->len ? g_array_index(self->devices, EmDeviceEntry, i).label : NULL;
}

gboolean em_train_page_select_device_index(EmTrainPage *self, guint i) {
  if (i >= self->devices->len) return FALSE;
  gtk_drop_down_set_selected(GTK_DROP_DOWN(self->device_choice), i);
  return TRUE;
}

const char *em_train_page_get_device_note(EmTrainPage *self) {
  return gtk_widget_get_visible(self->device_note)
             ? gtk_widget_get_tooltip_text(self->device_note)
             : NULL;
}

/* ---- state of the buttons and fields ----------------------------------------- */

static void update_sensitivity(EmTrainPage *self) {
  gboolean running = self->session != NULL;
  gboolean paused = running && self->pause_requested;
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "train.start", !running);
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "train.pause", running && !paused);
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "train.resume", paused);
  gtk_widget_action_set_enabled(GTK_WIDGET(self), "train.stop", running);
  GtkWidget *fixed[] = {self->optimizer, self->schedule, self->batch, self->epochs, self->seed,
                        self->device, self->threads, self->ckpt_every, self->limit,
                        self->profile_check, self->auto_batch_check};
  for (size_t i = 0; i < G_N_ELEMENTS(fixed); i++) gtk_widget_set_sensitive(fixed[i], !running);
  /* lr and clipping change while paused */
  gtk_widget_set_sensitive(self->lr, !running || paused);
  gtk_widget_set_sensitive(self->clip, !running || paused);
}

/* text, and under it the run's latest warning while a session has one.
 * The label shows 8 lines at most: the whole text is its tooltip. */
static void set_status(EmTrainPage *self, const char *text) {
  char *both = self->session && self->last_warning
                   ? g_strdup_printf("%s\n%s", text, self->last_warning)
                   : g_strdup(text);
  gtk_label_set_text(GTK_LABEL(self->status_label), both);
  gtk_widget_set_tooltip_text(self->status_label, strlen(both) > 200 ? both : NULL);
  g_free(both);
}

const char *em_train_page_get_status(EmTrainPage *self) {
  return gtk_label_get_text(GTK_LABEL(self->status_label));
}

static void format_duration(double s, char *out, size_t cap) {
  if (!isfinite(s) || s < 0) {
    g_strlcpy(out, "–", cap);
    return;
  }
  long t = lround(s);
  if (t >= 3600) g_snprintf(out, cap, "%ldh %02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) g_snprintf(out, cap, "%ldm %02lds", t / 60, t % 60);
  else g_snprintf(out, cap, "%lds", t);
}

/* ---- the drain timer ------------------------------------------------------------- */

static void finish_session(EmTrainPage *self, const em_train_drain *d);

/* "samples/s · step N of M": every quarter second while a run trains,
 * and once more at its end, so the last step is the one shown */
static void show_throughput(EmTrainPage *self, const em_train_drain *d) {
  char buf[160];
  g_snprintf(buf, sizeof buf, "%.0f samples/s · step %lld of %lld", d->samples_per_sec,
             (long long)d->last_step, (long long)d->total_steps);
  gtk_label_set_text(GTK_LABEL(self->throughput_label), buf);
}

static void apply_drain(EmTrainPage *self, em_train_drain *d) {
  if (d->started && !self->started_emitted) {
    self->started_emitted = TRUE;
    em_app_state_run_started(self->state, d->run_id);
  }
  int n = (int)d->step->len, ne = (int)d->eval_step->len;
  if (n > 0 || ne > 0 || d->paused != self->worker_paused) {
    EmTrainUpdate u = {
        .n = n,
        .step = (const int64_t *)(void *)d->step->data,
        .loss = (const double *)(void *)d->loss->data,
        .lr = (const double *)(void *)d->lr->data,
        .grad_norm = (const double *)(void *)d->grad_norm->data,
        .mem_allocated = (const int64_t *)(void *)d->mem_allocated->data,
        .mem_reserved = (const int64_t *)(void *)d->mem_reserved->data,
        .mem_peak = (const int64_t *)(void *)d->mem_peak->data,
        .n_eval = ne,
        .eval_step = (const int64_t *)(void *)d->eval_step->data,
        .test_loss = (const double *)(void *)d->test_loss->data,
        .test_accuracy = (const double *)(void *)d->test_accuracy->data,
        .epoch = d->epoch,
        .epochs = d->epochs,
        .total_steps = d->total_steps,
        .samples_per_sec = d->samples_per_sec,
        .eta_s = d->eta_s,
        .elapsed_s = d->elapsed_s,
        .paused = d->paused,
    };
    em_app_state_run_progress(self->state, &u);
  }
  self->worker_paused = d->paused;
  if (n > 0 || ne > 0) {
    double *x = g_new(double, MAX(n, ne)), *y = g_new(double, MAX(n, ne));
    for (int i = 0; i < n; i++) x[i] = (double)g_array_index(d->step, int64_t, i);
    em_line_chart_append(EM_LINE_CHART(self->loss_chart), self->s_loss, x,
                         (const double *)(void *)d->loss->data, n);
    for (int i = 0; i < ne; i++) x[i] = (double)g_array_index(d->eval_step, int64_t, i);
    em_line_chart_append(EM_LINE_CHART(self->loss_chart), self->s_test_loss, x,
                         (const double *)(void *)d->test_loss->data, ne);
    for (int i = 0; i < ne; i++) y[i] = g_array_index(d->test_accuracy, double, i);
    em_line_chart_append(EM_LINE_CHART(self->acc_chart), self->s_acc, x, y, ne);
    g_free(x);
    g_free(y);
  }
  gint64 now = g_get_monotonic_time();
  if (d->last_step > 0 && now - self->labels_at >= 250000) {
    self->labels_at = now;
    char eta[32], el[32], buf[160];
    format_duration(d->eta_s, eta, sizeof eta);
    format_duration(d->elapsed_s, el, sizeof el);
    show_throughput(self, d);
    g_snprintf(buf, sizeof buf, "Epoch %lld of %lld · elapsed %s · ETA %s",
               (long long)MIN(d->epoch + 1, d->epochs), (long long)d->epochs, el, eta);
    gtk_label_set_text(GTK_LABEL(self->eta_label), buf);
    g_snprintf(buf, sizeof buf, "%.0f samples/s · ETA %s", d->samples_per_sec, eta);
    em_line_chart_set_note(EM_LINE_CHART(self->loss_chart), buf);
  }
  if (d->warnings->len > 0) { /* the latest stays under the status (an auto-batch halving) */
    g_free(self->last_warning);
    self->last_warning = g_strdup(d->warnings->pdata[d->warnings->len - 1]);
  }
  if (!d->finished) {
    char buf[160], dev[16];
    em_device_str(self->run_device, dev, sizeof dev);
    if (d->paused) g_snprintf(buf, sizeof buf, "Paused at step %lld: the learning rate and "
                              "clipping can be changed before resuming", (long long)d->last_step);
    else if (self->pause_requested) g_strlcpy(buf, "Pausing after this step…", sizeof buf);
    else if (d->run_id) g_snprintf(buf, sizeof buf, "Training on %s, recorded as run %lld",
                                   em_device_is_cpu(self->run_device) ? "the CPU" : dev,
                                   (long long)d->run_id);
    else g_strlcpy(buf, "Preparing the data…", sizeof buf);
    set_status(self, buf);
  }
  for (guint i = 0; i < d->profiles->len; i++)
    em_app_state_profile_ready(self->state, d->profiles->pdata[i]);
  if (d->finished) finish_session(self, d);
}

static gboolean on_tick(gpointer data) {
  EmTrainPage *self = data;
  em_train_drain d;
  if (self->session && em_train_session_drain(self->session, &d)) {
    apply_drain(self, &d);
    em_train_drain_clear(&d);
  }
  return self->session ? G_SOURCE_CONTINUE : (self->tick_id = 0, G_SOURCE_REMOVE);
}

static void finish_session(EmTrainPage *self, const em_train_drain *d) {
  em_train_session_free(g_steal_pointer(&self->session)); /* the worker has ended */
  self->pause_requested = self->worker_paused = FALSE;
  if (!self->started_emitted) em_app_state_run_started(self->state, 0);
  char buf[1200];
  const char *what = em_run_status_name((em_run_status)d->status);
  if (d->run_id)
    g_snprintf(buf, sizeof buf, "Run %lld %s%s%s", (long long)d->run_id, what,
               d->message ? ": " : "", d->message ? d->message : "");
  else
    g_snprintf(buf, sizeof buf, "Training %s%s%s", what, d->message ? ": " : "",
               d->message ? d->message : "");
  if (self->last_warning && (!d->message || !strstr(d->message, self->last_warning))) {
    char *both = g_strdup_printf("%s\n%s", buf, self->last_warning);
    set_status(self, both);
    g_free(both);
  } else {
    set_status(self, buf);
  }
  if (d->last_step > 0) {
    char el[32], line[96];
    format_duration(d->elapsed_s, el, sizeof el);
    g_snprintf(line, sizeof line, "Ended at step %lld of %lld after %s", (long long)d->last_step,
               (long long)d->total_steps, el);
    gtk_label_set_text(GTK_LABEL(self->eta_label), line);
    show_throughput(self, d);
  }
  em_line_chart_set_note(EM_LINE_CHART(self->loss_chart), NULL);
  em_app_state_run_finished(self->state, d->run_id, d->status, d->message);
  if (self->spec_stale || self->dataset_stale) load_spec(self, self->spec_stale);
  self->spec_stale = self->dataset_stale = FALSE;
  update_sensitivity(self);
}

/* ---- actions ------------------------------------------------------------------------ */

static gboolean build_config(EmTrainPage *self, const char *spec_json, em_train_config *cfg,
                             char **error) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(spec_json, "the model", &err);
  em_train_config_defaults(cfg);
  if (!spec || em_train_config_from_spec(cfg, spec, &err) != EM_OK) {
    em_spec_free(spec);
    *error = g_strdup_printf("The model cannot be trained: %s", err.msg);
    return FALSE;
  }
  em_spec_free(spec);
  /* another optimiser than the spec's starts from its own defaults */
  em_setting_set_choice(em_setting_by_key("optim", "kind"), cfg,
                        (int)gtk_drop_down_get_selected(GTK_DROP_DOWN(self->optimizer)));
  cfg->optim.lr = spin(self->lr);
  em_sched_kind sk = EM_SCHED_CONSTANT;
  em_schedule_parse_name(schedules[gtk_drop_down_get_selected(GTK_DROP_DOWN(self->schedule))],
                         &sk, &err);
  if (sk != cfg->schedule.kind) em_schedule_init(&cfg->schedule, sk, cfg->optim.lr);
  cfg->batch_size = (int)spin(self->batch);
  cfg->epochs = (int)spin(self->epochs);
  cfg->seed = (uint64_t)spin(self->seed);
  cfg->threads = (int)spin(self->threads);
  cfg->clip_grad_norm = spin(self->clip);
  cfg->checkpoint_every = (int64_t)spin(self->ckpt_every);
  cfg->limit = (int64_t)spin(self->limit);
  const char *ds = em_app_state_get_dataset_name(self->state);
  const char *dir = em_app_state_get_dataset_dir(self->state);
  g_strlcpy(cfg->dataset, ds ? ds : "fashion-mnist", sizeof cfg->dataset);
  g_strlcpy(cfg->data_dir, dir ? dir : "", sizeof cfg->data_dir);
  cfg->device = selected_device(self);
  cfg->auto_batch = gtk_check_button_get_active(GTK_CHECK_BUTTON(self->auto_batch_check));
  if (em_device_check(cfg->device, &err) != EM_OK) {
    *error = g_strdup_printf("Choose another device: %s", err.msg);
    return FALSE;
  }
  em_train_config check = *cfg;
  g_strlcpy(check.checkpoint_dir, "<the run's folder>", sizeof check.checkpoint_dir);
  if (em_train_config_validate(&check, &err) != EM_OK) {
    *error = g_strdup_printf("Check the settings: %s", err.msg);
    return FALSE;
  }
  return TRUE;
}

gboolean em_train_page_get_config(EmTrainPage *self, em_train_config *cfg, char **error) {
  g_autoptr(GError) gerr = NULL;
  char *model = NULL;
  char *json = current_spec(self, &model, &gerr);
  g_free(model);
  if (!json) {
    *error = g_strdup(gerr->message);
    return FALSE;
  }
  gboolean ok = build_config(self, json, cfg, error);
  g_free(json);
  return ok;
}

static void start_action(GtkWidget *w, const char *name, GVariant *param) {
  EmTrainPage *self = EM_TRAIN_PAGE(w);
  if (self->session) return;
  g_autoptr(GError) gerr = NULL;
  char *model = NULL, *error = NULL;
  char *json = current_spec(self, &model, &gerr);
  em_train_session_options o = {0};
  if (!json) {
    set_status(self, gerr->message);
    return;
  }
  if (!build_config(self, json, &o.cfg, &error)) {
    set_status(self, error);
    g_free(error);
    g_free(json);
    g_free(model);
    return;
  }
  char *trace = NULL;
  if (gtk_check_button_get_active(GTK_CHECK_BUTTON(self->profile_check)))
    trace = g_strdup_printf("%s/ember-profile-%d-%d.json", g_get_tmp_dir(), (int)getpid(),
                            ++self->n_profiles);
  o.spec_json = json;
  o.model = model;
  o.registry_dir = em_app_state_get_registry_dir(self->state);
  o.trace_path = trace;
  self->run_lr = o.cfg.optim.lr;
  self->run_clip = o.cfg.clip_grad_norm;
  self->run_device = o.cfg.device;
  g_clear_pointer(&self->last_warning, g_free);
  self->started_emitted = self->pause_requested = self->worker_paused = FALSE;
  EmLineChart *lc = EM_LINE_CHART(self->loss_chart), *ac = EM_LINE_CHART(self->acc_chart);
  em_line_chart_clear(lc);
  em_line_chart_clear(ac);
  self->s_loss = em_line_chart_add_series(lc, "train loss", NULL);
  self->s_test_loss = em_line_chart_add_series(lc, "test loss", NULL);
  self->s_acc = em_line_chart_add_series(ac, "test accuracy", NULL);
  em_line_chart_reset_view(lc);
  em_line_chart_reset_view(ac);
  self->session = em_train_session_start(&o);
  g_free(json);
  g_free(model);
  g_free(trace);
  gtk_label_set_text(GTK_LABEL(self->throughput_label), "");
  gtk_label_set_text(GTK_LABEL(self->eta_label), "");
  set_status(self, "Preparing the data…");
  if (!self->tick_id) self->tick_id = g_timeout_add(50, on_tick, self);
  update_sensitivity(self);
}

static void pause_action(GtkWidget *w, const char *name, GVariant *param) {
  EmTrainPage *self = EM_TRAIN_PAGE(w);
  if (!self->session || self->pause_requested) return;
  self->pause_requested = TRUE;
  em_train_session_pause(self->session);
  set_status(self, "Pausing after this step…");
  update_sensitivity(self);
}

static void resume_action(GtkWidget *w, const char *name, GVariant *param) {
  EmTrainPage *self = EM_TRAIN_PAGE(w);
  if (!self->session || !self->pause_requested) return;
  double lr = spin(self->lr), clip = spin(self->clip);
  em_train_session_resume(self->session, lr, clip);
  self->run_lr = lr;
  self->run_clip = clip;
  self->pause_requested = FALSE;
  set_status(self, "Training");
  update_sensitivity(self);
}

static void stop_action(GtkWidget *w, const char *name, GVariant *param) {
  EmTrainPage *self = EM_TRAIN_PAGE(w);
  if (!self->session) return;
  em_train_session_stop(self->session);
  set_status(self, "Stopping after this step…");
  gtk_widget_action_set_enabled(w, "train.pause", FALSE);
  gtk_widget_action_set_enabled(w, "train.resume", FALSE);
}

void em_train_page_set_profile(EmTrainPage *self, gboolean profile) {
  gtk_check_button_set_active(GTK_CHECK_BUTTON(self->profile_check), profile);
}

gboolean em_train_page_is_running(EmTrainPage *self) { return self->session != NULL; }
gboolean em_train_page_is_paused(EmTrainPage *self) { return self->worker_paused; }
GtkWidget *em_train_page_get_loss_chart(EmTrainPage *self) { return self->loss_chart; }
GtkWidget *em_train_page_get_accuracy_chart(EmTrainPage *self) { return self->acc_chart; }

void em_train_page_set_idle_status(EmTrainPage *self, const char *text) {
  if (!self->session) set_status(self, text);
}

/* ---- the widget ------------------------------------------------------------------------ */

/* During a run the form shows the run's settings: the new model's are
 * loaded when it ends (finish_session). */
static void on_spec_changed(EmAppState *state, gpointer data) {
  EmTrainPage *self = data;
  if (!self->session) load_spec(self, TRUE);
  else self->spec_stale = TRUE;
}

/* A new dataset changes the model line, not the settings a person chose. */
static void on_dataset_changed(EmAppState *state, gpointer data) {
  EmTrainPage *self = data;
  if (!self->session) load_spec(self, FALSE);
  else self->dataset_stale = TRUE;
}

static void em_train_page_dispose(GObject *obj) {
  EmTrainPage *self = EM_TRAIN_PAGE(obj);
  g_clear_handle_id(&self->tick_id, g_source_remove);
  if (self->session) {
    /* the window closes mid-run: stop the worker and record the end */
    em_train_session_free(g_steal_pointer(&self->session));
  }
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_TRAIN_PAGE);
  g_clear_object(&self->state);
  g_clear_pointer(&self->devices, g_array_unref);
  g_clear_pointer(&self->last_warning, g_free);
  G_OBJECT_CLASS(em_train_page_parent_class)->dispose(obj);
}

static void em_train_page_class_init(EmTrainPageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_train_page_dispose;
  gtk_widget_class_set_layout_manager_type(wc, GTK_TYPE_BIN_LAYOUT);
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/shell/em-train-page.ui");
#define CHILD(n) gtk_widget_class_bind_template_child(wc, EmTrainPage, n)
  CHILD(paned);
  CHILD(model_label);
  CHILD(form);
  CHILD(optimizer);
  CHILD(lr);
  CHILD(schedule);
  CHILD(batch);
  CHILD(epochs);
  CHILD(seed);
  CHILD(device);
  CHILD(device_choice);
  CHILD(device_note);
  CHILD(threads);
  CHILD(clip);
  CHILD(ckpt_every);
  CHILD(limit);
  CHILD(profile_check);
  CHILD(auto_batch_check);
  CHILD(start_button);
  CHILD(pause_button);
  CHILD(resume_button);
  CHILD(stop_button);
  CHILD(status_label);
  CHILD(throughput_label);
  CHILD(eta_label);
  CHILD(chart_box);
#undef CHILD
  gtk_widget_class_install_action(wc, "train.start", NULL, start_action);
  gtk_widget_class_install_action(wc, "train.pause", NULL, pause_action);
  gtk_widget_class_install_action(wc, "train.resume", NULL, resume_action);
  gtk_widget_class_install_action(wc, "train.stop", NULL, stop_action);
}

static void on_loss_log_toggled(GtkCheckButton *b, gpointer data) {
  EmTrainPage *self = data;
  em_line_chart_set_log_y(EM_LINE_CHART(self->loss_chart), gtk_check_button_get_active(b));
}

/* The learning rate reads as %g: 1e-06 (five fixed digits showed it as
 * 0.00000), and takes what `--lr` takes, 0 to 1e6 (the spin button kept
 * 1e-5 to 10 and moved a spec's lr into that range without a word). */
static gboolean on_lr_output(GtkSpinButton *spin, gpointer data) {
  (void)data;
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd(buf, sizeof buf, "%.6g", gtk_spin_button_get_value(spin));
  if (g_strcmp0(gtk_editable_get_text(GTK_EDITABLE(spin)), buf) != 0)
    gtk_editable_set_text(GTK_EDITABLE(spin), buf);
  return TRUE;
}

static int on_lr_input(GtkSpinButton *spin, double *value, gpointer data) {
  (void)data;
  const char *text = gtk_editable_get_text(GTK_EDITABLE(spin));
  char *end = NULL;
  double v = g_ascii_strtod(text, &end);
  if (end == text || !isfinite(v)) return GTK_INPUT_ERROR;
  while (*end == ' ') end++;
  if (*end) return GTK_INPUT_ERROR;
  *value = v;
  return TRUE;
}

/* A spin button's range: its setting's, from the settings table. */
static void bound_spin(GtkWidget *spin, const char *group, const char *key) {
  double lo, hi;
  em_setting_bounds(em_setting_by_key(group, key), &lo, &hi);
  /* a spin button holds a double: whole numbers are exact up to 2^53 - 1 */
  gtk_spin_button_set_range(GTK_SPIN_BUTTON(spin), lo, MIN(hi, 9007199254740991.0));
}

/* The form's bounds and choices are the settings table's (em-train.h):
 * the same as the spec's and `ember train`'s. */
static void bind_settings(EmTrainPage *self) {
  bound_spin(self->lr, "optim", "lr");
  bound_spin(self->batch, NULL, "batch_size");
  bound_spin(self->epochs, NULL, "epochs");
  bound_spin(self->seed, NULL, "seed");
  bound_spin(self->threads, NULL, "threads");
  bound_spin(self->clip, NULL, "clip_grad_norm");
  bound_spin(self->ckpt_every, NULL, "checkpoint_every");
  bound_spin(self->limit, NULL, "limit");
  const em_setting *kind = em_setting_by_key("optim", "kind");
  GtkStringList *names = gtk_string_list_new(NULL);
  for (int i = 0; kind->choice_name(i); i++) gtk_string_list_append(names, kind->choice_name(i));
  gtk_drop_down_set_model(GTK_DROP_DOWN(self->optimizer), G_LIST_MODEL(names));
  g_object_unref(names);
}

static void em_train_page_init(EmTrainPage *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  em_wheel_guard_all(GTK_WIDGET(self)); /* the wheel scrolls the page */
  bind_settings(self);
  double lo, hi; /* the cores, within the setting's range */
  em_setting_bounds(em_setting_by_key(NULL, "threads"), &lo, &hi);
  gtk_spin_button_set_value(GTK_SPIN_BUTTON(self->threads), MIN(g_get_num_processors(), hi));
  /* the seed is the spec's, or 0 as `ember train` has it (load_spec) */
  g_signal_connect(self->lr, "output", G_CALLBACK(on_lr_output), NULL);
  g_signal_connect(self->lr, "input", G_CALLBACK(on_lr_input), NULL);
  self->loss_chart = em_line_chart_new();
  self->acc_chart = em_line_chart_new();
  em_line_chart_set_integer_x(EM_LINE_CHART(self->loss_chart), TRUE);
  em_line_chart_set_integer_x(EM_LINE_CHART(self->acc_chart), TRUE);
  em_line_chart_set_title(EM_LINE_CHART(self->loss_chart), "Loss");
  em_line_chart_set_x_label(EM_LINE_CHART(self->loss_chart), "step");
  em_line_chart_set_title(EM_LINE_CHART(self->acc_chart), "Test accuracy");
  em_line_chart_set_x_label(EM_LINE_CHART(self->acc_chart), "step");
  em_line_chart_set_smoothing(EM_LINE_CHART(self->loss_chart), 0.6);
  gtk_widget_set_vexpand(self->loss_chart, TRUE);
  gtk_widget_set_vexpand(self->acc_chart, TRUE);
  /* a log loss axis: one divergence spike flattens the rest of the curve */
  GtkWidget *log_check = gtk_check_button_new_with_label("Log loss axis");
  gtk_widget_set_name(log_check, "loss-log");
  gtk_widget_set_halign(log_check, GTK_ALIGN_END);
  g_signal_connect(log_check, "toggled", G_CALLBACK(on_loss_log_toggled), self);
  gtk_box_append(GTK_BOX(self->chart_box), log_check);
  gtk_box_append(GTK_BOX(self->chart_box), self->loss_chart);
  gtk_box_append(GTK_BOX(self->chart_box), self->acc_chart);
  set_status(self, "Ready: press Start to train.");
}

GtkWidget *em_train_page_new(EmAppState *state) {
  EmTrainPage *self = g_object_new(EM_TYPE_TRAIN_PAGE, NULL);
  self->state = g_object_ref(state);
  g_signal_connect_object(state, "spec-changed", G_CALLBACK(on_spec_changed), self, 0);
  g_signal_connect_object(state, "dataset-changed", G_CALLBACK(on_dataset_changed), self, 0);
  fill_devices(self, em_app_state_get_device(state).kind == EM_DEVICE_REF);
  g_signal_connect_object(self->device_choice, "notify::selected",
                          G_CALLBACK(on_device_selected), self, 0);
  g_signal_connect_object(state, "device-changed", G_CALLBACK(on_state_device_changed), self, 0);
  em_app_state_set_device(state, selected_device(self)); /* one that is there */
  load_spec(self, TRUE);
  update_sensitivity(self);
  em_train_page_show_last_run(self, em_app_state_get_registry_dir(state));
  return GTK_WIDGET(self);
}
