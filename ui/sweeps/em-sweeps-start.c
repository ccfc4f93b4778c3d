/* em-sweeps-start.c: the Sweeps page's form and the runner's commands.
 * Start writes the description under <registry>/artifacts/sweeps/
 * workbench/ (and the spec next to it when the Builder's differs from its
 * file) and runs `ember sweep start FILE --parallel P --name N --registry
 * DIR` in a session of its own (setsid: a terminal's Ctrl-C or the
 * window closing does not reach it), its output in FILE's .log. The page
 * finds the sweep by its name at the next read. */
#include "em-sweeps-page-private.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "em-store.h"
#include "em-train-page.h"

char *em_sweeps_page_cli_path_(void) {
  const char *cli = g_getenv("EMBER_CLI");
  if (cli) return g_strdup(cli);
  char *me = g_file_read_link("/proc/self/exe", NULL);
  char *dir = me ? g_path_get_dirname(me) : NULL;
  char *exe = dir ? g_build_filename(dir, "ember", NULL) : NULL;
  g_free(me);
  g_free(dir);
  return exe;
}

static void form_message(EmSweepsPage *self, const char *text, gboolean error) {
  gtk_label_set_text(self->form_message, text ? text : "");
  if (error) gtk_widget_add_css_class(GTK_WIDGET(self->form_message), "error");
  else gtk_widget_remove_css_class(GTK_WIDGET(self->form_message), "error");
}

/* ---- the base: the Builder's model under the Train page's settings -------------------- */

static EmTrainPage *train_page(EmSweepsPage *self) {
  GtkWidget *stack = gtk_widget_get_ancestor(GTK_WIDGET(self), GTK_TYPE_STACK);
  GtkWidget *p = stack ? gtk_stack_get_child_by_name(GTK_STACK(stack), "train") : NULL;
  return p && EM_IS_TRAIN_PAGE(p) ? EM_TRAIN_PAGE(p) : NULL;
}

/* The Train page's form as the spec's training keys (read off the settings
 * table): what every trial trains with unless the sweep varies it. The
 * device and threads stay each trial's own (the runner gives each its
 * share of the cores); the schedule stays the spec's. */
static char *training_base(EmSweepsPage *self, GString *said) {
  static const char *const keys[] = {"dataset", "data_dir", "optimizer", "lr", "batch_size",
                                     "epochs", "limit", "seed", "clip_grad_norm", NULL};
  json_t *o = json_object();
  EmTrainPage *tp = train_page(self);
  em_train_config cfg;
  char *error = NULL;
  if (tp && em_train_page_get_config(tp, &cfg, &error)) {
    for (int i = 0; keys[i]; i++) {
      const em_setting *s = em_setting_by_spec("training", keys[i]);
      json_t *v = NULL;
      if (!s) continue;
      if (s->type == EM_SETTING_INT || s->type == EM_SETTING_SEED)
        v = json_integer((json_int_t)em_setting_get_int(s, &cfg));
      else if (s->type == EM_SETTING_NUM)
        v = json_real(em_setting_get_num(s, &cfg));
      else if (s->type == EM_SETTING_CHOICE)
        v = json_string(s->choice_name(em_setting_get_choice(s, &cfg)));
      else if (s->type == EM_SETTING_STR && *((const char *)&cfg + s->offset))
        v = json_string((const char *)&cfg + s->offset);
      if (!v) continue;
      if (said && strcmp(keys[i], "data_dir")) {
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));
        g_string_append_printf(said, "%s%s %s", said->len ? ", " : "", keys[i], text);
        free(text);
      }
      json_object_set_new(o, keys[i], v);
    }
  } else {
    const char *ds = em_app_state_get_dataset_name(self->state),
               *dir = em_app_state_get_dataset_dir(self->state);
    if (ds && *ds) json_object_set_new(o, "dataset", json_string(ds));
    if (dir && *dir) json_object_set_new(o, "data_dir", json_string(dir));
    if (said && ds && *ds) g_string_append_printf(said, "dataset %s", ds);
    if (said && error) g_string_append_printf(said, " (the Train page: %s)", error);
  }
  g_free(error);
  char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
  json_decref(o);
  char *out = g_strdup(text);
  free(text);
  return out;
}

