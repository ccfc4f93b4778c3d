/* test-png.c: em_image_read_png. PNG files written here with libpng's own
 * writer (grey, RGB, RGBA, 16-bit grey, palette), read back as
 * (C, H, W) floats pixel/255 (16-bit: /65535) in every channel conversion; a real
 * Fashion-MNIST test image read as PNG equals the IDX dataset's sample
 * bit for bit; bad files (missing, not a PNG, truncated, too large, a
 * wrong channel count) are errors naming the file, none a crash. */
#include <math.h>
#include <png.h>
#include <stdlib.h>

#include "data-test-util.h"
#include "em-data.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct {
  char *dir;
} png_fixture;

static void png_setup(png_fixture *f, gconstpointer data) { f->dir = dt_tmpdir(); }
static void png_teardown(png_fixture *f, gconstpointer data) { dt_tmpdir_free(f->dir); }

/* Writes w x h pixels of format (a PNG_FORMAT_*) to dir/name with libpng;
 * colormap: the palette of a PNG_FORMAT_FLAG_COLORMAP image. */
static char *write_png(const char *dir, const char *name, int w, int h, png_uint_32 format,
                       const void *pixels, const void *colormap, int colormap_entries) {
  char *p = g_build_filename(dir, name, NULL);
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = (png_uint_32)w;
  img.height = (png_uint_32)h;
  img.format = format;
  img.colormap_entries = (png_uint_32)colormap_entries;
  g_assert_true(png_image_write_to_file(&img, p, 0, pixels, 0, colormap));
  png_image_free(&img);
  return p;
}

/* Grey 8-bit: one channel, pixel/255 exactly; 3 channels repeat it. */
static void test_png_grey(png_fixture *f, gconstpointer data) {
  uint8_t px[4 * 3];
  for (int i = 0; i < 12; i++) px[i] = (uint8_t)(i * 23);
  char *p = write_png(f->dir, "grey.png", 4, 3, PNG_FORMAT_GRAY, px, NULL, 0);
  em_error err = {0};
  for (int want = 0; want <= 1; want++) {
    em_image img;
    g_assert_cmpint(em_image_read_png(p, want, &img, &err), ==, EM_OK);
    g_assert_cmpint(img.channels, ==, 1);
    g_assert_cmpint(img.width, ==, 4);
    g_assert_cmpint(img.height, ==, 3);
    for (int i = 0; i < 12; i++) g_assert_cmpfloat(img.data[i], ==, (float)px[i] / 255.0f);
    em_image_clear(&img);
    g_assert_null(img.data);
  }
  em_image rgb;
  g_assert_cmpint(em_image_read_png(p, 3, &rgb, &err), ==, EM_OK);
  g_assert_cmpint(rgb.channels, ==, 3);
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < 12; i++) g_assert_cmpfloat(rgb.data[c * 12 + i], ==, px[i] / 255.0f);
  em_image_clear(&rgb);
  em_image_clear(NULL);
  g_free(p);
}

/* RGB 8-bit: planes (C, H, W) in R, G, B order; grey conversion of grey
 * colours (r = g = b) gives that grey back, and pure colours order as
 * their luminance (green > red > blue). */
static void test_png_rgb(png_fixture *f, gconstpointer data) {
  enum { W = 5, H = 2 };
  uint8_t px[H * W * 3];
  for (int i = 0; i < H * W; i++) {
    px[3 * i + 0] = (uint8_t)(10 * i);
    px[3 * i + 1] = (uint8_t)(200 - 7 * i);
    px[3 * i + 2] = (uint8_t)(i * i);
  }
  char *p = write_png(f->dir, "rgb.png", W, H, PNG_FORMAT_RGB, px, NULL, 0);
  em_error err = {0};
  em_image img;
  g_assert_cmpint(em_image_read_png(p, 0, &img, &err), ==, EM_OK);
  g_assert_cmpint(img.channels, ==, 3);
  g_assert_cmpint(img.height, ==, H);
  g_assert_cmpint(img.width, ==, W);
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < H * W; i++)
      g_assert_cmpfloat(img.data[c * H * W + i], ==, px[3 * i + c] / 255.0f);
  em_image_clear(&img);
  g_free(p);

  uint8_t grey[4 * 3] = {0, 0, 0, 77, 77, 77, 128, 128, 128, 255, 255, 255};
  p = write_png(f->dir, "greys.png", 4, 1, PNG_FORMAT_RGB, grey, NULL, 0);
  g_assert_cmpint(em_image_read_png(p, 1, &img, &err), ==, EM_OK);
  g_assert_cmpint(img.channels, ==, 1);
  for (int i = 0; i < 4; i++) g_assert_cmpfloat_with_epsilon(img.data[i], grey[3 * i] / 255.0f, 1.5 / 255);
  em_image_clear(&img);
  g_free(p);

  uint8_t pure[3 * 3] = {255, 0, 0, 0, 255, 0, 0, 0, 255};
  p = write_png(f->dir, "pure.png", 3, 1, PNG_FORMAT_RGB, pure, NULL, 0);
  g_assert_cmpint(em_image_read_png(p, 1, &img, &err), ==, EM_OK);
  g_assert_cmpfloat(img.data[1], >, img.data[0]);
  g_assert_cmpfloat(img.data[0], >, img.data[2]);
  g_assert_cmpfloat(img.data[2], >, 0.0f);
  em_image_clear(&img);
  g_free(p);
}

