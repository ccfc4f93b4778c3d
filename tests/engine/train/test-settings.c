/* test-settings.c: the settings table (em-train.h) is the one list of
 * training settings: every row round-trips through the config JSON and
 * is read from the spec where it has a spec key, every range is checked
 * in the spec and by validate alike (and holds the default), and the
 * "unknown key" messages list every row. `ember train`'s flags are
 * checked against the same table in tests/cli (test_settings_flags). */
#include <float.h>
#include <glib.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "em-nn.h"
#include "em-train.h"

#define MODEL "\"name\": \"t\", \"input\": {\"shape\": [4]}, " \
              "\"nodes\": [{\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 2}]"

static bool is_number(const em_setting *s) {
  return s->type == EM_SETTING_INT || s->type == EM_SETTING_NUM || s->type == EM_SETTING_SEED;
}

/* c's field of s set away from its value in c, in range. */
static void set_unusual(const em_setting *s, em_train_config *c) {
  em_error err = {0};
  switch (s->type) {
  case EM_SETTING_INT:
  case EM_SETTING_SEED:
    em_setting_set_int(s, c, em_setting_get_int(s, c) != s->max ? s->max : s->min);
    break;
  case EM_SETTING_NUM:
    em_setting_set_num(s, c, em_setting_get_num(s, c) != s->hi ? s->hi : s->lo);
    break;
  case EM_SETTING_BOOL: em_setting_set_bool(s, c, !em_setting_get_bool(s, c)); break;
  case EM_SETTING_STR: g_assert_cmpint(em_setting_set_text(s, c, s->key, "a/b", &err), ==, EM_OK); break;
  case EM_SETTING_CHOICE: {
    int n = 0;
    while (s->choice_name(n)) n++;
    em_setting_set_choice(s, c, (em_setting_get_choice(s, c) + 1) % n);
    break;
  }
  case EM_SETTING_DEVICE:
    g_assert_cmpint(em_setting_set_text(s, c, s->key, "ref", &err), ==, EM_OK);
    break;
  case EM_SETTING_PAIR: {
    double pair[2] = {0.25, 0.5};
    memcpy((char *)c + s->offset, pair, sizeof pair);
    break;
  }
  default: break;
  }
}

static bool same_field(const em_setting *s, const em_train_config *a, const em_train_config *b) {
  return memcmp((const char *)a + s->offset, (const char *)b + s->offset, s->size) == 0;
}

static void test_json_roundtrip_every_row(void) {
  int n;
  const em_setting *rows = em_settings(&n);
  for (int i = 0; i < n; i++) {
    const em_setting *s = &rows[i];
    if (!(s->flags & EM_SETTING_JSON)) continue;
    em_train_config a, b;
    em_train_config_defaults(&a);
    set_unusual(s, &a);
    char *json = em_train_config_to_json(&a);
    g_assert_nonnull(json);
    g_assert_nonnull(strstr(json, s->key)); /* written, sparse or not: it is away from its default */
    em_error err = {0};
    memset(&b, 0x5A, sizeof b);
    if (em_train_config_from_json(&b, json, &err) != EM_OK) g_error("%s: %s", s->key, err.msg);
    if (!same_field(s, &a, &b)) g_error("%s does not survive the JSON round trip: %s", s->key, json);
    free(json);
  }
}

/* The spec's JSON with `value` at the row's spec key. */
static char *spec_with(const em_setting *s, json_t *value) {
  json_t *tr = json_object(), *root = json_loads("{" MODEL "}", 0, NULL);
  if (strcmp(s->spec_section, "loss") == 0) {
    json_object_set_new(root, "loss", tr);
  } else {
    json_object_set_new(root, "training", tr);
    if (strcmp(s->spec_section, "schedule") == 0) {
      json_t *sched = json_pack("{s:s}", "type", "constant");
      json_object_set_new(tr, "schedule", sched);
      tr = sched;
    }
  }
  json_object_set_new(tr, s->spec_key, value);
  char *text = json_dumps(root, 0);
  json_decref(root);
  return text;
}

static json_t *json_of(const em_setting *s, const em_train_config *c) {
  switch (s->type) {
  case EM_SETTING_INT:
  case EM_SETTING_SEED: return json_integer(em_setting_get_int(s, c));
  case EM_SETTING_NUM: return json_real(em_setting_get_num(s, c));
  case EM_SETTING_BOOL: return json_boolean(em_setting_get_bool(s, c));
  case EM_SETTING_STR: return json_string((const char *)c + s->offset);
  case EM_SETTING_CHOICE: return json_string(s->choice_name(em_setting_get_choice(s, c)));
  case EM_SETTING_DEVICE: return json_string("ref");
  case EM_SETTING_PAIR: {
    const double *p = (const double *)((const char *)c + s->offset);
    return json_pack("[ff]", p[0], p[1]);
  }
  default: return NULL;
  }
}

static em_status from_spec_text(const char *text, em_train_config *c, em_error *err) {
  em_spec *spec = em_spec_parse(text, "test", err);
  if (!spec) return EM_ERR_INVALID;
  em_train_config_defaults(c);
  em_status st = em_train_config_from_spec(c, spec, err);
  em_spec_free(spec);
  return st;
}

