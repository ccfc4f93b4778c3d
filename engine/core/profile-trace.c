/* profile-trace.c: the records as a Chrome Trace Event / Perfetto JSON
 * file.
 *
 * Complete events ("ph": "X") in start order, a parent before a child
 * that starts with it, so that each thread's timestamps never go back
 * and children nest inside their parents; memory counters ("ph": "C");
 * thread names ("ph": "M"). Times are microseconds from the session's
 * start. Each event is built and written with jansson one at a time, so
 * a large trace needs no large tree in memory. */
#include "profile-private.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int by_start(const void *pa, const void *pb) {
  const em_prof_record *a = pa, *b = pb;
  if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns ? -1 : 1;
  if (a->end_ns != b->end_ns) return a->end_ns > b->end_ns ? -1 : 1; /* longer first */
  return a->depth < b->depth ? -1 : a->depth > b->depth;
}

static const char *category(const em_prof_record *r) {
  switch (r->kind) {
  case EM_SPAN_OP: return r->in_backward ? "backward" : "op";
  case EM_SPAN_BACKWARD: return "backward";
  case EM_SPAN_RANGE: return "range";
  case EM_SPAN_LAYER: return "layer";
  default: return "step";
  }
}

static json_t *event_of(const em_prof_record *r, int pid) {
  char name[192];
  if (r->kind == EM_SPAN_STEP) snprintf(name, sizeof name, "step %lld", (long long)r->step);
  else if (r->kind == EM_SPAN_LAYER) snprintf(name, sizeof name, "%s", em_prof_string(r->layer));
  else if (r->in_backward) snprintf(name, sizeof name, "%s (backward)", r->name);
  else snprintf(name, sizeof name, "%s", r->name);
  json_t *args = json_object();
  if (r->layer >= 0) json_object_set_new(args, "layer", json_string(em_prof_string(r->layer)));
  if (r->kind == EM_SPAN_OP || r->kind == EM_SPAN_BACKWARD || r->kind == EM_SPAN_RANGE) {
    json_t *shapes = json_array();
    for (int k = 0; k < r->n_shapes; k++) {
      json_t *s = json_array();
      int nd = r->ndim[k] < EM_PROF_DIMS ? r->ndim[k] : EM_PROF_DIMS;
      for (int d = 0; d < nd; d++) json_array_append_new(s, json_integer(r->dims[k][d]));
      json_array_append_new(shapes, s);
    }
    json_object_set_new(args, "shapes", shapes);
    json_object_set_new(args, "device", json_string("cpu"));
    json_object_set_new(args, "self_us", json_real(1e-3 * (double)r->self_ns));
  }
  if (r->flops > 0) json_object_set_new(args, "flops", json_real(r->flops));
  json_object_set_new(args, "bytes", json_integer(r->bytes));
  return json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", name, "cat", category(r),
                   "ph", "X", "ts", 1e-3 * (double)r->start_ns,
                   "dur", 1e-3 * (double)(r->end_ns - r->start_ns), "pid", pid, "tid", (int)r->tid,
                   "args", args);
}

static json_t *counter_of(const em_prof_mem_sample *m, int pid) {
  return json_pack("{s:s, s:s, s:f, s:i, s:i, s:{s:I, s:I}}", "name", "memory", "ph", "C", "ts",
                   1e-3 * (double)m->ts_ns, "pid", pid, "tid", 0, "args", "allocated_bytes",
                   (json_int_t)m->allocated, "reserved_bytes", (json_int_t)m->reserved);
}

/* Writes ev (stolen) with a separator; false on a write error. */
static bool put(FILE *f, json_t *ev, bool *first) {
  if (!ev) return false;
  char *s = json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(12));
  json_decref(ev);
  if (!s) return false;
  bool ok = fputs(*first ? "\n" : ",\n", f) >= 0 && fputs(s, f) >= 0;
  free(s);
  *first = false;
  return ok;
}

em_status em_profile_write_trace(const char *path, em_error *err) {
  int64_t n, nm;
  em_prof_record *rec = em_prof_records_copy(&n);
  if (!rec)
    return em_error_set(err, EM_ERR_INVALID,
                        "no trace to write to '%s': the profiler has no records (start it and run "
                        "some steps first)",
                        path);
  em_prof_mem_sample *mem = em_prof_mem_samples_copy(&nm);
  qsort(rec, (size_t)n, sizeof *rec, by_start);
  FILE *f = fopen(path, "w");
  if (!f) {
    int e = errno;
    free(rec);
    free(mem);
    return em_error_set(err, EM_ERR_IO, "cannot write the trace '%s': %s", path, strerror(e));
  }
  int pid = (int)getpid();
  bool first = true, ok = fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", f) >= 0;
  ok = ok && put(f, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "process_name", "ph", "M",
                              "pid", pid, "tid", 0, "args", "name", "ember"),
                 &first);
  int32_t named[256];
  int n_named = 0;
  for (int64_t i = 0; i < n && ok; i++) {
    bool seen = false;
    for (int k = 0; k < n_named && !seen; k++) seen = named[k] == rec[i].tid;
    if (seen || n_named == 256) continue;
    named[n_named++] = rec[i].tid;
    char tname[64];
    snprintf(tname, sizeof tname, "ember thread %d", (int)rec[i].tid);
    ok = put(f, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid",
                          pid, "tid", (int)rec[i].tid, "args", "name", tname),
             &first);
  }
  int64_t j = 0;
  for (int64_t i = 0; i < n && ok; i++) {
    for (; j < nm && mem[j].ts_ns <= rec[i].start_ns && ok; j++) ok = put(f, counter_of(&mem[j], pid), &first);
    ok = ok && put(f, event_of(&rec[i], pid), &first);
  }
  for (; j < nm && ok; j++) ok = put(f, counter_of(&mem[j], pid), &first);
  ok = ok && fputs("\n]}\n", f) >= 0;
  int e = errno;
  if (fclose(f) != 0 && ok) {
    ok = false;
    e = errno;
  }
  free(rec);
  free(mem);
  if (!ok)
    return em_error_set(err, EM_ERR_IO, "writing the trace '%s' failed: %s", path,
                        e ? strerror(e) : "out of memory");
  return EM_OK;
}
