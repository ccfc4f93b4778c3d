/* fuzz-file.h: the readers take a path, so a target hands them its bytes
 * as a file: one memfd per process (no disk), rewritten for each input and
 * opened by its /proc/self/fd path, which every reader opens afresh at
 * offset 0 and sees as a regular file. */
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *fuzz_file(const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("ember-fuzz", MFD_CLOEXEC);
    if (fd < 0) {
      perror("memfd_create");
      abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0) abort();
  size_t done = 0;
  while (done < size) {
    ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
    if (w <= 0) abort();
    done += (size_t)w;
  }
  return path;
}
