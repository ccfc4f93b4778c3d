/* spec-repeat.c: a spec's repeated blocks, expanded into plain nodes
 * before the nodes are parsed.
 *
 *   {"name": "layers", "repeat": 4, "nodes": [ ...one or more nodes... ]}
 *
 * stands for its nodes 4 times over, named as PyTorch names an
 * nn.ModuleList's children: "layers.0" ... "layers.3" when the block is
 * one node (so its parameters are "layers.0.self_attn.in_proj_weight"),
 * "layers.0.attn", "layers.0.norm", ... when it holds several. Inside a
 * copy, an input naming a node of the block names that copy's node; the
 * block's first node takes, by default, the node before it (the previous
 * copy's last node); other names (earlier nodes, "input") are kept. A
 * later node may name the block itself ("layers"): that is the last
 * copy's last node. The spec's JSON (em_spec_json) keeps the block as
 * written; the parsed nodes are the copies. */
#include "nn-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPEAT 1024

static const char *kind(const json_t *v) {
  return json_is_object(v) ? "an object" : json_is_array(v) ? "a list" : json_is_string(v) ? "a string" : "a value";
}

/* The name inner node `nm` gets in copy r of block `block`. */
static json_t *copy_name(const char *block, int r, const char *nm, bool single) {
  char buf[256];
  if (single) snprintf(buf, sizeof buf, "%s.%d", block, r);
  else snprintf(buf, sizeof buf, "%s.%d.%s", block, r, nm);
  return json_string(buf);
}

static bool is_inner(json_t *inner, const char *nm) {
  for (size_t k = 0; k < json_array_size(inner); k++) {
    const char *x = json_string_value(json_object_get(json_array_get(inner, k), "name"));
    if (x && !strcmp(x, nm)) return true;
  }
  return false;
}

/* Appends the copies of block b (an object with "repeat") to out. */
static em_status expand_block(json_t *b, size_t at, json_t *out, json_t *renames,
                              em_error *err) {
  const char *name = json_string_value(json_object_get(b, "name"));
  json_t *rep = json_object_get(b, "repeat"), *inner = json_object_get(b, "nodes");
  if (!name)
    return em_error_set(err, EM_ERR_INVALID, "nodes[%zu]: a repeated block needs a \"name\"", at);
  const char *key;
  json_t *v;
  json_object_foreach(b, key, v) {
    if (strcmp(key, "name") && strcmp(key, "repeat") && strcmp(key, "nodes"))
      return em_error_set(err, EM_ERR_INVALID,
                          "block '%s': unknown key '%s'; a repeated block has name, repeat and "
                          "nodes",
                          name, key);
  }
  if (!json_is_integer(rep) || json_integer_value(rep) < 1 ||
      json_integer_value(rep) > MAX_REPEAT)
    return em_error_set(err, EM_ERR_INVALID,
                        "block '%s': \"repeat\" must be an integer from 1 to %d", name,
                        MAX_REPEAT);
  if (!json_is_array(inner) || json_array_size(inner) == 0)
    return em_error_set(err, EM_ERR_INVALID, "block '%s': \"nodes\" must be a non-empty list, got %s",
                        name, inner ? kind(inner) : "nothing");
  bool single = json_array_size(inner) == 1;
  int n = (int)json_integer_value(rep);
  if (strchr(name, '.'))
    return em_error_set(err, EM_ERR_INVALID, "block '%s': a name may not hold '.' (the copies' "
                        "names add it: '%s.0')", name, name);
  for (size_t k = 0; k < json_array_size(inner); k++) {
    json_t *nd = json_array_get(inner, k);
    const char *nm = json_string_value(json_object_get(nd, "name"));
    if (nm && strchr(nm, '.'))
      return em_error_set(err, EM_ERR_INVALID, "block '%s': node '%s': a name may not hold '.'",
                          name, nm);
    if (!json_is_object(nd) || !json_is_string(json_object_get(nd, "name")))
      return em_error_set(err, EM_ERR_INVALID, "block '%s': nodes[%zu] must be an object with a "
                          "\"name\"", name, k);
    if (json_object_get(nd, "repeat"))
      return em_error_set(err, EM_ERR_INVALID,
                          "block '%s': a block inside a block is not supported; write the inner "
                          "one out or repeat the outer one",
                          name);
  }
  for (int r = 0; r < n; r++)
    for (size_t k = 0; k < json_array_size(inner); k++) {
      json_t *src = json_array_get(inner, k), *cp = json_deep_copy(src);
      if (!cp) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
      const char *nm = json_string_value(json_object_get(src, "name"));
      json_object_set_new(cp, "name", copy_name(name, r, nm, single));
      json_t *ins = json_object_get(cp, "inputs");
      for (size_t j = 0; json_is_array(ins) && j < json_array_size(ins); j++) {
        const char *x = json_string_value(json_array_get(ins, j));
        if (x && is_inner(inner, x)) json_array_set_new(ins, j, copy_name(name, r, x, single));
      }
      if (json_array_append_new(out, cp)) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
    }
  const char *last = json_string_value(json_object_get(json_array_get(out, json_array_size(out) - 1), "name"));
  json_object_set_new(renames, name, json_string(last));
  return EM_OK;
}

