/* nn-check.h: helpers shared by the tests of the neural-network ops:
 * fast kernels (f32) held to the plain loop reference (f64). */
#pragma once

#include "gradcheck.h"

/* A persistent contiguous copy of t converted to dt, with t's
 * requires-grad flag. */
em_tensor *nc_convert(const em_tensor *t, em_dtype dt);
/* A persistent copy of t (same dtype, no grad). */
em_tensor *nc_keep(const em_tensor *t);
/* Largest |a - b| divided by max(1, largest |b|); b is the reference. */
double nc_rel_diff(const em_tensor *a, const em_tensor *b);
/* Runs f on the f64 inputs (the reference kernels) and on f32 copies of
 * the float inputs (the fast kernels; other inputs are shared), runs
 * backward from the same random upstream gradient, and compares the
 * outputs and every input gradient within tol (nc_rel_diff). */
bool nc_fast_vs_ref(const char *what, gc_fn f, int n, em_tensor **inputs, void *ctx, double tol);
/* The f64 value of t's element k (row-major). */
double nc_at(const em_tensor *t, int64_t k);
