/* predict-input.h: the INPUT arguments of `ember predict`, read into
 * batches of model inputs.
 *
 * Each argument is one of (told apart by its content, then its name):
 *   - a PNG image (one sample; converted to the model's channel count),
 *   - an IDX images file, gzip-compressed or plain (every image), with an
 *     optional IDX labels file,
 *   - a CSV file of feature rows (an optional header line; an optional
 *     label column).
 * Pixels become pixel/255 floats exactly as the IDX dataset the trainer
 * reads makes them (the trainer applies no further normalisation); CSV
 * values are taken as they are, like the CSV dataset does.
 *
 * The samples of all arguments form one sequence, in argument order;
 * samples are addressed by their index in it. Everything but the PNG
 * pixels is read and checked when the inputs are opened (PNG files only
 * have their header checked then, and are decoded batch by batch), so a
 * bad file is reported before any prediction is printed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "em-data.h"
#include "em-error.h"
#include "em-tensor.h"

typedef struct {
  int64_t shape[EM_MAX_DIMS]; /* the model's sample shape (no batch) */
  int ndim;
  int classes;             /* the model's outputs: labels must be below this */
  const char *labels_path; /* IDX labels for the one IDX images input, or NULL */
  int label_column;        /* CSV: 0-based column holding the label, EM_CSV_LAST_COLUMN or
                              EM_CSV_NO_LABEL, as the engine's CSV table reader takes it */
} predict_input_options;

typedef struct predict_inputs predict_inputs;

/* Opens and checks the n paths. On failure returns NULL with err naming
 * the file and what is wrong with it. */
predict_inputs *predict_inputs_open(int n, const char *const *paths,
                                    const predict_input_options *o, em_error *err);
void predict_inputs_free(predict_inputs *in); /* NULL is fine */

int64_t predict_inputs_count(const predict_inputs *in);
/* Samples [first, first + n) into x (n, ...sample shape) and their labels
 * into y (n), -1 where an input has none. */
em_status predict_inputs_read(predict_inputs *in, int64_t first, int64_t n,
                              float *x /* (n, ...sample) */, int64_t *y /* (n) */,
                              em_error *err);
/* Where sample i came from: "shirt.png", "t10k-images-idx3-ubyte.gz:17"
 * (the image's 0-based index in the file) or "rows.csv:3" (the row's
 * line, 1-based, as the CSV reader's messages give it). */
void predict_inputs_source(const predict_inputs *in, int64_t i, char *buf, size_t cap);
