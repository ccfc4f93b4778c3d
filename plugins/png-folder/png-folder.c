/* png-folder.c: a dataset kind "png-folder" as an Ember plugin: a folder
 * of PNG images with one sub-folder per class, like torchvision's
 * ImageFolder:
 *
 *   DIR/cat/001.png, DIR/cat/002.png, DIR/dog/001.png, ...
 *
 * or, with a held-out split, DIR/train/<class>/... and DIR/test/<class>/...
 * (without them both splits read DIR). Class names sorted (strcmp) give the
 * labels 0, 1, ...; the test split uses the training split's classes.
 * Images are decoded with em_image_read_png (libpng): grey when the first
 * image of the training split is grey, else RGB (every image of both
 * splits is converted to that), and all must share the first image's
 * size, else the error names the file (read from its header, before it
 * is decoded). Samples are (C, H, W) floats exactly as em_image_read_png
 * gives them (pixel/255; 16-bit value/65535, alpha on black, colour to
 * grey), as `ember predict` reads an image: kept in memory as bytes while
 * every value is a whole byte's, else as floats.
 * This file is the example to copy for a dataset plugin. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "em-plugin.h"

#define MAX_CLASSES 1000

typedef struct {
  int64_t n;
  int c, h, w, classes;
  int want_c;       /* channels of the training split's first image; 0: the first image's own */
  uint8_t *pixels;  /* (N, C, H, W) bytes, value * 255, while every value is a whole byte's */
  float *fpixels;   /* (N, C, H, W) values, once one is not (pixels is then NULL) */
  int64_t *labels;  /* (N) */
} png_folder;

typedef struct {
  char **v;
  size_t n, cap;
} str_list;

static void list_free(str_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static bool list_add(str_list *l, const char *s) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    char **v = realloc(l->v, cap * sizeof *v);
    if (!v) return false;
    l->v = v;
    l->cap = cap;
  }
  return (l->v[l->n] = strdup(s)) != NULL && ++l->n;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool has_png_suffix(const char *n) {
  size_t len = strlen(n);
  return len > 4 && !strcasecmp(n + len - 4, ".png");
}

/* Sorted names in dir: sub-folders (dirs true) or PNG files. */
static em_status list_dir(const char *dir, bool dirs, str_list *out, em_error *err) {
  DIR *d = opendir(dir);
  if (!d) return em_error_set(err, EM_ERR_IO, "cannot open folder '%s': %s", dir, strerror(errno));
  struct dirent *de;
  em_status st = EM_OK;
  while (st == EM_OK && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
    bool want = dirs ? is_dir(path) : has_png_suffix(de->d_name) && !is_dir(path);
    if (want && !list_add(out, de->d_name))
      st = em_error_set(err, EM_ERR_NOMEM, "out of memory listing '%s'", dir);
  }
  closedir(d);
  if (out->n) qsort(out->v, out->n, sizeof *out->v, cmp_str);
  return st;
}

static void pf_free(void *impl) {
  png_folder *p = impl;
  if (!p) return;
  free(p->pixels);
  free(p->fpixels);
  free(p->labels);
  free(p);
}

static int64_t pf_len(const void *impl) { return ((const png_folder *)impl)->n; }

static int pf_shape(const void *impl, int64_t *shape) {
  const png_folder *p = impl;
  shape[0] = p->c;
  shape[1] = p->h;
  shape[2] = p->w;
  return 3;
}

static int pf_classes(const void *impl) { return ((const png_folder *)impl)->classes; }

static em_status pf_get(const void *impl, int64_t i, float *x /* (C, H, W) */, int64_t *y,
                        em_error *err) {
  const png_folder *p = impl;
  size_t per = (size_t)p->c * (size_t)p->h * (size_t)p->w;
  if (p->fpixels) {
    memcpy(x, p->fpixels + (size_t)i * per, per * sizeof *x);
  } else {
    const uint8_t *src = p->pixels + (size_t)i * per;
    for (size_t k = 0; k < per; k++) x[k] = (float)src[k] / 255.0f;
  }
  *y = p->labels[i];
  return EM_OK;
}

