/* test-settings-backend.c: the workbench's preferences survive where
 * GLib's default backend would lose them (issue 32, smaller: the style
 * preference snapped back without a session bus). With no session bus
 * and no dconf (GLib's memory backend), the settings go to
 * $XDG_CONFIG_HOME/ember/workbench.ini: a value written is read back by
 * a second, fresh opening (what the next start does). No display needed:
 * GSettings only. */
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

#include "em-application.h"

static void test_keyfile_when_nothing_keeps_them(void) {
  GSettingsBackend *b = em_application_settings_backend();
  g_assert_nonnull(b); /* the memory backend, not asked for: a key file instead */
  g_assert_cmpstr(G_OBJECT_TYPE_NAME(b), ==, "GKeyfileSettingsBackend");
  g_object_unref(b);
  GSettings *s = em_application_open_settings();
  if (!s) {
    g_test_skip("the org.ember.Workbench schema is not compiled in this build");
    return;
  }
  g_assert_true(g_settings_set_string(s, "color-scheme", "dark"));
  g_settings_sync();
  g_object_unref(s);
  char *ini = g_build_filename(g_get_user_config_dir(), "ember", "workbench.ini", NULL);
  char *text = NULL;
  g_assert_true(g_file_get_contents(ini, &text, NULL, NULL));
  g_assert_nonnull(strstr(text, "color-scheme='dark'"));
  GSettings *again = em_application_open_settings(); /* the next start */
  char *v = g_settings_get_string(again, "color-scheme");
  g_assert_cmpstr(v, ==, "dark");
  g_free(v);
  g_object_unref(again);
  g_free(text);
  g_unlink(ini);
  g_free(ini);
}

int main(int argc, char **argv) {
  /* before GLib reads any of these: no bus, no dconf asked for, a config
   * folder of the test's own */
  char *home = g_dir_make_tmp("ember-settings-XXXXXX", NULL);
  g_setenv("XDG_CONFIG_HOME", home, TRUE);
  g_setenv("XDG_RUNTIME_DIR", home, TRUE);
  g_unsetenv("DBUS_SESSION_BUS_ADDRESS");
  g_unsetenv("GSETTINGS_BACKEND");
  g_setenv("GIO_USE_VFS", "local", TRUE);
  g_test_init(&argc, &argv, NULL);
  /* GLib warns that the memory backend will not save: the very case */
  g_log_set_always_fatal(G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  g_test_add_func("/ui/settings/keyfile-when-nothing-keeps-them", test_keyfile_when_nothing_keeps_them);
  int rc = g_test_run();
  char *rm[] = {"rm", "-rf", home, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(home);
  return rc;
}
