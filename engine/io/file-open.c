/* file-open.c: opening a file to read without hanging on a named pipe
 * (FIFO) that nobody writes to.
 *
 * open(2) of a FIFO for reading blocks until a writer appears, so a FIFO
 * given where a dataset, a spec or a weights file belongs hung the
 * program (found by fuzzing `ember train --dataset cifar10 --data-dir`
 * with a FIFO as data_batch_1.bin). Opened with O_NONBLOCK, the call
 * returns at once; the flag is then cleared, so reads block as usual
 * (a FIFO without a writer reads as empty, one with a writer as its
 * data). */
#include "em-io.h"

#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int em_open_read(const char *path, bool regular_only) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st;
  int flags = fcntl(fd, F_GETFL);
  if (fstat(fd, &st) != 0 || flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if (S_ISDIR(st.st_mode) || (regular_only && !S_ISREG(st.st_mode))) {
    close(fd);
    errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    return -1;
  }
  return fd;
}

FILE *em_fopen_read(const char *path, bool regular_only) {
  int fd = em_open_read(path, regular_only);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return f;
}

char *em_read_text(const char *path, bool regular_only) {
  FILE *f = em_fopen_read(path, regular_only);
  if (!f) return NULL;
  size_t cap = 1 << 14, n = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      char *b = realloc(buf, cap * 2);
      if (!b) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
      cap *= 2;
    }
  }
  int e = ferror(f) ? EIO : 0;
  fclose(f);
  if (buf && e) {
    free(buf);
    buf = NULL;
    errno = e;
  }
  if (buf) buf[n] = '\0';
  return buf;
}

const char *em_open_error(int errnum) {
  if (errnum == EINVAL) return "not a regular file (a pipe, socket or device)";
  if (errnum == EISDIR) return "not a regular file (a folder)";
  return strerror(errnum);
}
