/* device.c: device names, the backend lookup, device memory with the
 * sticky out-of-memory error, and the device queries of em-device.h. */
#include "device-private.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char *const kind_names[EM_DEVICE_KIND_COUNT] = {"cpu", "cuda", "ref"};

const em_backend *em_backend_of_kind(em_device_kind k) {
  switch (k) {
  case EM_DEVICE_CPU: return em_cpu_backend();
  case EM_DEVICE_CUDA: return em_cuda_backend();
  case EM_DEVICE_REF: return em_ref_backend();
  default: return NULL;
  }
}

em_status em_device_parse(const char *s, em_device *out, em_error *err) {
  if (!s || !*s) return em_error_set(err, EM_ERR_INVALID, "empty device name (cpu, cuda[:N], ref)");
  for (int k = 0; k < EM_DEVICE_KIND_COUNT; k++) {
    size_t n = strlen(kind_names[k]);
    if (strncmp(s, kind_names[k], n) != 0) continue;
    const char *rest = s + n;
    long index = 0;
    if (*rest == ':') {
      char *end;
      index = strtol(rest + 1, &end, 10);
      if (end == rest + 1 || *end || index < 0 || index > 255)
        return em_error_set(err, EM_ERR_INVALID,
                            "bad device '%s': the index after ':' must be 0..255", s);
      if (k == EM_DEVICE_CPU && index != 0)
        return em_error_set(err, EM_ERR_INVALID, "bad device '%s': there is one CPU device (cpu)",
                            s);
    } else if (*rest) {
      continue;
    }
    *out = (em_device){(uint8_t)k, (uint8_t)index};
    return EM_OK;
  }
  return em_error_set(err, EM_ERR_INVALID, "unknown device '%s' (cpu, cuda, cuda:N, ref)", s);
}

const char *em_device_str(em_device d, char *buf, size_t n) {
  if (d.kind == EM_DEVICE_CPU || d.kind >= EM_DEVICE_KIND_COUNT)
    snprintf(buf, n, "%s", d.kind == EM_DEVICE_CPU ? "cpu" : "unknown");
  else snprintf(buf, n, "%s:%d", kind_names[d.kind], d.index);
  return buf;
}

const char *em_device_kind_name(em_device_kind k) {
  return (unsigned)k < EM_DEVICE_KIND_COUNT ? kind_names[k] : "unknown";
}

bool em_device_kind_built(em_device_kind k) {
  return k == EM_DEVICE_CPU || em_backend_of_kind(k) != NULL;
}

int em_device_count(em_device_kind k) {
  if (k == EM_DEVICE_CPU) return 1;
  const em_backend *b = em_backend_of_kind(k);
  return b ? b->count() : 0;
}

em_status em_device_check(em_device d, em_error *err) {
  if (d.kind == EM_DEVICE_CPU) return EM_OK;
  if (d.kind >= EM_DEVICE_KIND_COUNT) return em_error_set(err, EM_ERR_INVALID, "unknown device kind");
  const em_backend *b = em_backend_of_kind((em_device_kind)d.kind);
  if (!b) {
    if (d.kind == EM_DEVICE_CUDA)
      return em_error_set(err, EM_ERR_UNSUPPORTED,
                          "this build of Ember has no CUDA backend: rebuild with the CUDA "
                          "toolkit installed (meson setup -Dcuda=enabled)");
    return em_error_set(err, EM_ERR_UNSUPPORTED, "this build has no %s backend",
                        kind_names[d.kind]);
  }
  int n = b->count();
  if (n == 0) {
    em_error e = {0};
    if (b->why_none) b->why_none(&e);
    if (e.msg[0]) return em_error_set(err, EM_ERR_UNSUPPORTED, "%s", e.msg);
    return em_error_set(err, EM_ERR_UNSUPPORTED, "no %s device is present", b->name);
  }
  if (d.index >= n) {
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < n && used + 16 < sizeof list; i++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s:%d", i ? ", " : "",
                               b->name, i);
    return em_error_set(err, EM_ERR_INVALID, "%s:%d does not exist: %d %s device%s (%s)",
                        b->name, d.index, n, b->name, n == 1 ? "" : "s", list);
  }
  return EM_OK;
}

/* The processor's model name from /proc/cpuinfo, read once. */
static char cpu_model[128];
static void read_cpu_model(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon) continue;
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    snprintf(cpu_model, sizeof cpu_model, "%s", v);
    cpu_model[strcspn(cpu_model, "\n")] = '\0';
    break;
  }
  if (f) fclose(f);
}

