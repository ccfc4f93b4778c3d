/* em-profile.h: the op profiler, the memory summary, the leak report and
 * anomaly mode of libember.
 *
 * Profiler. Between em_profile_start and em_profile_stop every op records
 * its name, the layer it ran in, its input shapes, the device, its start
 * and end, its self time (its time minus the ops it called), its FLOPs
 * (matmul, linear and conv, forward and each backward GEMM) and the bytes
 * it allocated, into a bounded ring buffer (the oldest records make way).
 * Backward ops are marked as such and carry the layer of the forward op
 * that recorded them. Steps (em_profile_step_begin/end), layers (the
 * model's forward loop) and named ranges (em_profile_range_begin/end, for
 * code that is not an op, such as the optimiser step) are spans too. From
 * the records come an op table (grouped by op or by layer, sorted by any
 * column) and a Chrome trace / Perfetto JSON file.
 *
 * Off, an op pays one predictable branch on a global flag; on, a few
 * clock reads and one record copy.
 *
 * Memory. em_memory_stats (em-tensor.h) holds the allocator's counters;
 * em_memory_summary formats them like torch.cuda.memory_summary. While
 * the profiler runs with track_memory on, every block is tagged with the
 * op and layer that allocated it, so the live bytes of each site are
 * known. em_profile_step_end samples the allocated bytes each step (with
 * or without the profiler); em_leak_check reports a steady climb as a
 * probable leak, naming the sites that own the growth.
 *
 * Anomaly mode. With em_anomaly_set(true) every op's output (forward) and
 * every gradient a backward node produces is checked for NaN and
 * infinity; the first one is kept, and em_anomaly_check returns it as an
 * error naming the layer and the op ("layer 'fc2', op 'linear' (forward)
 * produced NaN ..."). The engine has no exceptions: the caller checks
 * after forward and after backward, and stops.
 *
 * Threads: records carry the thread they ran on; start, stop, the table,
 * the trace and the checks may be called from any thread. The profiler
 * and anomaly mode are process-wide. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "em-error.h"
#include "em-tensor.h"

/* ---- instrumentation (ops, layers, autograd, plugins) ---------------------- */
/* Nonzero while the profiler records or anomaly mode is on. */
extern _Atomic int em_profile_hooks_;
static inline bool em_profile_hooks_on(void) {
  return __builtin_expect(atomic_load_explicit(&em_profile_hooks_, memory_order_relaxed) != 0, 0);
}

/* Opens an op span on the calling thread: name is a string that outlives
 * the process's profiling (a literal); inputs' shapes are kept (up to 4;
 * NULL entries are skipped). Returns a token for em_op_end_, or -1 when
 * nothing is recorded. Use through EM_OP_BEGIN / EM_OP_END. */
int em_op_begin_(const char *name, int n, em_tensor *const *inputs);
/* Closes the span `token` (the innermost open one): records it, and in
 * anomaly mode checks out (may be NULL). Returns out. */
em_tensor *em_op_end_(int token, em_tensor *out);
/* Adds shape (ndim dims) to the span's recorded input shapes, for ops
 * that take raw buffers (gemm). */
void em_op_note_shape_(int token, int ndim, const int64_t *shape);
/* Adds FLOPs to the innermost open op span (ops that count their own:
 * gemm, conv2d). Parents include their children's FLOPs. */
void em_op_add_flops_(double flops);
static inline void em_op_add_flops(double flops) {
  if (em_profile_hooks_on()) em_op_add_flops_(flops);
}

/* In an op:  EM_OP_BEGIN("relu", 1, x);  ...  return EM_OP_END(y); */
#define EM_OP_BEGIN(name, n, ...)                                                         \
  const int em_op_token_ =                                                                \
      em_profile_hooks_on() ? em_op_begin_((name), (n), (em_tensor *const[]){__VA_ARGS__}) \
                            : -1
#define EM_OP_END(y) (em_op_token_ >= 0 ? em_op_end_(em_op_token_, (y)) : (y))

/* Layer spans: ops inside run "in" the layer. name is copied. Nested
 * layers get "outer/inner" names. Returns a token for em_profile_layer_end
 * (-1: nothing open). */
int em_profile_layer_begin_(const char *name);
/* Closes the layer or range span `token` (and any span left open in it). */
void em_profile_span_end_(int token);
static inline int em_profile_layer_begin(const char *name) {
  return em_profile_hooks_on() ? em_profile_layer_begin_(name) : -1;
}
static inline void em_profile_layer_end(int token) {
  if (token >= 0) em_profile_span_end_(token);
}

/* Named ranges for code that is not an op ("optimizer.step",
 * "dataloader.next"): they appear in the op table and the trace. name is
 * copied. */
int em_profile_range_begin_(const char *name);
static inline int em_profile_range_begin(const char *name) {
  return em_profile_hooks_on() ? em_profile_range_begin_(name) : -1;
}
static inline void em_profile_range_end(int token) {
  if (token >= 0) em_profile_span_end_(token);
}

/* ---- profiling sessions --------------------------------------------------- */
typedef struct {
  int64_t capacity;  /* records kept (a ring); default 65536 */
  bool track_memory; /* tag blocks with their op/layer site; default true */
} em_profile_options;
void em_profile_options_defaults(em_profile_options *o);

/* Starts recording (dropping earlier records). o NULL: the defaults.
 * EM_ERR_INVALID for a capacity below 16, EM_ERR_NOMEM when the ring
 * cannot be allocated. Restarting while running starts a new session. */
