/* em-data-page.c: see the header. A worker opens the dataset, counts the
 * labels and renders the preview samples to RGB pixels (scaled up with
 * nearest-neighbour); the main thread only makes textures and labels. */
#include "em-data-page.h"

#include <math.h>
#include <string.h>

#include "em-data.h"
#include "em-plugin.h"
#include "em-train.h"

#define N_PREVIEWS 32
#define MAX_CLASS_ROWS 100 /* class count rows listed; a line counts the rest */
#define PREVIEW_PX 84

static const char *fmnist_classes[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                       "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
static const char *cifar_classes[] = {"airplane", "automobile", "bird", "cat", "deer",
                                      "dog", "frog", "horse", "ship", "truck"};
/* The built-in kinds, in the dropdown's order (em-data-page.ui); dataset
 * kinds from plugins follow them, appended when the page is made. */
static const char *kind_names[] = {"fashion-mnist", "cifar10", "csv", "synthetic"};
#define N_BUILTIN_KINDS G_N_ELEMENTS(kind_names)

typedef struct {
  char *name, *path;
  /* results */
  char *error;
  gint64 n;
  int n_classes;
  gint64 *counts;
  int n_previews, w, h; /* preview pixels, RGB, w x h each */
  GBytes *pixels[N_PREVIEWS];
  int label[N_PREVIEWS];
  char shape[64];
} load_job;

static void load_job_free(load_job *j) {
  g_free(j->name);
  g_free(j->path);
  g_free(j->error);
  g_free(j->counts);
  for (int i = 0; i < j->n_previews; i++) g_bytes_unref(j->pixels[i]);
  g_free(j);
}

struct _EmDataPage {
  GtkBox parent_instance;
  GtkDropDown *kind_dropdown;
  GtkEntry *path_entry;
  GtkLabel *info_label, *error_label;
  GtkFlowBox *samples_flow;
  GtkGrid *counts_grid;
  EmAppState *state;
  GCancellable *cancel;
  gboolean loading;
  load_job *last; /* the last finished load's figures (pixels dropped) */
  GtkFileChooserNative *chooser;
  GPtrArray *kinds; /* the dropdown's dataset names (char *), built-ins first */
};

G_DEFINE_FINAL_TYPE(EmDataPage, em_data_page, GTK_TYPE_BOX)

/* The dataset name of dropdown entry k (the first when out of range). */
static const char *kind_at(EmDataPage *self, guint k) {
  return k < self->kinds->len ? g_ptr_array_index(self->kinds, k) : kind_names[0];
}

static const char *class_name(const char *kind, int k, char *buf, size_t n) {
  if (!strcmp(kind, "fashion-mnist") && k < 10) return fmnist_classes[k];
  if (!strcmp(kind, "cifar10") && k < 10) return cifar_classes[k];
  snprintf(buf, n, "class %d", k);
  return buf;
}

/* ---- worker ---------------------------------------------------------------- */

static em_dataset *open_dataset(const load_job *j, em_error *err) {
  if (!strcmp(j->name, "fashion-mnist")) return em_dataset_fashion_mnist(j->path, true, err);
  if (!strcmp(j->name, "cifar10")) {
    if (!j->path) {
      em_error_set(err, EM_ERR_INVALID, "CIFAR-10 needs a folder: choose the one holding data_batch_1.bin .. data_batch_5.bin");
      return NULL;
    }
    return em_dataset_cifar10(j->path, true, err);
  }
  if (!strcmp(j->name, "csv")) {
    if (!j->path) {
      em_error_set(err, EM_ERR_INVALID, "CSV needs a file: choose one with numeric columns and the label last");
      return NULL;
    }
    /* as the Train page's run opens it (the same columns, its training
     * split), so what is shown here is what trains */
    return em_dataset_open_named("csv", j->path, true, NULL, 0, 0, err);
  }
  if (!strcmp(j->name, "synthetic")) {
    int64_t shape[] = {1, 28, 28};
    return em_dataset_synthetic(2000, 3, shape, 10, 0.5, 0, err);
  }
  const em_dataset_type *kind = em_dataset_type_find(j->name);
  if (!kind) {
    em_error_set(err, EM_ERR_INVALID, "no dataset kind '%s' (its plugin is not loaded)", j->name);
    return NULL;
  }
  if (!j->path) {
    em_error_set(err, EM_ERR_INVALID, "%s needs a folder: choose one (%s)", j->name,
                 kind->help ? kind->help : "see the plugin's documentation");
    return NULL;
  }
  return kind->open(j->path, true, NULL, err);
}

/* Sample x (C, H, W) or (D) into RGB pixels scaled up to about PREVIEW_PX. */
static GBytes *render(const float *x, int ndim, const int64_t *shape, gboolean unit, int *w_out,
                      int *h_out) {
  int c = 1, h = 1, w = 1;
  if (ndim == 3) {
    c = (int)shape[0];
    h = (int)shape[1];
    w = (int)shape[2];
  } else if (ndim == 2) {
    h = (int)shape[0];
    w = (int)shape[1];
  } else {
    w = (int)shape[0];
  }
  int rows = ndim == 1 ? 8 : h; /* a vector is drawn as a strip */
  float lo = 0, hi = 1;
  if (!unit) {
    int64_t n = (int64_t)c * h * w;
    lo = hi = x[0];
    for (int64_t i = 1; i < n; i++) {
      lo = fminf(lo, x[i]);
      hi = fmaxf(hi, x[i]);
    }
    if (hi <= lo) hi = lo + 1;
  }
  int big = w > rows ? w : rows;
  int s = big >= PREVIEW_PX ? 1 : PREVIEW_PX / big;
  int W = w * s, H = ndim == 1 ? 24 : rows * s;
  guint8 *px = g_malloc((size_t)W * H * 3);
  for (int yy = 0; yy < H; yy++)
    for (int xx = 0; xx < W; xx++) {
      int sx = xx / s, sy = ndim == 1 ? 0 : yy / s;
      for (int ch = 0; ch < 3; ch++) {
        int cc = c == 3 ? ch : 0;
        float v = x[((int64_t)cc * h + sy) * w + sx];
        float t = (v - lo) / (hi - lo);
        t = t < 0 ? 0 : t > 1 ? 1 : t;
        px[((size_t)yy * W + xx) * 3 + ch] = (guint8)lrintf(255 * t);
      }
    }
  *w_out = W;
  *h_out = H;
  return g_bytes_new_take(px, (size_t)W * H * 3);
}

static void load_thread(GTask *task, gpointer src, gpointer data, GCancellable *cancel) {
  (void)src;
  load_job *j = data;
  em_error err = {0};
  em_dataset *ds = open_dataset(j, &err);
  if (!ds) {
    j->error = g_strdup(err.msg);
    g_task_return_boolean(task, FALSE);
    return;
  }
  j->n = em_dataset_len(ds);
  j->n_classes = em_dataset_num_classes(ds);
  j->counts = g_new0(gint64, j->n_classes > 0 ? j->n_classes : 1);
  int64_t shape[EM_MAX_DIMS];
  int nd = em_dataset_sample_shape(ds, shape);
  GString *sh = g_string_new("(");
  for (int d = 0; d < nd; d++) g_string_append_printf(sh, "%s%lld", d ? ", " : "", (long long)shape[d]);
  g_string_append(sh, ")");
  g_strlcpy(j->shape, sh->str, sizeof j->shape);
  g_string_free(sh, TRUE);
  float *x = g_new(float, em_dataset_sample_numel(ds));
  gboolean unit = !strcmp(j->name, "fashion-mnist") || !strcmp(j->name, "cifar10");
  for (int64_t i = 0; i < j->n && !g_cancellable_is_cancelled(cancel); i++) {
    int64_t y;
    if (em_dataset_get(ds, i, x, &y, &err) != EM_OK) {
      j->error = g_strdup(err.msg);
      break;
    }
    if (y >= 0 && y < j->n_classes) j->counts[y]++;
  }
  int np = j->n < N_PREVIEWS ? (int)j->n : N_PREVIEWS;
  for (int k = 0; k < np && !j->error; k++) {
    int64_t i = (int64_t)k * j->n / np, y;
    if (em_dataset_get(ds, i, x, &y, &err) != EM_OK) {
      j->error = g_strdup(err.msg);
      break;
    }
    j->label[k] = (int)y;
    j->pixels[k] = render(x, nd, shape, unit, &j->w, &j->h);
    j->n_previews = k + 1;
  }
  g_free(x);
  em_dataset_free(ds);
  g_task_return_boolean(task, j->error == NULL);
}

/* ---- main thread ---------------------------------------------------------------- */

static void clear_results(EmDataPage *self) {
  GtkWidget *c;
  while ((c = gtk_widget_get_first_child(GTK_WIDGET(self->samples_flow))))
    gtk_flow_box_remove(self->samples_flow, c);
  while ((c = gtk_widget_get_first_child(GTK_WIDGET(self->counts_grid))))
    gtk_grid_remove(self->counts_grid, c);
}

static void show_results(EmDataPage *self, load_job *j) {
  clear_results(self);
  char buf[32];
  for (int k = 0; k < j->n_previews; k++) {
    GdkTexture *tex = gdk_memory_texture_new(j->w, j->h, GDK_MEMORY_R8G8B8, j->pixels[k],
                                             (gsize)j->w * 3);
    GtkWidget *pic = gtk_picture_new_for_paintable(GDK_PAINTABLE(tex));
    g_object_unref(tex);
    gtk_picture_set_can_shrink(GTK_PICTURE(pic), FALSE);
    GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
    gtk_box_append(GTK_BOX(box), pic);
    GtkWidget *l = gtk_label_new(class_name(j->name, j->label[k], buf, sizeof buf));
    gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_END);
    gtk_label_set_max_width_chars(GTK_LABEL(l), 11);
    gtk_widget_add_css_class(l, "caption");
    gtk_box_append(GTK_BOX(box), l);
    gtk_flow_box_append(self->samples_flow, box);
  }
  gint64 most = 1;
  for (int k = 0; k < j->n_classes; k++) most = MAX(most, j->counts[k]);
  for (int k = 0; k < j->n_classes && k < MAX_CLASS_ROWS; k++) {
    GtkWidget *name = gtk_label_new(class_name(j->name, k, buf, sizeof buf));
    gtk_label_set_xalign(GTK_LABEL(name), 0);
    GtkWidget *bar = gtk_level_bar_new_for_interval(0, (double)most);
    gtk_level_bar_set_value(GTK_LEVEL_BAR(bar), (double)j->counts[k]);
    gtk_widget_set_hexpand(bar, TRUE);
    gtk_widget_set_valign(bar, GTK_ALIGN_CENTER);
    char cnt[32];
    em_format_count(j->counts[k], cnt, sizeof cnt);
    GtkWidget *num = gtk_label_new(cnt);
    gtk_label_set_xalign(GTK_LABEL(num), 1);
    gtk_label_set_width_chars(GTK_LABEL(num), 7);
    gtk_grid_attach(self->counts_grid, name, 0, k, 1, 1);
    gtk_grid_attach(self->counts_grid, bar, 1, k, 1, 1);
    gtk_grid_attach(self->counts_grid, num, 2, k, 1, 1);
  }
  if (j->n_classes > MAX_CLASS_ROWS) { /* the rest are counted, not listed */
    gint64 rest = 0;
    for (int k = MAX_CLASS_ROWS; k < j->n_classes; k++) rest += j->counts[k];
    char rb[32];
    char *more = g_strdup_printf("… and %d more classes (%s samples)",
                                 j->n_classes - MAX_CLASS_ROWS, em_format_count(rest, rb, sizeof rb));
    GtkWidget *l = gtk_label_new(more);
    g_free(more);
    gtk_label_set_xalign(GTK_LABEL(l), 0);
    gtk_label_set_wrap(GTK_LABEL(l), TRUE);
    gtk_widget_add_css_class(l, "dim-label");
    gtk_widget_set_name(l, "more-classes");
    gtk_grid_attach(self->counts_grid, l, 0, MAX_CLASS_ROWS, 3, 1);
  }
  char nb[32];
  char *info = g_strdup_printf("%s: %s training samples of shape %s, %d classes%s%s",
                               j->name, em_format_count(j->n, nb, sizeof nb), j->shape, j->n_classes,
                               j->path ? " — " : "", j->path ? j->path : "");
  gtk_label_set_text(self->info_label, info);
  g_free(info);
}

