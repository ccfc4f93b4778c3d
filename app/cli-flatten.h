/* cli-flatten.h: a JSON object as dotted keys ("optim.lr": 0.1), for
 * `run show` (the config) and `compare` (the keys whose values differ). */
#pragma once

#include <jansson.h>
#include <stddef.h>

/* Adds every leaf of v under prefix ("" for the top) to out, an object of
 * dotted key -> leaf value (arrays are leaves). */
void cli_json_flatten(const json_t *v, const char *prefix, json_t *out);
/* A leaf as a person reads it: strings bare, numbers %.6g, arrays and
 * objects as compact JSON. */
void cli_json_leaf_text(const json_t *v, char *buf, size_t cap);
