/* em-run-row.c: see the header. */
#include "em-run-row.h"

#include <math.h>
#include <string.h>
#include <time.h>

typedef struct {
  char *text;
  double number;
} extra_value;

static void extra_value_free(gpointer p) {
  extra_value *v = p;
  g_free(v->text);
  g_free(v);
}

struct _EmRunRow {
  GObject parent_instance;
  em_run run;
  char *tags;
  GHashTable *extra; /* column ("config.optim.lr") -> extra_value, or NULL */
};

G_DEFINE_FINAL_TYPE(EmRunRow, em_run_row, G_TYPE_OBJECT)

static void em_run_row_finalize(GObject *object) {
  EmRunRow *self = EM_RUN_ROW(object);
  g_free(self->run.name);
  g_free(self->run.model);
  g_free(self->run.host);
  g_free(self->run.device);
  g_free(self->run.engine_version);
  g_free(self->run.message);
  g_free(self->tags);
  if (self->extra) g_hash_table_unref(self->extra);
  G_OBJECT_CLASS(em_run_row_parent_class)->finalize(object);
}

static void em_run_row_class_init(EmRunRowClass *klass) {
  G_OBJECT_CLASS(klass)->finalize = em_run_row_finalize;
}

static void em_run_row_init(EmRunRow *self) {
  (void)self;
}

EmRunRow *em_run_row_new(const em_run *r) {
  EmRunRow *self = g_object_new(EM_TYPE_RUN_ROW, NULL);
  self->run = *r;
  self->run.name = g_strdup(r->name ? r->name : "");
  self->run.model = g_strdup(r->model ? r->model : "");
  self->run.host = g_strdup(r->host);
  self->run.device = g_strdup(r->device);
  self->run.engine_version = g_strdup(r->engine_version);
  self->run.message = g_strdup(r->message);
  self->run.spec_json = self->run.config_json = self->run.spec_sha256 = NULL;
  self->run.dataset_name = self->run.dataset_path = self->run.dataset_sha256 = NULL;
  self->tags = g_strdup("");
  return self;
}

static gboolean same_double(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

void em_run_row_set_extra(EmRunRow *self, const char *column, const char *text, double number) {
  if (!self->extra)
    self->extra = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, extra_value_free);
  extra_value *v = g_new(extra_value, 1);
  v->text = g_strdup(text ? text : "");
  v->number = number;
  g_hash_table_insert(self->extra, g_strdup(column), v);
}

const char *em_run_row_get_extra(EmRunRow *self, const char *column, double *number) {
  extra_value *v = self->extra ? g_hash_table_lookup(self->extra, column) : NULL;
  if (number) *number = v ? v->number : NAN;
  return v ? v->text : "";
}

static gboolean same_extra(EmRunRow *a, EmRunRow *b) {
  guint na = a->extra ? g_hash_table_size(a->extra) : 0, nb = b->extra ? g_hash_table_size(b->extra) : 0;
  if (na != nb) return FALSE;
  if (!na) return TRUE;
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init(&it, a->extra);
  while (g_hash_table_iter_next(&it, &k, &v)) {
    extra_value *w = g_hash_table_lookup(b->extra, k), *x = v;
    if (!w || g_strcmp0(w->text, x->text) || !same_double(w->number, x->number)) return FALSE;
  }
  return TRUE;
}

gboolean em_run_row_equal(EmRunRow *self, EmRunRow *other) {
  return em_run_row_same(self, &other->run, other->tags) && same_extra(self, other);
}

gboolean em_run_row_same(EmRunRow *self, const em_run *r, const char *tags) {
  const em_run *o = &self->run;
  return o->id == r->id && o->status == r->status && o->steps == r->steps &&
         o->parent_run == r->parent_run && same_double(o->started, r->started) &&
         same_double(o->ended, r->ended) &&
         same_double(o->final_test_accuracy, r->final_test_accuracy) &&
         same_double(o->final_test_loss, r->final_test_loss) &&
         same_double(o->final_train_loss, r->final_train_loss) &&
         !g_strcmp0(o->name, r->name ? r->name : "") && !g_strcmp0(o->model, r->model ? r->model : "") &&
         !g_strcmp0(o->message, r->message) && !g_strcmp0(o->device, r->device) &&
         !g_strcmp0(self->tags, tags ? tags : "");
}

const em_run *em_run_row_get(EmRunRow *self) {
  return &self->run;
}

const char *em_run_row_get_tags(EmRunRow *self) {
  return self->tags;
}

void em_run_row_set_tags(EmRunRow *self, const char *tags) {
  g_free(self->tags);
  self->tags = g_strdup(tags ? tags : "");
}

void em_run_row_format(EmRunRow *self, const char *column, char *buf, size_t cap) {
  const em_run *r = &self->run;
  buf[0] = 0;
  if (strcmp(column, "id") == 0) {
    g_snprintf(buf, cap, "%" G_GINT64_FORMAT, (gint64)r->id);
  } else if (strcmp(column, "name") == 0) {
    g_snprintf(buf, cap, "%s", r->name);
  } else if (strcmp(column, "model") == 0) {
    g_snprintf(buf, cap, "%s", r->model);
  } else if (strcmp(column, "status") == 0) {
    g_snprintf(buf, cap, "%s", em_run_status_name(r->status));
  } else if (strcmp(column, "started") == 0) {
    time_t t = (time_t)r->started;
    struct tm tm;
    if (localtime_r(&t, &tm)) strftime(buf, cap, "%Y-%m-%d %H:%M", &tm);
  } else if (strcmp(column, "duration") == 0) {
    double end = r->ended > 0 ? r->ended : (double)g_get_real_time() / 1e6;
    double d = end - r->started;
    if (d < 0) d = 0;
    if (d < 60) g_snprintf(buf, cap, "%.1fs", d);
    else if (d < 3600) g_snprintf(buf, cap, "%dm %02ds", (int)d / 60, (int)d % 60);
    else g_snprintf(buf, cap, "%dh %02dm", (int)d / 3600, ((int)d / 60) % 60);
  } else if (strcmp(column, "steps") == 0) {
    g_snprintf(buf, cap, "%" G_GINT64_FORMAT, (gint64)r->steps);
  } else if (strcmp(column, "accuracy") == 0) {
    em_run_row_format_metric(r->final_test_accuracy, TRUE, buf, cap);
  } else if (strcmp(column, "loss") == 0) {
    em_run_row_format_metric(r->final_test_loss, FALSE, buf, cap);
  } else if (strcmp(column, "tags") == 0) {
    g_snprintf(buf, cap, "%s", self->tags);
  } else {
    g_snprintf(buf, cap, "%s", em_run_row_get_extra(self, column, NULL));
  }
}

void em_run_row_format_metric(double v, gboolean percent, char *buf, size_t cap) {
  if (cap) buf[0] = 0;
  if (isnan(v)) return;
  if (isinf(v)) {
    g_snprintf(buf, cap, "%s", v > 0 ? "inf" : "-inf");
    return;
  }
  double x = percent ? 100 * v : v, a = fabs(x);
  const char *unit = percent ? "%" : "";
  /* fixed where it reads well; a plugin's or a diverged run's 1e300 would
   * otherwise print as a 300-digit number */
  if (x == 0 || (a >= (percent ? 0.01 : 1e-4) && a < 1e6))
    g_snprintf(buf, cap, percent ? "%.2f%s" : "%.4f%s", x, unit);
  else
    g_snprintf(buf, cap, "%.4g%s", x, unit);
}
