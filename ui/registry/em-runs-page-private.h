/* em-runs-page-private.h: what the files of the Runs page share:
 * em-runs-page.c (the table, filter, actions), em-runs-read.c (reading the
 * registry on the worker and merging it into the rows), em-runs-columns.c
 * (a setting or a metric as a column). */
#pragma once

#include <gtk/gtk.h>

#include "em-run-row.h"
#include "em-runs-page.h"
#include "em-store.h"

struct _EmRunsPage {
  GtkBox parent_instance;
  GtkSearchEntry *filter_entry;
  GtkDropDown *status_dropdown, *model_dropdown;
  GtkLabel *message_label, *count_label;
  GtkColumnView *column_view;
  GtkEntry *tag_entry;

  EmAppState *state;
  gboolean reading, read_again, disposed; /* the worker's read (reload_async) */
  GPtrArray *extra_keys;      /* char *: the added columns ("config.optim.lr"), in order */
  char **column_keys;         /* what the Columns menu offers (from the last read) */
  GtkMenuButton *columns_button;
  GtkListBox *columns_list;
  GPtrArray *retired_keys;    /* removed columns' keys (their factories may still hold them) */
  gboolean syncing_checks;
  GListStore *rows;           /* EmRunRow */
  GtkCustomFilter *filter;
  GtkFilterListModel *filtered;
  GtkSortListModel *sorted;
  GtkMultiSelection *selection;
  GtkStringList *models;      /* "Any model", then the models */
  GWeakRef compare;           /* EmComparePage */
  guint refresh_id;
  gboolean stale; /* the registry changed while the page was not shown */
  gboolean descending; /* the column view sorts its primary column descending */
  EmRunRow *probe_lo, *probe_hi; /* two rows ordered alike in every column */
  guint reloads;  /* for the tests: how many times the table was read */
  char *message;
};

typedef struct {
  EmRunsPage *self;
  const char *key;
} column_sort;

/* em-runs-page.c */
void em_runs_page_set_message_(EmRunsPage *self, const char *msg);
void em_runs_page_update_counts_(EmRunsPage *self);
void em_runs_page_cell_setup_(GtkSignalListItemFactory *f, GtkListItem *item, gpointer key);
void em_runs_page_cell_bind_(GtkSignalListItemFactory *f, GtkListItem *item, gpointer key);
int em_runs_page_compare_rows_(gconstpointer a, gconstpointer b, gpointer data);
/* em-runs-read.c: a read on the worker, merged on the main thread (one
 * queued while one runs). */
void em_runs_page_reload_async_(EmRunsPage *self);
/* em-runs-columns.c: the Columns menu (made once; filled from a read's
 * list of what there is to add). */
void em_runs_page_build_column_menu_(EmRunsPage *self);
void em_runs_page_fill_column_menu_(EmRunsPage *self);
