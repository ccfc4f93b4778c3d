/* run-start.c: starting and ending a training run's record, the part
 * `ember train` and the workbench's session share (em-store.h): the
 * dataset's identity from the files its kind reads, the config as JSON,
 * the device and kernels, the run row, its plugins, its checkpoint
 * folder; and the end through a connection of its own. */
#include "em-store.h"
#include "em-cpu.h"
#include "em-device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#define RUN_MAX_FILES 512 /* a dataset's files recorded with a run, both splits */

static int cmp_path(const void *a, const void *b) { return strcmp(a, b); }

static void warn(const em_run_start *o, const char *fmt, const char *msg) {
  if (!o->warn) return;
  char line[1200];
  snprintf(line, sizeof line, fmt, msg);
  o->warn(o->user, line);
}

/* The dataset's identity: its name, folder and files (training and test,
 * sorted); NULL, with a warning, when its files cannot be listed. paths
 * holds RUN_MAX_FILES entries (a text folder's files, fortunes' 43, count). */
static const em_dataset_identity *identity(const em_run_start *o, const em_train_config *cfg,
                                           em_dataset_identity *id, char (*paths)[1024],
                                           const char **files, char *folder, size_t cap) {
  em_error err = {0};
  int n1 = 0, n2 = 0;
  if (em_dataset_files_named(cfg->dataset, cfg->data_dir, true, paths, RUN_MAX_FILES / 2, &n1,
                             &err) != EM_OK ||
      em_dataset_files_named(cfg->dataset, cfg->data_dir, false, paths + n1, RUN_MAX_FILES / 2,
                             &n2, &err) != EM_OK) {
    warn(o, "the dataset's files are not recorded: %s", err.msg);
    return NULL;
  }
  int n = n1 + n2;
  qsort(paths, (size_t)n, sizeof paths[0], cmp_path);
  for (int i = 0; i < n; i++) files[i] = paths[i];
  folder[0] = '\0';
  if (cfg->data_dir[0]) {
    snprintf(folder, cap, "%s", cfg->data_dir);
  } else if (n > 0) {
    snprintf(folder, cap, "%s", paths[0]);
    char *slash = strrchr(folder, '/');
    if (slash && slash != folder) *slash = '\0';
  }
  *id = (em_dataset_identity){.name = cfg->dataset, .path = folder, .n_files = n, .files = files};
  return id;
}

em_status em_store_run_start(em_store *s, const em_run_start *o, em_train_config *cfg,
                             int64_t *run, em_error *err) {
  *run = 0;
  char(*paths)[1024] = malloc(RUN_MAX_FILES * sizeof *paths);
  const char **files = malloc(RUN_MAX_FILES * sizeof *files);
  if (!paths || !files) {
    free(paths);
    free(files);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory recording the run");
  }
  char folder[1024];
  em_dataset_identity ident;
  /* the config as recorded: checkpoint_dir still empty (the folder is
   * the run's, known once its row exists) */
  char *own_json = o->config_json ? NULL : em_train_config_to_json(cfg);
  const char *config_json = o->config_json ? o->config_json : own_json;
  char device[32], kernels[256];
  em_cpu_kernels_describe(kernels, sizeof kernels);
  em_run_new rn = {
      .name = o->name,
      .model = o->model,
      .spec_json = o->spec_json,
      .config_json = config_json ? config_json : "{}",
      .seed = cfg->seed,
      .device = em_device_str(cfg->device, device, sizeof device),
      .threads = cfg->threads,
      .engine_version = o->engine_version,
      .parent_run = o->parent_run,
      .dataset = identity(o, cfg, &ident, paths, files, folder, sizeof folder),
      .kernels = em_device_is_cpu(cfg->device) ? kernels : NULL, /* a device's own */
  };
  em_status st = em_store_run_create(s, &rn, run, err);
  free(own_json);
  free(paths);
  free(files);
  if (st != EM_OK) return st;
  em_error terr = {0}; /* the plugins are lineage: not having them recorded stops nothing */
  if (em_store_run_tag_plugins(s, *run, &terr) != EM_OK)
    warn(o, "the run's plugins are not recorded: %s", terr.msg);
  char dir[4096];
  em_store_run_checkpoint_dir(s, *run, dir, sizeof dir);
  if (strlen(dir) >= sizeof cfg->checkpoint_dir)
    em_error_set(err, EM_ERR_INVALID,
                 "the registry's path is too long for checkpoints (%zu bytes, at most %zu): %s",
                 strlen(dir), sizeof cfg->checkpoint_dir - 1,
                 o->shorter_registry ? o->shorter_registry : "use a shorter registry folder");
  else if (g_mkdir_with_parents(dir, 0755) != 0)
    em_error_set(err, EM_ERR_IO, "cannot create the folder '%s': %s", dir, g_strerror(errno));
  else
    memcpy(cfg->checkpoint_dir, dir, strlen(dir) + 1);
  if (err && err->status != EM_OK) {
    em_store_run_finish(s, *run, EM_RUN_FAILED, err->msg, NULL);
    *run = 0;
    return err->status;
  }
  return EM_OK;
}

em_status em_store_run_end(const char *dir, int64_t run, em_run_status st, const char *message,
                           em_error *err) {
  em_store *s = em_store_open(dir, false, err);
  if (!s) return err ? err->status : EM_ERR_IO;
  em_status rc = em_store_run_finish(s, run, st, message, err);
  em_store_close(s);
  return rc;
}
