/* em-train-page.h: the Train page: the training settings, Start / Pause /
 * Resume / Stop (actions train.start, train.pause, train.resume,
 * train.stop), live loss and accuracy charts, throughput and ETA. It owns
 * the session's worker (em-train-session.h) and is the one page that
 * emits EmAppState's run signals, coalesced by one 50 ms timer. */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"
#include "em-train.h"

G_BEGIN_DECLS

#define EM_TYPE_TRAIN_PAGE (em_train_page_get_type())
G_DECLARE_FINAL_TYPE(EmTrainPage, em_train_page, EM, TRAIN_PAGE, GtkWidget)

GtkWidget *em_train_page_new(EmAppState *state);

/* Sets a number of the form: "lr", "batch", "epochs", "seed", "threads",
 * "clip", "checkpoint-every", "limit". FALSE for an unknown field. */
gboolean em_train_page_set_value(EmTrainPage *self, const char *field, double value);
double em_train_page_get_value(EmTrainPage *self, const char *field);
/* The "profile a window" check box: the run's 20-batch profiled window
 * ends in EmAppState "profile-ready" with its trace file. */
void em_train_page_set_profile(EmTrainPage *self, gboolean profile);
/* The loss and accuracy charts (EmLineChart). */
GtkWidget *em_train_page_get_loss_chart(EmTrainPage *self);
GtkWidget *em_train_page_get_accuracy_chart(EmTrainPage *self);
/* The status line while no run goes (a run's own lines replace it). */
void em_train_page_set_idle_status(EmTrainPage *self, const char *text);
/* Shows the registry's newest run (its curves, a line on how it ended)
 * until a run starts: read on a worker thread (em-train-last-run.c). The
 * page does it when made. */
void em_train_page_show_last_run(EmTrainPage *self, const char *registry_dir);
/* TRUE while a session runs (paused included). */
gboolean em_train_page_is_running(EmTrainPage *self);
gboolean em_train_page_is_paused(EmTrainPage *self);
/* The device selector: the CPU, each CUDA device the engine counts, and
 * the reference device when offered (em-devices.h). The chosen device is
 * EmAppState's (em_app_state_set_device) and goes into the run's config.
 * set_device parses "cpu", "cuda", "cuda:N", "ref" and selects it when
 * em_device_check accepts it; otherwise the selection stays, the status
 * line says why and FALSE is returned with that message. */
gboolean em_train_page_set_device(EmTrainPage *self, const char *device, GError **error);
char *em_train_page_get_device(EmTrainPage *self); /* "cpu", "cuda:0"; g_free */
guint em_train_page_get_n_devices(EmTrainPage *self);
const char *em_train_page_get_device_label(EmTrainPage *self, guint i); /* NULL past the end */
gboolean em_train_page_select_device_index(EmTrainPage *self, guint i);
/* "No CUDA device found: <em_device_check's message>" (the note's tooltip:
 * the form shows one line), or NULL. */
const char *em_train_page_get_device_note(EmTrainPage *self);
/* The status line: what the run does or how it ended, and under it the
 * run's latest warning (a pre-flight or out-of-memory batch change). */
const char *em_train_page_get_status(EmTrainPage *self);
/* The config Start would run with (the spec's training section under
 * the form); FALSE and *error (g_free) when it cannot run as set. */
gboolean em_train_page_get_config(EmTrainPage *self, em_train_config *cfg, char **error);

G_END_DECLS