static void on_loaded(GObject *src, GAsyncResult *res, gpointer data) {
  (void)data;
  EmDataPage *self = EM_DATA_PAGE(src);
  load_job *j = g_task_get_task_data(G_TASK(res));
  gboolean ok = g_task_propagate_boolean(G_TASK(res), NULL);
  if (g_task_get_cancellable(G_TASK(res)) != self->cancel) return; /* superseded: still loading */
  self->loading = FALSE;
  if (self->last) load_job_free(self->last);
  self->last = NULL;
  if (!ok) {
    char *m = g_strdup_printf("Could not load %s: %s", j->name, j->error ? j->error : "unknown error");
    gtk_label_set_text(self->error_label, m);
    g_free(m);
    gtk_widget_set_visible(GTK_WIDGET(self->error_label), TRUE);
    clear_results(self);
    gtk_label_set_text(self->info_label, "");
    self->last = g_new0(load_job, 1);
    self->last->error = g_strdup(j->error ? j->error : "unknown error");
    self->last->name = g_strdup(j->name);
    return;
  }
  gtk_widget_set_visible(GTK_WIDGET(self->error_label), FALSE);
  show_results(self, j);
  load_job *keep = g_new0(load_job, 1);
  keep->name = g_strdup(j->name);
  keep->n = j->n;
  keep->n_classes = j->n_classes;
  keep->n_previews = 0;
  keep->counts = g_memdup2(j->counts, sizeof(gint64) * (gsize)j->n_classes);
  keep->label[0] = j->n_previews; /* previews shown */
  self->last = keep;
  if (self->state) em_app_state_set_dataset(self->state, j->name, j->path);
}