void em_sweeps_page_refresh_base_(EmSweepsPage *self) {
  if (!self->state) return;
  const char *path = em_app_state_get_spec_path(self->state);
  const char *json = em_app_state_get_spec_json(self->state);
  GString *said = g_string_new(NULL);
  g_free(training_base(self, said));
  char *base = path ? g_path_get_basename(path) : g_strdup(json ? "the Builder's model" : NULL);
  char *t = base ? g_strdup_printf("Base: %s%s, with %s", base,
                                   path && json ? "" : " (unsaved)", said->len ? said->str
                                                                               : "its spec's training")
                 : g_strdup("Base: no model yet: open or build one (Builder page).");
  gtk_label_set_text(self->base_label, t);
  g_free(t);
  g_free(base);
  g_string_free(said, TRUE);
}

/* The base spec's file: the one the model came from when the Builder's
 * JSON is that file's, else the JSON written to dir/spec-STAMP/NAME. */
static char *spec_file(EmSweepsPage *self, const char *dir, const char *stamp, GError **error) {
  const char *path = em_app_state_get_spec_path(self->state);
  const char *json = em_app_state_get_spec_json(self->state);
  if (!json) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                "No model: open or build one first (Builder page).");
    return NULL;
  }
  char *text = NULL;
  if (path && g_file_get_contents(path, &text, NULL, NULL) && !strcmp(text, json)) {
    g_free(text);
    return g_canonicalize_filename(path, NULL);
  }
  g_free(text);
  char *name = path ? g_path_get_basename(path) : g_strdup("model.json");
  char *sub = g_strdup_printf("%s/spec-%s", dir, stamp);
  char *out = g_build_filename(sub, name, NULL);
  g_mkdir_with_parents(sub, 0755);
  if (!g_file_set_contents(out, json, -1, error)) g_clear_pointer(&out, g_free);
  g_free(sub);
  g_free(name);
  return out;
}

/* ---- the form ------------------------------------------------------------------------------ */

static const char *drop_text(GtkDropDown *d) {
  GtkStringObject *o = gtk_drop_down_get_selected_item(d);
  return o ? gtk_string_object_get_string(o) : "";
}

static void on_kind_changed(GtkDropDown *d, GParamSpec *ps, EmSweepParamRow *row) {
  (void)ps;
  guint k = gtk_drop_down_get_selected(d);
  gtk_entry_set_placeholder_text(row->values, k == EM_SWEEP_KIND_RANGE       ? "0.5 .. 0.99"
                                              : k == EM_SWEEP_KIND_LOG_RANGE ? "1e-4 .. 0.3"
                                                                             : "0.01, 0.1, 1");
}

void em_sweeps_page_build_form_(EmSweepsPage *self) {
  static const char *const kinds[] = {"list", "range", "log range", "choice", NULL};
  static const char *const heads[] = {"Setting", "As", "Values"};
  for (int c = 0; c < 3; c++) {
    GtkWidget *h = gtk_label_new(heads[c]);
    gtk_label_set_xalign(GTK_LABEL(h), 0);
    gtk_widget_add_css_class(h, "dim-label");
    gtk_grid_attach(self->params_grid, h, c, 0, 1, 1);
  }
  for (int i = 0; i < EM_SWEEP_FORM_PARAMS; i++) {
    EmSweepParamRow *r = &self->rows[i];
    r->path = GTK_ENTRY(gtk_entry_new());
    static const char *const hints[] = {"training.lr", "training.batch_size",
                                        "nodes.fc1.out_features", "training.momentum"};
    gtk_entry_set_placeholder_text(r->path, hints[i % G_N_ELEMENTS(hints)]);
    gtk_editable_set_width_chars(GTK_EDITABLE(r->path), 14);
    gtk_widget_set_tooltip_text(GTK_WIDGET(r->path), "training.X (lr, batch_size, momentum, "
                                "weight_decay...), schedule.X, loss.X or nodes.NAME.ATTR");
    r->kind = GTK_DROP_DOWN(gtk_drop_down_new_from_strings(kinds));
    r->values = GTK_ENTRY(gtk_entry_new());
    gtk_editable_set_width_chars(GTK_EDITABLE(r->values), 12);
    gtk_widget_set_hexpand(GTK_WIDGET(r->values), TRUE);
    gtk_widget_set_tooltip_text(GTK_WIDGET(r->values), "a list or a choice: 0.01, 0.1, 1 (or "
                                "names); a range: LOW .. HIGH (whole numbers: an integer range)");
    g_signal_connect(r->kind, "notify::selected", G_CALLBACK(on_kind_changed), r);
    on_kind_changed(r->kind, NULL, r);
    gtk_grid_attach(self->params_grid, GTK_WIDGET(r->path), 0, i + 1, 1, 1);
    gtk_grid_attach(self->params_grid, GTK_WIDGET(r->kind), 1, i + 1, 1, 1);
    gtk_grid_attach(self->params_grid, GTK_WIDGET(r->values), 2, i + 1, 1, 1);
  }
  gtk_editable_set_text(GTK_EDITABLE(self->rows[0].path), "training.lr");
  gtk_editable_set_text(GTK_EDITABLE(self->rows[0].values), "0.01, 0.03, 0.1, 0.3");
  gtk_spin_button_set_range(self->parallel_spin, 1, MAX(1, g_get_num_processors()));
}

