/* torch-script.c: see torch-script.h. */
#include "torch-script.h"

#include <glib.h>
#include <sys/wait.h>

#define TORCH_PYTHON "/usr/bin/python3"

void test_write_raw(const char *dir, const char *name, const void *p, size_t n) {
  g_autofree char *path = g_strdup_printf("%s/%s.bin", dir, name);
  g_autoptr(GError) err = NULL;
  g_assert_true(g_file_set_contents(path, p, (gssize)n, &err));
}

int test_torch_available(void) {
  if (!g_file_test(TORCH_PYTHON, G_FILE_TEST_IS_EXECUTABLE) || !g_getenv("EMBER_SOURCE_ROOT")) {
    g_test_skip("needs " TORCH_PYTHON " with torch and EMBER_SOURCE_ROOT");
    return 0;
  }
  return 1;
}

void test_run_torch_script(const char *script, const char *dir, const char *dims) {
  g_autofree char *path = g_build_filename(g_getenv("EMBER_SOURCE_ROOT"), script, NULL);
  const char *argv[] = {TORCH_PYTHON, path, dir, dims, NULL};
  int status = 0;
  g_autofree char *out = NULL, *errout = NULL;
  g_autoptr(GError) err = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out,
                             &errout, &status, &err));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    g_test_skip("PyTorch is not importable by " TORCH_PYTHON);
    return;
  }
  if (!g_spawn_check_wait_status(status, &err))
    g_error("%s: %s\n%s%s", script, err->message, out, errout);
  g_test_message("%s", out);
}
