/* em-data.h: datasets and the data loader of libember.
 *
 * A dataset is a small vtable (length, sample shape, number of classes,
 * get sample i) plus the kind's own state. Built-in kinds: IDX (MNIST,
 * Fashion-MNIST; gzip or plain), CIFAR-10 binary, CSV and a seeded
 * synthetic set. Plugins add kinds by filling an em_dataset_vtable.
 *
 * A sample comes out as floats in a caller's buffer of
 * em_dataset_sample_numel() values, laid out row-major in the sample
 * shape (for images (C, H, W)), plus an int64 class label in
 * [0, num_classes); a kind of sequences (text) gives T labels per sample
 * instead, one per position (em_dataset_target_len), and may say that
 * its samples are token ids for an Embedding (em_dataset_token_samples).
 *
 * The loader turns a dataset into batches (x (N, ...sample shape) f32,
 * y (N) i64, or (N, T) per position) with worker threads, a bounded
 * prefetch queue, a seeded
 * per-epoch shuffle and a distributed sampler. Batches come out in the
 * same order whatever the number of workers.
 *
 * Errors from files (missing, truncated, corrupt, labels out of range)
 * come back as an em_status with a message naming the file; nothing
 * aborts on bad input. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-error.h"
#include "em-tensor.h"

/* ---- datasets ----------------------------------------------------------- */
typedef struct em_dataset em_dataset;
typedef struct em_tokenizer em_tokenizer; /* below: tokenizers */

/* What a dataset kind provides. `impl` is the kind's own state. Once the
 * dataset is made, len, sample_shape and num_classes must not change, and
 * get must be safe to call from several threads at once (the loader's
 * workers do): keep the data read-only after construction. */
typedef struct em_dataset_vtable {
  const char *kind; /* "idx", "cifar10", "csv", "synthetic", or a plugin's */
  int64_t (*len)(const void *impl);
  /* Fills shape (at most EM_MAX_DIMS - 1 dims) and returns ndim (>= 1). */
  int (*sample_shape)(const void *impl, int64_t *shape);
  int (*num_classes)(const void *impl);
  /* x: (...sample shape) floats; y: one label. 0 <= i < len. */
  em_status (*get)(const void *impl, int64_t i, float *x /* (...sample) */, int64_t *y,
                   em_error *err);
  void (*free)(void *impl); /* may be NULL */
  /* May be NULL: a hint that sample i is wanted next but one. The loader
   * gives it two samples ahead, so that a sample's memory is on its way
   * while the ones before are converted (0 <= i < len). */
  void (*prefetch)(const void *impl, int64_t i);
  /* May be NULL: one label per sample (y (N) in a batch). Otherwise the
   * number T >= 1 of labels each sample has, one per position of a
   * sequence (a language model's next tokens): get fills y[0..T), each
   * in [0, num_classes), and a batch's y is (N, T). */
  int64_t (*target_len)(const void *impl);
  /* true: every sample value is a token id, a whole number in
   * [0, EM_DATASET_MAX_TOKEN) (exact in f32), for a model whose input is
   * i64 (an Embedding): the trainer hands the model i64 indices. */
  bool token_samples;
} em_dataset_vtable;

#define EM_DATASET_MAX_TOKEN ((int64_t)1 << 24)

/* Wraps a kind's state into a dataset. Takes ownership of impl in every
 * case (on failure it is freed through vt->free). Fails when the sample
 * shape or the class count is unusable. */
em_dataset *em_dataset_new(const em_dataset_vtable *vt, void *impl, em_error *err);
void em_dataset_free(em_dataset *ds); /* NULL is fine */

int64_t em_dataset_len(const em_dataset *ds);
/* Fills shape (up to EM_MAX_DIMS - 1 values) and returns ndim. */
int em_dataset_sample_shape(const em_dataset *ds, int64_t *shape);
int64_t em_dataset_sample_numel(const em_dataset *ds);
int em_dataset_num_classes(const em_dataset *ds);
const char *em_dataset_kind(const em_dataset *ds);
/* Labels per sample: 0 for one class label (y (N)), T >= 1 for a label
 * per position (y (N, T)): the vtable's target_len. */
int64_t em_dataset_target_len(const em_dataset *ds);
/* The labels one sample fills: max(1, em_dataset_target_len). */
int64_t em_dataset_labels_per_sample(const em_dataset *ds);
bool em_dataset_token_samples(const em_dataset *ds);
/* Sample i into x (em_dataset_sample_numel floats) and its label into y
 * (em_dataset_labels_per_sample values), normalised if
 * em_dataset_set_normalize was called. Thread-safe. */
