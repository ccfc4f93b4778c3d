/* em-io.h: safetensors files, the format of Ember's checkpoints and
 * weight exchange with PyTorch.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes
 * of JSON mapping each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets into the data that follows the header) plus an
 * optional "__metadata__" map of strings, then the raw little-endian
 * tensor data, packed without holes. Loading runs no code and checks
 * everything; a truncated or corrupt file is a clear error.
 *
 * Ember reads and writes the dtypes F32, F64, I32, I64 and U8. A file may
 * hold others (F16, BF16, BOOL, ...): it still opens, and em_safetensors_info
 * / em_safetensors_read report those tensors as unsupported. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "em-error.h"
#include "em-tensor.h"

typedef struct {
  const char *name;
  const em_tensor *t; /* any strides */
} em_named_tensor;

/* Writes n tensors (names unique, not "__metadata__") and n_meta metadata
 * strings to path atomically: into a temporary file in the same folder,
 * which is synced and renamed over path, so a crash leaves either the old
 * file or the new one, never a torn one. */
em_status em_safetensors_save(const char *path, int n, const em_named_tensor *ts, int n_meta,
                              const char *const *meta_keys, const char *const *meta_values,
                              em_error *err);

/* Opens path to read (close-on-exec) without blocking on a FIFO that has
 * no writer. A folder is refused (errno EISDIR), and with regular_only
 * anything but a regular file (errno EINVAL): readers that seek, map or
 * read a file twice want that. -1 with errno on failure; em_open_error
 * words errno for a message ("not a regular file (a pipe, socket or
 * device)" for EINVAL, "... (a folder)" for EISDIR). */
int em_open_read(const char *path, bool regular_only);
FILE *em_fopen_read(const char *path, bool regular_only); /* the same as a stdio stream */
const char *em_open_error(int errnum);
/* A whole file as a NUL-terminated string (malloc'd; regular_only: NULL
 * for a FIFO or a device, as em_open_read); NULL with errno set when it
 * cannot be opened or read. */
char *em_read_text(const char *path, bool regular_only);

/* Syncs the folder that holds path, so a rename into it is durable. */
void em_sync_parent(const char *path);

/* A file written whole or not at all: into a temporary file beside its
 * target, which em_atomic_end syncs and renames over it. The target is
 * path, or the file a symlink at path names (the link stays); an existing
 * path that is not a regular file (a device such as /dev/null, a FIFO, a
 * folder) is refused, as a rename would replace it. The file's mode is
 * what open(O_CREAT, 0666) gives: an existing target's own, else 0666
 * less the umask. */
typedef struct {
  int fd;
  char *tmp, *target;
  unsigned mode; /* the target's mode if it exists, else 0666 & ~umask */
} em_atomic_file;
em_status em_atomic_begin(const char *path, em_atomic_file *f, em_error *err);
/* st: the writer's status so far. EM_OK: the file is synced
 * and renamed over the target, its folder synced; else (or on a failure
 * here) the temporary goes and the target is left as it was. */
em_status em_atomic_end(em_atomic_file *f, em_status st, em_error *err);
/* path becomes a second name of the file src (a hard link), atomically: a
 * link made beside it is renamed over it and the folder synced. EM_ERR_IO
 * where the file system has no links (the caller writes path instead);
 * nothing is changed then. */
em_status em_link_over(const char *src, const char *path, em_error *err);

typedef struct em_safetensors em_safetensors;

/* Opens and validates path (header length sane and within the file, valid
 * JSON, known dtypes, offsets in bounds, consistent with dtype and shape,
 * no overlaps or holes, nothing after the data). Tensor data is read on
 * demand by em_safetensors_read. */
em_safetensors *em_safetensors_open(const char *path, em_error *err);
int em_safetensors_count(const em_safetensors *f);
/* The i-th tensor's name, in the order of their data in the file; NULL
 * when i is out of range. */
const char *em_safetensors_name(const em_safetensors *f, int i);
/* dtype, ndim and shape (up to EM_MAX_DIMS values) of a tensor; any
 * output may be NULL. EM_ERR_INVALID when there is no such tensor,
 * EM_ERR_UNSUPPORTED when its dtype has no em_dtype. */
em_status em_safetensors_info(const em_safetensors *f, const char *name, em_dtype *dt, int *ndim,
                              int64_t *shape, em_error *err);
/* Reads a tensor into dst, which must have the same dtype and shape (any
 * strides). A mismatch is EM_ERR_SHAPE naming the tensor and both shapes. */
em_status em_safetensors_read(const em_safetensors *f, const char *name, em_tensor *dst,
                              em_error *err);
/* A "__metadata__" value, or NULL when the key is absent. */
const char *em_safetensors_meta(const em_safetensors *f, const char *key);
int em_safetensors_meta_count(const em_safetensors *f);
const char *em_safetensors_meta_key(const em_safetensors *f, int i); /* NULL if out of range */
void em_safetensors_close(em_safetensors *f); /* NULL is fine */

/* ---- JSON text (model specs, the CLI's --json) ------------------------------ */

/* A real in its shortest form that reads back equal: "%.15g", else
 * "%.16g", else "%.17g" (0.1, not 0.10000000000000001), with '.' whatever
 * the locale, ".0" added to a whole number (1.0) and the exponent without
 * '+' or leading zeros (1e-6), as jansson writes it. false for NaN and
 * infinities (JSON has none) or when size is under 32. */
bool em_json_real_format(double v, char *out, size_t size);
/* JSON text of v (any value), objects in their keys' order, reals as
 * em_json_real_format writes them, no final newline; malloc'd (free), NULL
 * for a non-finite real or out of memory. width < 0: all on one line;
 * 0: every non-empty array and object over several lines, two spaces of
 * indent per level (jansson's JSON_INDENT(2)); > 0: an array or object on
 * one line where it fits in width columns, as the zoo's specs are laid
 * out (EM_JSON_SPEC_WIDTH). */
char *em_json_write(const json_t *v, int width);
#define EM_JSON_SPEC_WIDTH 100

/* ---- data folders ------------------------------------------------------------- */

/* The folder of Ember's data of a kind ("models": the zoo), the first that
 * exists of: $EMBER_SOURCE_ROOT/data/KIND, the source tree this was built
 * from, the installed <datadir>/ember/KIND, and DIR/ember/KIND for each
 * DIR of $XDG_DATA_DIRS. The one resolver of the CLI and the workbench;
 * false (out "") when none exists or it does not fit in n bytes. */
bool em_data_dir(const char *kind, char *out, size_t n);
