/* gz-read.c: reading whole gzip or plain files with errors that name the
 * file and say what is wrong. */
#include "data-private.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

em_status em_gz_open(const char *path, gzFile *out, em_error *err) {
  *out = NULL;
  if (!path) return em_error_set(err, EM_ERR_INVALID, "no file name given");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return em_error_set(err, EM_ERR_IO, "cannot read '%s': not a regular file", path);
  }
  gzFile f = gzdopen(fd, "rb");
  if (!f) {
    close(fd);
    return em_error_set(err, EM_ERR_NOMEM, "cannot read '%s': out of memory", path);
  }
  gzbuffer(f, 1 << 17);
  *out = f;
  return EM_OK;
}

/* A gzip-level error after a short read, or EM_OK when the data just ended. */
static em_status gz_stream_error(gzFile f, const char *path, em_error *err) {
  int errnum = Z_OK;
  const char *msg = gzerror(f, &errnum);
  if (errnum == Z_OK) return EM_OK;
  if (errnum == Z_ERRNO)
    return em_error_set(err, EM_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
  return em_error_set(err, EM_ERR_FORMAT, "'%s' is corrupt or truncated (gzip: %s)", path,
                      msg ? msg : "unknown error");
}

/* Reads up to n bytes, in pieces gzread can take; returns the count read
 * or -1 on a gzip error. */
static int64_t gz_read_some(gzFile f, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t want = n - got;
    if (want > (1u << 30)) want = 1u << 30;
    int r = gzread(f, (char *)buf + got, (unsigned)want);
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (int64_t)got;
}

em_status em_gz_read_exact(gzFile f, const char *path, void *buf, size_t n, const char *what,
                           em_error *err) {
  int64_t got = gz_read_some(f, buf, n);
  if (got < 0 || (size_t)got < n) {
    em_status st = gz_stream_error(f, path, err);
    if (st != EM_OK) return st;
    return em_error_set(err, EM_ERR_FORMAT,
                        "'%s' is truncated: %s needs %zu bytes, the file has only %lld", path,
                        what, n, (long long)got);
  }
  return EM_OK;
}

em_status em_gz_read_alloc(gzFile f, const char *path, size_t n, const char *what,
                           uint8_t **out, em_error *err) {
  *out = NULL;
  size_t cap = n < (16u << 20) ? n : (16u << 20);
  uint8_t *buf = malloc(cap ? cap : 1);
  if (!buf) return em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s'", path);
  size_t got = 0;
  for (;;) {
    int64_t r = gz_read_some(f, buf + got, cap - got);
    if (r < 0) break;
    got += (size_t)r;
    if (got < cap || cap == n) break; /* the file ended, or all n bytes are in */
    size_t ncap = cap * 2 < n && cap * 2 > cap ? cap * 2 : n;
    uint8_t *nb = realloc(buf, ncap);
    if (!nb) {
      free(buf);
      return em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s' (%zu bytes)", path, n);
    }
    buf = nb;
    cap = ncap;
  }
  if (got < n) {
    free(buf);
    em_status st = gz_stream_error(f, path, err);
    if (st != EM_OK) return st;
    return em_error_set(err, EM_ERR_FORMAT,
                        "'%s' is truncated: %s needs %zu bytes, the file has only %zu", path,
                        what, n, got);
  }
  *out = buf;
  return EM_OK;
}

em_status em_gz_read_rest(gzFile f, const char *path, uint8_t **out, size_t *n, em_error *err) {
  *out = NULL;
  *n = 0;
  size_t cap = 1u << 20, got = 0;
  uint8_t *buf = malloc(cap);
  if (!buf) return em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s'", path);
  for (;;) {
    int64_t r = gz_read_some(f, buf + got, cap - got);
    if (r < 0) {
      free(buf);
      em_status st = gz_stream_error(f, path, err);
      return st != EM_OK ? st : em_error_set(err, EM_ERR_IO, "cannot read '%s'", path);
    }
    got += (size_t)r;
    if (got < cap) break;
    if (cap > ((size_t)1 << 40)) {
      free(buf);
      return em_error_set(err, EM_ERR_NOMEM, "'%s' is too large to load", path);
    }
    uint8_t *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      return em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    buf = nb;
    cap *= 2;
  }
  /* A short read may also be a gzip error (bad data, truncated stream). */
  em_status st = gz_stream_error(f, path, err);
  if (st != EM_OK) {
    free(buf);
    return st;
  }
  *out = buf;
  *n = got;
  return EM_OK;
}

em_status em_gz_expect_end(gzFile f, const char *path, const char *what, em_error *err) {
  unsigned char extra[64];
  int r = gzread(f, extra, sizeof extra);
  if (r < 0) return gz_stream_error(f, path, err);
  if (r > 0)
    return em_error_set(err, EM_ERR_FORMAT, "'%s' has extra bytes after %s", path, what);
  return gz_stream_error(f, path, err);
}
