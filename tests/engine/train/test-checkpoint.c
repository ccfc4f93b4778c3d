/* test-checkpoint.c: checkpoints and exact resume. A run resumed from any
 * checkpoint (a periodic one mid-epoch, one at an epoch's end, one after
 * an evaluation, one written when a stop was requested) ends with every
 * parameter, buffer and optimiser state tensor bit-identical to the run
 * that never stopped, and with the same epoch losses. A truncated,
 * corrupted or mismatched checkpoint is a clear error that leaves the
 * trainer as it was. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "em-io.h"
#include "train-private.h"
#include "train-helpers.h"

/* An MLP with dropout, SGD with momentum and a step schedule; two loader
 * workers. 256 samples / 32 = 8 batches = 8 steps per epoch. */
static const char *mlp_json =
    "{\"name\": \"mlp\", \"input\": {\"shape\": [16]}, \"nodes\": ["
    " {\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 32},"
    " {\"name\": \"act\", \"type\": \"ReLU\"},"
    " {\"name\": \"drop\", \"type\": \"Dropout\", \"p\": 0.3},"
    " {\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 3}],"
    " \"training\": {\"optimizer\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.9,"
    "  \"weight_decay\": 0.0001, \"batch_size\": 32, \"epochs\": 3, \"workers\": 2,"
    "  \"schedule\": {\"type\": \"step\", \"step_size\": 6, \"gamma\": 0.5}}}";

/* A tiny CNN with batch norm, Adam, accumulate 2 and clipping; 208
 * samples / 16 = 13 batches, so the last step of an epoch has one
 * micro-batch: 7 steps per epoch. */
static const char *cnn_json =
    "{\"name\": \"cnn\", \"input\": {\"shape\": [1, 8, 8]}, \"nodes\": ["
    " {\"name\": \"conv\", \"type\": \"Conv2d\", \"out_channels\": 4, \"kernel_size\": 3,"
    "  \"padding\": 1},"
    " {\"name\": \"bn\", \"type\": \"BatchNorm2d\"},"
    " {\"name\": \"relu\", \"type\": \"ReLU\"},"
    " {\"name\": \"pool\", \"type\": \"MaxPool2d\", \"kernel_size\": 2},"
    " {\"name\": \"flat\", \"type\": \"Flatten\"},"
    " {\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 3}],"
    " \"training\": {\"optimizer\": \"adam\", \"lr\": 0.01, \"batch_size\": 16, \"epochs\": 2,"
    "  \"workers\": 0, \"accumulate\": 2, \"clip_grad_norm\": 0.5,"
    "  \"schedule\": {\"type\": \"cosine\"}}}";

static void mlp_setup(th_setup *s) {
  int64_t shape[1] = {16};
  th_setup_init(s, mlp_json, 256, 1, shape, 3);
  s->cfg.checkpoint_every = 5;
}

static void cnn_setup(th_setup *s) {
  int64_t shape[3] = {1, 8, 8};
  th_setup_init(s, cnn_json, 208, 3, shape, 3);
  s->cfg.checkpoint_every = 3;
}

/* Resumes s from `from` (a model initialised differently, so that every
 * value must come from the file) and checks the end against the full
 * run's final checkpoint and epoch losses. */
static void resume_and_compare(th_setup *s, const th_record *full, const char *from,
                               int64_t total_steps) {
  g_assert_nonnull(from);
  char *dir = th_tmpdir();
  th_record rec;
  th_record_init(&rec);
  em_error err = {0};
  if (th_run(s, dir, from, 777, &rec, &err) != EM_OK) g_error("resuming: %s", err.msg);
  const char *a = th_find(full, "final", total_steps), *b = th_find(&rec, "final", total_steps);
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  th_assert_same_checkpoint(a, b);
  /* The epochs the resumed run ended report the same mean loss. */
  g_assert_cmpuint(rec.epoch_losses->len, >=, 1);
  for (guint i = 0; i < rec.epoch_losses->len; i++) {
    int64_t e = g_array_index(rec.epoch_indices, int64_t, i);
    double want = g_array_index(full->epoch_losses, double, e);
    g_assert_true(g_array_index(rec.epoch_losses, double, i) == want);
  }
  th_record_clear(&rec);
  th_rm_rf(dir);
  g_free(dir);
}

