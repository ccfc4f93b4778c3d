/* em-sweeps-page-private.h: what the Sweeps page's files share (this
 * folder only): the page's struct, the snapshot a worker reads from the
 * registry (em-sweeps-read.c), the view it fills (em-sweeps-view.c) and
 * the form and the runner's commands (em-sweeps-start.c). */
#pragma once

#include "em-line-chart.h"
#include "em-parallel-coords.h"
#include "em-sweep-desc.h"
#include "em-sweep-stats.h"
#include "em-sweeps-page.h"
#include "em-sweeps.h"

/* One read of the registry, made on a worker thread. */
typedef struct {
  char *error;             /* the registry could not be read (NULL: it was) */
  em_sweep_row *sweeps;    /* every sweep, by id */
  int n_sweeps;
  char *sweeps_digest;     /* what the list shows, to see whether it changed */
  gint64 sweep;            /* the sweep read (0: none) */
  int sweep_index;         /* its row in sweeps */
  em_trial_row *trials;
  int n_trials;
  gboolean have_desc;
  em_tune_desc d;
  gboolean runner_alive;   /* its runner's process is there (or on another host) */
  em_sweep_table table;    /* the trials as the parallel coordinates draw them */
  double eta2[EM_TUNE_MAX_PARAMS];
  int n_eta;               /* the completed trials the importances used */
  int n_done;              /* completed trials, in finish order: */
  double *done_y, *best_y; /* (n_done) each one's metric, the best so far */
  int best;                /* the best trial's index in trials (-1: none) */
  char *digest;            /* the sweep's state, to see whether it changed */
} EmSweepSnapshot;

void em_sweep_snapshot_free(EmSweepSnapshot *s);
/* Reads the registry in dir: the sweeps, and the trials of sweep want (0:
 * the newest) or of the one named want_name (a sweep just started). */
EmSweepSnapshot *em_sweep_snapshot_read(const char *dir, gint64 want, const char *want_name);

typedef struct {
  GtkEntry *path;
  GtkDropDown *kind;
  GtkEntry *values;
} EmSweepParamRow;

struct _EmSweepsPage {
  GtkBox parent_instance;
  EmAppState *state;
  GWeakRef compare;

  /* the template */
  GtkDropDown *sweep_drop;
  GtkToggleButton *new_toggle;
  GtkButton *pause_button, *cancel_button, *resume_button, *compare_button, *register_button;
  GtkLabel *status_label, *base_label, *form_message, *importance_note;
  GtkRevealer *form_revealer;
  GtkGrid *params_grid, *importance_grid;
  GtkDropDown *sampler_drop, *direction_drop, *pruner_drop;
  GtkEntry *metric_entry;
  GtkSpinButton *trials_spin, *parallel_spin, *limit_spin, *epochs_spin;
  GtkButton *start_button;
  GtkFrame *pc_frame, *best_frame;
  GtkWidget *side;            /* the best so far and the importances (hidden with the form) */
  GtkColumnView *trials_view;
  EmSweepParamRow rows[EM_SWEEP_FORM_PARAMS];

  /* made in code */
  EmParallelCoords *pc;
  EmLineChart *best_chart;
  GListStore *trial_rows;     /* EmTextRow, id: the trial's number */
  GtkCustomFilter *filter;    /* the parallel coordinates' brushes */
  GtkMultiSelection *selection;
  GtkStringList *sweep_names;

  /* the registry, as last read */
  GCancellable *cancel;
  guint tick;
  gboolean reading, filling_list;
  gint64 sweep;               /* the sweep shown (0: none yet) */
  char *want_name;            /* a sweep just started, until it is listed */
  EmSweepSnapshot *snap;      /* the last one applied */
  char *digest, *sweeps_digest;
  int n_updates;
  GArray *runs;               /* gint64, the run of each trial number (0: none) */
  char *metric;
  gboolean maximize;
  char *columns_key;          /* the table's columns: the metric and the settings' paths */
  int n_cols;

  /* the runner this page started (it outlives the page) */
  GSubprocess *proc;
  char *proc_log;
  int n_cli;                  /* pause/cancel commands in flight */
};

/* em-sweeps-read.c: the periodic read on a worker and its result */
void em_sweeps_page_read_now_(EmSweepsPage *self);
/* em-sweeps-view.c */
void em_sweeps_page_apply_(EmSweepsPage *self, EmSweepSnapshot *s); /* takes s */
void em_sweeps_page_build_view_(EmSweepsPage *self);
void em_sweeps_page_update_buttons_(EmSweepsPage *self);
void em_sweeps_page_set_status_(EmSweepsPage *self, const char *text);
/* em-sweeps-start.c */
void em_sweeps_page_build_form_(EmSweepsPage *self);
void em_sweeps_page_refresh_base_(EmSweepsPage *self);
char *em_sweeps_page_cli_path_(void);