void em_sweeps_page_set_param(EmSweepsPage *self, int row, const char *path, em_sweep_kind kind,
                              const char *values) {
  g_return_if_fail(EM_IS_SWEEPS_PAGE(self) && row >= 0 && row < EM_SWEEP_FORM_PARAMS);
  gtk_editable_set_text(GTK_EDITABLE(self->rows[row].path), path ? path : "");
  gtk_drop_down_set_selected(self->rows[row].kind, kind);
  gtk_editable_set_text(GTK_EDITABLE(self->rows[row].values), values ? values : "");
}

static void select_text(GtkDropDown *d, const char *text) {
  GListModel *m = gtk_drop_down_get_model(d);
  for (guint i = 0; text && i < g_list_model_get_n_items(m); i++) {
    GtkStringObject *o = g_list_model_get_item(m, i);
    gboolean hit = !strcmp(gtk_string_object_get_string(o), text);
    g_object_unref(o);
    if (hit) gtk_drop_down_set_selected(d, i);
  }
}

void em_sweeps_page_set_options(EmSweepsPage *self, const char *sampler, const char *metric,
                                gboolean maximize, int trials, int parallel, const char *pruner,
                                gint64 limit, int epochs) {
  g_return_if_fail(EM_IS_SWEEPS_PAGE(self));
  select_text(self->sampler_drop, sampler);
  gtk_editable_set_text(GTK_EDITABLE(self->metric_entry), metric ? metric : "test_accuracy");
  gtk_drop_down_set_selected(self->direction_drop, maximize ? 0 : 1);
  gtk_spin_button_set_value(self->trials_spin, trials);
  gtk_spin_button_set_value(self->parallel_spin, parallel);
  select_text(self->pruner_drop, pruner);
  gtk_spin_button_set_value(self->limit_spin, (double)limit);
  gtk_spin_button_set_value(self->epochs_spin, epochs);
}

/* ---- the runner -------------------------------------------------------------------------- */

static void child_setup(gpointer data) {
  (void)data;
  setsid(); /* a session of its own: the workbench's terminal and process group are not its */
}

static void on_runner_exited(GObject *src, GAsyncResult *res, gpointer data) {
  GSubprocess *p = G_SUBPROCESS(src);
  if (!g_subprocess_wait_finish(p, res, NULL)) return; /* cancelled: the page is going */
  EmSweepsPage *self = data;
  if (self->proc != p) return;
  int code = g_subprocess_get_if_exited(p) ? g_subprocess_get_exit_status(p) : -1;
  if (code != 0) {
    char *log = NULL, *last = NULL;
    if (self->proc_log && g_file_get_contents(self->proc_log, &log, NULL, NULL)) {
      g_strstrip(log);
      char *nl = strrchr(log, '\n');
      last = g_strdup(nl ? nl + 1 : log);
    }
    char *m = g_strdup_printf("The sweep's runner ended (%s %d)%s%s", code < 0 ? "signal" : "exit "
                              "status", code < 0 ? g_subprocess_get_term_sig(p) : code,
                              last && *last ? ": " : "", last ? last : "");
    form_message(self, m, TRUE);
    em_sweeps_page_set_status_(self, m);
    g_free(m);
    g_free(last);
    g_free(log);
    g_clear_pointer(&self->want_name, g_free);
  }
  g_clear_object(&self->proc);
  em_sweeps_page_read_now_(self);
}

