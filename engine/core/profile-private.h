/* profile-private.h: what the profiler's files (profile-*.c), the
 * allocator (alloc.c) and autograd (autograd.c) share. */
#pragma once

#include <pthread.h>

#include "em-profile.h"

/* Bits of em_profile_hooks_. */
enum { EM_HOOK_PROFILE = 1, EM_HOOK_ANOMALY = 2 };

/* Span kinds. */
enum { EM_SPAN_OP, EM_SPAN_BACKWARD, EM_SPAN_RANGE, EM_SPAN_LAYER, EM_SPAN_STEP };

#define EM_PROF_SHAPES 4 /* input shapes kept per record */
#define EM_PROF_DIMS 6   /* dims kept per shape */

/* One finished span. */
typedef struct {
  const char *name;  /* a literal (ops) or an interned string */
  int32_t layer;     /* interned layer path, -1: none */
  int32_t tid;       /* small thread number */
  uint8_t kind;      /* EM_SPAN_* */
  uint8_t depth;     /* open spans around it on its thread */
  bool in_backward;  /* a backward node or an op it ran */
  bool layer_outer;  /* no enclosing op/range span of the same layer */
  int8_t n_shapes;
  int8_t ndim[EM_PROF_SHAPES]; /* > EM_PROF_DIMS: only the first kept */
  int64_t start_ns, end_ns, self_ns; /* from the session's start (ticks in the
                                        ring, ns in copies) */
  int64_t bytes;     /* allocated while open, on its thread */
  int64_t step;      /* EM_SPAN_STEP: the step number */
  double flops;      /* including nested spans' */
  int32_t dims[EM_PROF_SHAPES][EM_PROF_DIMS]; /* last: not cleared when a span opens */
} em_prof_record;

/* A memory counter sample for the trace. */
typedef struct {
  int64_t ts_ns, allocated, reserved;
} em_prof_mem_sample;

/* ---- profile-recorder.c ----------------------------------------------------- */
/* Copies of the kept records, oldest first (malloc'd; *n their number),
 * and of the memory samples; NULL with *n 0 when there are none. */
em_prof_record *em_prof_records_copy(int64_t *n);
em_prof_mem_sample *em_prof_mem_samples_copy(int64_t *n);
/* Ticks since the session started (nanoseconds, or TSC counts that
 * em_prof_records_copy converts). */
int64_t em_prof_now(void);
/* The interned string `id` (layers, ranges); "?" when unknown. */
const char *em_prof_string(int32_t id);
/* Interns s (copied), returning its id, or -1 when the table is full. */
int32_t em_prof_intern(const char *s);

/* Anomaly mode, turned on without the profiler, starts a new session so
 * that node tags from earlier sessions are not trusted. */
void em_prof_new_tag_session(void);

/* Autograd's hooks: em_record tags a node with the current layer;
 * backward spans wrap each node's backward function. */
void em_prof_node_tag(const em_node *node);
int em_prof_backward_begin(const em_node *node);
void em_prof_backward_end(int token, const em_node *node);

/* The allocator's hook while memory tracking is on: counts bytes for the
 * thread's open span and returns the allocation's site (>= 0). */
extern _Atomic int em_prof_track_memory_;
int em_prof_alloc_site(int64_t bytes);

/* ---- sites (profile-memory.c) ---------------------------------------------------- */
#define EM_PROF_MAX_SITES 1024
/* Site 0 is "outside ops and layers". A site is (span name or NULL,
 * layer, backward). Full table: site 0. */
int32_t em_prof_site_intern(const char *op, int32_t layer, bool backward);
/* "layer 'fc1', op 'linear'" into buf. */
void em_prof_site_name(int32_t site, char *buf, size_t n);
int32_t em_prof_site_count(void); /* lock-free */
/* Samples the allocator (and the sites' live bytes) for the leak check. */
void em_prof_leak_sample(void);

/* ---- alloc.c: blocks tagged with their site ------------------------------------------ */
/* Starts tagging (on) or stops it; either way forgets every tag and
 * zeroes the per-site live bytes. */
void em_alloc_tagging(bool on);
/* Live bytes of sites [0, n) into out; returns the number of sites copied
 * (0 when tagging is off). */
int em_alloc_site_live(int64_t *out, int n);

/* ---- profile-anomaly.c ------------------------------------------------------------- */
/* Checks an op's output (forward, or an op run by a backward node) and a
 * backward node's input gradients; keeps the first anomaly. */
void em_anomaly_check_output(const char *op, int32_t layer, bool backward, const em_tensor *out,
                             int n_in, em_tensor *const *inputs);
void em_anomaly_check_node(const char *op, int32_t layer, const em_node *node);