static const em_dataset_vtable pf_vtable = {
    .kind = "png-folder",
    .len = pf_len,
    .sample_shape = pf_shape,
    .num_classes = pf_classes,
    .get = pf_get,
    .free = pf_free,
};

/* Whether every value of v is a whole byte's (b / 255 for a byte b). */
static bool whole_bytes(const float *v, size_t n) {
  for (size_t k = 0; k < n; k++)
    if ((float)lrintf(v[k] * 255.0f) / 255.0f != v[k]) return false;
  return true;
}

/* The samples so far as floats, from bytes: an image with a value that
 * is not a whole byte's came (16-bit, alpha, colour made grey). */
static bool to_floats(png_folder *p, int64_t cap, size_t per) {
  float *f = malloc((size_t)cap * per * sizeof *f);
  if (!f) return false;
  for (size_t k = 0; k < (size_t)p->n * per; k++) f[k] = (float)p->pixels[k] / 255.0f;
  free(p->pixels);
  p->pixels = NULL;
  p->fpixels = f;
  return true;
}

/* Decodes one image into sample slot p->n (growing the arrays), its size
 * checked against the first image's from its header first. */
static em_status add_image(png_folder *p, const char *path, int64_t label, int64_t *cap,
                           em_error *err) {
  if (p->n) {
    int w, h, c;
    em_status st = em_image_png_header(path, &w, &h, &c, err);
    if (st != EM_OK) return st;
    if (h != p->h || w != p->w)
      return em_error_set(err, EM_ERR_SHAPE,
                          "'%s' is %dx%d pixels but the images before it are %dx%d: every image "
                          "of a png-folder dataset must have the same size",
                          path, w, h, p->w, p->h);
  }
  em_image img;
  em_status st = em_image_read_png(path, p->n ? p->c : p->want_c, &img, err);
  if (st != EM_OK) return st;
  if (!p->n) {
    p->c = img.channels;
    p->h = img.height;
    p->w = img.width;
  }
  size_t per = (size_t)p->c * (size_t)p->h * (size_t)p->w;
  if (p->n == *cap) {
    int64_t nc = *cap ? 2 * *cap : 256;
    bool ok;
    if (p->fpixels) {
      float *px = realloc(p->fpixels, (size_t)nc * per * sizeof *px);
      if ((ok = px != NULL)) p->fpixels = px;
    } else {
      uint8_t *px = realloc(p->pixels, (size_t)nc * per);
      if ((ok = px != NULL)) p->pixels = px;
    }
    int64_t *lb = ok ? realloc(p->labels, (size_t)nc * sizeof *lb) : NULL;
    if (lb) p->labels = lb;
    if (!ok || !lb) {
      em_image_clear(&img);
      return em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    *cap = nc;
  }
  if (!p->fpixels && !whole_bytes(img.data, per) && !to_floats(p, *cap, per)) {
    em_image_clear(&img);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s'", path);
  }
  if (p->fpixels) {
    memcpy(p->fpixels + (size_t)p->n * per, img.data, per * sizeof *img.data);
  } else {
    uint8_t *dst = p->pixels + (size_t)p->n * per;
    for (size_t k = 0; k < per; k++) dst[k] = (uint8_t)lrintf(img.data[k] * 255.0f);
  }
  p->labels[p->n++] = label;
  em_image_clear(&img);
  return EM_OK;
}

/* The channels of the training split's first image (class folders and
 * files in sorted order, as it reads them), from its header: the test
 * split converts to them, so both give samples of one shape; 0 when
 * there is none (the training split then says so). */
static int first_image_channels(const char *class_root, const str_list *classes) {
  str_list files = {0};
  int c = 0;
  em_error e = {0};
  for (size_t i = 0; !c && i < classes->n; i++) {
    char cdir[4096 + 256];
    snprintf(cdir, sizeof cdir, "%s/%s", class_root, classes->v[i]);
    list_free(&files);
    if (list_dir(cdir, false, &files, &e) != EM_OK || files.n == 0) continue;
    char path[4096 + 512];
    snprintf(path, sizeof path, "%s/%s", cdir, files.v[0]);
    int w, h;
    if (em_image_png_header(path, &w, &h, &c, &e) != EM_OK) c = 0;
    break;
  }
  list_free(&files);
  return c;
}

static em_dataset *pf_open(const char *dir, bool train, const void *options, em_error *err) {
  char root[4096], class_root[4096];
  /* a held-out split when DIR/train is there: the classes are train's,
   * and DIR/test must be there too (else "train" would read as a class) */
  snprintf(class_root, sizeof class_root, "%s/train", dir);
  bool split = is_dir(class_root);
  if (split) snprintf(root, sizeof root, "%s/%s", dir, train ? "train" : "test");
  else {
    snprintf(root, sizeof root, "%s", dir);
    snprintf(class_root, sizeof class_root, "%s", dir);
  }
  if (!is_dir(root)) {
    if (split)
      em_error_set(err, EM_ERR_IO, "png-folder: '%s/train' is there but '%s' is not: a "
                   "held-out split needs both train/ and test/ (or put the class folders in "
                   "'%s' itself)", dir, root, dir);
    else em_error_set(err, EM_ERR_IO, "png-folder: '%s' is not a folder", root);
    return NULL;
  }
  str_list classes = {0}, here = {0}, files = {0};
  png_folder *p = calloc(1, sizeof *p);
  em_status st = p ? EM_OK : em_error_set(err, EM_ERR_NOMEM, "out of memory");
  if (st == EM_OK) st = list_dir(class_root, true, &classes, err);
  if (st == EM_OK && classes.n == 0)
    st = em_error_set(err, EM_ERR_FORMAT,
                      "png-folder: '%s' has no class sub-folders (expected %s/<class>/*.png)",
                      class_root, class_root);
  if (st == EM_OK && classes.n > MAX_CLASSES)
    st = em_error_set(err, EM_ERR_FORMAT, "png-folder: '%s' has %zu classes; at most %d",
                      class_root, classes.n, MAX_CLASSES);
  if (st == EM_OK && strcmp(root, class_root) != 0) {
    /* the test split: its classes must be among the training split's */
    st = list_dir(root, true, &here, err);
    for (size_t i = 0; st == EM_OK && i < here.n; i++)
      if (!bsearch(&here.v[i], classes.v, classes.n, sizeof *classes.v, cmp_str))
        st = em_error_set(err, EM_ERR_FORMAT,
                          "png-folder: class folder '%s/%s' has no counterpart in '%s'", root,
                          here.v[i], class_root);
  }
  if (st == EM_OK && strcmp(root, class_root) != 0)
    p->want_c = first_image_channels(class_root, &classes);
  int64_t cap = 0;
  for (size_t c = 0; st == EM_OK && c < classes.n; c++) {
    char cdir[4096 + 256];
    snprintf(cdir, sizeof cdir, "%s/%s", root, classes.v[c]);
    if (!is_dir(cdir)) continue; /* a class absent from the test split */
    list_free(&files);
    st = list_dir(cdir, false, &files, err);
    for (size_t f = 0; st == EM_OK && f < files.n; f++) {
      char path[4096 + 512];
      snprintf(path, sizeof path, "%s/%s", cdir, files.v[f]);
      st = add_image(p, path, (int64_t)c, &cap, err);
    }
  }
  if (st == EM_OK && p->n == 0)
    st = em_error_set(err, EM_ERR_FORMAT, "png-folder: no .png images under '%s'", root);
  if (p) p->classes = (int)classes.n;
  list_free(&classes);
  list_free(&here);
  list_free(&files);
  if (st != EM_OK) {
    pf_free(p);
    return NULL;
  }
  return em_dataset_new(&pf_vtable, p, err);
}

static const em_dataset_type pf_type = {
    .name = "png-folder",
    .help = "PNG images in one sub-folder per class (optional train/ and test/)",
    .open = pf_open,
};

static em_status pf_init(em_plugin_host *host, em_error *err) {
  return em_plugin_add_dataset(host, &pf_type, err);
}

static const em_plugin_table pf_table = {
    .api_version = EM_PLUGIN_API_VERSION,
    .name = "png-folder",
    .version = "1.0",
    .description = "Dataset of PNG images, one sub-folder per class (libpng)",
    .init = pf_init,
};

EM_PLUGIN_EXPORT const em_plugin_table *ember_plugin_entry(void) { return &pf_table; }
