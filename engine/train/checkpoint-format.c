/* checkpoint-format.c: what saving and loading a checkpoint share: the
 * file names in a checkpoint folder, the folder itself, the spec
 * comparison and the checksum. The format:
 *
 * Tensors: the model's parameters and buffers under their PyTorch names,
 * the optimiser's state as "optim/<name>" (step counts included).
 * Metadata (strings):
 *   format "ember-checkpoint", version "1"
 *   epoch, batch, step     where the run stands: `batch` batches of epoch
 *                          `epoch` are done, `step` optimiser steps in all
 *   rng                    the dropout stream, 4 x 16 hex digits
 *   lr_scale, rollbacks    what divergence rollbacks left
 *   loss_sum               the epoch's running loss sum over `batch` batches
 *   grad_norms, grad_norms_seen   the watchdog's memory, oldest first
 *   spec                   the spec (keys sorted); loading compares its
 *                          model part (everything but "name", "training",
 *                          "loss" and "description") with the model's
 *   config                 em_train_config_to_json
 *   amp_scale, amp_growth_tracker, amp_skipped   the loss scaler's state
 *                          (em-amp.h), only when cfg.amp_scaler is on
 *   checksum               "crc32:xxxxxxxx" over every tensor (name, dtype,
 *                          shape, data) and every other metadata entry, in
 *                          name order, so a flipped byte anywhere is caught
 *
 * em_safetensors_save writes atomically (temporary file, fsync, rename,
 * fsync of the folder), and em_safetensors_open rejects truncated and
 * malformed files. Loading reads everything into temporaries and checks
 * it all before it touches the trainer. Doubles are written with 17
 * significant digits, which read back to the same bits. */
#include "train-private.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

em_status em_checkpoint_path(char *out, size_t cap, const char *dir, const char *kind,
                             int64_t epoch, int64_t step, em_error *err) {
  int w;
  if (strcmp(kind, "eval") == 0) /* epoch: the number of the epoch just finished, from 1 */
    w = snprintf(out, cap, "%s/eval-e%03lld-step-%09lld.safetensors", dir, (long long)epoch,
                 (long long)step);
  else if (strcmp(kind, "step") == 0)
    w = snprintf(out, cap, "%s/step-%09lld.safetensors", dir, (long long)step);
  else
    w = snprintf(out, cap, "%s/%s-step-%09lld.safetensors", dir, kind, (long long)step);
  if (w < 0 || (size_t)w >= cap)
    return em_error_set(err, EM_ERR_INVALID, "the checkpoint folder name is too long: '%.200s...'",
                        dir);
  return EM_OK;
}

/* The literal at *p: moves past it. */
static bool take_text(const char **p, const char *lit) {
  size_t n = strlen(lit);
  if (strncmp(*p, lit, n) != 0) return false;
  *p += n;
  return true;
}

/* One or more digits at *p: their value (below 2^63), and past them. */
static bool take_number(const char **p, int64_t *v) {
  const char *s = *p;
  int64_t x = 0;
  if (!isdigit((unsigned char)*s)) return false;
  for (; isdigit((unsigned char)*s); s++) {
    if (x > (INT64_MAX - 9) / 10) return false;
    x = x * 10 + (*s - '0');
  }
  *p = s;
  *v = x;
  return true;
}

bool em_checkpoint_name_parse(const char *name, char *kind, size_t cap, int64_t *step) {
  const char *p = name, *k;
  int64_t epoch, st;
  if (take_text(&p, "eval-e")) {
    if (!take_number(&p, &epoch) || !take_text(&p, "-step-")) return false;
    k = "eval";
  } else if (take_text(&p, "step-")) {
    k = "step";
  } else if (take_text(&p, "final-step-")) {
    k = "final";
  } else if (take_text(&p, "rollback-step-")) {
    k = "rollback";
  } else {
    return false;
  }
  if (!take_number(&p, &st) || strcmp(p, ".safetensors") != 0) return false;
  snprintf(kind, cap, "%s", k);
  *step = st;
  return true;
}

/* mkdir -p */
static em_status make_dirs(const char *dir, em_error *err) {
  char p[4096];
  int w = snprintf(p, sizeof p, "%s", dir);
  if (w < 0 || (size_t)w >= sizeof p)
    return em_error_set(err, EM_ERR_INVALID, "checkpoint folder name too long: '%.200s...'", dir);
  for (char *s = p + 1;; s++) {
    bool end = *s == '\0';
    if (*s == '/' || end) {
      *s = '\0';
      if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return em_error_set(err, EM_ERR_IO, "cannot create the checkpoint folder '%s': %s", p,
                            strerror(errno));
      if (end) break;
      *s = '/';
    }
  }
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return em_error_set(err, EM_ERR_IO, "the checkpoint folder '%s' is not a folder", dir);
  return EM_OK;
}

