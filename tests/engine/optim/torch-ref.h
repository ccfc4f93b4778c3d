/* torch-ref.h: runs optim-ref.py under Debian's PyTorch 1.13
 * (/usr/bin/python3) on a batch of cases in one process, so a test binary
 * pays for importing torch once. A case is a kind word and a list of
 * numbers (the format is described in optim-ref.py); its result is a
 * list of doubles. */
#pragma once

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct tref_batch tref_batch;

tref_batch *tref_batch_new(void);
void tref_batch_free(tref_batch *b);
/* Starts case number tref_case(...) of the given kind. */
int tref_case(tref_batch *b, const char *kind);
void tref_word(tref_batch *b, const char *w);
void tref_num(tref_batch *b, double v); /* exact (%.17g) */
void tref_int(tref_batch *b, int64_t v);
/* Runs the script. Returns false, with the reason in *why, when
 * /usr/bin/python3 or torch is missing (the caller skips); any other
 * failure fails the test. */
bool tref_batch_run(tref_batch *b, char **why);
/* Runs *b; when that cannot be done, frees it, sets *b to NULL and marks
 * the current test skipped with the reason (kept in *why for later
 * tests). */
void tref_batch_run_or_skip(tref_batch **b, char **why);
/* Case c's result: *n doubles. */
const double *tref_result(const tref_batch *b, int c, int64_t *n);

/* |a - b| <= tol * max(|b|, 1) for every element, with the worst
 * relative error seen in *worst (may be NULL). Prints the first
 * mismatch. */
bool tref_close(const char *what, const double *got, const double *want, int64_t n,
                double tol, double *worst);