/* RGBA: alpha is composed on black (transparent -> 0, opaque kept). */
static void test_png_alpha(png_fixture *f, gconstpointer data) {
  uint8_t px[2 * 4] = {255, 255, 255, 0, 200, 100, 50, 255};
  char *p = write_png(f->dir, "rgba.png", 2, 1, PNG_FORMAT_RGBA, px, NULL, 0);
  em_error err = {0};
  em_image img;
  g_assert_cmpint(em_image_read_png(p, 0, &img, &err), ==, EM_OK);
  g_assert_cmpint(img.channels, ==, 3);
  const float want[3][2] = {{0, 200}, {0, 100}, {0, 50}};
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < 2; i++) g_assert_cmpfloat(img.data[c * 2 + i], ==, want[c][i] / 255.0f);
  em_image_clear(&img);
  g_free(p);
}

/* 16-bit grey is value/65535 as stored, as OpenCV and PIL read it (this
 * file says gamma 1.0: libpng's simplified reader made 32768 into 0.73);
 * grey with alpha is composed onto black in the stored values; a palette
 * image decodes, and its tRNS transparency is alpha too. */
static void test_png_depths(png_fixture *f, gconstpointer data) {
  uint16_t px16[4] = {0, 1000, 32768, 65535};
  char *p = write_png(f->dir, "g16.png", 4, 1, PNG_FORMAT_LINEAR_Y, px16, NULL, 0);
  em_error err = {0};
  em_image img;
  g_assert_cmpint(em_image_read_png(p, 0, &img, &err), ==, EM_OK);
  g_assert_cmpint(img.channels, ==, 1);
  for (int i = 0; i < 4; i++) g_assert_cmpfloat(img.data[i], ==, (float)px16[i] / 65535.0f);
  em_image_clear(&img);
  g_free(p);

  uint8_t ga[2 * 3] = {255, 128, 200, 255, 90, 0};
  p = write_png(f->dir, "ga.png", 3, 1, PNG_FORMAT_GA, ga, NULL, 0);
  g_assert_cmpint(em_image_read_png(p, 0, &img, &err), ==, EM_OK);
  g_assert_cmpint(img.channels, ==, 1);
  g_assert_cmpfloat(img.data[0], ==, (128 / 255.0f) * 1.0f);
  g_assert_cmpfloat(img.data[1], ==, 200 / 255.0f);
  g_assert_cmpfloat(img.data[2], ==, 0.0f);
  em_image_clear(&img);
  g_free(p);

  /* pure red as grey: ITU-R 601's 0.299 (OpenCV, PIL), not linear light's 0.49 */
  uint8_t red[3] = {255, 0, 0};
  p = write_png(f->dir, "red.png", 1, 1, PNG_FORMAT_RGB, red, NULL, 0);
  g_assert_cmpint(em_image_read_png(p, 1, &img, &err), ==, EM_OK);
  g_assert_cmpfloat_with_epsilon(img.data[0], 0.299f, 1e-6);
  em_image_clear(&img);
  g_free(p);

  uint8_t cmap[3 * 3] = {255, 0, 0, 0, 0, 0, 10, 20, 30}, idx[4] = {2, 0, 1, 2};
  p = write_png(f->dir, "pal.png", 2, 2, PNG_FORMAT_RGB_COLORMAP, idx, cmap, 3);
  g_assert_cmpint(em_image_read_png(p, 3, &img, &err), ==, EM_OK);
  g_assert_cmpint(img.channels, ==, 3);
  const uint8_t want_r[4] = {10, 255, 0, 10}, want_b[4] = {30, 0, 0, 30};
  for (int i = 0; i < 4; i++) {
    g_assert_cmpfloat(img.data[i], ==, want_r[i] / 255.0f);
    g_assert_cmpfloat(img.data[8 + i], ==, want_b[i] / 255.0f);
  }
  em_image_clear(&img);
  g_free(p);

  /* a palette with transparency (RGBA colormap: libpng writes tRNS) */
  uint8_t cmap_a[2 * 4] = {255, 255, 255, 0, 100, 150, 200, 255}, idx_a[2] = {0, 1};
  p = write_png(f->dir, "pal-trns.png", 2, 1, PNG_FORMAT_RGBA_COLORMAP, idx_a, cmap_a, 2);
  g_assert_cmpint(em_image_read_png(p, 3, &img, &err), ==, EM_OK);
  const float want_pa[3][2] = {{0, 100}, {0, 150}, {0, 200}};
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < 2; i++) g_assert_cmpfloat(img.data[c * 2 + i], ==, want_pa[c][i] / 255.0f);
  em_image_clear(&img);
  g_free(p);
}

