/* profile-table.c: the op table, from the profiler's records.
 *
 * Rows are ops (backward ones apart: "linear (backward)", and an op run
 * by a backward node, such as the gemm inside linear's backward, counts
 * as backward too) and ranges; or layers, split into forward and
 * backward, where a layer's total is the time of its outermost ops and
 * its self time the sum of its ops' self times. Step and layer spans are
 * not rows: steps give the wall time the shares are taken of.
 *
 * When the ring dropped records, only spans that began after the newest
 * dropped one ended are used (from the first step that began then), so
 * that no kept span lost its children. */
#include "profile-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_row_kind(int kind) {
  return kind == EM_SPAN_OP || kind == EM_SPAN_BACKWARD || kind == EM_SPAN_RANGE;
}

/* The row of key, added when new. */
static em_op_row *row_for(em_op_table *t, int *cap, const char *key) {
  for (int i = t->n_rows - 1; i >= 0; i--)
    if (!strcmp(t->rows[i].name, key)) return &t->rows[i];
  if (t->n_rows == *cap) {
    int nc = *cap ? 2 * *cap : 64;
    em_op_row *r = realloc(t->rows, sizeof *r * (size_t)nc);
    if (!r) return NULL;
    t->rows = r;
    *cap = nc;
  }
  em_op_row *r = &t->rows[t->n_rows++];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", key);
  return r;
}

em_status em_op_table_build(em_op_table *t, em_op_table_group group, em_error *err) {
  memset(t, 0, sizeof *t);
  t->group = group;
  int64_t n;
  em_prof_record *rec = em_prof_records_copy(&n);
  t->dropped = em_profile_dropped_count();
  if (!rec)
    return em_error_set(err, EM_ERR_INVALID,
                        "the profiler has no records: start it (em_profile_start, or the "
                        "--profile option) and run some steps first");
  /* Records are kept in the order they ended: every span that began after
   * the oldest kept one ended has all its children. With steps, start at
   * the first such step, so the rows and the wall time cover the same
   * complete steps. */
  int64_t cutoff = INT64_MIN;
  if (t->dropped) {
    cutoff = rec[0].end_ns;
    int64_t first_step = INT64_MAX;
    for (int64_t i = 0; i < n; i++)
      if (rec[i].kind == EM_SPAN_STEP && rec[i].start_ns >= cutoff && rec[i].start_ns < first_step)
        first_step = rec[i].start_ns;
    if (first_step != INT64_MAX) cutoff = first_step;
  }
  int64_t lo = INT64_MAX, hi = INT64_MIN, step_ns = 0;
  int cap = 0;
  for (int64_t i = 0; i < n; i++) {
    const em_prof_record *r = &rec[i];
    if (r->start_ns < cutoff) continue;
    t->records++;
    if (r->start_ns < lo) lo = r->start_ns;
    if (r->end_ns > hi) hi = r->end_ns;
    if (r->kind == EM_SPAN_STEP) {
      t->steps++;
      step_ns += r->end_ns - r->start_ns;
    }
    if (!is_row_kind(r->kind)) continue;
    char key[sizeof t->rows[0].name];
    const char *bw = r->in_backward ? " (backward)" : "";
    bool counts = true;
    if (group == EM_OP_TABLE_BY_OP) {
      snprintf(key, sizeof key, "%s%s", r->name, bw);
    } else {
      snprintf(key, sizeof key, "%s%s", r->layer >= 0 ? em_prof_string(r->layer) : "(outside layers)",
               bw);
      counts = r->layer_outer;
    }
    em_op_row *row = row_for(t, &cap, key);
    if (!row) {
      free(rec);
      em_op_table_free(t);
      return em_error_set(err, EM_ERR_NOMEM, "out of memory building the op table");
    }
    double total_ms = 1e-6 * (double)(r->end_ns - r->start_ns);
    row->self_ms += 1e-6 * (double)r->self_ns;
    if (counts) {
      row->count++;
      row->total_ms += total_ms;
      row->flops += r->flops;
      row->bytes += r->bytes;
    }
  }
  free(rec);
  t->wall_ms = 1e-6 * (double)(t->steps ? step_ns : (hi > lo ? hi - lo : 0));
  for (int i = 0; i < t->n_rows; i++) {
    em_op_row *row = &t->rows[i];
    row->mean_ms = row->count ? row->total_ms / (double)row->count : 0;
    row->percent = t->wall_ms > 0 ? 100.0 * row->total_ms / t->wall_ms : 0;
    t->self_sum_ms += row->self_ms;
  }
  em_op_table_sort(t, EM_OP_COL_TOTAL, true);
  return EM_OK;
}

