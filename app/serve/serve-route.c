/* serve-route.c: which served version answers a request. With a canary
 * (`--canary REF:PCT`), PCT percent of the requests go to it: a request
 * that carries an "id" is placed by a hash of the id (FNV-1a, so the same
 * id always lands on the same version, whichever HTTP thread parses it),
 * one without at random. A request to /v2/models/NAME/versions/V goes to
 * version V when it is the stable or the canary one. */
#include "serve-private.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* A per-thread xorshift for requests without an id. */
static unsigned draw_permille(void) {
  static _Thread_local uint64_t x;
  if (!x) x = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&x ^ 0x9E3779B97F4A7C15ull;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return (unsigned)(x % 1000);
}

serve_model *serve_route(serve_server *srv, const char *id, const char *version, int *role) {
  serve_model *stable = serve_slot_acquire(&srv->slot);
  serve_model *canary = srv->canary.cur ? serve_slot_acquire(&srv->canary) : NULL;
  serve_model *pick = stable;
  *role = 0;
  if (version && version[0]) {
    pick = !strcmp(stable->version, version) ? stable
           : canary && !strcmp(canary->version, version) ? canary
                                                        : NULL;
  } else if (canary) {
    int share = atomic_load(&srv->canary_permille);
    unsigned at = id && id[0] ? (unsigned)(fnv1a(id) % 1000) : draw_permille();
    if ((int)at < share) pick = canary;
  }
  if (pick == canary && canary) *role = 1;
  if (pick != stable) serve_model_unref(stable);
  if (canary && pick != canary) serve_model_unref(canary);
  return pick;
}

bool serve_route_serves(serve_server *srv, const char *version) {
  int role;
  serve_model *m = serve_route(srv, NULL, version, &role);
  if (m) serve_model_unref(m);
  return m != NULL;
}