/* A real image: Fashion-MNIST test image 7 as a PNG reads back as the IDX
 * dataset's sample, bit for bit. */
static void test_png_fmnist(png_fixture *f, gconstpointer data) {
  em_error err = {0};
  em_dataset *ds = em_dataset_fashion_mnist(NULL, false, &err);
  if (!ds) {
    g_test_skip("Fashion-MNIST not installed");
    return;
  }
  float x[784];
  int64_t y;
  g_assert_cmpint(em_dataset_get(ds, 7, x, &y, &err), ==, EM_OK);
  uint8_t px[784];
  for (int i = 0; i < 784; i++) px[i] = (uint8_t)lrintf(x[i] * 255.0f);
  char *p = write_png(f->dir, "t7.png", 28, 28, PNG_FORMAT_GRAY, px, NULL, 0);
  em_image img;
  g_assert_cmpint(em_image_read_png(p, 1, &img, &err), ==, EM_OK);
  g_assert_cmpint(img.height, ==, 28);
  g_assert_cmpint(img.width, ==, 28);
  g_assert_cmpmem(img.data, sizeof x, x, sizeof x);
  em_image_clear(&img);
  g_free(p);
  em_dataset_free(ds);
}

static void test_png_bad(png_fixture *f, gconstpointer data) {
  em_error err = {0};
  em_image img;
  char *missing = g_build_filename(f->dir, "missing.png", NULL);
  g_assert_cmpint(em_image_read_png(missing, 0, &img, &err), ==, EM_ERR_IO);
  dt_assert_msg(err.msg, missing, NULL);
  g_assert_null(img.data);
  g_free(missing);

  const char text[] = "P5\n28 28\n255\nthis is not a PNG file at all";
  char *notpng = dt_write(f->dir, "text.png", text, sizeof text, false);
  g_assert_cmpint(em_image_read_png(notpng, 0, &img, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, notpng, "not a readable PNG", NULL);
  g_free(notpng);

  uint8_t px[16 * 16];
  for (int i = 0; i < 256; i++) px[i] = (uint8_t)(i * 37);
  char *good = write_png(f->dir, "good.png", 16, 16, PNG_FORMAT_GRAY, px, NULL, 0);
  size_t n;
  guint8 *bytes = dt_read(good, &n);
  /* Cut in the header, in the image data, and just before the end. */
  const size_t cuts[] = {12, 30, n / 2, n - 13};
  for (size_t i = 0; i < G_N_ELEMENTS(cuts); i++) {
    char *cut = dt_write(f->dir, "cut.png", bytes, cuts[i], false);
    em_error e = {0};
    em_status st = em_image_read_png(cut, 0, &img, &e);
    g_assert_cmpint(st, ==, EM_ERR_FORMAT);
    dt_assert_msg(e.msg, cut, NULL);
    g_assert_null(img.data);
    g_free(cut);
  }
  /* A flipped bit in the compressed data: a CRC or zlib error. */
  bytes[n / 2] ^= 0x40;
  char *corrupt = dt_write(f->dir, "corrupt.png", bytes, n, false);
  g_assert_cmpint(em_image_read_png(corrupt, 0, &img, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, corrupt, NULL);
  g_free(corrupt);
  g_free(bytes);

  g_assert_cmpint(em_image_read_png(good, 2, &img, &err), ==, EM_ERR_INVALID);
  dt_assert_msg(err.msg, good, "1 or 3 channels", NULL);
  g_free(good);

  /* Wider than 16384 pixels: refused before the pixels are allocated. */
  uint8_t *wide = calloc(16385, 1);
  char *big = write_png(f->dir, "wide.png", 16385, 1, PNG_FORMAT_GRAY, wide, NULL, 0);
  g_assert_cmpint(em_image_read_png(big, 0, &img, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, big, "16385x1", "16384", NULL);
  free(wide);
  g_free(big);
}

/* Appends a chunk: length (or the one given), type, data, CRC. */
static void put_chunk(GByteArray *b, const char *type, const void *data, uint32_t n,
                      uint32_t stated) {
  guint8 h[8] = {stated >> 24, stated >> 16, stated >> 8, stated, type[0], type[1], type[2],
                 type[3]};
  g_byte_array_append(b, h, 8);
  if (n) g_byte_array_append(b, data, n);
  uLong crc = crc32(crc32(0, (const Bytef *)type, 4), data, n);
  guint8 c[4] = {crc >> 24, crc >> 16, crc >> 8, crc};
  g_byte_array_append(b, c, 4);
}

static GByteArray *png_start(uint32_t w, uint32_t h, int depth, int type, int interlace) {
  GByteArray *b = g_byte_array_new();
  g_byte_array_append(b, (const guint8 *)"\x89PNG\r\n\x1a\n", 8);
  guint8 ihdr[13] = {w >> 24, w >> 16, w >> 8, w, h >> 24, h >> 16, h >> 8, h,
                     (guint8)depth, (guint8)type, 0, 0, (guint8)interlace};
  put_chunk(b, "IHDR", ihdr, 13, 13);
  return b;
}

/* Allocation bounded by what the file can hold: a chunk whose length
 * runs past the end of the file is refused before libpng allocates it (a
 * 343-byte file with a tEXt chunk of 2^31 - 1 bytes took 2.1 GB and 4 s
 * to fail), and pixels that the compressed data cannot fill are refused
 * before they are allocated (16384 x 16384 16-bit RGBA: 2 GB). */
static void test_png_small_file_big_claims(png_fixture *f, gconstpointer data) {
  em_error err = {0};
  em_image img;
  const char *types[] = {"tEXt", "zTXt", "iTXt", "sPLT", "IDAT", "abCd"};
  for (size_t i = 0; i < G_N_ELEMENTS(types); i++) {
    GByteArray *b = png_start(28, 28, 8, 0, 0);
    guint8 body[300];
    memset(body, 'x', sizeof body);
    put_chunk(b, types[i], body, sizeof body, 0x7fffffff);
    char *p = dt_write(f->dir, "claim.png", b->data, b->len, false);
    g_byte_array_unref(b);
    gint64 t0 = g_get_monotonic_time();
    g_assert_cmpint(em_image_read_png(p, 0, &img, &err), ==, EM_ERR_FORMAT);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, G_USEC_PER_SEC);
    char want[64];
    snprintf(want, sizeof want, "'%s' chunk at byte 33 says 2147483647 bytes", types[i]);
    dt_assert_msg(err.msg, p, want, NULL);
    g_assert_null(img.data);
    g_free(p);
  }
  /* 16384 x 16384 16-bit RGBA, interlaced, from 1 KB of real deflate data */
  GByteArray *b = png_start(16384, 16384, 16, 6, 1);
  guint8 zeros[65536] = {0}, z[1024];
  uLongf zn = sizeof z;
  g_assert_cmpint(compress2(z, &zn, zeros, sizeof zeros, 9), ==, Z_OK);
  put_chunk(b, "IDAT", z, (uint32_t)zn, (uint32_t)zn);
  put_chunk(b, "IEND", NULL, 0, 0);
  char *p = dt_write(f->dir, "huge.png", b->data, b->len, false);
  g_byte_array_unref(b);
  g_assert_cmpint(em_image_read_png(p, 0, &img, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, p, "16384x16384", "compressed bytes can hold", NULL);
  g_free(p);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
#define ADD(path, fn) g_test_add(path, png_fixture, NULL, png_setup, fn, png_teardown)
  ADD("/engine/data/png/grey", test_png_grey);
  ADD("/engine/data/png/rgb", test_png_rgb);
  ADD("/engine/data/png/alpha", test_png_alpha);
  ADD("/engine/data/png/depths", test_png_depths);
  ADD("/engine/data/png/fashion-mnist", test_png_fmnist);
  ADD("/engine/data/png/bad", test_png_bad);
  ADD("/engine/data/png/small-file-big-claims", test_png_small_file_big_claims);
  return g_test_run();
}
