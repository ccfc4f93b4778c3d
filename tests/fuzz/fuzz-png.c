/* fuzz-png.c: the bytes as a PNG file: em_image_png_header, then
 * em_image_read_png keeping the file's channels and converting to grey
 * and to RGB (as `ember predict` and the image folders ask), when the
 * header gives a size small enough to decode quickly. */
#include "fuzz-file.h"

#include "em-data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size);
  em_error err;
  int w, h, c;
  if (em_image_png_header(path, &w, &h, &c, &err) != EM_OK) {
    /* the decoder must refuse it too (and free what it made) */
    em_image img = {0};
    (void)em_image_read_png(path, 0, &img, &err);
    em_image_clear(&img);
    return 0;
  }
  if ((int64_t)w * h > (1 << 20)) return 0; /* a valid huge image: slow, not interesting */
  for (int want = 0; want <= 3; want += (want ? 2 : 1)) {
    em_image img = {0};
    if (em_image_read_png(path, want, &img, &err) == EM_OK) {
      volatile float s = 0;
      for (int64_t i = 0; i < (int64_t)img.channels * img.height * img.width; i++)
        s += img.data[i];
      (void)s;
    }
    em_image_clear(&img);
  }
  return 0;
}
