/* file-atomic.c: the file operations that keep a crash from leaving a torn
 * or half-renamed file: syncing the folder after a rename into it, and a
 * second name for a file made in one rename. */
#include "em-io.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void em_sync_parent(const char *path) {
  char *copy = strdup(path);
  if (!copy) return;
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  free(copy);
}

em_status em_link_over(const char *src, const char *path, em_error *err) {
  size_t cap = strlen(path) + 32;
  char *tmp = malloc(cap);
  if (!tmp) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  snprintf(tmp, cap, "%s.link-%ld", path, (long)getpid());
  unlink(tmp); /* left by a crash of this pid's predecessor */
  em_status st = EM_OK;
  if (link(src, tmp) != 0)
    st = em_error_set(err, EM_ERR_IO, "cannot link '%s' to '%s': %s", tmp, src, strerror(errno));
  else if (rename(tmp, path) != 0) {
    st = em_error_set(err, EM_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path,
                      strerror(errno));
    unlink(tmp);
  } else {
    em_sync_parent(path);
  }
  free(tmp);
  return st;
}