static void test_resume_mlp(void) {
  th_setup s;
  mlp_setup(&s);
  char *dir = th_tmpdir();
  th_record full;
  th_record_init(&full);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &full, &err), ==, EM_OK);
  /* step 5, 10, 15, 20; an eval checkpoint per epoch; a final one */
  g_assert_nonnull(th_find(&full, "step", 5));
  g_assert_nonnull(th_find(&full, "step", 20));
  g_assert_null(th_find(&full, "step", 8));
  const char *eval1 = th_find(&full, "eval", 8);
  g_assert_nonnull(eval1);
  g_assert_true(g_str_has_suffix(eval1, "/eval-e001-step-000000008.safetensors"));
  g_assert_nonnull(th_find(&full, "eval", 24));
  g_assert_nonnull(th_find(&full, "final", 24));
  g_assert_cmpuint(full.ckpt_paths->len, ==, 4 + 3 + 1);
  g_assert_cmpstr(g_ptr_array_index(full.ckpt_kinds, full.ckpt_paths->len - 1), ==, "final");
  /* "eval" and "final" carry the evaluation of their weights, "step" none */
  for (guint i = 0; i < full.ckpt_paths->len; i++) {
    double acc = g_array_index(full.ckpt_accuracy, double, i);
    if (strcmp(g_ptr_array_index(full.ckpt_kinds, i), "step") == 0) g_assert_true(isnan(acc));
    else g_assert_true(acc > 0.5 && acc <= 1);
  }

  resume_and_compare(&s, &full, th_find(&full, "step", 5), 24);  /* epoch 1, batch 5 */
  resume_and_compare(&s, &full, eval1, 24);                      /* epoch boundary */
  resume_and_compare(&s, &full, th_find(&full, "step", 20), 24); /* epoch 3, batch 4 */
  th_record_clear(&full);
  th_rm_rf(dir);
  g_free(dir);
  th_setup_free(&s);
}

/* Every optimiser of the table resumes exactly: the MLP's run with each
 * kind's defaults, its state made as large as the config allows
 * (momentum for SGD, AMSGrad for Adam: a field a kind does not read is
 * ignored), resumed from mid-epoch step 10. */
static void test_resume_every_optimizer(void) {
  g_assert_cmpint(em_optim_kind_count(), >=, 3);
  for (int k = 0; k < em_optim_kind_count(); k++) {
    th_setup s;
    mlp_setup(&s);
    em_optim_config_defaults(&s.cfg.optim, (em_optim_kind)k);
    s.cfg.optim.momentum = 0.9;
    s.cfg.optim.amsgrad = true;
    char *dir = th_tmpdir();
    th_record full;
    th_record_init(&full);
    em_error err = {0};
    if (th_run(&s, dir, NULL, 5, &full, &err) != EM_OK)
      g_error("%s: %s", em_optim_kind_name((em_optim_kind)k), err.msg);
    g_assert_nonnull(th_find(&full, "final", 24));
    resume_and_compare(&s, &full, th_find(&full, "step", 10), 24);
    th_record_clear(&full);
    th_rm_rf(dir);
    g_free(dir);
    th_setup_free(&s);
  }
}

static void test_resume_cnn(void) {
  th_setup s;
  cnn_setup(&s);
  char *dir = th_tmpdir();
  th_record full;
  th_record_init(&full);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &full, &err), ==, EM_OK);
  /* 14 steps: periodic ones at 3, 6, 9, 12; evaluations after 7 and 14 */
  g_assert_nonnull(th_find(&full, "eval", 7));
  g_assert_nonnull(th_find(&full, "final", 14));
  char value[64];
  g_assert_cmpint(em_checkpoint_read_meta(th_find(&full, "step", 9), "batch", value,
                                          sizeof value, &err), ==, EM_OK);
  g_assert_cmpstr(value, ==, "4"); /* epoch 2: steps 8 (batch 2) and 9 (batch 4) */
  resume_and_compare(&s, &full, th_find(&full, "step", 3), 14);
  resume_and_compare(&s, &full, th_find(&full, "step", 6), 14);
  resume_and_compare(&s, &full, th_find(&full, "eval", 7), 14);
  resume_and_compare(&s, &full, th_find(&full, "step", 9), 14);
  th_record_clear(&full);
  th_rm_rf(dir);
  g_free(dir);
  th_setup_free(&s);
}

/* ---- stop, and checkpoints written by the callback ------------------------ */

typedef struct {
  int64_t stop_at_batch_event; /* stop on the STEP event of this (global) batch */
  int events;
  /* save from the callback */
  const char *save_dir;
  int saved_ok, refused;
} stop_hook;

static bool stop_cb(em_trainer *t, const em_train_event *ev, void *user) {
  stop_hook *h = user;
  if (ev->kind != EM_EVENT_STEP) return true;
  h->events++;
  if (h->save_dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/cb-%03d.safetensors", h->save_dir, h->events);
    em_error err = {0};
    em_status st = em_trainer_save_checkpoint(t, path, &err);
    if (st == EM_OK) h->saved_ok++;
    else {
      g_assert_cmpint(st, ==, EM_ERR_INVALID);
      g_assert_nonnull(strstr(err.msg, "accumulating"));
      h->refused++;
    }
  }
  return h->events != h->stop_at_batch_event;
}

