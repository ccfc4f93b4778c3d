/* config-json.c: the whole training config as one JSON object and back,
 * for the registry and for resuming a run:
 *
 *   {"dataset": "fashion-mnist", "data_dir": "", "batch_size": 64, ...,
 *    "optim": {"kind": "sgd", "lr": 0.01, ...},
 *    "schedule": {"type": "constant", ...},
 *    "loss": "cross_entropy", ..., "on_divergence": "auto", ...}
 *
 * The keys, their order and their types are the settings table's
 * (settings.c): every row of it is written (a sparse one only away from
 * its default, so that a run without amp is stored as before); reading
 * starts from the defaults, so a config written before a field existed
 * still loads. Unknown keys and wrong types are errors naming the key.
 * Numbers are written with the fewest digits that read back to the same
 * double, so from_json(to_json(c)) equals c field for field. Ranges are
 * em_train_config_validate's job: any config, valid or not, survives the
 * round trip. */
#include "train-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing ------------------------------------------------------------ */

/* Whether a sparse row of c holds its default (then it is not written). */
static bool at_default(const em_setting *s, const em_train_config *c,
                       const em_train_config *d) {
  return memcmp((const char *)c + s->offset, (const char *)d + s->offset, s->size) == 0;
}

char *em_train_config_to_json(const em_train_config *c) {
  em_train_config d;
  em_train_config_defaults(&d);
  json_t *j = json_object();
  bool ok = j != NULL;
  int n;
  const em_setting *rows = em_settings(&n);
  for (int i = 0; ok && i < n; i++) {
    const em_setting *s = &rows[i];
    if (!(s->flags & EM_SETTING_JSON)) continue;
    if ((s->flags & EM_SETTING_SPARSE) && at_default(s, c, &d)) continue;
    json_t *obj = j;
    if (s->group) { /* the group's object, made at its first row */
      obj = json_object_get(j, s->group);
      if (!obj) ok = (obj = json_object()) && json_object_set_new(j, s->group, obj) == 0;
    }
    json_t *v = ok ? em_setting_to_json(s, c) : NULL;
    ok = v && json_object_set_new(obj, s->key, v) == 0;
  }
  char *text = ok ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  return text;
}

/* ---- reading ------------------------------------------------------------ */

static em_status unknown_key(const char *sec, const char *group, const char *key,
                             em_error *err) {
  char known[1024];
  em_settings_json_keys(group, known, sizeof known);
  return em_error_set(err, EM_ERR_INVALID, "\"%s\": unknown key \"%s\"; known: %s", sec, key,
                      known);
}

/* The keys of one object: the top level (group NULL) or a group's. */
static em_status object_from_json(em_train_config *c, const char *group, const json_t *j,
                                  em_error *err) {
  char sec[32];
  snprintf(sec, sizeof sec, group ? "config.%s" : "config", group);
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)j, key, v) {
    const em_setting *s = em_setting_by_key(group, key);
    if (s) {
      EM_TRY(em_setting_from_json(s, sec, key, v, false, c, err));
      continue;
    }
    /* the schedule's copy of the lr that records before the one lr kept:
     * read past, the lr is the optimiser's */
    if (group && strcmp(group, "schedule") == 0 && strcmp(key, "lr") == 0) {
      EM_TRY(em_json_want_num(sec, key, v, &(double){0}, err));
      continue;
    }
    bool is_group = !group && (strcmp(key, "optim") == 0 || strcmp(key, "schedule") == 0);
    if (!is_group) return unknown_key(sec, group, key, err);
    if (!json_is_object(v))
      return em_error_set(err, EM_ERR_INVALID, "\"config\".\"%s\" must be an object, not %s",
                          key, em_json_kind(v));
    EM_TRY(object_from_json(c, key, v, err));
  }
  return EM_OK;
}

em_status em_train_config_from_json(em_train_config *c, const char *json, em_error *err) {
  if (!json) return em_error_set(err, EM_ERR_INVALID, "config JSON: no text given");
  json_error_t jerr;
  json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return em_error_set(err, EM_ERR_INVALID, "config JSON is not valid JSON: %s (line %d, "
                        "column %d)", jerr.text, jerr.line, jerr.column);
  em_status st = EM_OK;
  if (!json_is_object(root))
    st = em_error_set(err, EM_ERR_INVALID, "config JSON must be an object, not %s",
                      em_json_kind(root));
  /* Into a copy, so that c is untouched on an error. */
  em_train_config tmp;
  em_train_config_defaults(&tmp);
  if (st == EM_OK) st = object_from_json(&tmp, NULL, root, err);
  json_decref(root);
  tmp.schedule.lr = tmp.optim.lr; /* the struct's copy, for whoever reads it */
  if (st == EM_OK) *c = tmp;
  return st;
}
