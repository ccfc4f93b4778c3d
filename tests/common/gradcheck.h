/* gradcheck.h: finite-difference gradient checks (f64) and small helpers
 * shared by the engine tests. */
#pragma once

#include <stdbool.h>

#include "em-ops.h"

/* Builds the op's output from the inputs; runs inside a scope. */
typedef em_tensor *(*gc_fn)(em_tensor **inputs, void *ctx);

typedef struct {
  double eps;  /* finite-difference step, default 1e-6 */
  double atol; /* default 1e-6 */
  double rtol; /* default 1e-4 */
} gc_opts;

/* Checks d(sum(f(inputs) * R))/d(input) for a fixed random R against
 * central differences, for every input that requires grad. inputs are
 * persistent f64 tensors. Prints the worst element on failure. */
bool gradcheck(const char *what, gc_fn f, int n, em_tensor **inputs, void *ctx,
               const gc_opts *opts);

/* A persistent tensor filled from a seeded uniform(lo, hi). */
em_tensor *gc_rand(em_dtype dt, int ndim, const int64_t *shape, double lo, double hi,
                   unsigned seed, bool requires_grad);
/* Largest |a - b| over all elements (same numel, any dtype). */
double gc_max_abs_diff(const em_tensor *a, const em_tensor *b);
