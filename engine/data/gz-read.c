/* gz-read.c: reading whole gzip or plain files with errors that name the
 * file and say what is wrong: zlib's streaming reader, and libdeflate's
 * whole-buffer one for a file whose size is known (em_gz_whole). */
#include "data-private.h"
#include "em-device.h"
#include "em-io.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libdeflate.h>

em_status em_gz_open(const char *path, gzFile *out, em_error *err) {
  *out = NULL;
  if (!path) return em_error_set(err, EM_ERR_INVALID, "no file name given");
  int fd = em_open_read(path, true);
  if (fd < 0)
    return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, em_open_error(errno));
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
  /* zlib names a stream opened by gzdopen "<fd:N>": the file is named already */
  if (msg && strncmp(msg, "<fd:", 4) == 0 && strstr(msg, ": ")) msg = strstr(msg, ": ") + 2;
  return em_error_set(err, EM_ERR_FORMAT, "'%s' is corrupt or truncated (gzip: %s)", path,
                      msg ? msg : "unknown error");
}

/* Before a buffer that already holds `held` bytes of path grows by
 * `more`: an error when the machine has not that much memory available
 * (MemAvailable) with room to spare, so that a file that inflates beyond
 * the memory (a gzip bomb of a few MB) is reported, not left to the
 * out-of-memory killer. */
static em_status room_to_grow(const char *path, size_t held, size_t more, em_error *err) {
  em_device_info host;
  if (em_device_info_get(em_device_cpu(), &host, NULL) != EM_OK || host.free_bytes <= 0)
    return EM_OK; /* unknown: let malloc say */
  const double margin = 256.0 * 1024 * 1024;
  if ((double)more + margin <= (double)host.free_bytes) return EM_OK;
  char a[32], b[32];
  return em_error_set(err, EM_ERR_NOMEM, "'%s' holds more than %s once decompressed, more than "
                      "the %s of memory available (a gzip file that inflates this far is "
                      "corrupt or a 'gzip bomb', or the machine is short of memory)", path,
                      em_format_bytes((int64_t)(held + more), a, sizeof a),
                      em_format_bytes(host.free_bytes, b, sizeof b));
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
    em_status room = room_to_grow(path, got, ncap - got, err);
    if (room != EM_OK) {
      free(buf);
      return room;
    }
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

em_status em_gz_measure(gzFile f, const char *path, uint64_t *n, em_error *err) {
  *n = 0;
  enum { CHUNK = 1 << 18 };
  uint8_t *buf = malloc(CHUNK);
  if (!buf) return em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s'", path);
  for (;;) {
    int64_t r = gz_read_some(f, buf, CHUNK);
    if (r < 0) {
      free(buf);
      em_status st = gz_stream_error(f, path, err);
      return st != EM_OK ? st : em_error_set(err, EM_ERR_IO, "cannot read '%s'", path);
    }
    *n += (uint64_t)r;
    if (r < CHUNK) break;
  }
  free(buf);
  if (gzrewind(f) != 0) return em_error_set(err, EM_ERR_IO, "cannot read '%s' again", path);
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
    em_status room = room_to_grow(path, got, cap, err);
    if (room != EM_OK) {
      free(buf);
      return room;
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

em_status em_gz_check_trailing(const char *path, em_error *err) {
  int fd = em_open_read(path, true);
  if (fd < 0)
    return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, em_open_error(errno));
  enum { IN = 1 << 18, OUT = 1 << 18 };
  uint8_t *in = malloc(IN), *out = malloc(OUT);
  z_stream z = {0};
  em_status st = EM_OK;
  bool started = false, gz = false;
  uint64_t pos = 0; /* file offset of in[0] */
  if (!in || !out || inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
    st = em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s'", path);
    goto out;
  }
  started = true;
  for (;;) {
    if (z.avail_in == 0) {
      pos += (uint64_t)(z.next_in ? z.next_in - in : 0);
      ssize_t r;
      do r = read(fd, in, IN);
      while (r < 0 && errno == EINTR);
      if (r < 0) {
        st = em_error_set(err, EM_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        break;
      }
      if (r == 0) break; /* the end: after a whole member, or a truncated one (said already) */
      z.next_in = in;
      z.avail_in = (unsigned)r;
      if (!gz && pos == 0 && (r < 2 || in[0] != 0x1f || in[1] != 0x8b)) break; /* plain */
      gz = true;
    }
    z.next_out = out;
    z.avail_out = OUT;
    int ret = inflate(&z, Z_NO_FLUSH);
    if (ret == Z_STREAM_END) {
      /* what follows a member: nothing, another member, or trailing data */
      if (z.avail_in == 0) {
        pos += (uint64_t)(z.next_in - in);
        ssize_t r;
        do r = read(fd, in, IN);
        while (r < 0 && errno == EINTR);
        if (r <= 0) break;
        z.next_in = in;
        z.avail_in = (unsigned)r;
      }
      if (z.avail_in < 2 || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b) {
        uint64_t at = pos + (uint64_t)(z.next_in - in);
        struct stat sb;
        uint64_t size = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : at;
        st = em_error_set(err, EM_ERR_FORMAT, "'%s': trailing data after the gzip stream (%llu "
                          "bytes from byte %llu that are not another gzip member): corrupt, or "
                          "something was appended to it", path,
                          (unsigned long long)(size - at), (unsigned long long)at);
        break;
      }
      inflateReset(&z); /* another member, as gzip -d and zlib's gzread take it */
    } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
      break; /* a damaged stream: the reader's own error said so */
    }
  }
out:
  if (started) inflateEnd(&z);
  free(in);
  free(out);
  close(fd);
  return st;
}

/* The n bytes of fd into a new buffer, or NULL. */
static uint8_t *read_whole_fd(int fd, size_t n) {
  uint8_t *buf = malloc(n);
  size_t got = 0;
  while (buf && got < n) {
    ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      free(buf);
      return NULL;
    }
    got += (size_t)r;
  }
  return buf;
}

uint8_t *em_gz_whole(const char *path, size_t size) {
  int fd = em_open_read(path, true);
  if (fd < 0) return NULL;
  struct stat st;
  uint8_t *in = NULL;
  size_t n = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 18 && size > 0 &&
      size / EM_DEFLATE_MAX_RATIO <= (uint64_t)st.st_size) {
    n = (size_t)st.st_size;
    in = read_whole_fd(fd, n);
  }
  close(fd);
  /* gzip magic, and ISIZE (the size mod 2^32, little-endian) at the end */
  if (!in || in[0] != 0x1f || in[1] != 0x8b ||
      ((uint32_t)in[n - 4] | (uint32_t)in[n - 3] << 8 | (uint32_t)in[n - 2] << 16 |
       (uint32_t)in[n - 1] << 24) != (uint32_t)size) {
    free(in);
    return NULL;
  }
  uint8_t *out = malloc(size);
  struct libdeflate_decompressor *d = out ? libdeflate_alloc_decompressor() : NULL;
  size_t used = 0, got = 0;
  enum libdeflate_result r =
      d ? libdeflate_gzip_decompress_ex(d, in, n, out, size, &used, &got) : LIBDEFLATE_BAD_DATA;
  libdeflate_free_decompressor(d);
  free(in);
  if (r != LIBDEFLATE_SUCCESS || got != size || used != n) { /* one member, nothing after */
    free(out);
    return NULL;
  }
  return out;
}
