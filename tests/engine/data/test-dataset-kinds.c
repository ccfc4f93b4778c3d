/* test-dataset-kinds.c: the registry of dataset kinds (engine/data/
 * registry.c). The built-ins are registered like a plugin's kinds and
 * found by name; every registered kind opens, or fails with a message
 * that names what is missing; an unknown name lists every kind; a plugin
 * may not take a built-in's name, nor remove it. */
#include <glib.h>
#include <string.h>

#include "em-data.h"

static const char *const builtins[] = {"fashion-mnist", "cifar10", "csv", "synthetic", "text"};

static void test_builtins_registered(void) {
  g_assert_cmpint(em_dataset_type_count(), >=, (int)G_N_ELEMENTS(builtins));
  for (guint i = 0; i < G_N_ELEMENTS(builtins); i++) {
    const em_dataset_type *k = em_dataset_type_find(builtins[i]);
    g_assert_nonnull(k);
    g_assert_true(em_dataset_type_at((int)i) == k); /* the built-ins first, in order */
    g_assert_nonnull(k->help);
    g_assert_nonnull(k->open);
  }
  g_assert_null(em_dataset_type_at(em_dataset_type_count()));
  g_assert_null(em_dataset_type_find("no-such-kind"));
}

/* A missing folder, and no folder at all: each kind opens (synthetic, or
 * fashion-mnist from its default folder where the machine has it) or
 * fails with a status and a message that names the folder it looked in,
 * the kind, or the flag that gives it. */
static void test_every_kind_opens_or_says_why(void) {
  int64_t shape[1] = {4};
  const char *dirs[] = {"/nonexistent/ember-kinds", NULL};
  for (int i = 0; i < em_dataset_type_count(); i++) {
    const char *name = em_dataset_type_at(i)->name;
    for (guint d = 0; d < G_N_ELEMENTS(dirs); d++)
      for (int train = 0; train < 2; train++) {
        em_error err = {0};
        em_dataset *ds = em_dataset_open_named(name, dirs[d], train, shape, 1, 3, &err);
        if (ds) {
          g_assert_cmpint(em_dataset_len(ds), >, 0);
          em_dataset_free(ds);
          continue;
        }
        g_assert_cmpint(err.status, !=, EM_OK);
        g_assert_cmpstr(err.msg, !=, "");
        if (!strstr(err.msg, dirs[d] ? dirs[d] : "--data-dir") && !strstr(err.msg, name) &&
            !strstr(err.msg, "/usr/share/datasets"))
          g_error("%s from %s: unclear: %s", name, dirs[d] ? dirs[d] : "(none)", err.msg);
      }
    /* its files for lineage: listed, or the same kind of refusal */
    char(*paths)[1024] = g_malloc(8 * sizeof *paths);
    int n = -1;
    em_error err = {0};
    em_status st = em_dataset_files_named(name, "/nonexistent/ember-kinds", true, paths, 8, &n,
                                          &err);
    if (st != EM_OK) g_assert_true(strstr(err.msg, "/nonexistent/ember-kinds") != NULL);
    else g_assert_cmpint(n, >=, 0);
    g_free(paths);
  }
  /* the synthetic kind makes what the model asks for */
  em_error err = {0};
  em_dataset *ds = em_dataset_open_named("synthetic", NULL, true, shape, 1, 3, &err);
  g_assert_nonnull(ds);
  int64_t got[4];
  g_assert_cmpint(em_dataset_sample_shape(ds, got), ==, 1);
  g_assert_cmpint(got[0], ==, 4);
  g_assert_cmpint(em_dataset_num_classes(ds), ==, 3);
  em_dataset_free(ds);
}

static void test_unknown_lists_every_kind(void) {
  em_error err = {0};
  g_assert_null(em_dataset_open_named("imagenet", "/tmp", true, NULL, 0, 0, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "unknown dataset 'imagenet'"));
  for (int i = 0; i < em_dataset_type_count(); i++)
    g_assert_nonnull(strstr(err.msg, em_dataset_type_at(i)->name));
}

static em_dataset *no_open(const char *dir, bool train, const void *options, em_error *err) {
  (void)dir, (void)train, (void)options;
  em_error_set(err, EM_ERR_IO, "not really");
  return NULL;
}

static void test_plugin_kinds(void) {
  static const em_dataset_type clash = {.name = "csv", .help = "x", .open = no_open};
  static const em_dataset_type mine = {.name = "my-kind", .help = "x", .open = no_open};
  em_error err = {0};
  g_assert_cmpint(em_dataset_type_add(&clash, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "built in"));
  int n = em_dataset_type_count();
  g_assert_cmpint(em_dataset_type_add(&mine, &err), ==, EM_OK);
  g_assert_cmpint(em_dataset_type_add(&mine, &err), ==, EM_ERR_INVALID);
  g_assert_true(em_dataset_type_at(n) == &mine);
  /* a plugin's kind is given a folder, or refused before its open */
  g_assert_null(em_dataset_open_named("my-kind", NULL, true, NULL, 0, 0, &err));
  g_assert_nonnull(strstr(err.msg, "the my-kind dataset needs its folder"));
  g_assert_null(em_dataset_open_named("my-kind", "/tmp", true, NULL, 0, 0, &err));
  g_assert_cmpstr(err.msg, ==, "not really");
  em_dataset_type_remove(&mine);
  g_assert_cmpint(em_dataset_type_count(), ==, n);
  /* removal only undoes a plugin's registration */
  em_dataset_type_remove(em_dataset_type_find("csv"));
  g_assert_nonnull(em_dataset_type_find("csv"));
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/data/kinds/builtins", test_builtins_registered);
  g_test_add_func("/engine/data/kinds/open-or-say-why", test_every_kind_opens_or_says_why);
  g_test_add_func("/engine/data/kinds/unknown", test_unknown_lists_every_kind);
  g_test_add_func("/engine/data/kinds/plugin", test_plugin_kinds);
  return g_test_run();
}
