/* profile-memory.c: allocation sites, the per-step samples behind the leak
 * report, and the memory summary.
 *
 * A site is where memory was asked for: the innermost op or range span
 * (or none), its layer (or none) and whether it ran in backward. Sites are
 * interned once (hash map under a mutex; at most EM_PROF_MAX_SITES, the
 * rest share site 0) and the allocator keeps each one's live bytes.
 *
 * Every em_profile_step_end samples the allocated bytes and, while memory
 * is tracked, the sites' live bytes, into a ring of the last LEAK_MAX
 * steps. A leak is a steady climb: over the window, allocated memory rose
 * in at least 80% of the steps, ended higher than it started and has a
 * positive least-squares slope. The sites named are those whose live
 * bytes grew between the window's first and last samples. */
#include "profile-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sites ------------------------------------------------------------------------- */
#define SITE_SLOTS 4096
static pthread_mutex_t site_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  const char *op;
  int32_t layer;
  bool backward;
} sites[EM_PROF_MAX_SITES] = {{NULL, -1, false}};
static _Atomic int32_t n_sites = 1; /* site 0: outside ops and layers */
static int32_t site_slots[SITE_SLOTS]; /* id + 1; 0 empty */

int32_t em_prof_site_count(void) { return atomic_load(&n_sites); }

int32_t em_prof_site_intern(const char *op, int32_t layer, bool backward) {
  if (!op && layer < 0) return 0;
  uint64_t h = ((uint64_t)(uintptr_t)op * 0x9E3779B97F4A7C15ull) ^
               ((uint64_t)(uint32_t)layer * 0xC2B2AE3D27D4EB4Full) ^ (uint64_t)backward;
  h ^= h >> 29;
  pthread_mutex_lock(&site_lock);
  int32_t id = 0;
  for (uint64_t k = 0; k < SITE_SLOTS; k++) {
    int32_t *slot = &site_slots[(h + k) & (SITE_SLOTS - 1)];
    if (*slot == 0) {
      int32_t n = atomic_load(&n_sites);
      if (n < EM_PROF_MAX_SITES) {
        sites[n].op = op;
        sites[n].layer = layer;
        sites[n].backward = backward;
        *slot = n + 1;
        atomic_store(&n_sites, n + 1);
        id = n;
      }
      break;
    }
    int32_t c = *slot - 1;
    if (sites[c].op == op && sites[c].layer == layer && sites[c].backward == backward) {
      id = c;
      break;
    }
  }
  pthread_mutex_unlock(&site_lock);
  return id;
}

void em_prof_site_name(int32_t site, char *buf, size_t n) {
  if (site <= 0 || site >= atomic_load(&n_sites)) {
    snprintf(buf, n, "(outside ops and layers)");
    return;
  }
  const char *op = sites[site].op, *bw = sites[site].backward ? " (backward)" : "";
  int32_t layer = sites[site].layer;
  if (op && layer >= 0) snprintf(buf, n, "layer '%s', op '%s'%s", em_prof_string(layer), op, bw);
  else if (op) snprintf(buf, n, "op '%s'%s (outside layers)", op, bw);
  else snprintf(buf, n, "layer '%s'%s (outside ops)", em_prof_string(layer), bw);
}

/* ---- samples -------------------------------------------------------------------------------- */
#define LEAK_MAX 32
static pthread_mutex_t leak_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t leak_total;
static int64_t leak_alloc[LEAK_MAX];
static int leak_nsites[LEAK_MAX];
static int64_t leak_live[LEAK_MAX][EM_PROF_MAX_SITES];

void em_prof_leak_sample(void) {
  em_memory_stats ms;
  em_memory_stats_get(&ms);
  pthread_mutex_lock(&leak_lock);
  int slot = (int)(leak_total % LEAK_MAX);
  leak_alloc[slot] = ms.allocated_bytes;
  leak_nsites[slot] = em_alloc_site_live(leak_live[slot], EM_PROF_MAX_SITES);
  leak_total++;
  pthread_mutex_unlock(&leak_lock);
}

void em_leak_reset(void) {
  pthread_mutex_lock(&leak_lock);
  leak_total = 0;
  pthread_mutex_unlock(&leak_lock);
}

/* "1.50 MiB" */
typedef struct {
  char name[160];
  int64_t growth;
} site_growth;

