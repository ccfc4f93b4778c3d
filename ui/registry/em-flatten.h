/* em-flatten.h: a JSON object as dotted keys ("optim.lr" -> 0.1), to find
 * the settings, spec and metrics in which runs differ. */
#pragma once

#include <jansson.h>
#include <stddef.h>

/* Adds every leaf of v under prefix ("" for the top) to out, an object of
 * dotted key -> leaf (arrays are leaves). */
void em_json_flatten(const json_t *v, const char *prefix, json_t *out);
/* A leaf as a person reads it: strings bare, numbers %.6g, arrays and
 * objects as compact JSON; NULL as "—". Returns buf. */
const char *em_json_leaf_text(const json_t *v, char *buf, size_t cap);