/* Passes the hint on to the kind's prefetch, if any (i out of range:
 * nothing). */
void em_dataset_prefetch(const em_dataset *ds, int64_t i);
em_status em_dataset_get(const em_dataset *ds, int64_t i, float *x /* (...sample) */,
                         int64_t *y, em_error *err);

/* Per-channel normalisation applied by em_dataset_get:
 * x = (x - mean[c]) / std[c], where c indexes the first sample dimension
 * (the channel of a (C, H, W) image, the feature of a (D) vector).
 * n is 1 (one value for all channels) or that dimension's size; every
 * std must be positive. Call before a loader starts; n = 0 turns it off.
 * IDX and CIFAR pixels are pixel/255 in [0, 1] before this step, so
 * mean 0, std 1/255 gives raw pixel values back. */
em_status em_dataset_set_normalize(em_dataset *ds, int n, const float *mean, const float *std,
                                   em_error *err);

/* ---- dataset kinds: the registry -------------------------------------------- */
/* What a model asks of the data: its input's sample shape and its
 * classes (its output's width). A kind may ignore it (a file's shape is
 * the file's); synthetic makes its samples to it, csv names a label past
 * it by its line. NULL or zeroed: nothing asked. */
typedef struct {
  const int64_t *sample_shape; /* (ndim) */
  int sample_ndim;
  int classes;
  /* The model's tokenizer (its spec's "tokenizer"), or NULL: what the
   * text kind encodes with. */
  const em_tokenizer *tokenizer;
} em_dataset_want;

/* A dataset kind: `--dataset name --data-dir DIR`. open returns a dataset
 * made with em_dataset_new (NULL with err filled: a message naming the
 * file at fault). options is the em_dataset_want of the model that will
 * read it (NULL when none is known, as on the workbench's Data page).
 * Built-in kinds (fashion-mnist, cifar10, csv, synthetic, text) and plugins'
 * (em_plugin_add_dataset) register alike; a plugin's open is always given
 * a folder. */
typedef struct {
  const char *name; /* "png-folder" */
  const char *help; /* one line */
  em_dataset *(*open)(const char *dir, bool train, const void *options, em_error *err);
} em_dataset_type;

/* The kinds in registration order (the built-ins first), by name or
 * index. find loads the plugins when the name is not registered (the
 * host's lazy load, em_plugin_set_loader) and looks again. */
const em_dataset_type *em_dataset_type_find(const char *name);
int em_dataset_type_count(void);
const em_dataset_type *em_dataset_type_at(int i);
/* For the plugin host (a plugin calls em_plugin_add_dataset, which stages
 * and rolls back) and tests: add fails on a name already taken. */
em_status em_dataset_type_add(const em_dataset_type *kind, em_error *err);
void em_dataset_type_remove(const em_dataset_type *kind);

/* Opens the named kind's split from dir (a folder, or csv's file; NULL
 * or "": the kind's default, or a clear "needs its folder") for a model
 * whose input samples have sample_shape (sample_ndim 0: not known) and
 * which has classes outputs (0: not known). An unknown name lists the
 * known ones and where plugins were looked for. A spec's dataset is
 * opened with em_train_open_dataset (em-train.h), which calls this. */
em_dataset *em_dataset_open_named(const char *name, const char *dir, bool train,
                                  const int64_t *sample_shape, int sample_ndim, int classes,
                                  em_error *err);
/* The same with the whole of what the model asks (want NULL: nothing). */
em_dataset *em_dataset_open_want(const char *name, const char *dir, bool train,
                                 const em_dataset_want *want, em_error *err);
/* The files a named dataset reads (absolute paths, sorted), for lineage:
 * up to cap paths of up to 1024 bytes each into paths; *n gets the count.
 * "synthetic" has none; a plugin's kind reports none (its files are its
 * own business). */
em_status em_dataset_files_named(const char *name, const char *dir, bool train,
                                 char (*paths)[1024], int cap, int *n, em_error *err);


/* IDX files (the MNIST format), gzip-compressed or plain. The images file
 * must hold unsigned bytes with >= 2 dims: (N, H, W) gives samples of
 * shape (1, H, W), (N, D) gives (D), (N, C, H, W) gives (C, H, W). The
 * labels file holds N unsigned bytes. num_classes <= 0 takes the largest
 * label + 1; otherwise every label must be below it. Pixels stay bytes in
 * memory and become pixel/255 floats per sample. */
em_dataset *em_dataset_idx(const char *images_path, const char *labels_path, int num_classes,
                           em_error *err);
/* Fashion-MNIST from dir (NULL: /usr/share/datasets/fashion-mnist):
 * train-{images-idx3,labels-idx1}-ubyte.gz, or t10k-* when !train. */