static void test_resume_from_stop(void) {
  for (int which = 0; which < 2; which++) {
    th_setup s;
    if (which == 0) mlp_setup(&s);
    else cnn_setup(&s);
    int64_t total = which == 0 ? 24 : 14;
    char *dir_full = th_tmpdir(), *dir_stop = th_tmpdir();
    th_record full, stopped;
    th_record_init(&full);
    th_record_init(&stopped);
    em_error err = {0};
    g_assert_cmpint(th_run(&s, dir_full, NULL, 5, &full, &err), ==, EM_OK);
    /* MLP: stop after batch 11 (epoch 2, step 11); CNN: after batch 14,
     * the first micro-batch of step 8: the trainer finishes that step. */
    stop_hook h = {.stop_at_batch_event = which == 0 ? 11 : 14};
    stopped.hook = stop_cb;
    stopped.hook_user = &h;
    g_assert_cmpint(th_run(&s, dir_stop, NULL, 5, &stopped, &err), ==, EM_OK);
    int64_t at = which == 0 ? 11 : 8;
      g_assert_cmpint(h.events, ==, which == 0 ? 11 : 15);
    const char *fin = th_find(&stopped, "final", at);
    g_assert_nonnull(fin);
    char value[64];
    g_assert_cmpint(em_checkpoint_read_meta(fin, "step", value, sizeof value, &err), ==, EM_OK);
    g_assert_cmpint(g_ascii_strtoll(value, NULL, 10), ==, at);
    resume_and_compare(&s, &full, fin, total);
    th_record_clear(&full);
    th_record_clear(&stopped);
    th_rm_rf(dir_full);
    th_rm_rf(dir_stop);
    g_free(dir_full);
    g_free(dir_stop);
    th_setup_free(&s);
  }
}

/* A test set that asks the trainer to stop when its sample `at` is read
 * for the `eval`-th time, i.e. during that evaluation (the evaluation's
 * loader reads ahead on its worker threads: when is not exact). Its first
 * `len` samples of inner, or all when len is 0. */
typedef struct {
  const em_dataset *inner;
  em_trainer **trainer;
  int64_t at, len;
  int eval, reads;
} stopping_set;

static int64_t ss_len(const void *impl) {
  const stopping_set *s = impl;
  return s->len ? s->len : em_dataset_len(s->inner);
}
static int ss_shape(const void *impl, int64_t *shape) {
  return em_dataset_sample_shape(((const stopping_set *)impl)->inner, shape);
}
static int ss_classes(const void *impl) {
  return em_dataset_num_classes(((const stopping_set *)impl)->inner);
}
static em_status ss_get(const void *impl, int64_t i, float *x, int64_t *y, em_error *err) {
  stopping_set *s = (stopping_set *)impl;
  if (i == s->at && ++s->reads == s->eval) em_trainer_request_stop(*s->trainer);
  return em_dataset_get(s->inner, i, x, y, err);
}
static const em_dataset_vtable stopping_vt = {
    .kind = "stopping", .len = ss_len, .sample_shape = ss_shape, .num_classes = ss_classes,
    .get = ss_get, .free = g_free};

static bool keep_trainer(em_trainer *t, const em_train_event *ev, void *user) {
  (void)ev;
  *(em_trainer **)user = t;
  return true;
}

/* A stop asked during the last evaluation (the window closed, Ctrl-C)
 * ends it between batches: no EVAL, no "eval" checkpoint, the run stopped
 * with a final checkpoint at the end of the epoch's batches, and resuming
 * from it evaluates and ends exactly like the run that was not stopped. */
/* Runs s with its test set wrapped to ask for a stop (as stopping_set
 * says: at, len, eval) into rec and dir; returns how often the trigger
 * sample was read. */
static int run_stopping(th_setup *s, stopping_set how, th_record *rec, const char *dir) {
  em_error err = {0};
  em_trainer *t = NULL;
  stopping_set *ss = g_new(stopping_set, 1);
  *ss = how;
  ss->inner = s->test;
  ss->trainer = &t;
  em_dataset *test = em_dataset_new(&stopping_vt, ss, &err);
  g_assert_nonnull(test);
  em_dataset *plain = s->test;
  s->test = test;
  rec->hook = keep_trainer;
  rec->hook_user = &t;
  g_assert_cmpint(th_run(s, dir, NULL, 5, rec, &err), ==, EM_OK);
  s->test = plain;
  int reads = ss->reads;
  em_dataset_free(test);
  return reads;
}