/* A number of bytes from the first line of a file ("max": none, -1). */
static int64_t read_bytes_file(const char *path) {
  FILE *f = fopen(path, "r");
  long long v = -1;
  if (f && fscanf(f, "%lld", &v) != 1) v = -1;
  if (f) fclose(f);
  return v;
}

/* What this process may still take, where less than the machine has
 * free: an address-space limit (ulimit -v) less what is mapped now, and a
 * cgroup's memory.max less its memory.current (a container's limit). */
static int64_t process_headroom(void) {
  int64_t room = -1;
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kib = 0;
    while (f && fgets(line, sizeof line, f))
      if (sscanf(line, "VmSize: %lld kB", &kib) == 1) break;
    if (f) fclose(f);
    int64_t left = (int64_t)rl.rlim_cur - (int64_t)kib * 1024;
    room = left > 0 ? left : 0;
  }
  int64_t max = read_bytes_file("/sys/fs/cgroup/memory.max");
  int64_t cur = read_bytes_file("/sys/fs/cgroup/memory.current");
  if (max > 0 && cur >= 0) {
    int64_t left = max > cur ? max - cur : 0;
    if (room < 0 || left < room) room = left;
  }
  return room;
}

/* The host: its processor, cores and memory (MemTotal and MemAvailable of
 * /proc/meminfo, what free(1) calls "available"; sysconf's pages where
 * there is none; less where this process is held to less, by ulimit -v or
 * a cgroup). */
static void host_info(em_device_info *out) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, read_cpu_model);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  out->multiprocessors = cores > 0 ? (int)cores : 1;
  if (cpu_model[0]) snprintf(out->name, sizeof out->name, "%s", cpu_model);
  else snprintf(out->name, sizeof out->name, "host CPU (%d cores)", out->multiprocessors);
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    long long kib;
    if (sscanf(line, "MemTotal: %lld kB", &kib) == 1) out->total_bytes = (int64_t)kib * 1024;
    else if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
      out->free_bytes = (int64_t)kib * 1024;
  }
  if (f) fclose(f);
  long page = sysconf(_SC_PAGE_SIZE), pages = sysconf(_SC_PHYS_PAGES);
  long avail = sysconf(_SC_AVPHYS_PAGES);
  if (!out->total_bytes && pages > 0 && page > 0) out->total_bytes = (int64_t)pages * page;
  if (!out->free_bytes && avail > 0 && page > 0) out->free_bytes = (int64_t)avail * page;
  int64_t room = process_headroom();
  if (room >= 0 && room < out->free_bytes) out->free_bytes = room;
}

em_status em_device_info_get(em_device d, em_device_info *out, em_error *err) {
  memset(out, 0, sizeof *out);
  if (d.kind == EM_DEVICE_CPU) {
    host_info(out);
    return EM_OK;
  }
  em_status st = em_device_check(d, err);
  if (st) return st;
  return em_backend_of_kind((em_device_kind)d.kind)->info(d.index, out, err);
}

static const em_backend *usable(em_device d) {
  if (d.kind == EM_DEVICE_CPU || d.kind >= EM_DEVICE_KIND_COUNT) return NULL;
  const em_backend *b = em_backend_of_kind((em_device_kind)d.kind);
  return b && d.index < b->count() ? b : NULL;
}

void em_device_memory_stats(em_device d, em_memory_stats *out) {
  if (d.kind == EM_DEVICE_CPU) {
    em_memory_stats_get(out);
    return;
  }
  memset(out, 0, sizeof *out);
  const em_backend *b = usable(d);
  if (b) b->stats(d.index, out);
}

void em_device_memory_reset_peak(em_device d) {
  if (d.kind == EM_DEVICE_CPU) {
    em_memory_reset_peak();
    return;
  }
  const em_backend *b = usable(d);
  if (b) b->reset_peak(d.index);
}

void em_device_release_cached(em_device d) {
  if (d.kind == EM_DEVICE_CPU) {
    em_memory_release_cached();
    return;
  }
  const em_backend *b = usable(d);
  if (b) b->release_cached(d.index);
}

void em_device_synchronize(em_device d) {
  const em_backend *b = usable(d);
  if (b) b->synchronize(d.index);
}

/* ---- device memory and the sticky out-of-memory error ------------------- */

static _Thread_local const char *current_op;
static _Thread_local bool error_pending;
static _Thread_local em_error pending;

