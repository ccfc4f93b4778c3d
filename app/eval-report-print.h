/* eval-report-print.h: `ember eval --report`'s output and its record
 * with the run (eval-report-print.c). */
#pragma once

#include <jansson.h>
#include <stdio.h>

#include "em-store.h"
#include "em-train.h"

/* The report as JSON (class names NULL: their indices). */
json_t *eval_report_json(const em_eval_report *r, const char *const *names);
/* The confusion matrix, per-class table, summary and worst mistakes. */
void eval_report_print(const em_eval_report *r, const char *const *names, FILE *out);
/* Writes it under the run's artifacts and records it; 0, or 1 with a
 * warning said. path gets the file. */
int eval_report_keep(em_store *s, int64_t run, const json_t *report, char *path, size_t cap);