em_dataset *em_dataset_fashion_mnist(const char *dir, bool train, em_error *err);
/* The files em_dataset_fashion_mnist (dir NULL: its default folder) and
 * em_dataset_cifar10 open for a split, named as they name them: IDX
 * images then labels (2); CIFAR-10 batches (5 for train, 1 for test).
 * Returns the count, or -1 when a name would not fit. */
int em_dataset_fashion_mnist_files(const char *dir, bool train, char (*paths)[4096]);
int em_dataset_cifar10_dir_files(const char *dir, bool train, char (*paths)[4096]);
/* MNIST: the same file names, under dir (required). */
em_dataset *em_dataset_mnist(const char *dir, bool train, em_error *err);

/* Reads a whole IDX file of unsigned bytes (gzip or plain) with
 * min_dims..max_dims dimensions (1 <= min_dims <= max_dims <= EM_MAX_DIMS):
 * *ndim and dims (room for max_dims values) get its sizes, *data its
 * values, row-major, malloc'd (free it; NULL on failure). items names what
 * the first dimension counts ("images", "labels") in messages. A missing
 * file, a folder, a truncated file, corrupt gzip data, a bad magic number,
 * another value type, a dimension count out of range, a size of 0 past the
 * first dimension, an absurd total and bytes after the values are errors
 * naming the file. A first dimension of 0 (no items) is not an error. */
em_status em_idx_read(const char *path, const char *items, int min_dims, int max_dims,
                      int *ndim, int64_t *dims, uint8_t **data, em_error *err);

/* CIFAR-10 binary batches: records of 1 label byte + 3072 pixel bytes
 * (3, 32, 32), labels below 10. dir holds data_batch_1.bin ..
 * data_batch_5.bin (train) or test_batch.bin. */
em_dataset *em_dataset_cifar10(const char *dir, bool train, em_error *err);
/* The same format from an explicit list of files (gzip or plain). */
em_dataset *em_dataset_cifar10_files(int n_files, const char *const *paths, em_error *err);

/* ---- CSV tables ------------------------------------------------------------ */
/* A CSV file of numbers: feature columns and at most one integer label
 * column (a whole number written as a decimal, "3.0", is taken as the
 * integer). Blank lines are skipped; spaces, tabs and a '\r' around a value
 * are ignored; a file holding NUL bytes is refused as not a text file.
 * Errors name the file, the line and the column (1-based, as an editor
 * shows them). */
#define EM_CSV_LAST_COLUMN (-1) /* label_column: the last column */
#define EM_CSV_NO_LABEL (-2)    /* label_column: every column is a feature */
typedef enum {
  EM_CSV_HEADER_NO,   /* every non-blank line is data */
  EM_CSV_HEADER_YES,  /* the first non-blank line is a header: skipped */
  EM_CSV_HEADER_AUTO, /* ... when no field of it is a number (and one is not empty) */
} em_csv_header;
typedef struct {
  int label_column;     /* 0-based, EM_CSV_LAST_COLUMN (the default) or EM_CSV_NO_LABEL */
  em_csv_header header; /* EM_CSV_HEADER_NO by default */
  char delimiter;       /* ',' by default */
  int64_t columns;      /* > 0: every data line has this many columns (label included);
                           0 (the default): as many as the first data line */
  const char *columns_why; /* NULL, or why `columns`, for the message when a line differs
                              ("the model takes 784 features") */
} em_csv_table_options;
typedef struct {
  int64_t rows, features; /* N, D */
  float *x;               /* (N, D) */
  int64_t *labels;        /* (N), each >= 0; NULL without a label column or rows */
  int64_t *lines;         /* (N): the line each row came from, for messages */
  int label_column;       /* 0-based, or -1: none */
} em_csv_table;
void em_csv_table_options_defaults(em_csv_table_options *o);
/* Reads the whole file into *out (clear it with em_csv_table_clear, also
 * after a failure). No data lines give a table of 0 rows, not an error. */
em_status em_csv_table_read(const char *path, const em_csv_table_options *o /* NULL: defaults */,
                            em_csv_table *out, em_error *err);
void em_csv_table_clear(em_csv_table *t); /* NULL is fine */

/* CSV: numeric feature columns and one integer label column. */
typedef struct {
  int label_column;     /* 0-based; -1 (the default) is the last column */
  em_csv_header header; /* EM_CSV_HEADER_NO (the default), _YES or _AUTO */
  char delimiter;   /* ',' by default */
  int num_classes;  /* <= 0: largest label + 1 */
} em_csv_options;
void em_csv_options_defaults(em_csv_options *o);
/* Samples have shape (D), D = columns - 1. Blank lines are skipped.
 * Errors name the file, the line and the column of a bad value. */