void em_op_table_free(em_op_table *t) {
  free(t->rows);
  t->rows = NULL;
  t->n_rows = 0;
}

static double col_value(const em_op_row *r, em_op_table_col col) {
  switch (col) {
  case EM_OP_COL_COUNT: return (double)r->count;
  case EM_OP_COL_TOTAL: return r->total_ms;
  case EM_OP_COL_SELF: return r->self_ms;
  case EM_OP_COL_MEAN: return r->mean_ms;
  case EM_OP_COL_PERCENT: return r->percent;
  case EM_OP_COL_FLOPS: return r->flops;
  case EM_OP_COL_BYTES: return (double)r->bytes;
  case EM_OP_COL_NAME: break;
  }
  return 0;
}

/* < 0 when a sorts before b ascending; ties by name. */
static int compare(const em_op_row *a, const em_op_row *b, em_op_table_col col) {
  if (col != EM_OP_COL_NAME) {
    double x = col_value(a, col), y = col_value(b, col);
    if (x != y) return x < y ? -1 : 1;
  }
  return strcmp(a->name, b->name);
}

void em_op_table_sort(em_op_table *t, em_op_table_col col, bool descending) {
  /* insertion sort: tables have tens of rows, and it is stable */
  for (int i = 1; i < t->n_rows; i++) {
    em_op_row r = t->rows[i];
    int j = i - 1;
    while (j >= 0) {
      int c = compare(&t->rows[j], &r, col);
      if (descending ? c >= 0 : c <= 0) break;
      t->rows[j + 1] = t->rows[j];
      j--;
    }
    t->rows[j + 1] = r;
  }
}

em_status em_op_table_parse_col(const char *name, em_op_table_col *out, em_error *err) {
  static const char *names[] = {"name", "count", "total", "self", "mean", "percent", "flops",
                                "bytes"};
  for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
    if (!strcmp(name, names[i])) {
      *out = (em_op_table_col)i;
      return EM_OK;
    }
  return em_error_set(err, EM_ERR_INVALID,
                      "unknown op table column '%s'; choose name, count, total, self, mean, "
                      "percent, flops or bytes",
                      name);
}

char *em_op_table_format(const em_op_table *t, int max_rows) {
  int rows = max_rows > 0 && max_rows < t->n_rows ? max_rows : t->n_rows;
  size_t cap = 512 + 160 * (size_t)(rows + 4), n = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  int w = 12;
  for (int i = 0; i < rows; i++) {
    int l = (int)strlen(t->rows[i].name);
    if (l > w) w = l;
  }
  if (w > 60) w = 60;
  n += (size_t)snprintf(buf + n, cap - n, "%-*s %8s %11s %11s %10s %7s %10s %11s\n", w,
                        t->group == EM_OP_TABLE_BY_OP ? "op" : "layer", "calls", "total ms",
                        "self ms", "mean ms", "% step", "GFLOP", "alloc MiB");
  for (int i = 0; i < rows; i++) {
    const em_op_row *r = &t->rows[i];
    n += (size_t)snprintf(buf + n, cap - n, "%-*.*s %8lld %11.3f %11.3f %10.4f %7.1f %10.3f %11.2f\n",
                          w, w, r->name, (long long)r->count, r->total_ms, r->self_ms, r->mean_ms,
                          r->percent, 1e-9 * r->flops, (double)r->bytes / (1024.0 * 1024.0));
  }
  if (rows < t->n_rows)
    n += (size_t)snprintf(buf + n, cap - n, "(%d more rows)\n", t->n_rows - rows);
  snprintf(buf + n, cap - n,
           "self time %.3f ms in %lld records over %lld steps (wall %.3f ms)%s\n", t->self_sum_ms,
           (long long)t->records, (long long)t->steps, t->wall_ms,
           t->dropped ? "; older records were dropped (raise the capacity to keep them)" : "");
  return buf;
}