/* Runs `ember ARGS... --registry DIR` in the background, its output in log. */
static gboolean launch(EmSweepsPage *self, const char *const *args, const char *log) {
  char *cli = em_sweeps_page_cli_path_();
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, cli ? cli : (char *)"ember");
  for (const char *const *a = args; *a; a++) g_ptr_array_add(argv, (char *)*a);
  g_ptr_array_add(argv, (char *)"--registry");
  g_ptr_array_add(argv, (char *)em_app_state_get_registry_dir(self->state));
  g_ptr_array_add(argv, NULL);
  GSubprocessLauncher *l = g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDERR_MERGE);
  g_subprocess_launcher_set_stdout_file_path(l, log);
  g_subprocess_launcher_set_child_setup(l, child_setup, NULL, NULL);
  GError *error = NULL;
  GSubprocess *p = g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_object_unref(l);
  char *cmd = g_strjoinv(" ", (char **)argv->pdata);
  g_ptr_array_unref(argv);
  g_free(cli);
  if (!p) {
    char *m = g_strdup_printf("Could not start `%s`: %s", cmd, error->message);
    form_message(self, m, TRUE);
    em_sweeps_page_set_status_(self, m);
    g_free(m);
    g_free(cmd);
    g_error_free(error);
    return FALSE;
  }
  g_clear_object(&self->proc);
  self->proc = p;
  g_free(self->proc_log);
  self->proc_log = g_strdup(log);
  g_subprocess_wait_async(p, self->cancel, on_runner_exited, self);
  char *m = g_strdup_printf("Started `%s` (process %s); its output: %s", cmd,
                            g_subprocess_get_identifier(p), log);
  em_sweeps_page_set_status_(self, m);
  g_free(m);
  g_free(cmd);
  return TRUE;
}

/* <registry>/artifacts/sweeps/workbench, the registry made first when it
 * is new (it refuses an artifacts folder without its database). */
static char *sweeps_dir(EmSweepsPage *self, em_error *err) {
  em_store *s = em_store_open(em_app_state_get_registry_dir(self->state), false, err);
  if (!s) return NULL;
  em_store_close(s);
  char *dir = g_build_filename(em_app_state_get_registry_dir(self->state), "artifacts", "sweeps",
                               "workbench", NULL);
  g_mkdir_with_parents(dir, 0755);
  return dir;
}

gboolean em_sweeps_page_start(EmSweepsPage *self) {
  g_return_val_if_fail(EM_IS_SWEEPS_PAGE(self), FALSE);
  if (!self->state) return FALSE;
  GDateTime *now = g_date_time_new_now_local();
  char *stamp = g_date_time_format(now, "%Y%m%d-%H%M%S");
  char *ustamp = g_strdup_printf("%s-%03d", stamp, g_date_time_get_microsecond(now) / 1000);
  em_error err = {0};
  char *dir = sweeps_dir(self, &err);
  GError *error = NULL;
  char *spec = dir ? spec_file(self, dir, ustamp, &error) : NULL;
  char *base = training_base(self, NULL), *json = NULL, *name = NULL;
  gboolean ok = FALSE;
  if (!dir) {
    form_message(self, err.msg, TRUE);
    goto out;
  }
  if (!spec) {
    form_message(self, error->message, TRUE);
    g_clear_error(&error);
    goto out;
  }
  char *model = g_path_get_basename(spec);
  char *dot = strrchr(model, '.');
  if (dot) *dot = '\0';
  char *when = g_date_time_format(now, "%m-%d %H:%M:%S");
  name = g_strdup_printf("%s %s", model, when); /* the page finds it by it: the newest of the name */
  g_free(when);
  g_free(model);
  em_sweep_form f = {.spec = spec, .name = name, .sampler = drop_text(self->sampler_drop),
                     .metric = gtk_editable_get_text(GTK_EDITABLE(self->metric_entry)),
                     .maximize = gtk_drop_down_get_selected(self->direction_drop) == 0,
                     .trials = gtk_spin_button_get_value_as_int(self->trials_spin),
                     .pruner = drop_text(self->pruner_drop),
                     .limit = (int64_t)gtk_spin_button_get_value(self->limit_spin),
                     .epochs = gtk_spin_button_get_value_as_int(self->epochs_spin),
                     .training_json = base};
  for (int i = 0; i < EM_SWEEP_FORM_PARAMS; i++)
    f.p[i] = (em_sweep_form_param){gtk_editable_get_text(GTK_EDITABLE(self->rows[i].path)),
                                   (em_sweep_kind)gtk_drop_down_get_selected(self->rows[i].kind),
                                   gtk_editable_get_text(GTK_EDITABLE(self->rows[i].values))};
  json = em_sweep_form_to_json(&f, &err);
  em_tune_desc d;
  if (!json || em_tune_desc_parse(&d, json, NULL, &err) != EM_OK) {
    form_message(self, err.msg, TRUE);
    goto out;
  }
  em_tune_desc_clear(&d);
  char *file = g_strdup_printf("%s/sweep-%s.json", dir, ustamp);
  char *log = g_strdup_printf("%s/sweep-%s.log", dir, ustamp);
  char parallel[16];
  g_snprintf(parallel, sizeof parallel, "%d", gtk_spin_button_get_value_as_int(self->parallel_spin));
  if (!g_file_set_contents(file, json, -1, &error)) {
    form_message(self, error->message, TRUE);
    g_clear_error(&error);
  } else {
    const char *args[] = {"sweep", "start", file, "--parallel", parallel, "--name", name, NULL};
    ok = launch(self, args, log);
  }
  if (ok) {
    form_message(self, "", FALSE);
    g_free(self->want_name);
    self->want_name = g_strdup(name);
    gtk_toggle_button_set_active(self->new_toggle, FALSE);
    em_sweeps_page_read_now_(self);
  }
  g_free(file);
  g_free(log);
out:
  g_date_time_unref(now);
  g_free(json);
  g_free(name);
  g_free(base);
  g_free(spec);
  g_free(dir);
  g_free(stamp);
  g_free(ustamp);
  return ok;
}