void em_data_page_load(EmDataPage *self, const char *name, const char *path) {
  g_return_if_fail(EM_IS_DATA_PAGE(self));
  if (self->cancel) g_cancellable_cancel(self->cancel);
  g_clear_object(&self->cancel);
  self->cancel = g_cancellable_new();
  load_job *j = g_new0(load_job, 1);
  j->name = g_strdup(name);
  j->path = path && *path ? g_strdup(path) : NULL;
  self->loading = TRUE;
  gtk_label_set_text(self->info_label, "Loading…");
  GTask *task = g_task_new(self, self->cancel, on_loaded, NULL);
  g_task_set_task_data(task, j, (GDestroyNotify)load_job_free);
  g_task_set_return_on_cancel(task, FALSE);
  g_task_run_in_thread(task, load_thread);
  g_object_unref(task);
}

static void act_load(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmDataPage *self = EM_DATA_PAGE(w);
  guint k = gtk_drop_down_get_selected(self->kind_dropdown);
  em_data_page_load(self, kind_at(self, k), gtk_editable_get_text(GTK_EDITABLE(self->path_entry)));
}

static void on_chooser_response(GtkNativeDialog *d, int response, EmDataPage *self) {
  if (response == GTK_RESPONSE_ACCEPT) {
    GFile *f = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(d));
    char *path = g_file_get_path(f);
    gtk_editable_set_text(GTK_EDITABLE(self->path_entry), path ? path : "");
    g_free(path);
    g_object_unref(f);
    act_load(GTK_WIDGET(self), NULL, NULL);
  }
  g_clear_object(&self->chooser);
}

