/* em-model-doc.c: see the header. The history is an array of texts and a
 * cursor; the saved state is kept as text too (NULL: unknown, a
 * recovered document), so "modified" is one comparison. The recovery
 * file is JSON (jansson): {"path", "written", "spec": the text}, written
 * whole with g_file_set_contents (a rename: never half a file). */
#include "em-model-doc.h"

#include <glib/gstdio.h>
#include <jansson.h>
#include <string.h>

/* Steps kept; the oldest go first. */
#define HISTORY_MAX 200

struct EmModelDoc {
  GPtrArray *states; /* char *, oldest first */
  guint cur;         /* index of the current state */
  char *saved;       /* the text the file holds, NULL: unknown */
  char *path;
  char *recovery;
  gboolean recovery_written;
  gboolean discarded; /* the person chose to lose the current state */
};

char *em_model_doc_recovery_path(void) {
  return g_build_filename(g_get_user_state_dir(), "ember", "unsaved-model.json", NULL);
}

EmModelDoc *em_model_doc_new(const char *recovery) {
  EmModelDoc *d = g_new0(EmModelDoc, 1);
  d->states = g_ptr_array_new_with_free_func(g_free);
  d->recovery = recovery ? g_strdup(recovery) : em_model_doc_recovery_path();
  return d;
}

void em_model_doc_free(EmModelDoc *d) {
  if (!d) return;
  g_ptr_array_unref(d->states);
  g_free(d->saved);
  g_free(d->path);
  g_free(d->recovery);
  g_free(d);
}

static const char *current(const EmModelDoc *d) {
  return d->states->len ? g_ptr_array_index(d->states, d->cur) : NULL;
}

static gboolean differs(const EmModelDoc *d) {
  return current(d) && g_strcmp0(current(d), d->saved) != 0;
}

gboolean em_model_doc_is_modified(const EmModelDoc *d) { return !d->discarded && differs(d); }

static void remove_recovery(EmModelDoc *d) {
  if (!d->recovery_written) return;
  g_unlink(d->recovery);
  d->recovery_written = FALSE;
}

/* The recovery copy follows the modified state. A failure to write it
 * is not the person's problem now: the next edit tries again. */
static void sync_recovery(EmModelDoc *d) {
  if (!em_model_doc_is_modified(d)) {
    remove_recovery(d);
    return;
  }
  json_t *o = json_object();
  json_object_set_new(o, "path", d->path ? json_string(d->path) : json_null());
  GDateTime *now = g_date_time_new_now_local();
  char *when = g_date_time_format_iso8601(now);
  g_date_time_unref(now);
  json_object_set_new(o, "written", json_string(when));
  g_free(when);
  json_object_set_new(o, "spec", json_string(current(d)));
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(o);
  char *dir = g_path_get_dirname(d->recovery);
  g_mkdir_with_parents(dir, 0700);
  g_free(dir);
  if (text && g_file_set_contents(d->recovery, text, -1, NULL)) d->recovery_written = TRUE;
  free(text);
}

static void restart(EmModelDoc *d, const char *text, const char *path, const char *saved) {
  d->discarded = FALSE;
  g_ptr_array_set_size(d->states, 0);
  g_ptr_array_add(d->states, g_strdup(text));
  d->cur = 0;
  g_free(d->saved);
  d->saved = g_strdup(saved);
  char *p = g_strdup(path); /* path may be d->path */
  g_free(d->path);
  d->path = p;
  sync_recovery(d);
}

void em_model_doc_reset(EmModelDoc *d, const char *text, const char *path) {
  restart(d, text, path, text);
}

void em_model_doc_reset_modified(EmModelDoc *d, const char *text, const char *path) {
  restart(d, text, path, NULL);
}

gboolean em_model_doc_note(EmModelDoc *d, const char *text) {
  if (!d->states->len) {
    em_model_doc_reset(d, text, NULL);
    return FALSE;
  }
  if (!g_strcmp0(current(d), text)) return FALSE;
  d->discarded = FALSE;
  g_ptr_array_set_size(d->states, d->cur + 1); /* the redo steps go */
  g_ptr_array_add(d->states, g_strdup(text));
  if (d->states->len > HISTORY_MAX) g_ptr_array_remove_index(d->states, 0);
  d->cur = d->states->len - 1;
  sync_recovery(d);
  return TRUE;
}

gboolean em_model_doc_can_undo(const EmModelDoc *d) { return d->cur > 0; }
gboolean em_model_doc_can_redo(const EmModelDoc *d) { return d->cur + 1 < d->states->len; }

const char *em_model_doc_undo(EmModelDoc *d) {
  if (!em_model_doc_can_undo(d)) return NULL;
  d->discarded = FALSE;
  d->cur--;
  sync_recovery(d);
  return current(d);
}

const char *em_model_doc_redo(EmModelDoc *d) {
  if (!em_model_doc_can_redo(d)) return NULL;
  d->discarded = FALSE;
  d->cur++;
  sync_recovery(d);
  return current(d);
}

void em_model_doc_saved(EmModelDoc *d, const char *path) {
  g_free(d->saved);
  d->saved = g_strdup(current(d));
  char *p = g_strdup(path);
  g_free(d->path);
  d->path = p;
  sync_recovery(d);
}

const char *em_model_doc_path(const EmModelDoc *d) { return d->path; }

void em_model_doc_discard_recovery(EmModelDoc *d) {
  d->discarded = TRUE;
  d->recovery_written = TRUE; /* remove whatever copy is there */
  remove_recovery(d);
}

gboolean em_model_doc_read_recovery(const char *recovery, char **text, char **path, char **when) {
  *text = *path = *when = NULL;
  json_t *o = json_load_file(recovery, 0, NULL);
  const char *spec = json_string_value(json_object_get(o, "spec"));
  if (spec) {
    *text = g_strdup(spec);
    *path = g_strdup(json_string_value(json_object_get(o, "path")));
    *when = g_strdup(json_string_value(json_object_get(o, "written")));
  }
  json_decref(o);
  return spec != NULL;
}
