/* png.c: a PNG file into floats (C, H, W) in [0, 1], through libpng's
 * simplified reading API (which handles every bit depth, palettes,
 * interlacing and transparency). Used by `ember predict` for image input
 * and by datasets of image folders (plugins too). */
#include "em-data.h"
#include "em-io.h"

#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIDE 16384 /* larger images are refused, not allocated */

em_status em_image_read_png(const char *path, int want_channels, em_image *out, em_error *err) {
  memset(out, 0, sizeof *out);
  if (want_channels != 0 && want_channels != 1 && want_channels != 3)
    return em_error_set(err, EM_ERR_INVALID, "'%s': images have 1 or 3 channels, not %d", path,
                        want_channels);
  FILE *f = em_fopen_read(path, false);
  if (!f)
    return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, em_open_error(errno));
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_stdio(&img, f)) {
    em_status st = em_error_set(err, EM_ERR_FORMAT, "'%s' is not a readable PNG image: %s", path,
                                img.message);
    png_image_free(&img);
    fclose(f);
    return st;
  }
  if (img.width == 0 || img.height == 0 || img.width > MAX_SIDE || img.height > MAX_SIDE) {
    em_status st = em_error_set(err, EM_ERR_FORMAT, "'%s': %ux%u pixels is outside 1..%d a side",
                                path, img.width, img.height, MAX_SIDE);
    png_image_free(&img);
    fclose(f);
    return st;
  }
  bool color = (img.format & PNG_FORMAT_FLAG_COLOR) != 0;
  int c = want_channels ? want_channels : (color ? 3 : 1);
  img.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB; /* alpha composed on black */
  size_t hw = (size_t)img.width * img.height;
  png_bytep buf = malloc(hw * (size_t)c);
  float *data = malloc(hw * (size_t)c * sizeof *data);
  if (!buf || !data) {
    free(buf);
    free(data);
    png_image_free(&img);
    fclose(f);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory decoding '%s'", path);
  }
  /* With a NULL background libpng composes alpha onto whatever the
   * buffer holds (here: uninitialised memory); black is what the header
   * promises. */
  const png_color black = {0, 0, 0};
  if (!png_image_finish_read(&img, &black, buf, 0, NULL)) {
    em_status st = em_error_set(err, EM_ERR_FORMAT, "'%s': corrupt PNG data: %s", path,
                                img.message);
    free(buf);
    free(data);
    png_image_free(&img);
    fclose(f);
    return st;
  }
  fclose(f);
  /* HWC bytes -> CHW floats. */
  for (int ch = 0; ch < c; ch++)
    for (size_t p = 0; p < hw; p++) data[(size_t)ch * hw + p] = buf[p * (size_t)c + (size_t)ch] / 255.0f;
  free(buf);
  out->channels = c;
  out->height = (int)img.height;
  out->width = (int)img.width;
  out->data = data;
  return EM_OK;
}

void em_image_clear(em_image *img) {
  if (!img) return;
  free(img->data);
  memset(img, 0, sizeof *img);
}
