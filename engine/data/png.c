/* png.c: a PNG file into floats (C, H, W) in [0, 1]: each stored value
 * over its largest (v / 255 for 8 bits, v / 65535 for 16), as OpenCV,
 * PIL and torchvision read them. Used by `ember predict` for image input
 * and by datasets of image folders (plugins too).
 *
 * libpng's simplified API is not used: it takes 16-bit data without a
 * gamma chunk as linear light and converts it to sRGB (32768 of 65535
 * read as 0.73), and it composes alpha and makes grey in linear light too.
 * Here the values are taken as stored (gAMA is ignored, as those readers
 * do), palettes and 1-, 2- and 4-bit greys are expanded, alpha (its
 * channel or a tRNS chunk) is composed onto black in the stored values
 * (v * a), colour becomes grey with ITU-R 601 weights (0.299 R + 0.587 G
 * + 0.114 B, OpenCV's and PIL's) and grey becomes colour by copying. */
#include "data-private.h"
#include "em-data.h"
#include "em-io.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SIDE 16384 /* larger images are refused, not allocated */

typedef struct {
  jmp_buf jmp;
  char msg[200];
} png_fail;

static void on_error(png_structp png, png_const_charp msg) {
  png_fail *f = png_get_error_ptr(png);
  /* libpng's stdio reader says only "Read Error" at the end of the file */
  snprintf(f->msg, sizeof f->msg, "%s",
           strcmp(msg, "Read Error") ? msg : "the file ends early (truncated?)");
  longjmp(f->jmp, 1);
}

static void on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

/* What one read needs released, whichever way it ends. */
typedef struct {
  FILE *file;
  png_structp png;
  png_infop info;
  png_bytep pixels;
  png_bytepp rows;
  float *data;
} png_read;

static void read_free(png_read *r, png_fail *fail, bool keep_data) {
  if (r->png) png_destroy_read_struct(&r->png, r->info ? &r->info : NULL, NULL);
  if (r->file) fclose(r->file);
  free(r->pixels);
  free(r->rows);
  if (!keep_data) free(r->data);
  free(r);
  free(fail);
}

/* The value of channel k of pixel p (of n channels, 8 or 16 bits) over
 * its largest, in double: the sums below round once, to float, so a grey
 * stored as RGB (r = g = b) reads exactly as the same grey stored as grey. */
static inline double value_at(const png_byte *px, int depth, int n, size_t p, int k) {
  size_t i = p * (size_t)n + (size_t)k;
  if (depth == 16) return (double)((px[2 * i] << 8) | px[2 * i + 1]) / 65535.0;
  return (double)px[i] / 255.0;
}

static uint32_t be32(const uint8_t *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

em_status em_image_png_header(const char *path, int *width, int *height, int *channels,
                              em_error *err) {
  FILE *f = em_fopen_read(path, true); /* as em_image_read_png: a regular file */
  if (!f) return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, em_open_error(errno));
  uint8_t b[26]; /* signature, IHDR's length and type, width, height, depth, colour type */
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  if (n < 8 || png_sig_cmp(b, 0, 8))
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is not a readable PNG image: not a PNG file",
                        path);
  if (n < sizeof b || memcmp(b + 12, "IHDR", 4) != 0)
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is a truncated or corrupt PNG image (no "
                        "header chunk)", path);
  uint32_t w = be32(b + 16), h = be32(b + 20);
  if (w == 0 || h == 0 || w > INT32_MAX || h > INT32_MAX) /* the PNG format's bounds */
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is a corrupt PNG image: its header says %u x "
                        "%u pixels (each side must be 1 to 2^31 - 1)", path, (unsigned)w,
                        (unsigned)h);
  if (w > MAX_SIDE || h > MAX_SIDE)
    return em_error_set(err, EM_ERR_FORMAT, "'%s': %ux%u pixels is outside 1..%d a side", path,
                        (unsigned)w, (unsigned)h, MAX_SIDE);
  *width = (int)w;
  *height = (int)h;
  *channels = b[25] & PNG_COLOR_MASK_COLOR ? 3 : 1; /* palette included, as decoded */
  return EM_OK;
}

