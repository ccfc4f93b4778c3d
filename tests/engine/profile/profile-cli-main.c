/* profile-cli-main.c: a stand-in `ember` for the tests: runs
 * `<exe> profile ...` through em_cli_profile, the command the real CLI
 * dispatches to. */
#include <stdio.h>
#include <string.h>

#include "cmd-profile.h"
#include "em-error.h"

static void log_to_stderr(em_log_level level, const char *msg, void *user) {
  (void)user;
  if (level >= EM_LOG_WARNING) fprintf(stderr, "ember: %s\n", msg);
}

int main(int argc, char **argv) {
  em_log_set_handler(log_to_stderr, NULL);
  if (argc < 2 || strcmp(argv[1], "profile") != 0) {
    fprintf(stderr, "usage: %s profile SPEC [options]\n", argv[0]);
    return 2;
  }
  return em_cli_profile(argc - 1, argv + 1);
}