static void test_stop_during_eval(void) {
  th_setup s;
  mlp_setup(&s);
  char *dir_full = th_tmpdir(), *dir_stop = th_tmpdir();
  th_record full, stopped;
  th_record_init(&full);
  th_record_init(&stopped);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir_full, NULL, 5, &full, &err), ==, EM_OK);
  /* 3 epochs: the stop comes in the third evaluation */
  g_assert_cmpint(run_stopping(&s, (stopping_set){.at = 20, .eval = 3}, &stopped, dir_stop), ==,
                  3);
  g_assert_null(th_find(&stopped, "eval", 24));
  g_assert_nonnull(th_find(&stopped, "eval", 16)); /* the evaluations before it ran whole */
  const char *fin = th_find(&stopped, "final", 24);
  g_assert_nonnull(fin);
  char value[64];
  g_assert_cmpint(em_checkpoint_read_meta(fin, "epoch", value, sizeof value, &err), ==, EM_OK);
  g_assert_cmpstr(value, ==, "2"); /* still in the last epoch: the run is "stopped" */
  resume_and_compare(&s, &full, fin, 24);

  /* asked while the last batch is read, the stop cuts nothing: that
   * evaluation is whole (here a test set of one batch, so whenever the
   * request lands it is during the last batch) */
  th_record again;
  th_record_init(&again);
  char *dir_again = th_tmpdir();
  g_assert_cmpint(run_stopping(&s, (stopping_set){.at = 31, .len = 32, .eval = 3}, &again,
                               dir_again), ==, 3);
  g_assert_nonnull(th_find(&again, "eval", 24));
  th_record_clear(&again);
  th_rm_rf(dir_again);
  g_free(dir_again);
  th_record_clear(&full);
  th_record_clear(&stopped);
  th_rm_rf(dir_full);
  th_rm_rf(dir_stop);
  g_free(dir_full);
  g_free(dir_stop);
  th_setup_free(&s);
}

static void test_save_from_callback(void) {
  th_setup s;
  cnn_setup(&s);
  s.cfg.checkpoint_every = 0;
  char *dir = th_tmpdir(), *cbdir = th_tmpdir();
  th_record full, rec;
  th_record_init(&full);
  th_record_init(&rec);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &full, &err), ==, EM_OK);
  stop_hook h = {.save_dir = cbdir};
  rec.hook = stop_cb;
  rec.hook_user = &h;
  g_assert_cmpint(th_run(&s, NULL, NULL, 5, &rec, &err), ==, EM_OK);
  /* 26 micro-batches: 14 end a step (12 even ones and each epoch's 13th) */
  g_assert_cmpint(h.saved_ok, ==, 14);
  g_assert_cmpint(h.refused, ==, 12);
  char path[1024];
  snprintf(path, sizeof path, "%s/cb-%03d.safetensors", cbdir, 10); /* step 5, mid-epoch */
  resume_and_compare(&s, &full, path, 14);
  snprintf(path, sizeof path, "%s/cb-%03d.safetensors", cbdir, 13); /* end of epoch 1 */
  resume_and_compare(&s, &full, path, 14);
  th_record_clear(&full);
  th_record_clear(&rec);
  th_rm_rf(dir);
  th_rm_rf(cbdir);
  g_free(dir);
  g_free(cbdir);
  th_setup_free(&s);
}

/* ---- bad checkpoints --------------------------------------------------------- */

static GBytes *read_file(const char *path) {
  char *data;
  gsize n;
  g_assert_true(g_file_get_contents(path, &data, &n, NULL));
  return g_bytes_new_take(data, n);
}

static void write_bytes(const char *path, const void *data, size_t n) {
  g_assert_true(g_file_set_contents(path, data, (gssize)n, NULL));
}

/* Loads `path` into t and expects status st with the file named in the
 * message and `needle` in it (when not NULL). */
static void expect_load_error(em_trainer *t, const char *path, em_status st, const char *needle) {
  em_error err = {0};
  em_status got = em_trainer_load_checkpoint(t, path, &err);
  if (got != st) g_error("loading '%s': status %d, expected %d: %s", path, got, st, err.msg);
  g_assert_nonnull(strstr(err.msg, path));
  if (needle && !strstr(err.msg, needle)) g_error("'%s' lacks '%s'", err.msg, needle);
  /* the registry's check without a trainer: the same for a damaged or
   * missing file; a whole file that does not fit this trainer is whole */
  em_error verr = {0};
  int64_t step = -1, epoch = -1;
  em_status want = st == EM_ERR_INVALID ? EM_OK : st;
  got = em_checkpoint_verify(path, &step, &epoch, &verr);
  if (got != want)
    g_error("verifying '%s': status %d, expected %d: %s", path, got, want, verr.msg);
  if (want != EM_OK) {
    g_assert_nonnull(strstr(verr.msg, path));
    g_assert_cmpint(step, ==, -1);
  }
}

