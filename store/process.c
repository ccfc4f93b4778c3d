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

/* Field 3 (state) of /proc/<pid>/stat into *state and field 22 (start
 * time in clock ticks since boot) into *start; false when unreadable. */
static bool proc_stat(int64_t pid, char *state, int64_t *start) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
   * count fields from the last ')'; field 3 (state) follows it. */
  char *p = strrchr(buf, ')');
  if (!p) return false;
  p++;
  for (int field = 3; field <= 22; field++) {
    while (*p == ' ') p++;
    if (!*p) return false;
    if (field == 3) *state = *p;
    if (field == 22) {
      *start = strtoll(p, NULL, 10);
      return true;
    }
    while (*p && *p != ' ') p++;
  }
  return false;
}

int64_t em_process_start_time(int64_t pid) {
  char state;
  int64_t start;
  return proc_stat(pid, &state, &start) ? start : -1;
}

bool em_process_alive(int64_t pid, int64_t recorded_start) {
  if (pid <= 0) return false;
  if (kill((pid_t)pid, 0) == -1 && errno == ESRCH) return false;
  char state = 0;
  int64_t now_start = -1;
  if (!proc_stat(pid, &state, &now_start)) return true; /* no /proc: kill() is all we know */
  /* exited and not yet reaped by its parent (or being torn down): it
   * runs nothing any more */
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  if (recorded_start >= 0 && now_start != recorded_start) return false; /* pid reused */
  return true;
}
