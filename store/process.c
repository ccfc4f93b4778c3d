/* process.c: what a run records about the process that runs it (host,
 * pid and the pid's start time), and whether that process still lives. */
#include "store-private.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double em_store_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *em_store_host(void) {
  static char host[256];
  static gsize done;
  if (g_once_init_enter(&done)) {
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) g_strlcpy(host, "localhost", sizeof host);
    g_once_init_leave(&done, 1);
  }
  return host;
}

int64_t em_process_start_time(int64_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
   * count fields from the last ')'; field 3 (state) follows it. */
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  p++;
  for (int field = 3; field <= 22; field++) {
    while (*p == ' ') p++;
    if (!*p) return -1;
    if (field == 22) return strtoll(p, NULL, 10);
    while (*p && *p != ' ') p++;
  }
  return -1;
}

bool em_process_alive(int64_t pid, int64_t recorded_start) {
  if (pid <= 0) return false;
  if (kill((pid_t)pid, 0) == -1 && errno == ESRCH) return false;
  if (recorded_start >= 0) {
    int64_t now_start = em_process_start_time(pid);
    if (now_start >= 0 && now_start != recorded_start) return false; /* pid reused */
  }
  return true;
}