/* Every checkpoint a run wrote verifies whole, with the step and epoch
 * its file name and its CHECKPOINT event gave; the names parse back. */
static void test_verify_and_names(void) {
  th_setup s;
  mlp_setup(&s);
  char *dir = th_tmpdir();
  th_record full;
  th_record_init(&full);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &full, &err), ==, EM_OK);
  g_assert_cmpuint(full.ckpt_paths->len, >=, 6);
  for (guint i = 0; i < full.ckpt_paths->len; i++) {
    const char *path = g_ptr_array_index(full.ckpt_paths, i);
    char *base = g_path_get_basename(path), kind[16];
    int64_t named = -1, step = -1, epoch = -1;
    g_assert_true(em_checkpoint_name_parse(base, kind, sizeof kind, &named));
    g_assert_cmpstr(kind, ==, g_ptr_array_index(full.ckpt_kinds, i));
    g_assert_cmpint(em_checkpoint_verify(path, &step, &epoch, &err), ==, EM_OK);
    g_assert_cmpint(step, ==, named);
    char v[64];
    g_assert_cmpint(em_checkpoint_read_meta(path, "step", v, sizeof v, &err), ==, EM_OK);
    g_assert_cmpint(g_ascii_strtoll(v, NULL, 10), ==, step);
    g_assert_cmpint(epoch, ==, (step - 1) / 8); /* 8 steps an epoch: that of its last batch */
    g_free(base);
  }
  static const struct {
    const char *name, *kind;
    int64_t step;
  } good[] = {{"step-000000005.safetensors", "step", 5},
              {"eval-e003-step-000000024.safetensors", "eval", 24},
              {"final-step-000000024.safetensors", "final", 24},
              {"rollback-step-7.safetensors", "rollback", 7}};
  for (unsigned i = 0; i < G_N_ELEMENTS(good); i++) {
    char kind[16];
    int64_t step = -1;
    g_assert_true(em_checkpoint_name_parse(good[i].name, kind, sizeof kind, &step));
    g_assert_cmpstr(kind, ==, good[i].kind);
    g_assert_cmpint(step, ==, good[i].step);
  }
  static const char *const bad[] = {
      "step-000000005.safetensors.tmp-Ab12Cd", "step-.safetensors", "step-+5.safetensors",
      "step- 5.safetensors", "step-5.safetensor", "best-step-5.safetensors", "eval-step-5.safetensors",
      "weights.safetensors", "step-99999999999999999999.safetensors", "final-step-5"};
  for (unsigned i = 0; i < G_N_ELEMENTS(bad); i++) {
    char kind[16];
    int64_t step = -1;
    if (em_checkpoint_name_parse(bad[i], kind, sizeof kind, &step)) g_error("'%s' parsed", bad[i]);
  }
  th_record_clear(&full);
  th_rm_rf(dir);
  g_free(dir);
  th_setup_free(&s);
}