em_dataset *em_dataset_csv(const char *path, const em_csv_options *o /* NULL: defaults */,
                           em_error *err);
/* The same file as a training or a held-out test split: every
 * EM_CSV_HOLDOUT_EVERY-th data row (the 5th, 10th, ...) is a test sample,
 * the others are training samples; both splits count the classes over
 * the whole file. A file of fewer data rows than that is an error. */
#define EM_CSV_HOLDOUT_EVERY 5
em_dataset *em_dataset_csv_split(const char *path, const em_csv_options *o /* NULL: defaults */,
                                 bool train, em_error *err);

/* A seeded classification set of Gaussian class blobs: class k has a
 * centre drawn from N(0, 1) per value; sample i has label i % num_classes
 * and values centre + noise * N(0, 1). Made on the fly from
 * (seed, i): deterministic, thread-safe, no memory per sample. */
em_dataset *em_dataset_synthetic(int64_t n, int ndim, const int64_t *shape /* sample */,
                                 int num_classes, double noise, uint64_t seed, em_error *err);
/* The same task (class centres from seed) with a training or a held-out
 * test split: the two splits' samples are drawn independently. */
em_dataset *em_dataset_synthetic_split(int64_t n, int ndim, const int64_t *shape /* sample */,
                                       int num_classes, double noise, uint64_t seed, bool train,
                                       em_error *err);

/* ---- tokenizers ------------------------------------------------------------ */
/* How text becomes token ids and back, for a language model.
 *   byte: 256 ids, one per byte value; takes any bytes, keeps no vocabulary.
 *   char: one id per Unicode character (code point, UTF-8 aware) of its
 *         vocabulary, a UTF-8 string that holds each character once; a
 *         character's id is its place in that string. Its text must be
 *         valid UTF-8 without NUL bytes, every character in the vocabulary.
 * A tokenizer is part of its model: a spec keeps it in its "tokenizer"
 * section (em-nn.h, em_spec_tokenizer), so that generation decodes ids
 * back to text from the spec alone, without the data it trained on. */
typedef enum { EM_TOKENIZER_BYTE, EM_TOKENIZER_CHAR } em_tokenizer_kind;

/* kind byte: vocab must be NULL. kind char: vocab (vocab_bytes bytes of
 * UTF-8) holds each character once; NULL makes a char tokenizer with no
 * vocabulary yet (vocab size 0: it encodes nothing, and the text dataset
 * says which characters its text has). A vocabulary that is not UTF-8,
 * holds a NUL, is empty or repeats a character is EM_ERR_INVALID saying
 * which character. */
em_tokenizer *em_tokenizer_new(em_tokenizer_kind kind, const char *vocab, size_t vocab_bytes,
                               em_error *err);
void em_tokenizer_free(em_tokenizer *t); /* NULL is fine */
em_tokenizer_kind em_tokenizer_kind_of(const em_tokenizer *t);
const char *em_tokenizer_kind_name(em_tokenizer_kind k); /* "byte", "char" */
/* 256 for byte; char: the vocabulary's characters (0: none given). */
int64_t em_tokenizer_vocab_size(const em_tokenizer *t);
/* n bytes of text into ids (room for n values: every token is at least one
 * byte); *n_ids gets their count. A text the tokenizer cannot take (char:
 * not UTF-8, a NUL byte, a character outside the vocabulary) is
 * EM_ERR_FORMAT naming source, the line and the column (1-based, the
 * column in characters) and the byte or character at fault. */
em_status em_tokenizer_encode(const em_tokenizer *t, const char *text, size_t n,
                              const char *source, int32_t *ids, size_t *n_ids, em_error *err);
/* The bytes of token id into out (room for 4); returns their count (1 to
 * 4), or 0 for an id outside the vocabulary. */
int em_tokenizer_decode(const em_tokenizer *t, int64_t id, char *out);

/* ---- text --------------------------------------------------------------------- */
/* A language model's text: a file, or a folder of text files read in name
 * order (bytewise), as one sequence of tokens. A folder's entries are
 * taken when they are regular files (symbolic links followed) and not
 * hidden ('.'); a file reached under two names (fortunes' art.u8 -> art)
 * is read once, under its first name; a file holding a NUL byte is binary
 * (the fortune package's .dat indexes) and is left out; subfolders are not
 * read. A file named directly is read whatever it holds (the byte
 * tokenizer takes any bytes; the char tokenizer says where its text
 * stops being UTF-8); an empty one is an error.
 *
 * The last EM_TEXT_VALIDATION_PERCENT percent of the tokens are the
 * validation (test) split, the rest the training split: the same
 * split for every run and every context. A split of n tokens gives
 * (n - 1) / L samples of context L, window i starting at token i * L:
 * x = tokens[i L .. i L + L) (the ids as floats: the trainer gives the
 * model i64, em_dataset_token_samples), targets tokens[i L + 1 .. i L + L]
 * (em_dataset_target_len L), so an epoch predicts every token of the
 * split once. */