static void act_browse(GtkWidget *w, const char *n, GVariant *p) {
  (void)n;
  (void)p;
  EmDataPage *self = EM_DATA_PAGE(w);
  guint k = gtk_drop_down_get_selected(self->kind_dropdown);
  gboolean file = !strcmp(kind_at(self, k), "csv");
  GtkRoot *root = gtk_widget_get_root(w);
  g_clear_object(&self->chooser);
  self->chooser = gtk_file_chooser_native_new(
      file ? "Choose a CSV File" : "Choose the Dataset Folder",
      GTK_IS_WINDOW(root) ? GTK_WINDOW(root) : NULL,
      file ? GTK_FILE_CHOOSER_ACTION_OPEN : GTK_FILE_CHOOSER_ACTION_SELECT_FOLDER, "_Choose",
      "_Cancel");
  g_signal_connect_object(self->chooser, "response", G_CALLBACK(on_chooser_response), self, 0);
  gtk_native_dialog_show(GTK_NATIVE_DIALOG(self->chooser));
}

static void on_path_activate(GtkEntry *e, EmDataPage *self) {
  (void)e;
  act_load(GTK_WIDGET(self), NULL, NULL);
}

static void on_kind_changed(GtkDropDown *dd, GParamSpec *ps, EmDataPage *self) {
  (void)ps;
  guint k = gtk_drop_down_get_selected(dd);
  static const char *hints[] = {"default: /usr/share/datasets/fashion-mnist",
                                "folder holding data_batch_1.bin .. 5 and test_batch.bin",
                                "CSV file: numeric columns, the label last (1 row in 5 tests)",
                                "seeded Gaussian blobs (no files)"};
  if (k < G_N_ELEMENTS(hints)) {
    gtk_entry_set_placeholder_text(self->path_entry, hints[k]);
  } else { /* a plugin's kind: its own one-line help */
    const em_dataset_type *kind = em_dataset_type_find(kind_at(self, k));
    gtk_entry_set_placeholder_text(self->path_entry, kind && kind->help ? kind->help : "folder");
  }
}

gboolean em_data_page_is_loading(EmDataPage *self) { return self->loading; }
int em_data_page_get_n_previews(EmDataPage *self) {
  return self->last && !self->last->error ? self->last->label[0] : 0;
}
gint64 em_data_page_get_n_samples(EmDataPage *self) { return self->last ? self->last->n : 0; }
int em_data_page_get_n_classes(EmDataPage *self) { return self->last ? self->last->n_classes : 0; }
gint64 em_data_page_get_class_count(EmDataPage *self, int k) {
  return self->last && self->last->counts && k >= 0 && k < self->last->n_classes
             ? self->last->counts[k]
             : 0;
}
const char *em_data_page_get_error(EmDataPage *self) { return self->last ? self->last->error : NULL; }

