/* file-hash.c: the SHA-256 and size of a file (GLib's GChecksum), as the
 * registry records them for artifacts, checkpoints and dataset files. */
#include "store-private.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* From offset 0 with pread: the descriptor's own offset is not used (the
 * plugin host passes one it loads from afterwards). */
em_status em_store_fd_sha256(int fd, const char *name, char hex[65], int64_t *size,
                             em_error *err) {
  enum { CHUNK = 1 << 20 };
  guchar *buf = g_malloc(CHUNK);
  GChecksum *sum = g_checksum_new(G_CHECKSUM_SHA256);
  int64_t total = 0;
  em_status st = EM_OK;
  for (;;) {
    ssize_t n = pread(fd, buf, CHUNK, (off_t)total);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = em_error_set(err, EM_ERR_IO, "reading '%s' to hash it: %s", name, strerror(errno));
      break;
    }
    if (n == 0) break;
    g_checksum_update(sum, buf, (gssize)n);
    total += n;
  }
  if (!st) {
    g_strlcpy(hex, g_checksum_get_string(sum), 65);
    if (size) *size = total;
  }
  g_checksum_free(sum);
  g_free(buf);
  return st;
}

em_status em_store_file_sha256(const char *path, char hex[65], int64_t *size, em_error *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return em_error_set(err, EM_ERR_IO, "cannot read '%s' to hash it: %s", path, strerror(errno));
  em_status st = em_store_fd_sha256(fd, path, hex, size, err);
  close(fd);
  return st;
}