em_status em_checkpoint_dir_prepare(const char *dir, char *abs, size_t cap, em_error *err) {
  EM_TRY(make_dirs(dir, err));
  char *real = realpath(dir, NULL);
  if (!real)
    return em_error_set(err, EM_ERR_IO, "cannot resolve the checkpoint folder '%s': %s", dir,
                        strerror(errno));
  int w = snprintf(abs, cap, "%s", real);
  free(real);
  if (w < 0 || (size_t)w >= cap)
    return em_error_set(err, EM_ERR_INVALID, "the checkpoint folder's path is too long: "
                        "'%.200s...'", abs);
  return EM_OK;
}

/* ---- the spec fingerprint ------------------------------------------------- */

/* doc as canonical text (sorted keys, compact); consumes doc. */
static char *canonical_text(json_t *doc) {
  char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(doc);
  return text;
}

/* The spec as JSON with sorted keys. malloc'd, NULL when out of memory. */
char *em_checkpoint_spec_text(const em_spec *spec) {
  return canonical_text(json_deep_copy(em_spec_json(spec)));
}

/* The model part of a saved spec text (everything that shapes the
 * weights), canonical; NULL when text is not a JSON object. malloc'd. */
char *em_checkpoint_model_text(const char *spec_text) {
  json_t *doc = spec_text ? json_loads(spec_text, 0, NULL) : NULL;
  if (!json_is_object(doc)) {
    json_decref(doc);
    return NULL;
  }
  static const char *const not_model[] = {"training", "loss", "description", "name"};
  for (size_t i = 0; i < sizeof not_model / sizeof *not_model; i++)
    json_object_del(doc, not_model[i]);
  return canonical_text(doc);
}

/* ---- the checksum ----------------------------------------------------------- */

int em_ckpt_tensor_cmp(const void *a, const void *b) {
  return strcmp(((const em_ckpt_tensor *)a)->name, ((const em_ckpt_tensor *)b)->name);
}

static int cmp_ck_meta(const void *a, const void *b) {
  return strcmp(((const em_ckpt_meta *)a)->key, ((const em_ckpt_meta *)b)->key);
}

static uLong crc_bytes(uLong crc, const void *p, size_t n) {
  return crc32_z(crc, (const Bytef *)p, (z_size_t)n);
}

/* One tensor: name, dtype, shape, data (row-major). */
static uLong crc_tensor(uLong crc, const char *name, const em_tensor *t) {
  crc = crc_bytes(crc, name, strlen(name) + 1);
  const char *dn = em_dtype_name(t->dtype);
  crc = crc_bytes(crc, dn, strlen(dn) + 1);
  int64_t dims[EM_MAX_DIMS + 1];
  dims[0] = t->ndim;
  memcpy(dims + 1, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  crc = crc_bytes(crc, dims, sizeof(int64_t) * (size_t)(t->ndim + 1));
  if (em_tensor_is_contiguous(t)) return crc_bytes(crc, em_tensor_ptr(t), em_tensor_nbytes(t));
  em_tensor *c = em_tensor_new(t->dtype, t->ndim, t->shape, NULL);
  EM_ASSERT(c && "out of memory for a checksum copy");
  em_tensor_copy_(c, t);
  crc = crc_bytes(crc, em_tensor_ptr(c), em_tensor_nbytes(c));
  em_tensor_free(c);
  return crc;
}

uint32_t em_checkpoint_crc_start(void) { return (uint32_t)crc32_z(0, Z_NULL, 0); }

uint32_t em_checkpoint_crc_tensor(uint32_t crc, const char *name, const em_tensor *t) {
  return (uint32_t)crc_tensor(crc, name, t);
}

uint32_t em_checkpoint_crc_meta(uint32_t crc, em_ckpt_meta *meta, int n_meta) {
  qsort(meta, (size_t)n_meta, sizeof *meta, cmp_ck_meta);
  for (int i = 0; i < n_meta; i++) {
    if (strcmp(meta[i].key, "checksum") == 0) continue;
    crc = (uint32_t)crc_bytes(crc, meta[i].key, strlen(meta[i].key) + 1);
    crc = (uint32_t)crc_bytes(crc, meta[i].value, strlen(meta[i].value) + 1);
  }
  return crc;
}

/* Sorts both lists in place and returns the checksum of their contents;
 * the "checksum" entry itself is skipped. */
uint32_t em_checkpoint_checksum(em_ckpt_tensor *ts, int n, em_ckpt_meta *meta, int n_meta) {
  qsort(ts, (size_t)n, sizeof *ts, em_ckpt_tensor_cmp);
  uint32_t crc = em_checkpoint_crc_start();
  for (int i = 0; i < n; i++) crc = em_checkpoint_crc_tensor(crc, ts[i].name, ts[i].t);
  return em_checkpoint_crc_meta(crc, meta, n_meta);
}

