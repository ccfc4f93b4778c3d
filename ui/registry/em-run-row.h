/* em-run-row.h: one run of the registry as a small GObject, for the list
 * models behind the Runs and Registry pages' tables. */
#pragma once

#include <glib-object.h>

#include "em-store.h"

G_BEGIN_DECLS

#define EM_TYPE_RUN_ROW (em_run_row_get_type())
G_DECLARE_FINAL_TYPE(EmRunRow, em_run_row, EM, RUN_ROW, GObject)

/* Copies what the lists show from r (strings duplicated). */
EmRunRow *em_run_row_new(const em_run *r);
/* The copy (valid while the row lives; spec/config are NULL). */
const em_run *em_run_row_get(EmRunRow *self);
/* Whether the row shows what r and tags would (a reload keeps the row). */
gboolean em_run_row_same(EmRunRow *self, const em_run *r, const char *tags);
/* Whether two rows show the same (extra columns included). */
gboolean em_run_row_equal(EmRunRow *self, EmRunRow *other);
/* A column the table added (a setting or a metric, em_store_run_values):
 * its text ("" when the run has none) and number (NAN when not one). */
void em_run_row_set_extra(EmRunRow *self, const char *column, const char *text, double number);
const char *em_run_row_get_extra(EmRunRow *self, const char *column, double *number);
/* Tags as "k=v, k2=v2" ("" when none), set by the page that reads them. */
const char *em_run_row_get_tags(EmRunRow *self);
void em_run_row_set_tags(EmRunRow *self, const char *tags);
/* "2026-11-29 21:50", "1m 12s", "51.67%", "1.3226" (or "" when absent);
 * an added column's text. */
void em_run_row_format(EmRunRow *self, const char *column, char *buf, size_t cap);
/* A final metric for a table: "" when absent (NaN), "inf" / "-inf"
 * (never "inf%"), 4 significant digits in exponent form when the fixed
 * form would be long (1e300 is "1e+300", not 300 digits); percent: the
 * value times 100 with "%" ("51.67%"). */
void em_run_row_format_metric(double v, gboolean percent, char *buf, size_t cap);

G_END_DECLS
