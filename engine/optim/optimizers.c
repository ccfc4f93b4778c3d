/* optimizers.c: the optimisers, one table. Each is a type (optim-private.h)
 * defined in its own file; its position in OPTIMIZERS is its
 * em_optim_kind, and every list of optimisers (the settings' choices, the
 * CLI's --optimizer, the workbench's drop-down, "unknown optimizer"
 * messages) is read off it. A new optimiser is its file plus one word
 * here. */
#include "optim-private.h"

#include <stdio.h>
#include <string.h>

/* In em_optim_kind's order (the built-ins' enum values name positions). */
#define OPTIMIZERS(X) X(sgd) X(adam) X(adamw)

#define DECLARE(n) extern const em_optim_type em_optim_##n;
OPTIMIZERS(DECLARE)
#define ENTRY(n) &em_optim_##n,
static const em_optim_type *const table[] = {OPTIMIZERS(ENTRY)};
#define N_TYPES ((int)(sizeof table / sizeof table[0]))

_Static_assert(EM_OPTIM_ADAMW < N_TYPES, "the enum's kinds are the table's first rows");

int em_optim_kind_count(void) { return N_TYPES; }

const em_optim_type *em_optim_type_of(em_optim_kind kind) {
  EM_ASSERT((unsigned)kind < (unsigned)N_TYPES);
  return table[kind];
}

const char *em_optim_kind_name(em_optim_kind kind) {
  return (unsigned)kind < (unsigned)N_TYPES ? table[kind]->name : NULL;
}

em_status em_optim_parse_kind(const char *name, em_optim_kind *out, em_error *err) {
  for (int k = 0; k < N_TYPES; k++)
    if (name && strcmp(name, table[k]->name) == 0) {
      *out = (em_optim_kind)k;
      return EM_OK;
    }
  char known[256] = "";
  for (int k = 0; k < N_TYPES; k++)
    snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s",
             k == 0 ? "" : k == N_TYPES - 1 ? " or " : ", ", table[k]->name);
  return em_error_set(err, EM_ERR_INVALID, "unknown optimizer '%s' (expected %s)",
                      name ? name : "(null)", known);
}

void em_optim_config_defaults(em_optim_config *c, em_optim_kind kind) {
  *c = em_optim_type_of(kind)->defaults;
  c->kind = kind;
}

int em_optim_state_per_param(const em_optim_config *c) {
  return em_optim_type_of(c->kind)->buffers(c);
}
