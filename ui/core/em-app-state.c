/* em-app-state.c: the workbench's shared state (see the header). */
#include "em-app-state.h"

#include "em-device.h"
#include "em-store.h"

struct _EmAppState {
  GObject parent_instance;
  char *registry_dir;
  char *spec_json, *spec_path;
  char *dataset_name, *dataset_dir;
  gboolean training;
  em_device device, run_device;
};

G_DEFINE_FINAL_TYPE(EmAppState, em_app_state, G_TYPE_OBJECT)

enum {
  SIG_SPEC_CHANGED,
  SIG_DATASET_CHANGED,
  SIG_DEVICE_CHANGED,
  SIG_RUN_STARTED,
  SIG_RUN_PROGRESS,
  SIG_RUN_FINISHED,
  SIG_PROFILE_READY,
  SIG_REGISTRY_CHANGED,
  SIG_LAYER_SELECTED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

static void em_app_state_finalize(GObject *obj) {
  EmAppState *self = EM_APP_STATE(obj);
  g_free(self->registry_dir);
  g_free(self->spec_json);
  g_free(self->spec_path);
  g_free(self->dataset_name);
  g_free(self->dataset_dir);
  G_OBJECT_CLASS(em_app_state_parent_class)->finalize(obj);
}

static void em_app_state_class_init(EmAppStateClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  oc->finalize = em_app_state_finalize;
  GType t = G_TYPE_FROM_CLASS(klass);
  signals[SIG_SPEC_CHANGED] = g_signal_new("spec-changed", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                           NULL, G_TYPE_NONE, 0);
  signals[SIG_DATASET_CHANGED] = g_signal_new("dataset-changed", t, G_SIGNAL_RUN_LAST, 0, NULL,
                                              NULL, NULL, G_TYPE_NONE, 0);
  signals[SIG_DEVICE_CHANGED] = g_signal_new("device-changed", t, G_SIGNAL_RUN_LAST, 0, NULL,
                                             NULL, NULL, G_TYPE_NONE, 0);
  signals[SIG_RUN_STARTED] = g_signal_new("run-started", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                          NULL, G_TYPE_NONE, 1, G_TYPE_INT64);
  signals[SIG_RUN_PROGRESS] = g_signal_new("run-progress", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                           NULL, G_TYPE_NONE, 1, G_TYPE_POINTER);
  signals[SIG_RUN_FINISHED] = g_signal_new("run-finished", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                           NULL, G_TYPE_NONE, 3, G_TYPE_INT64, G_TYPE_INT,
                                           G_TYPE_STRING);
  signals[SIG_PROFILE_READY] = g_signal_new("profile-ready", t, G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                                            NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
  signals[SIG_REGISTRY_CHANGED] = g_signal_new("registry-changed", t, G_SIGNAL_RUN_LAST, 0, NULL,
                                               NULL, NULL, G_TYPE_NONE, 0);
  signals[SIG_LAYER_SELECTED] = g_signal_new("layer-selected", t, G_SIGNAL_RUN_LAST, 0, NULL,
                                             NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
}

static void em_app_state_init(EmAppState *self) {
  self->dataset_name = g_strdup("fashion-mnist");
}

EmAppState *em_app_state_new(const char *registry_dir) {
  EmAppState *self = g_object_new(EM_TYPE_APP_STATE, NULL);
  if (registry_dir) {
    self->registry_dir = g_strdup(registry_dir);
  } else {
    char dir[4096];
    em_error err = {0};
    if (em_store_default_dir(dir, sizeof dir, &err) == EM_OK) self->registry_dir = g_strdup(dir);
    else self->registry_dir = g_build_filename(g_get_user_data_dir(), "ember", NULL);
  }
  return self;
}

const char *em_app_state_get_registry_dir(EmAppState *self) { return self->registry_dir; }

void em_app_state_set_spec(EmAppState *self, const char *spec_json, const char *path) {
  char *j = g_strdup(spec_json), *p = g_strdup(path);
  g_free(self->spec_json);
  g_free(self->spec_path);
  self->spec_json = j;
  self->spec_path = p;
  g_signal_emit(self, signals[SIG_SPEC_CHANGED], 0);
}

const char *em_app_state_get_spec_json(EmAppState *self) { return self->spec_json; }
const char *em_app_state_get_spec_path(EmAppState *self) { return self->spec_path; }

void em_app_state_set_dataset(EmAppState *self, const char *name, const char *dir) {
  char *n = g_strdup(name ? name : "fashion-mnist"), *d = g_strdup(dir);
  g_free(self->dataset_name);
  g_free(self->dataset_dir);
  self->dataset_name = n;
  self->dataset_dir = d;
  g_signal_emit(self, signals[SIG_DATASET_CHANGED], 0);
}

const char *em_app_state_get_dataset_name(EmAppState *self) { return self->dataset_name; }
const char *em_app_state_get_dataset_dir(EmAppState *self) { return self->dataset_dir; }

void em_app_state_set_device(EmAppState *self, em_device device) {
  if (em_device_eq(self->device, device)) return;
  self->device = device;
  g_signal_emit(self, signals[SIG_DEVICE_CHANGED], 0);
}

em_device em_app_state_get_device(EmAppState *self) { return self->device; }
em_device em_app_state_get_run_device(EmAppState *self) { return self->run_device; }

void em_app_state_run_started(EmAppState *self, gint64 run_id) {
  self->training = TRUE;
  self->run_device = self->device;
  g_signal_emit(self, signals[SIG_RUN_STARTED], 0, run_id);
}

void em_app_state_run_progress(EmAppState *self, const EmTrainUpdate *u) {
  g_signal_emit(self, signals[SIG_RUN_PROGRESS], 0, (gpointer)u);
}

void em_app_state_run_finished(EmAppState *self, gint64 run_id, int status, const char *message) {
  self->training = FALSE;
  g_signal_emit(self, signals[SIG_RUN_FINISHED], 0, run_id, status, message);
  g_signal_emit(self, signals[SIG_REGISTRY_CHANGED], 0);
}

void em_app_state_profile_ready(EmAppState *self, const char *trace_path) {
  g_signal_emit(self, signals[SIG_PROFILE_READY], 0, trace_path);
}

gboolean em_app_state_is_training(EmAppState *self) { return self->training; }

void em_app_state_registry_changed(EmAppState *self) {
  g_signal_emit(self, signals[SIG_REGISTRY_CHANGED], 0);
}

void em_app_state_select_layer(EmAppState *self, const char *layer) {
  g_signal_emit(self, signals[SIG_LAYER_SELECTED], 0, layer);
}
