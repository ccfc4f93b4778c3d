/* em-model-doc.h: the model document's state beside its JSON: the file
 * it belongs to, whether it differs from that file (the modified marker,
 * the confirm-or-save on quit, close and open), the undo and redo
 * history, and the recovery copy that survives a crash.
 *
 * The Builder (and the canvas after it) edits a json_t and tells the
 * document each state it reaches, as the spec's text (em_model_doc_note):
 * a state that differs from the current one is a new undo step. States
 * are whole texts (a spec is a few KiB), so undo and redo are exact and
 * need no inverse per edit kind. A state the person can lose (modified)
 * is written to the recovery file at once; saving, discarding or undoing
 * back to the saved state removes it. Pure GLib: no widgets. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct EmModelDoc EmModelDoc;

/* recovery: the recovery file's path (NULL: em_model_doc_recovery_path()). */
EmModelDoc *em_model_doc_new(const char *recovery);
void em_model_doc_free(EmModelDoc *d);

/* A document loaded from path (NULL: untitled, or a copy Save asks a
 * place for) with text as its saved state: the history restarts, and it
 * is unmodified. */
void em_model_doc_reset(EmModelDoc *d, const char *text, const char *path);
/* A document that starts modified (a recovered one): text differs from
 * what path holds (the saved state is unknown). */
void em_model_doc_reset_modified(EmModelDoc *d, const char *text, const char *path);
/* The document reached text: TRUE when that is a new state (an undo step;
 * the redo steps after the current one go). */
gboolean em_model_doc_note(EmModelDoc *d, const char *text);
/* The state to load to undo (redo) the last step, or NULL when there is
 * none; the document then stands at it. */
const char *em_model_doc_undo(EmModelDoc *d);
const char *em_model_doc_redo(EmModelDoc *d);
gboolean em_model_doc_can_undo(const EmModelDoc *d);
gboolean em_model_doc_can_redo(const EmModelDoc *d);
/* TRUE when the current state is not the one last saved or loaded, and
 * the person has not chosen to discard it (until the next change). */
gboolean em_model_doc_is_modified(const EmModelDoc *d);
/* The current state was written to path. */
void em_model_doc_saved(EmModelDoc *d, const char *path);
const char *em_model_doc_path(const EmModelDoc *d);
/* The person chose to drop the unsaved state: no recovery copy, and it
 * counts as unmodified until the next change. */
void em_model_doc_discard_recovery(EmModelDoc *d);

/* $XDG_STATE_HOME/ember/unsaved-model.json (g_free). */
char *em_model_doc_recovery_path(void);
/* A recovery file left by a session that ended with unsaved changes:
 * TRUE with the spec's text, the file it belonged to (NULL: untitled)
 * and when it was written (g_free each). */
gboolean em_model_doc_read_recovery(const char *recovery, char **text, char **path, char **when);

G_END_DECLS