const char *em_device_set_op(const char *op) {
  const char *prev = current_op;
  current_op = op;
  return prev;
}

static void raise_oom(em_device d, const em_backend *b, size_t nbytes, const char *what) {
  if (error_pending) return; /* keep the first: later failures follow from it */
  em_memory_stats s;
  b->stats(d.index, &s);
  em_device_info info;
  em_error e;
  bool have_info = b->info(d.index, &info, &e) == EM_OK;
  char dev[32], ask[32], al[32], re[32], ca[32], lg[32], pk[32], tot[32], fr[32];
  em_device_str(d, dev, sizeof dev);
  em_format_bytes(nbytes, ask, sizeof ask);
  em_format_bytes(s.allocated_bytes, al, sizeof al);
  em_format_bytes(s.reserved_bytes, re, sizeof re);
  em_format_bytes(s.reserved_bytes - s.allocated_bytes, ca, sizeof ca);
  em_format_bytes(s.largest_free_block, lg, sizeof lg);
  em_format_bytes(s.peak_allocated_bytes, pk, sizeof pk);
  char tail[128] = "";
  if (have_info) {
    em_format_bytes(info.total_bytes, tot, sizeof tot);
    em_format_bytes(info.free_bytes, fr, sizeof fr);
    snprintf(tail, sizeof tail, "; device total %s, free %s", tot, fr);
  }
  em_error_set(&pending, EM_ERR_NOMEM,
               "out of memory on %s in %s: asked %s; allocated %s, reserved %s (cached %s in "
               "%lld blocks, largest %s), peak %s%s",
               dev, what ? what : (current_op ? current_op : "an allocation"), ask, al, re, ca,
               (long long)s.cached_blocks, lg, pk, tail);
  error_pending = true;
}

void *em_device_alloc(em_device d, size_t nbytes, const char *what) {
  const em_backend *b = em_backend_of_kind((em_device_kind)d.kind);
  EM_ASSERT(b && "em_device_alloc on a device kind this build lacks");
  void *p = b->alloc(d.index, nbytes ? nbytes : 1);
  if (!p) raise_oom(d, b, nbytes, what);
  return p;
}

void em_device_free(em_device d, void *p, size_t nbytes) {
  if (!p) return;
  if (d.kind == EM_DEVICE_CPU) {
    em_free(p, nbytes);
    return;
  }
  em_backend_of_kind((em_device_kind)d.kind)->free(d.index, p, nbytes ? nbytes : 1);
}

bool em_device_error_pending(void) { return error_pending; }

void em_device_error_raise(const em_error *e) {
  if (error_pending) return;
  pending = *e;
  error_pending = true;
}

/* The message of the kernel that failed last on this thread. */
static _Thread_local em_error kernel_error;

em_status em_kernel_fail(em_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(kernel_error.msg, sizeof kernel_error.msg, fmt, ap);
  va_end(ap);
  kernel_error.status = st;
  return st;
}

bool em_kernel_done(const char *entry, em_status st) {
  if (st == EM_OK) return true;
  em_error e;
  em_error_set(&e, st, "%s: kernel %s failed: %s", current_op ? current_op : "an op", entry,
               kernel_error.status == st ? kernel_error.msg : "(no message)");
  em_device_error_raise(&e);
  return false;
}

em_status em_device_error_take(em_error *err) {
  if (!error_pending) return EM_OK;
  error_pending = false;
  if (err) *err = pending;
  return pending.status;
}

/* ---- page-locked host memory ------------------------------------------- */

/* A small header before each block remembers who allocated it. */
typedef struct {
  void *base;
  bool pinned;
  char pad[64 - sizeof(void *) - sizeof(bool)];
} host_header;

void *em_host_pinned_alloc(size_t nbytes) {
  const em_backend *b = em_cuda_backend();
  bool pinned = b && b->host_alloc && b->count() > 0;
  void *base = pinned ? b->host_alloc(nbytes + sizeof(host_header)) : NULL;
  if (!base) {
    pinned = false;
    base = aligned_alloc(64, (nbytes + sizeof(host_header) + 63) & ~(size_t)63);
  }
  if (!base) return NULL;
  host_header *h = base;
  h->base = base;
  h->pinned = pinned;
  return h + 1;
}

void em_host_pinned_free(void *p) {
  if (!p) return;
  host_header *h = (host_header *)p - 1;
  if (h->pinned) em_cuda_backend()->host_free(h->base);
  else free(h->base);
}