/* The first time the page is shown it loads the chosen dataset: decoding
 * 60,000 images is not worth doing (and competing with a training for the
 * CPU) until someone looks. */
static void em_data_page_map(GtkWidget *w) {
  GTK_WIDGET_CLASS(em_data_page_parent_class)->map(w);
  EmDataPage *self = EM_DATA_PAGE(w);
  if (!self->last && !self->loading) act_load(w, NULL, NULL);
}

static void em_data_page_dispose(GObject *obj) {
  EmDataPage *self = EM_DATA_PAGE(obj);
  if (self->cancel) g_cancellable_cancel(self->cancel);
  g_clear_object(&self->cancel);
  if (self->chooser) gtk_native_dialog_destroy(GTK_NATIVE_DIALOG(self->chooser));
  g_clear_object(&self->chooser);
  g_clear_object(&self->state);
  g_clear_pointer(&self->kinds, g_ptr_array_unref);
  gtk_widget_dispose_template(GTK_WIDGET(obj), EM_TYPE_DATA_PAGE);
  G_OBJECT_CLASS(em_data_page_parent_class)->dispose(obj);
}

static void em_data_page_finalize(GObject *obj) {
  EmDataPage *self = EM_DATA_PAGE(obj);
  if (self->last) load_job_free(self->last);
  G_OBJECT_CLASS(em_data_page_parent_class)->finalize(obj);
}

static void em_data_page_class_init(EmDataPageClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  oc->dispose = em_data_page_dispose;
  oc->finalize = em_data_page_finalize;
  wc->map = em_data_page_map;
  gtk_widget_class_set_template_from_resource(wc, "/org/ember/Workbench/builder/em-data-page.ui");
  gtk_widget_class_bind_template_child(wc, EmDataPage, kind_dropdown);
  gtk_widget_class_bind_template_child(wc, EmDataPage, path_entry);
  gtk_widget_class_bind_template_child(wc, EmDataPage, info_label);
  gtk_widget_class_bind_template_child(wc, EmDataPage, error_label);
  gtk_widget_class_bind_template_child(wc, EmDataPage, samples_flow);
  gtk_widget_class_bind_template_child(wc, EmDataPage, counts_grid);
  gtk_widget_class_install_action(wc, "data.load", NULL, act_load);
  gtk_widget_class_install_action(wc, "data.browse", NULL, act_browse);
}

static void em_data_page_init(EmDataPage *self) {
  gtk_widget_init_template(GTK_WIDGET(self));
  /* the built-in kinds of the .ui file, then those plugins registered */
  self->kinds = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; i < N_BUILTIN_KINDS; i++) g_ptr_array_add(self->kinds, g_strdup(kind_names[i]));
  GtkStringList *names = GTK_STRING_LIST(gtk_drop_down_get_model(self->kind_dropdown));
  for (int i = 0; i < em_dataset_type_count(); i++) {
    const em_dataset_type *kind = em_dataset_type_at(i);
    if (!kind) continue;
    g_ptr_array_add(self->kinds, g_strdup(kind->name));
    char *label = g_strdup_printf("%s (plugin)", kind->name);
    gtk_string_list_append(names, label);
    g_free(label);
  }
  g_signal_connect_object(self->kind_dropdown, "notify::selected", G_CALLBACK(on_kind_changed),
                          self, 0);
  on_kind_changed(self->kind_dropdown, NULL, self);
  g_signal_connect_object(self->path_entry, "activate", G_CALLBACK(on_path_activate), self, 0);
}

GtkWidget *em_data_page_new(EmAppState *state) {
  EmDataPage *self = g_object_new(EM_TYPE_DATA_PAGE, NULL);
  self->state = state ? g_object_ref(state) : NULL;
  const char *name = state ? em_app_state_get_dataset_name(state) : NULL;
  guint k = 0;
  for (guint i = 0; name && i < self->kinds->len; i++)
    if (!strcmp(name, g_ptr_array_index(self->kinds, i))) k = i;
  gtk_drop_down_set_selected(self->kind_dropdown, k);
  const char *dir = state ? em_app_state_get_dataset_dir(state) : NULL;
  if (dir) gtk_editable_set_text(GTK_EDITABLE(self->path_entry), dir);
  return GTK_WIDGET(self);
}
