/* file-atomic.c: the file operations that keep a crash from leaving a torn
 * or half-renamed file: a file written whole through a temporary beside
 * it, syncing the folder after a rename into it, and a second name for a
 * file made in one rename.
 *
 * The mode of a written file is the one open(path, O_CREAT, 0666) would
 * give, as cp and torch.save do: a new file 0666 & ~umask, an existing
 * one keeps its own (mkostemp makes the temporary 0600, so it is set
 * before the rename). */
#include "em-io.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The process's umask. umask(2) can only be read by setting it, and the
 * set-and-restore is process-wide: a thread creating a file in between
 * would get the wrong mode. So it is read from /proc/self/status's Umask
 * line (Linux 4.7 and later), which changes nothing and tracks later
 * umask calls; where that is missing, from the value taken once before
 * main, while the process has one thread. */
static mode_t g_start_umask = 022;

__attribute__((constructor)) static void read_start_umask(void) {
  g_start_umask = umask(022);
  umask(g_start_umask);
}

static mode_t current_umask(void) {
  FILE *f = fopen("/proc/self/status", "re");
  if (!f) return g_start_umask;
  char line[256];
  mode_t m = g_start_umask;
  while (fgets(line, sizeof line, f)) {
    unsigned v;
    if (sscanf(line, "Umask: %o", &v) == 1) {
      m = (mode_t)(v & 0777);
      break;
    }
  }
  fclose(f);
  return m;
}

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

em_status em_atomic_begin(const char *path, em_atomic_file *f, em_error *err) {
  *f = (em_atomic_file){.fd = -1};
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
    return em_error_set(err, EM_ERR_IO, "'%s' is %s, not a regular file: it was left as it is; "
                        "give a file name", path, S_ISDIR(sb.st_mode) ? "a folder" : "a device "
                        "or a pipe");
  /* The file to write: path, or through a chain of symlinks the file they
   * end at, made or not, as a shell's > follows them (8 links at most). */
  char *target = strdup(path);
  for (int hop = 0; target && hop < 8; hop++) {
    struct stat lb;
    char link[PATH_MAX];
    ssize_t n;
    if (lstat(target, &lb) != 0 || !S_ISLNK(lb.st_mode) ||
        (n = readlink(target, link, sizeof link - 1)) <= 0)
      break;
    link[n] = '\0';
    char *next = NULL;
    if (link[0] == '/') {
      next = strdup(link);
    } else { /* relative to the link's folder */
      char *copy = strdup(target);
      const char *dir = copy ? dirname(copy) : NULL;
      size_t cap = dir ? strlen(dir) + (size_t)n + 2 : 0;
      if (dir && (next = malloc(cap))) snprintf(next, cap, "%s/%s", dir, link);
      free(copy);
    }
    free(target);
    target = next;
  }
  f->target = target;
  struct stat tb; /* an existing file keeps its mode, a new one follows the umask */
  f->mode = target && stat(target, &tb) == 0 && S_ISREG(tb.st_mode)
                ? (unsigned)(tb.st_mode & 0777)
                : (unsigned)(0666 & ~current_umask());
  size_t plen = f->target ? strlen(f->target) : 0;
  f->tmp = f->target ? malloc(plen + 16) : NULL;
  if (!f->tmp) {
    free(f->target);
    f->target = NULL;
    return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  }
  memcpy(f->tmp, f->target, plen);
  memcpy(f->tmp + plen, ".tmp-XXXXXX", 12);
  f->fd = mkostemp(f->tmp, O_CLOEXEC);
  if (f->fd < 0) {
    em_status st =
        strcmp(path, f->target) == 0
            ? em_error_set(err, EM_ERR_IO, "cannot create a temporary file next to '%s': %s "
                           "(check that the folder exists and is writable)", path,
                           strerror(errno))
            : em_error_set(err, EM_ERR_IO, "cannot create a temporary file next to '%s', "
                           "the file the link '%s' names: %s (check that its folder exists and "
                           "is writable)", f->target, path, strerror(errno));
    free(f->tmp);
    free(f->target);
    *f = (em_atomic_file){.fd = -1};
    return st;
  }
  return EM_OK;
}

em_status em_atomic_end(em_atomic_file *f, em_status st, em_error *err) {
  if (f->fd < 0) return st;
  if (st == EM_OK && fchmod(f->fd, (mode_t)f->mode) != 0)
    st = em_error_set(err, EM_ERR_IO, "cannot set the mode of '%s': %s", f->tmp, strerror(errno));
  if (st == EM_OK && fsync(f->fd) != 0)
    st = em_error_set(err, EM_ERR_IO, "cannot sync '%s': %s", f->tmp, strerror(errno));
  if (close(f->fd) != 0 && st == EM_OK)
    st = em_error_set(err, EM_ERR_IO, "cannot write '%s': %s", f->tmp, strerror(errno));
  if (st == EM_OK && rename(f->tmp, f->target) != 0)
    st = em_error_set(err, EM_ERR_IO, "cannot rename '%s' to '%s': %s", f->tmp, f->target,
                      strerror(errno));
  if (st != EM_OK) unlink(f->tmp);
  else em_sync_parent(f->target);
  free(f->tmp);
  free(f->target);
  *f = (em_atomic_file){.fd = -1};
  return st;
}