static void test_corrupt(void) {
  th_setup s;
  mlp_setup(&s);
  s.cfg.epochs = 1;
  char *dir = th_tmpdir(), *dir2 = th_tmpdir(), *bad_dir = th_tmpdir();
  th_record full;
  th_record_init(&full);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &full, &err), ==, EM_OK);
  const char *good = th_find(&full, "step", 5);
  GBytes *bytes = read_file(good);
  gsize n;
  const uint8_t *data = g_bytes_get_data(bytes, &n);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)data[i] << (8 * i);
  g_assert_cmpuint(8 + hlen, <, n);

  em_model *m = em_model_new(s.spec, 5, &err);
  em_train_config cfg = s.cfg;
  cfg.checkpoint_every = 0;
  em_trainer *t = em_trainer_new(m, &cfg, s.train, s.test, &err);
  g_assert_nonnull(t);
  char *bad = g_build_filename(bad_dir, "bad.safetensors", NULL);

  /* Truncated anywhere: in the length, the header, the data. */
  size_t cuts[] = {0, 5, 8, 8 + hlen / 3, 8 + hlen - 1, 8 + hlen, 8 + hlen + 4, n / 2 + 7, n - 1};
  for (size_t i = 0; i < G_N_ELEMENTS(cuts); i++) {
    write_bytes(bad, data, cuts[i]);
    expect_load_error(t, bad, EM_ERR_FORMAT, NULL);
  }
  /* One byte flipped: all through the header (names, dtypes, shapes,
   * offsets, metadata values, the padding) and in the data. */
  uint8_t *copy = g_memdup2(data, n);
  int flips = 0;
  for (size_t pos = 8; pos < 8 + hlen; pos += 37) {
    copy[pos] ^= 0x01;
    write_bytes(bad, copy, n);
    copy[pos] ^= 0x01;
    expect_load_error(t, bad, EM_ERR_FORMAT, NULL);
    flips++;
  }
  g_assert_cmpint(flips, >, 20);
  size_t data_pos[] = {8 + hlen, 8 + hlen + 1000, n - 1};
  for (size_t i = 0; i < G_N_ELEMENTS(data_pos); i++) {
    copy[data_pos[i]] ^= 0x40;
    write_bytes(bad, copy, n);
    copy[data_pos[i]] ^= 0x40;
    expect_load_error(t, bad, EM_ERR_FORMAT, "corrupt");
  }
  /* Not a checkpoint at all: a weights file, a missing file. */
  g_assert_cmpint(em_model_save(m, bad, &err), ==, EM_OK);
  expect_load_error(t, bad, EM_ERR_FORMAT, "not an Ember training checkpoint");
  char *missing = g_build_filename(bad_dir, "nope.safetensors", NULL);
  expect_load_error(t, missing, EM_ERR_IO, NULL);
  g_free(missing);

  /* After all that, the trainer's run is a fresh run. */
  g_assert_cmpint(em_trainer_run(t, NULL, NULL, &err), ==, EM_OK);
  char *out = g_build_filename(dir2, "after.safetensors", NULL);
  g_assert_cmpint(em_trainer_save_checkpoint(t, out, &err), ==, EM_OK);
  th_assert_same_checkpoint(th_find(&full, "final", 8), out);
  /* ...and the good file still loads. */
  g_assert_cmpint(em_trainer_load_checkpoint(t, good, &err), ==, EM_OK);

  g_free(out);
  g_free(copy);
  g_free(bad);
  g_bytes_unref(bytes);
  em_trainer_free(t);
  em_model_free(m);
  th_record_clear(&full);
  th_rm_rf(dir);
  th_rm_rf(dir2);
  th_rm_rf(bad_dir);
  g_free(dir);
  g_free(dir2);
  g_free(bad_dir);
  th_setup_free(&s);
}

/* Copies checkpoint src to dst with metadata key set to value (or the
 * i64 scalar tensor named key set to the number value), and a checksum
 * that matches again: a file the writer could have made, whose state
 * does not hold together. */
static void rewrite_checkpoint(const char *src, const char *dst, const char *key,
                               const char *value) {
  em_error err = {0};
  em_safetensors *f = em_safetensors_open(src, &err);
  g_assert_nonnull(f);
  int n = em_safetensors_count(f), nm = em_safetensors_meta_count(f);
  em_named_tensor *ts = g_new0(em_named_tensor, n);
  em_ckpt_tensor *cts = g_new0(em_ckpt_tensor, n);
  for (int i = 0; i < n; i++) {
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    const char *name = em_safetensors_name(f, i);
    g_assert_cmpint(em_safetensors_info(f, name, &dt, &nd, shape, &err), ==, EM_OK);
    em_tensor *t = em_tensor_new(dt, nd, shape, &err);
    g_assert_cmpint(em_safetensors_read(f, name, t, &err), ==, EM_OK);
    if (strcmp(name, key) == 0) *em_i64(t) = g_ascii_strtoll(value, NULL, 10);
    ts[i] = (em_named_tensor){name, t};
    cts[i] = (em_ckpt_tensor){name, t};
  }
  const char **keys = g_new0(const char *, nm), **vals = g_new0(const char *, nm);
  em_ckpt_meta *meta = g_new0(em_ckpt_meta, nm);
  for (int i = 0; i < nm; i++) {
    keys[i] = em_safetensors_meta_key(f, i);
    vals[i] = strcmp(keys[i], key) == 0 ? value : em_safetensors_meta(f, keys[i]);
    meta[i] = (em_ckpt_meta){keys[i], vals[i]};
  }
  char sum[32];
  snprintf(sum, sizeof sum, "crc32:%08x", em_checkpoint_checksum(cts, n, meta, nm));
  for (int i = 0; i < nm; i++)
    if (strcmp(keys[i], "checksum") == 0) vals[i] = sum;
  g_assert_cmpint(em_safetensors_save(dst, n, ts, nm, keys, vals, &err), ==, EM_OK);
  for (int i = 0; i < n; i++) em_tensor_free((em_tensor *)ts[i].t);
  g_free(ts);
  g_free(cts);
  g_free(keys);
  g_free(vals);
  g_free(meta);
  em_safetensors_close(f);
}

/* A checkpoint whose checksum matches but whose position, watchdog or
 * optimiser counts do not hold together is refused, saying what. */
