/* conv-check.h: helpers of the conv and pool tests: closeness of two
 * tensors, and the PyTorch reference (torch_conv.py under Debian's
 * PyTorch 1.13 at /usr/bin/python3), run once per test binary on a batch
 * of cases so that torch is imported once. */
#pragma once

#include <glib.h>
#include <stdbool.h>

#include "gradcheck.h"

/* max |got - want| / max(max |want|, 1): the error relative to the
 * reference's scale (same numel, any dtype and strides). */
double cc_rel_err(const em_tensor *got, const em_tensor *want);
/* cc_rel_err <= tol, printing what failed and by how much otherwise. */
bool cc_close(const char *what, const em_tensor *got, const em_tensor *want, double tol);

typedef struct cc_torch cc_torch;
cc_torch *cc_torch_new(void);
void cc_torch_free(cc_torch *t);
/* Queues a case (the ops and tensor lists are described in
 * torch_conv.py); tensors are f32 of any strides. Returns its index. */
int cc_torch_case(cc_torch *t, const char *op, const char *params_json, int n,
                  em_tensor *const *ins);
/* Runs every queued case. Returns false, with the reason in *why, when
 * /usr/bin/python3 cannot import torch (the caller skips); any other
 * failure fails the test. */
bool cc_torch_run(cc_torch *t, char **why);
/* Output k of case c: a persistent f32 tensor owned by t. */
em_tensor *cc_torch_out(cc_torch *t, int c, int k);