static void test_spec_reads_every_spec_row(void) {
  int n;
  const em_setting *rows = em_settings(&n);
  for (int i = 0; i < n; i++) {
    const em_setting *s = &rows[i];
    if (!(s->flags & EM_SETTING_SPEC) || s->type == EM_SETTING_METRICS) continue;
    em_train_config want, got;
    em_train_config_defaults(&want);
    set_unusual(s, &want);
    char *text = spec_with(s, json_of(s, &want));
    em_error err = {0};
    if (from_spec_text(text, &got, &err) != EM_OK) g_error("%s: %s (%s)", s->spec_key, err.msg, text);
    if (!same_field(s, &want, &got)) g_error("the spec's %s is not read: %s", s->spec_key, text);
    free(text);
  }
}

/* One range, everywhere: the default lies in it; a value past it is
 * refused by the spec reader and by validate, both naming the key. */
static void test_ranges_agree(void) {
  int n;
  const em_setting *rows = em_settings(&n);
  em_train_config d;
  em_train_config_defaults(&d);
  for (int i = 0; i < n; i++) {
    const em_setting *s = &rows[i];
    if (!is_number(s) || !(s->flags & EM_SETTING_JSON)) continue;
    double lo, hi;
    em_setting_bounds(s, &lo, &hi);
    g_assert_cmpfloat(lo, <=, hi);
    em_train_config bad = d;
    json_t *past;
    if (s->type == EM_SETTING_NUM) {
      double v = em_setting_get_num(s, &d);
      if (!(v >= s->lo && v <= s->hi)) g_error("%s's default %g is out of its range", s->key, v);
      double x = s->hi < DBL_MAX ? s->hi * 2 + 1 : s->lo - 1;
      em_setting_set_num(s, &bad, x);
      past = json_real(x);
    } else {
      int64_t v = em_setting_get_int(s, &d);
      if (s->type == EM_SETTING_SEED) continue; /* any 64-bit seed is one */
      if (v < s->min || v > s->max) g_error("%s's default %lld is out of its range", s->key,
                                            (long long)v);
      int64_t x = s->max < INT64_MAX ? s->max + 1 : s->min - 1;
      if (s->size == sizeof(int) && (x > INT32_MAX || x < INT32_MIN)) continue;
      em_setting_set_int(s, &bad, x);
      past = json_integer(x);
    }
    em_error err = {0};
    if (em_train_config_validate(&bad, &err) == EM_OK) g_error("validate takes %s past its range", s->key);
    if (!strstr(err.msg, s->key)) g_error("'%s' does not name %s", err.msg, s->key);
    if (s->flags & EM_SETTING_SPEC) {
      char *text = spec_with(s, past);
      em_train_config c;
      if (from_spec_text(text, &c, &err) == EM_OK) g_error("the spec takes %s past its range", s->key);
      if (!strstr(err.msg, s->spec_key)) g_error("'%s' does not name %s", err.msg, s->spec_key);
      free(text);
    } else {
      json_decref(past);
    }
  }
}

/* The "known:" lists are the table's. */
static void test_unknown_keys_list_the_table(void) {
  em_error err = {0};
  em_train_config c;
  g_assert_cmpint(from_spec_text("{" MODEL ", \"training\": {\"bogus\": 1}}", &c, &err), ==,
                  EM_ERR_INVALID);
  char training[2048];
  g_strlcpy(training, err.msg, sizeof training);
  g_assert_cmpint(from_spec_text("{" MODEL ", \"training\": {\"schedule\": {\"type\": "
                                 "\"step\", \"bogus\": 1}}}", &c, &err), ==, EM_ERR_INVALID);
  char schedule[2048];
  g_strlcpy(schedule, err.msg, sizeof schedule);
  g_assert_cmpint(em_train_config_from_json(&c, "{\"bogus\": 1}", &err), ==, EM_ERR_INVALID);
  char top[2048];
  g_strlcpy(top, err.msg, sizeof top);
  int n;
  const em_setting *rows = em_settings(&n);
  for (int i = 0; i < n; i++) {
    const em_setting *s = &rows[i];
    if ((s->flags & EM_SETTING_SPEC) && strcmp(s->spec_section, "training") == 0)
      g_assert_nonnull(strstr(training, s->spec_key));
    if ((s->flags & EM_SETTING_SPEC) && strcmp(s->spec_section, "schedule") == 0)
      g_assert_nonnull(strstr(schedule, s->spec_key));
    if ((s->flags & EM_SETTING_JSON) && !s->group) g_assert_nonnull(strstr(top, s->key));
  }
}

/* Lookups by flag and key find the same rows; flags are unique. */
static void test_lookups(void) {
  int n;
  const em_setting *rows = em_settings(&n);
  for (int i = 0; i < n; i++) {
    const em_setting *s = &rows[i];
    if (s->flag) g_assert_true(em_setting_by_flag(s->flag) == s);
    if (s->flags & EM_SETTING_JSON) g_assert_true(em_setting_by_key(s->group, s->key) == s);
    if (s->flags & EM_SETTING_SPEC)
      g_assert_true(em_setting_by_spec(s->spec_section, s->spec_key) == s);
    if (s->flag && s->metavar == NULL) g_assert_cmpint(s->type, ==, EM_SETTING_BOOL);
  }
  g_assert_null(em_setting_by_flag("frobnicate"));
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/train/settings/json-roundtrip-every-row", test_json_roundtrip_every_row);
  g_test_add_func("/train/settings/spec-reads-every-row", test_spec_reads_every_spec_row);
  g_test_add_func("/train/settings/ranges-agree", test_ranges_agree);
  g_test_add_func("/train/settings/unknown-keys", test_unknown_keys_list_the_table);
  g_test_add_func("/train/settings/lookups", test_lookups);
  return g_test_run();
}