static void test_inconsistent_state(void) {
  th_setup s;
  mlp_setup(&s);
  s.cfg.epochs = 1;
  char *dir = th_tmpdir(), *bad_dir = th_tmpdir();
  th_record full;
  th_record_init(&full);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &full, &err), ==, EM_OK);
  const char *good = th_find(&full, "step", 5);
  em_model *m = em_model_new(s.spec, 5, &err);
  em_train_config cfg = s.cfg;
  cfg.checkpoint_every = 0;
  em_trainer *t = em_trainer_new(m, &cfg, s.train, s.test, &err);
  char *bad = g_build_filename(bad_dir, "bad.safetensors", NULL);
  static const struct {
    const char *key, *value, *says;
  } cases[] = {
      {"grad_norms_seen", "9223372036854775807", "\"grad_norms_seen\" is 9223372036854775807"},
      {"grad_norms_seen", "6", "with 5 norms listed at step 5"},
      {"grad_norms", "", "with 0 norms listed"},
      {"epoch", "99999999999", "past the 1 epochs its run trains"},
      {"optim/fc1.weight.step", "4611686018427387904", "'optim/fc1.weight.step' is"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    rewrite_checkpoint(good, bad, cases[i].key, cases[i].value);
    expect_load_error(t, bad, i == 3 ? EM_ERR_INVALID : EM_ERR_FORMAT, cases[i].says);
  }
  rewrite_checkpoint(good, bad, "grad_norms_seen", "5"); /* the same file again: loads */
  g_assert_cmpint(em_trainer_load_checkpoint(t, bad, &err), ==, EM_OK);
  g_free(bad);
  em_trainer_free(t);
  em_model_free(m);
  th_record_clear(&full);
  th_rm_rf(dir);
  th_rm_rf(bad_dir);
  g_free(dir);
  g_free(bad_dir);
  th_setup_free(&s);
}

/* A trainer for spec_json (training section of the MLP) with cfg changes. */
static em_trainer *other_trainer(th_setup *base, const char *spec_json, em_spec **spec,
                                 em_model **m, void (*tweak)(em_train_config *)) {
  em_error err = {0};
  *spec = em_spec_parse(spec_json, "other", &err);
  if (!*spec) g_error("%s", err.msg);
  *m = em_model_new(*spec, 5, &err);
  em_train_config cfg = base->cfg;
  cfg.checkpoint_every = 0;
  if (tweak) tweak(&cfg);
  em_trainer *t = em_trainer_new(*m, &cfg, base->train, base->test, &err);
  if (!t) g_error("%s", err.msg);
  return t;
}

static void no_momentum(em_train_config *c) { c->optim.momentum = 0; }
static void adam(em_train_config *c) { em_optim_config_defaults(&c->optim, EM_OPTIM_ADAM); }
static void batch_64(em_train_config *c) { c->batch_size = 64; }

static void test_mismatch(void) {
  th_setup s;
  mlp_setup(&s);
  s.cfg.epochs = 1;
  char *dir = th_tmpdir();
  th_record full;
  th_record_init(&full);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &full, &err), ==, EM_OK);
  const char *ck = th_find(&full, "step", 5);
  struct {
    const char *spec;
    void (*tweak)(em_train_config *);
    const char *needle;
  } cases[] = {
    /* other widths: the shapes are named */
    {"{\"name\": \"mlp\", \"input\": {\"shape\": [16]}, \"nodes\": ["
     " {\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 24},"
     " {\"name\": \"act\", \"type\": \"ReLU\"},"
     " {\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 3}]}",
     NULL, "tensor 'fc1.weight' has shape [32, 16], the model expects [24, 16]"},
    /* the same tensors, another activation: the spec differs */
    {"{\"name\": \"mlp-tanh\", \"input\": {\"shape\": [16]}, \"nodes\": ["
     " {\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 32},"
     " {\"name\": \"act\", \"type\": \"Tanh\"},"
     " {\"name\": \"drop\", \"type\": \"Dropout\", \"p\": 0.3},"
     " {\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 3}]}",
     NULL, "was made for a different model (spec 'mlp')"},
    /* an optimiser without momentum has no buffers for the saved ones */
    {mlp_json, no_momentum, "holds a tensor 'optim/fc1.bias.momentum_buffer'"},
    /* Adam expects state the SGD checkpoint lacks */
    {mlp_json, adam, "has no tensor 'optim/fc1.weight.exp_avg', which this optimiser (adam)"},
    /* batch 64: 4 batches per epoch, the checkpoint is after batch 5 */
    {mlp_json, batch_64, "an epoch here has only 4 batches"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    em_spec *spec;
    em_model *m;
    em_trainer *t = other_trainer(&s, cases[i].spec, &spec, &m, cases[i].tweak);
    expect_load_error(t, ck, EM_ERR_INVALID, cases[i].needle);
    em_trainer_free(t);
    em_model_free(m);
    em_spec_free(spec);
  }
  /* A different training section is the same model: it loads. */
  {
    em_spec *spec;
    em_model *m;
    char *json = g_strdup(mlp_json);
    char *lr = strstr(json, "\"lr\": 0.1");
    lr[8] = '2';
    em_trainer *t = other_trainer(&s, json, &spec, &m, NULL);
    g_assert_cmpint(em_trainer_load_checkpoint(t, ck, &err), ==, EM_OK);
    em_trainer_free(t);
    em_model_free(m);
    em_spec_free(spec);
    g_free(json);
  }
  th_record_clear(&full);
  th_rm_rf(dir);
  g_free(dir);
  th_setup_free(&s);
}