#define EM_TEXT_VALIDATION_PERCENT 10
em_dataset *em_dataset_text(const char *path, const em_tokenizer *tok, int64_t context,
                            bool train, em_error *err);

/* ---- images ----------------------------------------------------------------- */
/* A decoded image: floats (channels, height, width) in [0, 1] (pixel/255). */
typedef struct {
  int channels, height, width;
  float *data;
} em_image;
/* Reads a PNG file (any bit depth, palette, interlacing; alpha is composed
 * on black). want_channels 1 converts to grey, 3 to RGB, 0 keeps the
 * file's (grey -> 1, colour -> 3). A file that is not a PNG, is corrupt
 * or is larger than 16384 pixels a side is an error naming the file.
 * Clear out with em_image_clear. */
em_status em_image_read_png(const char *path, int want_channels, em_image *out, em_error *err);
void em_image_clear(em_image *img); /* NULL is fine */
/* A PNG file's size and the channels em_image_read_png gives it with
 * want_channels 0 (1 grey, 3 colour), from its header alone: a reader can
 * refuse a file of the wrong size before decoding it. */
em_status em_image_png_header(const char *path, int *width, int *height, int *channels,
                              em_error *err);

/* ---- the data loader ------------------------------------------------------ */
typedef struct {
  int batch_size;  /* default 64 */
  bool shuffle;    /* default true */
  bool drop_last;  /* drop a last batch smaller than batch_size; default false */
  int workers;     /* worker threads; 0 loads in the calling thread; default 2 */
  int prefetch;    /* batches prepared ahead; 0 (default): 2 per worker */
  uint64_t seed;   /* shuffle seed; default 0 */
  int64_t limit;   /* use only the first `limit` samples; 0 (default): all */
  int rank, world; /* distributed sampler; default 0, 1 */
  bool pinned;     /* batches in page-locked memory (em_host_pinned_alloc), which a
                      GPU copies from asynchronously; default false */
} em_loader_config;

typedef struct {
  const float *x;   /* (N, ...sample shape) */
  const int64_t *y; /* (N), or (N, T) for a dataset of T labels per sample */
  int64_t n;        /* N: batch_size, or fewer for a last batch */
} em_batch;

typedef struct em_loader em_loader;

void em_loader_config_defaults(em_loader_config *c);
/* c NULL: the defaults. The dataset must outlive the loader. Workers start at once and
 * prefetch epoch 0 only after em_loader_start_epoch (or the first
 * em_loader_next, which starts epoch 0 when no epoch was started). */
em_loader *em_loader_new(const em_dataset *ds, const em_loader_config *c, em_error *err);
/* Starts epoch `epoch` (>= 0), dropping whatever the previous epoch had
 * in flight. With shuffle on, the order is a permutation derived from
 * (seed, epoch) alone: the same whatever the number of workers, and the
 * same again when a resumed run restarts at that epoch. With world > 1
 * each rank takes every world-th index of that permutation, padded (by
 * wrapping around) to a multiple of world, like PyTorch's
 * DistributedSampler; every rank must use the same seed. */
void em_loader_start_epoch(em_loader *l, int64_t epoch);
/* Starts epoch `epoch` at batch first_batch (0-based; the batches before
 * it are skipped without being loaded; batches per epoch or more gives an
 * empty epoch): a resumed run continues with exactly the batches an
 * uninterrupted run would have seen. */
void em_loader_start_epoch_at(em_loader *l, int64_t epoch, int64_t first_batch);
/* The next batch of the epoch, valid until the next call on this loader
 * (or em_loader_start_epoch / em_loader_free). Returns false at the end
 * of the epoch (err cleared) or on an error (err set; the epoch is over). */
bool em_loader_next(em_loader *l, em_batch *out, em_error *err);
int64_t em_loader_batches_per_epoch(const em_loader *l);
/* Samples this rank sees in one epoch (after padding and drop_last). */
int64_t em_loader_samples_per_epoch(const em_loader *l);
/* Stops the workers (mid-epoch is fine) and frees everything. NULL is fine. */
void em_loader_free(em_loader *l);