static int by_growth(const void *a, const void *b) {
  int64_t x = ((const site_growth *)a)->growth, y = ((const site_growth *)b)->growth;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Growth per site name between two samples (sites with the same name,
 * from different literals, are merged). Returns the number of entries. */
static int site_growths(int first, int last, site_growth *out) {
  int n = leak_nsites[last], m = 0;
  for (int s = 0; s < n; s++) {
    int64_t before = s < leak_nsites[first] ? leak_live[first][s] : 0;
    int64_t g = leak_live[last][s] - before;
    if (g == 0) continue;
    char name[160];
    em_prof_site_name(s, name, sizeof name);
    int k = 0;
    while (k < m && strcmp(out[k].name, name)) k++;
    if (k == m) {
      snprintf(out[m].name, sizeof out[m].name, "%s", name);
      out[m++].growth = 0;
    }
    out[k].growth += g;
  }
  qsort(out, (size_t)m, sizeof *out, by_growth);
  return m;
}

bool em_leak_check(int window, em_leak_report *out) {
  memset(out, 0, sizeof *out);
  if (window <= 0) window = 10;
  if (window > LEAK_MAX) window = LEAK_MAX;
  if (window < 3) window = 3;
  pthread_mutex_lock(&leak_lock);
  int w = leak_total < window ? (int)leak_total : window;
  out->steps = w;
  if (w < window) {
    snprintf(out->message, sizeof out->message,
             "no leak check yet: it needs %d step samples and has %d", window, w);
    pthread_mutex_unlock(&leak_lock);
    return false;
  }
  int slot[LEAK_MAX];
  for (int i = 0; i < w; i++) slot[i] = (int)((leak_total - w + i) % LEAK_MAX);
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int rises = 0;
  for (int i = 0; i < w; i++) {
    double x = i, y = (double)leak_alloc[slot[i]];
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    if (i > 0 && leak_alloc[slot[i]] > leak_alloc[slot[i - 1]]) rises++;
  }
  out->first_bytes = leak_alloc[slot[0]];
  out->last_bytes = leak_alloc[slot[w - 1]];
  out->bytes_per_step = (w * sxy - sx * sy) / (w * sxx - sx * sx);
  out->suspected = out->last_bytes > out->first_bytes && out->bytes_per_step > 0 &&
                   rises * 5 >= (w - 1) * 4;
  char a[32], b[32];
  if (!out->suspected) {
    snprintf(out->message, sizeof out->message,
             "no leak: allocated memory went from %s to %s over the last %d steps",
             em_format_bytes(out->first_bytes, a, sizeof a),
             em_format_bytes(out->last_bytes, b, sizeof b), w);
    pthread_mutex_unlock(&leak_lock);
    return false;
  }
  size_t len = (size_t)snprintf(
      out->message, sizeof out->message,
      "probable leak: allocated memory grew in %d of the last %d steps, by %s (%s per step)", rises,
      w - 1, em_format_bytes(out->last_bytes - out->first_bytes, a, sizeof a),
      em_format_bytes((int64_t)out->bytes_per_step, b, sizeof b));
  if (leak_nsites[slot[w - 1]] > 0 && leak_nsites[slot[0]] > 0) {
    static site_growth g[EM_PROF_MAX_SITES]; /* under leak_lock */
    int m = site_growths(slot[0], slot[w - 1], g);
    for (int k = 0; k < m && out->n_sites < EM_LEAK_MAX_SITES; k++) {
      if (g[k].growth <= 0) break;
      memcpy(out->sites[out->n_sites].site, g[k].name, sizeof out->sites[0].site);
      out->sites[out->n_sites++].growth_bytes = g[k].growth;
      if (len < sizeof out->message)
        len += (size_t)snprintf(out->message + len, sizeof out->message - len, "%s%s +%s",
                                out->n_sites == 1 ? "; growing: " : ", ", g[k].name,
                                em_format_bytes(g[k].growth, a, sizeof a));
    }
    if (out->n_sites == 0 && len < sizeof out->message)
      snprintf(out->message + len, sizeof out->message - len,
               "; no tracked site grew: the memory was allocated before profiling started or "
               "outside the engine's allocator");
  } else if (len < sizeof out->message) {
    snprintf(out->message + len, sizeof out->message - len,
             "; profile with memory tracking (em_profile_start) to see which ops and layers "
             "own the growth");
  }
  pthread_mutex_unlock(&leak_lock);
  return true;
}

/* ---- summary ------------------------------------------------------------------------------------- */

char *em_memory_summary(const em_memory_stats *s, const char *device) {
  char *buf = malloc(2048);
  if (!buf) return NULL;
  char a[32], b[32], c[32];
  int64_t cached = s->reserved_bytes - s->allocated_bytes;
  double frag = cached > 0 ? 1.0 - (double)s->largest_free_block / (double)cached : 0.0;
  size_t n = 0, cap = 2048;
  n += (size_t)snprintf(buf + n, cap - n, "Memory summary (%s)\n", device ? device : "cpu");
  n += (size_t)snprintf(buf + n, cap - n, "  %-22s %12s  (%lld bytes)\n", "allocated",
                        em_format_bytes(s->allocated_bytes, a, sizeof a),
                        (long long)s->allocated_bytes);
  n += (size_t)snprintf(buf + n, cap - n, "  %-22s %12s  (%lld bytes)\n", "peak allocated",
                        em_format_bytes(s->peak_allocated_bytes, a, sizeof a),
                        (long long)s->peak_allocated_bytes);
  n += (size_t)snprintf(buf + n, cap - n, "  %-22s %12s  (%lld bytes)\n", "reserved (cached)",
                        em_format_bytes(s->reserved_bytes, a, sizeof a),
                        (long long)s->reserved_bytes);
  n += (size_t)snprintf(buf + n, cap - n, "  %-22s %12s  (%lld bytes)\n", "peak reserved",
                        em_format_bytes(s->peak_reserved_bytes, a, sizeof a),
                        (long long)s->peak_reserved_bytes);
  n += (size_t)snprintf(buf + n, cap - n, "  %-22s %12s  in %lld blocks, largest %s\n",
                        "cached, free", em_format_bytes(cached, b, sizeof b),
                        (long long)s->cached_blocks,
                        em_format_bytes(s->largest_free_block, c, sizeof c));
  n += (size_t)snprintf(buf + n, cap - n, "  %-22s %11.1f%%  (1 - largest free block / cached)\n",
                        "fragmentation", 100.0 * frag);
  n += (size_t)snprintf(buf + n, cap - n, "  %-22s %12lld  (%lld from the system)\n",
                        "allocations", (long long)s->alloc_count,
                        (long long)s->system_alloc_count);
  snprintf(buf + n, cap - n, "  %-22s %12lld\n", "frees", (long long)s->free_count);
  return buf;
}