void em_sweeps_page_resume(EmSweepsPage *self) {
  g_return_if_fail(EM_IS_SWEEPS_PAGE(self));
  if (!self->sweep || self->proc) return;
  char id[24], parallel[16];
  g_snprintf(id, sizeof id, "%lld", (long long)self->sweep);
  g_snprintf(parallel, sizeof parallel, "%d", gtk_spin_button_get_value_as_int(self->parallel_spin));
  em_error err = {0};
  char *dir = sweeps_dir(self, &err);
  if (!dir) {
    em_sweeps_page_set_status_(self, err.msg);
    return;
  }
  char *log = g_strdup_printf("%s/resume-%s-%lld.log", dir, id, (long long)g_get_real_time());
  const char *args[] = {"sweep", "resume", id, "--parallel", parallel, NULL};
  if (launch(self, args, log)) em_sweeps_page_update_buttons_(self);
  g_free(log);
  g_free(dir);
}

/* ---- pause and cancel: told to the runner through the registry --------------------------- */

static void on_cli_done(GObject *src, GAsyncResult *res, gpointer data) {
  char *out = NULL;
  GError *error = NULL;
  if (!g_subprocess_communicate_utf8_finish(G_SUBPROCESS(src), res, &out, NULL, &error)) {
    gboolean gone = g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
    g_error_free(error);
    if (gone) return;
  }
  EmSweepsPage *self = data;
  self->n_cli--;
  if (out) em_sweeps_page_set_status_(self, g_strstrip(out));
  g_free(out);
  em_sweeps_page_read_now_(self);
}

static void tell(EmSweepsPage *self, const char *what) {
  if (!self->sweep || !self->state) return;
  char *cli = em_sweeps_page_cli_path_();
  char id[24];
  g_snprintf(id, sizeof id, "%lld", (long long)self->sweep);
  GError *error = NULL;
  GSubprocess *p = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_MERGE,
                                    &error, cli ? cli : "ember", "sweep", what, id, "--registry",
                                    em_app_state_get_registry_dir(self->state), NULL);
  g_free(cli);
  if (!p) {
    em_sweeps_page_set_status_(self, error->message);
    g_error_free(error);
    return;
  }
  self->n_cli++;
  g_subprocess_communicate_utf8_async(p, NULL, self->cancel, on_cli_done, self);
  g_object_unref(p);
}

void em_sweeps_page_pause(EmSweepsPage *self) { tell(self, "pause"); }
void em_sweeps_page_cancel(EmSweepsPage *self) { tell(self, "cancel"); }