em_status em_profile_start(const em_profile_options *o, em_error *err);
/* Stops recording; the records stay for the table and the trace. */
void em_profile_stop(void);
bool em_profile_running(void);
/* Records kept, and records that made way for newer ones, this session. */
int64_t em_profile_record_count(void);
int64_t em_profile_dropped_count(void);

/* Step boundaries, from the training loop's thread. Call step_end after
 * the step's scope has ended (so its temporaries are released): it samples
 * the allocator for the leak check every step, profiling or not (a lock
 * and a copy), and while profiling adds a memory counter to the trace. */
void em_profile_step_begin(void);
void em_profile_step_end(void);
/* Ends the step begun as one that held no batch (an epoch's end): kept as
 * a range "epoch.end", not counted as a step. */
void em_profile_step_cancel(void);

/* Writes the records as Chrome Trace Event JSON (opens in Perfetto and
 * chrome://tracing): "X" events (cat "op", "backward", "layer", "range",
 * "step"; args: layer, shapes, device, flops, bytes) and "C" counters
 * for memory, with "displayTimeUnit": "ms". EM_ERR_IO when the file
 * cannot be written; EM_ERR_INVALID when nothing was recorded. */
em_status em_profile_write_trace(const char *path, em_error *err);

/* ---- op table --------------------------------------------------------------- */
typedef enum { EM_OP_TABLE_BY_OP, EM_OP_TABLE_BY_LAYER } em_op_table_group;
typedef enum {
  EM_OP_COL_NAME,
  EM_OP_COL_COUNT,
  EM_OP_COL_TOTAL,
  EM_OP_COL_SELF,
  EM_OP_COL_MEAN,
  EM_OP_COL_PERCENT,
  EM_OP_COL_FLOPS,
  EM_OP_COL_BYTES,
} em_op_table_col;

typedef struct {
  char name[128];   /* op ("conv2d", "conv2d (backward)", "optimizer.step") or
                       layer ("fc1", "fc1 (backward)", "(outside layers)") */
  int64_t count;    /* calls (by layer: outermost ops of the layer) */
  double total_ms;  /* inclusive time */
  double self_ms;   /* minus nested ops */
  double mean_ms;   /* total / count */
  double percent;   /* total as a share of the profiled steps' wall time */
  double flops;     /* sum (inclusive) */
  int64_t bytes;    /* allocated (inclusive) */
} em_op_row;

typedef struct {
  em_op_table_group group;
  int n_rows;
  em_op_row *rows;
  int64_t steps;       /* complete steps among the records */
  double wall_ms;      /* their wall time (no steps: the recorded span) */
  double self_sum_ms;  /* sum of every row's self time */
  int64_t records, dropped;
} em_op_table;

/* Aggregates the records (kept; the profiler may still run). Layer and
 * step spans are not rows; ranges are. EM_ERR_INVALID when there are no
 * records. Free with em_op_table_free. */
em_status em_op_table_build(em_op_table *t, em_op_table_group group, em_error *err);
void em_op_table_sort(em_op_table *t, em_op_table_col col, bool descending);
/* The first max_rows rows (<= 0: all) as aligned text with a header and
 * a total line; malloc'd, free(). */
char *em_op_table_format(const em_op_table *t, int max_rows);
void em_op_table_free(em_op_table *t);
/* "total", "self", ... -> column; EM_ERR_INVALID names the choices. */
em_status em_op_table_parse_col(const char *name, em_op_table_col *out, em_error *err);

/* ---- memory ---------------------------------------------------------------- */
/* s formatted like torch.cuda.memory_summary for `device` ("cpu"):
 * allocated, reserved, peak, counts, largest free block; malloc'd,
 * free(). */
char *em_memory_summary(const em_memory_stats *s, const char *device);

/* ---- leak report ------------------------------------------------------------- */
#define EM_LEAK_MAX_SITES 8
typedef struct {
  bool suspected;         /* a steady climb over the window */
  int steps;              /* samples in the window */
  int64_t first_bytes, last_bytes; /* allocated at the window's ends */
  double bytes_per_step;  /* least-squares slope */
  int n_sites;            /* sites whose live bytes grew, largest first */
  struct {
    char site[160];       /* "layer 'fc1', op 'linear'" */
    int64_t growth_bytes;
  } sites[EM_LEAK_MAX_SITES];
  char message[1024];     /* one paragraph for a person */
} em_leak_report;

/* Looks at the last `window` step samples (0: 10; at most 32): a leak is
 * suspected when allocated memory rose over the window, with a positive
 * slope, in at least 80% of the steps. Sites are named when the profiler
 * tracked memory during the window. Returns out->suspected. */
bool em_leak_check(int window, em_leak_report *out);
/* Forgets the samples (after a deliberate change of memory use: a new
 * model, an evaluation with other batch sizes). */
void em_leak_reset(void);

/* ---- anomaly mode ------------------------------------------------------------ */
/* Turning it on clears any anomaly kept. */
void em_anomaly_set(bool on);
bool em_anomaly_enabled(void);
/* EM_OK when no op produced NaN or infinity since anomaly mode was turned
 * on (or cleared); else EM_ERR_NUMERIC with a message naming the first
 * one: layer, op, forward or backward, and what it produced. */
em_status em_anomaly_check(em_error *err);
void em_anomaly_clear(void);
