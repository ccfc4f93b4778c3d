/* train-report.c: `ember train`'s summary line (train-report.h). */
#include "train-report.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "cli-table.h"
#include "em-cpu.h"
#include "em-device.h"
#include "em-pool.h"
#include "plugin-load.h"

static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

void train_print_result(const em_train_config *cfg, const em_train_summary *s,
                              const char *spec_name, int64_t params, int64_t run_id,
                              const em_store_writer_stats *ws, const em_trainer *tr) {
  json_t *o = json_object();
  em_ddp_stats ds;
  if (tr && em_trainer_ddp_stats(tr, &ds) && ds.steps > 0) {
    double n = (double)ds.steps;
    char bdev[32]; /* comm, bucket_device, staged: who reduced the buckets, where they live,
                    * through host copies or not */
    json_object_set_new(o, "ddp",
                        json_pack("{s:i, s:i, s:I, s:f, s:f, s:f, s:f, s:s, s:s, s:b}", "world",
                                  em_trainer_world(tr), "buckets", ds.n_buckets,
                                  "bytes_per_step", (json_int_t)ds.bytes_per_step,
                                  "backward_ms_per_step", 1e3 * ds.backward_s / n,
                                  "allreduce_ms_per_step", 1e3 * ds.comm_s / n,
                                  "exposed_ms_per_step", 1e3 * ds.exposed_s / n,
                                  "finish_ms_per_step", 1e3 * ds.finish_s / n, "comm",
                                  ds.comm ? ds.comm : "?", "bucket_device",
                                  em_device_str(ds.device, bdev, sizeof bdev), "staged",
                                  (int)ds.staged));
  }
  json_object_set_new(o, "model", json_string(spec_name));
  json_object_set_new(o, "epochs", json_integer(s->epochs));
  json_object_set_new(o, "steps", json_integer(s->steps));
  json_object_set_new(o, "batch_size", json_integer(cfg->batch_size));
  json_object_set_new(o, "params", json_integer(params));
  json_object_set_new(o, "train_loss", cli_json_num(s->final_train_loss));
  if (s->evaluated) {
    json_object_set_new(o, "test_loss", cli_json_num(s->test_loss));
    json_object_set_new(o, "test_accuracy", cli_json_num(s->test_accuracy));
  } else {
    json_object_set_new(o, "test_loss", json_null());
    json_object_set_new(o, "test_accuracy", json_null());
  }
  json_object_set_new(o, "train_seconds", cli_json_num(s->train_seconds));
  json_object_set_new(o, "train_samples_per_sec", cli_json_num(s->train_samples_per_sec));
  if (s->target_len) { /* a language model: its losses are per token */
    json_object_set_new(o, "test_perplexity",
                        s->evaluated ? cli_json_num(exp(s->test_loss)) : json_null());
    json_object_set_new(o, "train_tokens_per_sec",
                        cli_json_num(s->train_samples_per_sec * (double)s->target_len));
  }
  json_object_set_new(o, "threads", json_integer(cfg->threads));
  json_object_set_new(o, "blas_core", json_string(em_blas_core()));
  json_object_set_new(o, "cpu_kernels", json_string(em_cpu_kernels_active()));
  json_object_set_new(o, "cpu_isa", json_string(em_cpu_isa_name(em_cpu_isa_active())));
  char devname[32];
  bool on_cpu = em_device_is_cpu(cfg->device);
  json_object_set_new(o, "device", json_string(em_device_str(cfg->device, devname,
                                                             sizeof devname)));
  if (!on_cpu) { /* the batch the run ended at (--auto-batch may lower it), the device's peak */
    em_memory_stats ms;
    em_device_memory_stats(cfg->device, &ms);
    json_object_set_new(o, "final_batch_size", json_integer(tr ? em_trainer_batch_size(tr)
                                                                : cfg->batch_size));
    json_object_set_new(o, "device_peak_mb",
                        cli_json_num(round((double)ms.peak_allocated_bytes / 1048576.0 * 10) / 10));
  }
  if (cfg->amp != EM_AMP_OFF) { /* the mode, and the GEMM it ran on ("none": f32) */
    json_object_set_new(o, "amp", json_string(em_amp_mode_name(cfg->amp)));
    json_object_set_new(o, "amp_kernel", json_string(on_cpu ? em_bf16_kernel_name(
                                                                  em_bf16_kernel_best())
                                                            : devname));
  }
  json_object_set_new(o, "seed", json_integer((json_int_t)cfg->seed));
  json_object_set_new(o, "stopped", json_boolean(s->stopped));
  if (s->early_stopped) json_object_set_new(o, "early_stopped", json_true());
  json_object_set_new(o, "metrics", app_metrics_json()); /* plugin metrics of the last eval */
  json_object_set_new(o, "peak_rss_mb", cli_json_num(round(peak_rss_mb() * 10) / 10));
  json_object_set_new(o, "run_id", run_id > 0 ? json_integer((json_int_t)run_id) : json_null());
  json_object_set_new(o, "record_enqueue_s", cli_json_num(ws->enqueue_seconds));
  json_object_set_new(o, "record_commit_s", cli_json_num(ws->commit_seconds));
  char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
  printf("%s\n", txt);
  fflush(stdout);
  free(txt);
  json_decref(o);
}