em_status em_spec_expand_repeats(json_t *nodes, const char *out_name, char **out_name_to,
                                 json_t **flat, em_error *err) {
  *flat = NULL;
  *out_name_to = NULL;
  bool any = false;
  for (size_t i = 0; i < json_array_size(nodes); i++)
    any |= json_object_get(json_array_get(nodes, i), "repeat") != NULL;
  if (!any) return EM_OK;
  json_t *out = json_array(), *renames = json_object();
  if (!out || !renames) {
    json_decref(out);
    json_decref(renames);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  }
  em_status st = EM_OK;
  for (size_t i = 0; i < json_array_size(nodes) && st == EM_OK; i++) {
    json_t *nd = json_array_get(nodes, i);
    if (json_is_object(nd) && json_object_get(nd, "repeat")) {
      st = expand_block(nd, i, out, renames, err);
      continue;
    }
    const char *nm = json_is_object(nd) ? json_string_value(json_object_get(nd, "name")) : NULL;
    if (nm && strchr(nm, '.')) {
      st = em_error_set(err, EM_ERR_INVALID, "nodes[%zu]: the name '%s' may not hold '.'", i, nm);
      break;
    }
    json_t *cp = json_deep_copy(nd);
    json_t *ins = json_is_object(cp) ? json_object_get(cp, "inputs") : NULL;
    for (size_t j = 0; json_is_array(ins) && j < json_array_size(ins); j++) {
      const char *x = json_string_value(json_array_get(ins, j));
      json_t *to = x ? json_object_get(renames, x) : NULL;
      if (to) json_array_set(ins, j, to);
    }
    if (!cp || json_array_append_new(out, cp))
      st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
  }
  const char *to = st == EM_OK && out_name ? json_string_value(json_object_get(renames, out_name))
                                            : NULL;
  if (to && !(*out_name_to = strdup(to))) st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
  json_decref(renames);
  if (st != EM_OK) {
    json_decref(out);
    return st;
  }
  *flat = out;
  return EM_OK;
}

int em_spec_row_nodes(const em_spec *s, int row, int *first) {
  json_t *nodes = json_object_get(s->root, "nodes");
  int at = 0;
  for (int r = 0; r < (int)json_array_size(nodes); r++) {
    json_t *nd = json_array_get(nodes, (size_t)r);
    json_t *rep = json_object_get(nd, "repeat");
    int n = rep ? (int)json_integer_value(rep) * (int)json_array_size(json_object_get(nd, "nodes"))
                : 1;
    if (r == row) {
      if (at + n > s->n_nodes) return -1;
      *first = at;
      return at + n - 1;
    }
    at += n;
  }
  return -1;
}