/* Before libpng reads a byte: every chunk's length must fit in what the
 * file holds after it (libpng allocates an ancillary chunk's stated
 * length and only then reads it: a 343-byte file with a tEXt of 2^31 - 1
 * bytes took 2.1 GB and seconds to say "truncated"), and the sides in
 * IHDR must be 1..MAX_SIDE. *idat: the compressed image data's bytes,
 * which bound what it can decode to. f is left at byte 8. */
static em_status walk_chunks(FILE *f, const char *path, uint64_t size, uint64_t *idat,
                             em_error *err) {
  *idat = 0;
  uint64_t pos = 8;
  bool first = true;
  while (pos + 8 <= size) {
    uint8_t h[16];
    size_t want = first ? 16 : 8; /* IHDR: its width and height too */
    if (fseeko(f, (off_t)pos, SEEK_SET) != 0 || fread(h, 1, want, f) != want) break;
    uint32_t len = be32(h);
    char type[5];
    for (int i = 0; i < 4; i++) /* printable, for the message */
      type[i] = h[4 + i] >= 0x20 && h[4 + i] < 0x7f ? (char)h[4 + i] : '?';
    type[4] = '\0';
    if (first) {
      if (memcmp(type, "IHDR", 4) != 0)
        return em_error_set(err, EM_ERR_FORMAT, "'%s' is a truncated or corrupt PNG image (no "
                            "header chunk)", path);
      uint32_t w = be32(h + 8), ht = be32(h + 12);
      if (w == 0 || ht == 0 || w > MAX_SIDE || ht > MAX_SIDE)
        return em_error_set(err, EM_ERR_FORMAT, "'%s': %ux%u pixels is outside 1..%d a side",
                            path, (unsigned)w, (unsigned)ht, MAX_SIDE);
      first = false;
    }
    if (len > PNG_UINT_31_MAX || (uint64_t)len + 12 > size - pos)
      return em_error_set(err, EM_ERR_FORMAT, "'%s' is a truncated or corrupt PNG image: its "
                          "'%s' chunk at byte %llu says %lu bytes, but the file has %llu after "
                          "that chunk's start", path, type, (unsigned long long)pos,
                          (unsigned long)len, (unsigned long long)(size - pos));
    if (memcmp(type, "IDAT", 4) == 0) *idat += len;
    pos += (uint64_t)len + 12;
    if (memcmp(type, "IEND", 4) == 0) break;
  }
  if (fseeko(f, 8, SEEK_SET) != 0)
    return em_error_set(err, EM_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
  return EM_OK;
}

em_status em_image_read_png(const char *path, int want_channels, em_image *out, em_error *err) {
  memset(out, 0, sizeof *out);
  if (want_channels != 0 && want_channels != 1 && want_channels != 3)
    return em_error_set(err, EM_ERR_INVALID, "'%s': images have 1 or 3 channels, not %d", path,
                        want_channels);
  /* on the heap: what is assigned after setjmp must not live in this
   * frame, whose non-volatile locals are indeterminate after a longjmp */
  png_read *r = calloc(1, sizeof *r);
  png_fail *fail = calloc(1, sizeof *fail);
  if (!r || !fail) {
    free(r);
    free(fail);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory decoding '%s'", path);
  }
  /* a regular file: its size bounds every chunk (and it is read twice) */
  if (!(r->file = em_fopen_read(path, true))) {
    free(r);
    free(fail);
    return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, em_open_error(errno));
  }
  png_byte sig[8];
  if (fread(sig, 1, sizeof sig, r->file) != sizeof sig || png_sig_cmp(sig, 0, sizeof sig)) {
    read_free(r, fail, false);
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is not a readable PNG image: not a PNG file",
                        path);
  }
  struct stat sb;
  uint64_t idat = 0;
  if (fstat(fileno(r->file), &sb) != 0) {
    read_free(r, fail, false);
    return em_error_set(err, EM_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
  }
  em_status walked = walk_chunks(r->file, path, (uint64_t)sb.st_size, &idat, err);
  if (walked != EM_OK) {
    read_free(r, fail, false);
    return walked;
  }
  r->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, fail, on_error, on_warning);
  if (r->png) r->info = png_create_info_struct(r->png);
  if (!r->png || !r->info) {
    read_free(r, fail, false);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory decoding '%s'", path);
  }
  /* libpng's own bounds too: the sides, and what one chunk (an ancillary
   * one inflated included: zTXt, iCCP) may allocate, at most the file's
   * size or libpng's usual 8 MB cap, whichever is larger */
  png_set_user_limits(r->png, MAX_SIDE, MAX_SIDE);
  png_set_chunk_malloc_max(r->png, (png_alloc_size_t)sb.st_size > 8000000
                                       ? (png_alloc_size_t)sb.st_size : 8000000);
  volatile bool header_read = false; /* read after a longjmp back into this frame */
  if (setjmp(fail->jmp)) {
    char why[sizeof fail->msg];
    memcpy(why, fail->msg, sizeof why);
    read_free(r, fail, false);
    return em_error_set(err, EM_ERR_FORMAT, header_read ? "'%s': corrupt PNG data: %s"
                                                       : "'%s' is not a readable PNG image: %s",
                        path, why);
  }
  png_init_io(r->png, r->file);
  png_set_sig_bytes(r->png, sizeof sig);
  png_read_info(r->png, r->info);
  header_read = true;
  png_uint_32 w = png_get_image_width(r->png, r->info), h = png_get_image_height(r->png, r->info);
  int type = png_get_color_type(r->png, r->info), depth = png_get_bit_depth(r->png, r->info);
  if (w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE) {
    read_free(r, fail, false);
    return em_error_set(err, EM_ERR_FORMAT, "'%s': %ux%u pixels is outside 1..%d a side", path,
                        (unsigned)w, (unsigned)h, MAX_SIDE);
  }
  /* The image data decodes to h rows of a filter byte and rowbytes (more
   * when interlaced): no more than its compressed bytes can inflate to,
   * checked before the pixels are allocated. */
  double raw = (double)h * ((double)png_get_rowbytes(r->png, r->info) + 1);
  if (raw > ((double)idat + 64) * EM_DEFLATE_MAX_RATIO) {
    read_free(r, fail, false);
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is a truncated or corrupt PNG image: %ux%u "
                        "pixels need %.0f bytes of image data, more than its %llu compressed "
                        "bytes can hold (deflate inflates at most %dx)", path, (unsigned)w,
                        (unsigned)h, raw, (unsigned long long)idat, EM_DEFLATE_MAX_RATIO);
  }
  /* to 8- or 16-bit grey or RGB, with an alpha channel when it has one */
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r->png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(r->png);
  if (png_get_valid(r->png, r->info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(r->png);
  png_set_interlace_handling(r->png);
  png_read_update_info(r->png, r->info);
  int n = png_get_channels(r->png, r->info);
  depth = png_get_bit_depth(r->png, r->info);
  size_t row_bytes = png_get_rowbytes(r->png, r->info), hw = (size_t)w * h;
  bool color = n >= 3, alpha = n == 2 || n == 4;
  int c = want_channels ? want_channels : (color ? 3 : 1);
  r->pixels = malloc(row_bytes * h);
  r->rows = malloc(sizeof *r->rows * h);
  r->data = malloc(hw * (size_t)c * sizeof *r->data);
  if (!r->pixels || !r->rows || !r->data) {
    read_free(r, fail, false);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory decoding '%s' (%ux%u)", path,
                        (unsigned)w, (unsigned)h);
  }
  for (png_uint_32 y = 0; y < h; y++) r->rows[y] = r->pixels + y * row_bytes;
  png_read_image(r->png, r->rows);
  png_read_end(r->png, NULL);
  /* HWC stored values -> CHW floats (row_bytes is w * n * depth / 8: no padding) */
  int colors = color ? 3 : 1;
  for (size_t p = 0; p < hw; p++) {
    double a = alpha ? value_at(r->pixels, depth, n, p, colors) : 1.0;
    double v[3];
    for (int k = 0; k < colors; k++) v[k] = value_at(r->pixels, depth, n, p, k) * a;
    if (c == 1) r->data[p] = (float)(color ? 0.299 * v[0] + 0.587 * v[1] + 0.114 * v[2] : v[0]);
    else
      for (int k = 0; k < 3; k++) r->data[(size_t)k * hw + p] = (float)v[color ? k : 0];
  }
  out->channels = c;
  out->height = (int)h;
  out->width = (int)w;
  out->data = r->data;
  read_free(r, fail, true);
  return EM_OK;
}

void em_image_clear(em_image *img) {
  if (!img) return;
  free(img->data);
  memset(img, 0, sizeof *img);
}