static void test_read_meta(void) {
  th_setup s;
  mlp_setup(&s);
  s.cfg.epochs = 1;
  char *dir = th_tmpdir();
  th_record full;
  th_record_init(&full);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &full, &err), ==, EM_OK);
  const char *ck = th_find(&full, "step", 5);
  char v[8192];
  g_assert_cmpint(em_checkpoint_read_meta(ck, "format", v, sizeof v, &err), ==, EM_OK);
  g_assert_cmpstr(v, ==, "ember-checkpoint");
  g_assert_cmpint(em_checkpoint_read_meta(ck, "epoch", v, sizeof v, &err), ==, EM_OK);
  g_assert_cmpstr(v, ==, "0");
  g_assert_cmpint(em_checkpoint_read_meta(ck, "config", v, sizeof v, &err), ==, EM_OK);
  em_train_config back;
  g_assert_cmpint(em_train_config_from_json(&back, v, &err), ==, EM_OK);
  g_assert_cmpint(back.batch_size, ==, 32);
  g_assert_cmpint(em_checkpoint_read_meta(ck, "spec", v, sizeof v, &err), ==, EM_OK);
  g_assert_nonnull(strstr(v, "\"fc1\""));
  g_assert_cmpint(em_checkpoint_read_meta(ck, "spec", v, 10, &err), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_checkpoint_read_meta(ck, "nothing", v, sizeof v, &err), ==, EM_ERR_INVALID);
  /* a plain weights file is not a checkpoint */
  char *w = g_build_filename(dir, "weights.safetensors", NULL);
  em_model *m = em_model_new(s.spec, 1, &err);
  g_assert_cmpint(em_model_save(m, w, &err), ==, EM_OK);
  g_assert_cmpint(em_checkpoint_read_meta(w, "step", v, sizeof v, &err), ==, EM_ERR_FORMAT);
  /* em_model_load reads a checkpoint's model part (a registered version's
   * weights are a checkpoint): the weights of step 5, optimiser skipped */
  g_assert_cmpint(em_model_load(m, ck, &err), ==, EM_OK);
  em_safetensors *f = em_safetensors_open(ck, &err);
  g_assert_nonnull(f);
  for (int i = 0; i < em_model_tensor_count(m); i++) {
    const char *name;
    em_tensor *t = em_model_tensor(m, i, &name);
    em_tensor *x = em_tensor_new(t->dtype, t->ndim, t->shape, &err);
    g_assert_cmpint(em_safetensors_read(f, name, x, &err), ==, EM_OK);
    g_assert_cmpint(memcmp(em_tensor_ptr(t), em_tensor_ptr(x), em_tensor_nbytes(t)), ==, 0);
    em_tensor_free(x);
  }
  em_safetensors_close(f);
  em_model_free(m);
  g_free(w);
  th_record_clear(&full);
  th_rm_rf(dir);
  g_free(dir);
  th_setup_free(&s);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/train/checkpoint/resume-mlp-sgd-dropout", test_resume_mlp);
  g_test_add_func("/train/checkpoint/resume-cnn-bn-adam-accumulate", test_resume_cnn);
  g_test_add_func("/train/checkpoint/resume-every-optimizer", test_resume_every_optimizer);
  g_test_add_func("/train/checkpoint/resume-from-stop", test_resume_from_stop);
  g_test_add_func("/train/checkpoint/save-from-callback", test_save_from_callback);
  g_test_add_func("/train/checkpoint/stop-during-eval", test_stop_during_eval);
  g_test_add_func("/train/checkpoint/corrupt", test_corrupt);
  g_test_add_func("/train/checkpoint/mismatch", test_mismatch);
  g_test_add_func("/train/checkpoint/read-meta", test_read_meta);
  g_test_add_func("/train/checkpoint/inconsistent-state", test_inconsistent_state);
  g_test_add_func("/train/checkpoint/verify-and-names", test_verify_and_names);
  return g_test_run();
}
