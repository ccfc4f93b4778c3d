/* cmd-train.c: `ember train`: a new run from a spec, or a recorded run
 * continued with --resume, recorded in the registry unless --no-record.
 *
 * The trainer runs in this (the main) thread. The registry is touched
 * from here only before and after the loop (create the run, record a
 * resume, finish the run); during the loop every row goes through an
 * em_store_writer, which commits in its own thread.
 *
 * Choices:
 * - The recorded config has an empty checkpoint_dir: the folder is the
 *   run's own (<registry>/artifacts/runs/<id>/checkpoints, known only once
 *   the run exists) and the checkpoint rows name every file.
 * - --epochs 0 only writes the initial weights; it records nothing.
 * - Ctrl-C / SIGTERM: the first asks the trainer to stop after the step
 *   (it writes a final checkpoint), the second ends the process at once.
 *   A run stopped by a signal exits with 128 + the signal after printing
 *   the JSON summary, so scripts see that it did not finish.
 * - --ddp (under mpirun): every rank runs this command. Rank 0 alone reads
 *   the spec or the registry, records, prints and checkpoints; it sends
 *   the spec, the config and the checkpoint to resume from to the other
 *   ranks (ddp_share), which train quietly. The recorded config carries
 *   "ddp_world" (the number of ranks; --batch is per rank). A rank that
 *   fails tells the others (em_comm_say_failed): a peer waiting for it
 *   stops at once, and rank 0 records the failure with that rank's
 *   message. At the end every rank says how it ended (em_comm_end): rank
 *   0 prints the other ranks' errors (theirs are held, so nothing is said
 *   twice) and everyone takes the job's exit code; then, if any rank
 *   failed, the job ends with MPI_Abort (collectives may still be in
 *   flight). A stop agreed by all ranks is no failure: every rank exits
 *   with the code of the signal that asked for it. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "em-cpu.h"
#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "cli-progress.h"
#include "em-device.h"
#include "em-pool.h"
#include "em-store.h"
#include "em-train-job.h"
#include "em-io.h"
#include "em-train.h"
#include "plugin-load.h"
#include "train-ddp.h"
#include "train-options.h"
#include "train-report.h"

#ifndef EMBER_VERSION
#define EMBER_VERSION "unknown"
#endif

/* What the run trains: from a spec file (parent 0, model the file's
 * stem), or rebuilt from the registry (em_store_resume_prepare). */
typedef struct {
  em_resume r;
  bool ran_here; /* --resume on the device it trained on: no pre-flight */
} train_job;

/* ---- stop on Ctrl-C / SIGTERM ------------------------------------------ */

static _Atomic(em_trainer *) g_trainer;
static volatile sig_atomic_t g_signal;

static bool g_say_stop; /* the first signal is answered on stderr (rank 0 alone) */

static void on_stop_signal(int sig) {
  static const char msg[] = "\nember: stopping after this step, with a checkpoint (press Ctrl-C "
                            "again to quit at once, losing the steps since the last one)\n";
  if (g_say_stop && write(STDERR_FILENO, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
  g_signal = sig;
  em_trainer *t = atomic_load(&g_trainer);
  if (t) em_trainer_request_stop(t);
}

static void install_stop_handlers(void) {
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  g_say_stop = !rank || strcmp(rank, "0") == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART; /* a second signal ends the process */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL); /* its terminal closed: stopped as by Ctrl-C, not killed */
}

/* ---- the event sink ------------------------------------------------------ */

typedef struct {
  cli_progress prog;
  em_run_recorder rec;
  int64_t stop_after; /* --stop-after-steps */
  int64_t last_step;  /* the last optimiser step seen */
  bool speaks;        /* not a data-parallel rank other than 0 (whose events
                         are the same as rank 0's: said once) */
  char said[1024];    /* the last divergence printed (the run's error repeats it) */
} train_sinks;

static bool on_event(const em_train_event *ev, void *user) {
  train_sinks *s = user;
  cli_progress_event(ev, &s->prog);
  if (ev->kind == EM_EVENT_STEP && ev->step == s->last_step) return true; /* mid-accumulation */
  em_run_recorder_event(&s->rec, ev);
  if (ev->kind == EM_EVENT_DIVERGENCE && s->speaks) {
    fprintf(stderr, "ember: divergence at step %lld: %s\n", (long long)ev->step,
            ev->message ? ev->message : "the loss diverged");
    snprintf(s->said, sizeof s->said, "%s", ev->message ? ev->message : "");
  }
  if (ev->kind == EM_EVENT_WARNING && ev->message)
    fprintf(stderr, "ember: warning at step %lld: %s\n", (long long)ev->step, ev->message);
  if (ev->kind == EM_EVENT_PROFILE && !s->prog.quiet && ev->path && ev->path[0])
    fprintf(stderr, "%sprofile of the window written to %s (open it in Perfetto or "
            "chrome://tracing)\n%s", s->prog.tty ? "\n" : "", ev->path,
            ev->message ? ev->message : "");
  else if (ev->kind == EM_EVENT_PROFILE && !s->prog.quiet)
    fprintf(stderr, "%sprofile of the window:\n%s", s->prog.tty ? "\n" : "",
            ev->message ? ev->message : "");
  if (ev->kind == EM_EVENT_STEP) {
    s->last_step = ev->step;
    if (s->stop_after > 0 && ev->step >= s->stop_after) return false;
  }
  return true;
}

/* ---- setup ------------------------------------------------------------------ */

static void file_stem(const char *path, char *out, size_t cap) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  snprintf(out, cap, "%s", base);
  char *dot = strrchr(out, '.');
  if (dot && dot != out) *dot = '\0';
}

static int setup_from_spec(const cli_train_opts *o, train_job *j) {
  em_error err = {0};
  j->r.spec = em_spec_load(o->spec_path, &err);
  if (!j->r.spec) return cli_fail(&err, NULL);
  em_train_config_defaults(&j->r.cfg);
  if (em_train_config_from_spec(&j->r.cfg, j->r.spec, &err) != EM_OK)
    return cli_fail(&err, o->spec_path);
  cli_train_opts_apply(o, &j->r.cfg);
  cli_train_opts_check_amp(o, &j->r.cfg);
  /* recorded absolute (--data-dir or the spec's "data_dir"), so that
   * --resume from another folder finds the data */
  if (j->r.cfg.data_dir[0] && j->r.cfg.data_dir[0] != '/') {
    char *abs = realpath(j->r.cfg.data_dir, NULL);
    if (abs && strlen(abs) < sizeof j->r.cfg.data_dir)
      snprintf(j->r.cfg.data_dir, sizeof j->r.cfg.data_dir, "%s", abs);
    free(abs);
  }
  /* a regular file's text as written; a spec given through a pipe was
   * read once by em_spec_load, and the parsed spec is recorded instead */
  j->r.spec_text = em_read_text(o->spec_path, true);
  if (!j->r.spec_text) j->r.spec_text = em_spec_format(em_spec_json(j->r.spec), NULL);
  file_stem(o->spec_path, j->r.model, sizeof j->r.model);
  return 0;
}

/* A warning of the registry's (what it could not record, or what a
 * resume will not keep). */
static void warn_line(void *user, const char *msg) {
  (void)user;
  cli_warn("%s", msg);
}

static em_status restore_plugins(void *user, em_store *s, int64_t run, em_error *err) {
  (void)user;
  return app_plugins_restore(s, run, err);
}

static const em_job_hooks k_hooks = {.warn = warn_line, .restore_plugins = restore_plugins};

/* --resume RUN|latest: the registry's part (em_store_resume_prepare),
 * then what the flags change: --threads, --device, and the ranks. */
static int setup_from_run(const cli_train_opts *o, em_store *s, train_job *j) {
  em_error err = {0};
  int64_t id = 0;
  if (strcmp(o->resume, "latest") == 0) {
    if (em_store_run_latest_with_checkpoint(s, &id, &err) != EM_OK)
      return cli_fail1(&err, "--resume latest");
  } else if (cli_run_id(s, o->resume, &id, &err) != EM_OK) {
    return cli_fail1(&err, "--resume");
  }
  if (em_store_resume_prepare(s, id, &k_hooks, &j->r, &err) != EM_OK)
    return cli_fail1(&err, "--resume");
  em_resume *r = &j->r;
  if (r->world != o->world)
    cli_warn("run %lld trained on %d rank%s, this part on %d: the samples each step sees "
             "change, so the weights will differ from an uninterrupted run",
             (long long)id, r->world, r->world == 1 ? "" : "s", o->world);
  if (o->threads_given || o->device_given) {
    cli_train_opts_apply(o, &r->cfg); /* only --threads, --device, --auto-batch can be there */
    if (!em_device_eq(r->device, r->cfg.device)) {
      char a[32], b[32];
      cli_warn("run %lld trained on %s, this part on %s: the weights will agree to rounding, "
               "not bit for bit, with an uninterrupted run", (long long)id,
               em_device_str(r->device, a, sizeof a), em_device_str(r->cfg.device, b, sizeof b));
    }
  }
  if (o->threads_given && r->cfg.threads != r->threads)
    cli_warn("run %lld trained with %d threads, this part uses %d: the weights will not be "
             "bit-identical to an uninterrupted run", (long long)id, r->threads, r->cfg.threads);
  /* It trained at that batch on this device: that beats the pre-flight's
   * estimate, which errs high. */
  j->ran_here = em_device_eq(r->device, r->cfg.device);
  return 0;
}

static em_dataset *open_data(const em_spec *spec, const em_train_config *cfg, bool train,
                             int *rc) {
  em_error err = {0};
  em_dataset *ds = em_train_open_dataset(spec, cfg, train, &err);
  if (!ds) *rc = cli_fail(&err, NULL);
  return ds;
}

/* mkdir -p */
static em_status make_dirs(const char *path, em_error *err) {
  char buf[4096];
  if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf)
    return em_error_set(err, EM_ERR_INVALID, "the path '%s' is too long", path);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return em_error_set(err, EM_ERR_IO, "cannot create the folder '%s': %s", buf,
                            strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  return EM_OK;
}

/* Ends a run through a connection of its own (see the writer's comment
 * in cli_cmd_train); a failure is only a warning: the run's results are
 * recorded, the registry will show it as killed. */
static void finish_run(const char *regdir, int64_t run, em_run_status st, const char *msg) {
  em_error err = {0};
  if (em_store_run_end(regdir, run, st, msg, &err) != EM_OK)
    cli_warn("run %lld's end is not recorded: %s", (long long)run, err.msg);
}


/* ---- the command -------------------------------------------------------------- */

static void check_usage(const cli_train_opts *o) {
  if (o->weights)
    cli_die_usage("train: --weights is an 'ember eval' option; --init FILE starts training "
                  "from saved weights");
  if (o->quantize)
    cli_die_usage("train: --quantize is an 'ember eval' option (export, predict and serve take "
                  "it too)");
  if (o->report)
    cli_die_usage("train: --report is an 'ember eval' option (the evaluation report of saved "
                  "weights or a registered version)");
  if (o->resume) {
    if (o->spec_path)
      cli_die_usage("--resume rebuilds the run from the registry: leave out SPEC ('%s')",
                    o->spec_path);
    if (o->no_record)
      cli_die_usage("--resume records the continued run as a new run: leave out --no-record");
    const char *bad = cli_train_opts_resume_conflict(o);
    if (bad)
      cli_die_usage("%s cannot be combined with --resume: a resumed run keeps the settings it "
                    "recorded, so that it ends exactly where an uninterrupted run would (start "
                    "a new run to change them)",
                    bad);
    if (o->checkpoint_dir)
      cli_die_usage("--checkpoint-dir cannot be combined with --resume: a resumed run keeps "
                    "its checkpoints in the registry");
    if (o->init)
      cli_die_usage("--init cannot be combined with --resume: the weights come from the "
                    "run's checkpoint");
    return;
  }
  if (!o->spec_path) cli_die_usage("train expects a SPEC file (or --resume RUN)");
  cli_train_opts_warn_unrecorded(o);
  if (!o->no_record && o->checkpoint_dir)
    cli_die_usage("--checkpoint-dir is for --no-record runs: a recorded run keeps its "
                  "checkpoints in the registry (artifacts/runs/<id>/checkpoints)");
}

int cli_cmd_train(int argc, char **argv) {
  cli_train_opts o;
  cli_train_opts_parse(argc, argv, "train", &o);
  check_usage(&o);
  bool record = !o.no_record;
  em_comm *comm = NULL;
  int rank = 0;
  o.world = 1;
  if (o.ddp) {
    em_error cerr = {0};
    if (!(comm = em_comm_mpi_new(&argc, &argv, &cerr))) return cli_fail(&cerr, "--ddp");
    rank = em_comm_rank(comm);
    o.world = em_comm_world(comm);
    cli_set_rank(rank, rank != 0); /* rank 0 prints the job's errors (em_comm_end) */
    if (o.world == 1) /* it trained as one process without a word */
      cli_warn("--ddp with 1 rank: this trains as one process (start ranks with mpirun -np N "
               "... --ddp)");
    em_ddp_options dopt; /* known before anything is recorded */
    em_ddp_options_defaults(&dopt);
    if (dopt.comm == EM_DDP_COMM_BAD)
      cli_die_usage("EMBER_DDP_COMM is '%s': it takes auto, mpi or nccl (who reduces the "
                    "gradients of a CUDA device)", getenv("EMBER_DDP_COMM"));
    if (rank != 0) { /* rank 0 records, prints, saves and checkpoints */
      o.quiet = true;
      o.save = NULL;
      o.checkpoint_dir = NULL;
      o.profile = NULL;
      record = false;
    }
  }

  /* found before the training, not after it (by the rank that writes) */
  if (o.save) cli_check_output_path("--save", o.save, true);
  if (o.profile) cli_check_output_path("--profile", o.profile, false);

  train_job j;
  memset(&j, 0, sizeof j);
  em_error err = {0};
  em_store *store = NULL;
  em_store_writer *writer = NULL;
  em_dataset *train = NULL, *test = NULL;
  em_model *model = NULL;
  em_trainer *tr = NULL;
  int64_t run = 0;
  char regdir[4096] = "";
  int rc = 0;
  bool signalled = false; /* rc is 128 + a signal of an orderly stop */

  if (record || o.resume) {
    if (cli_registry_dir(o.registry, regdir, sizeof regdir, &err) != EM_OK) {
      rc = cli_fail1(&err, "registry");
      goto out;
    }
  }
  if (rank != 0) {
    if ((rc = train_ddp_share(comm, true, &j.r)) != 0) goto out;
  } else if (o.resume) {
    store = em_store_open(regdir, false, &err);
    if (!store) rc = cli_fail1(&err, "--resume");
    else rc = setup_from_run(&o, store, &j);
    if (comm) {
      int src = train_ddp_share(comm, rc == 0, &j.r);
      if (rc == 0) rc = src;
    }
    if (rc != 0) goto out;
  } else {
    rc = setup_from_spec(&o, &j);
    if (rc == 0 && o.world > 1 && !o.threads_given) train_ddp_default_threads(&j.r.cfg);
    if (comm) {
      int src = train_ddp_share(comm, rc == 0, &j.r);
      if (rc == 0) rc = src;
    }
    if (rc != 0) goto out;
  }
  /* data-parallel: each rank now sets up alone (its data read, rank 0's
   * dataset hashed and run recorded), however long that takes on a large
   * folder or a slow registry: the first to finish waits for the others
   * without the timeout, which starts again when they say they are done */
  if (comm) em_comm_say_busy(comm, true);
  em_train_config *cfg = &j.r.cfg;
  if (comm && cfg->device.kind == EM_DEVICE_CUDA) { /* one process per GPU: its local rank's */
    em_error derr = {0};
    if (o.world > 1 && o.device && strchr(o.device, ':'))
      cli_die_usage("--device %s with --ddp: each rank trains on the GPU of its rank on the "
                    "node (--device cuda); choose the GPUs with CUDA_VISIBLE_DEVICES", o.device);
    if (em_dist_local_device(EM_DEVICE_CUDA, &cfg->device, &derr) != EM_OK)
      cli_die_usage("--ddp --device cuda: %s", derr.msg);
  }
  cli_train_opts_check_device(&o, cfg); /* exit 2 before anything is recorded */
  if (rank != 0) cfg->checkpoint_every = 0; /* rank 0 writes the checkpoints */
  if (!record) {
    if (cfg->checkpoint_every > 0 && !o.checkpoint_dir)
      cli_die_usage("--checkpoint-every with --no-record needs --checkpoint-dir DIR (a "
                    "recorded run checkpoints into the registry)");
    if (o.checkpoint_dir) {
      if (strlen(o.checkpoint_dir) >= sizeof cfg->checkpoint_dir)
        cli_die_usage("--checkpoint-dir: the path is too long");
      snprintf(cfg->checkpoint_dir, sizeof cfg->checkpoint_dir, "%s", o.checkpoint_dir);
    }
  }
  /* Checked before anything is recorded. A recorded run's checkpoint
   * folder is named once the run exists: stand in the registry's. */
  em_train_config check = *cfg;
  if (record && !check.checkpoint_dir[0])
    snprintf(check.checkpoint_dir, sizeof check.checkpoint_dir, "%s",
             "<registry>/artifacts/runs/<run id>/checkpoints");
  if (em_train_config_validate(&check, &err) != EM_OK) {
    rc = cli_fail(&err, NULL);
    goto out;
  }
  /* On a device: the pre-flight memory estimate refuses a batch that will
   * not fit, before anything is recorded (--auto-batch: starts lower).
   * Not under --ddp: the ranks' batches must stay equal; not for a resume
   * on the device the run trained on at this batch. */
  if (!o.no_preflight && o.world == 1 && !j.ran_here) {
    int batch;
    char note[512];
    if (em_train_preflight(j.r.spec, cfg, &batch, note, sizeof note, &err) != EM_OK) {
      rc = cli_fail(&err, NULL);
      goto out;
    }
    if (note[0]) cli_warn("%s", note);
    cfg->batch_size = batch;
  }
  /* The registry before the data: a registry that cannot be opened fails
   * the command at once, not after the dataset loaded. */
  if (record && cfg->epochs > 0 && !store && !(store = em_store_open(regdir, false, &err))) {
    fprintf(stderr,
            "ember: cannot record the run: %s\n(train without recording: --no-record; "
            "another registry: --registry DIR)\n",
            err.msg);
    rc = 1;
    goto out;
  }
  /* --epochs 0 writes the initial weights: no data to read (a spec the
   * dataset cannot feed, an Embedding's indices say, still gets them) */
  if (cfg->epochs > 0 && (!(train = open_data(j.r.spec, cfg, true, &rc)) ||
                          !(test = open_data(j.r.spec, cfg, false, &rc))))
    goto out;
  model = em_model_new(j.r.spec, cfg->seed, &err);
  if (!model) {
    rc = cli_fail(&err, o.spec_path);
    goto out;
  }
  if (o.init && em_model_load(model, o.init, &err) != EM_OK) {
    rc = cli_fail(&err, o.init);
    goto out;
  }
  em_train_summary sum;
  memset(&sum, 0, sizeof sum);
  em_store_writer_stats ws;
  memset(&ws, 0, sizeof ws);
  if (cfg->epochs == 0) {
    record = false; /* nothing trained: the initial weights only */
    goto save;
  }
  if (cfg->checkpoint_dir[0] && make_dirs(cfg->checkpoint_dir, &err) != EM_OK) {
    rc = cli_fail1(&err, "--checkpoint-dir");
    goto out;
  }

  /* The run row, its checkpoint folder and the writer. */
  if (record) {
    em_run_start rs = {
        .name = o.name,
        .model = j.r.model,
        .spec_json = j.r.spec_text,
        .engine_version = EMBER_VERSION,
        .shorter_registry = "use a shorter --registry or EMBER_HOME",
        .warn = warn_line,
    };
    if (em_store_job_record(store, &rs, cfg, j.r.lr_scale, o.world, j.r.parent, &run, &err) !=
        EM_OK) {
      rc = cli_fail1(&err, "cannot record the run");
      goto out;
    }
  }

  tr = em_trainer_new(model, cfg, train, test, &err);
  if (tr && comm) em_trainer_set_comm(tr, comm, &err);
  if (!tr || err.status != EM_OK) {
    if (run) em_store_run_finish(store, run, EM_RUN_FAILED, err.msg, NULL);
    rc = cli_fail(&err, NULL);
    goto out;
  }
  if (j.r.parent) {
    if (em_store_job_resume_trainer(run ? store : NULL, run, &j.r, o.world, tr, &k_hooks, &err) !=
        EM_OK) {
      if (run) em_store_run_finish(store, run, EM_RUN_FAILED, err.msg, NULL);
      rc = cli_fail1(&err, "--resume");
      goto out;
    }
    if (!o.quiet)
      fprintf(stderr, "resuming run %lld from step %lld (epoch %lld) as run %lld\n",
              (long long)j.r.parent, (long long)j.r.ckpt.step, (long long)j.r.ckpt.epoch + 1,
              (long long)run);
  }

  /* While training, the writer's connection is the process's only one:
   * this one is closed first and opened again to finish the run, so no
   * idle connection sits beside the writer for the length of a run. */
  if (run) {
    em_store_close(store);
    store = NULL;
    if (!(writer = em_store_writer_new(regdir, 200, &err))) {
      rc = cli_fail1(&err, "cannot record the run");
      finish_run(regdir, run, EM_RUN_FAILED, err.msg);
      goto out;
    }
  }

  train_sinks sinks;
  memset(&sinks, 0, sizeof sinks);
  cli_progress_init(&sinks.prog, o.quiet, em_spec_name(j.r.spec));
  em_run_recorder_init(&sinks.rec, writer, run, o.keep_checkpoints);
  sinks.stop_after = o.stop_after_steps;
  sinks.speaks = rank == 0;
  sinks.last_step = j.r.parent ? j.r.ckpt.step : 0;
  if (run && !o.quiet) fprintf(stderr, "recording as run %lld in %s\n", (long long)run, regdir);
  if (j.r.cfg.amp == EM_AMP_BF16 && !o.quiet && em_device_is_cpu(j.r.cfg.device)) {
    /* which GEMM autocast runs on */
    em_bf16_kernel k = em_bf16_kernel_best();
    fprintf(stderr, "amp bf16: %s\n",
            k == EM_BF16_KERNEL_EMULATED
                ? "emulated (no AVX512-BF16 or AMX kernel here: operands rounded to bf16, "
                  "multiplied in f32)"
            : k != EM_BF16_KERNEL_NONE ? em_bf16_kernel_name(k)
                                       : "EMBER_BF16_KERNEL=none: running f32");
  }

  em_train_diagnostics diag;
  em_train_diagnostics_defaults(&diag);
  diag.detect_anomaly = o.detect_anomaly;
  if (o.profile) {
    snprintf(diag.trace_path, sizeof diag.trace_path, "%s", o.profile);
    if (o.profile_steps > 0) diag.batches = o.profile_steps;
  }
  em_trainer_set_diagnostics(tr, &diag);

  atomic_store(&g_trainer, tr);
  install_stop_handlers();
  if (comm) em_comm_say_busy(comm, false); /* set up: the collectives' timeout holds again */
  em_status st = em_trainer_run(tr, on_event, &sinks, &err);
  atomic_store(&g_trainer, NULL);
  /* the other ranks wait for rank 0's --save and records without the
   * timeout (em_comm_end's answer ends it) */
  if (comm && rank == 0) em_comm_say_busy(comm, true);
  cli_progress_finish(&sinks.prog);
  em_trainer_summary(tr, &sum);

  if (writer) {
    em_error werr = {0};
    if (em_store_writer_flush(writer, &werr) != EM_OK)
      cli_warn("some rows of run %lld were not recorded: %s", (long long)run, werr.msg);
    em_store_writer_get_stats(writer, &ws);
    if (em_store_writer_free(writer, &werr) != EM_OK)
      cli_warn("some rows of run %lld were not recorded: %s", (long long)run, werr.msg);
    writer = NULL;
  }
  /* --save before the run is marked completed: "completed" means every
   * output of the command exists. */
  em_error serr = {0};
  bool saved = st != EM_OK || !o.save || em_model_save(model, o.save, &serr) == EM_OK;
  if (run)
    finish_run(regdir, run,
               st != EM_OK ? EM_RUN_FAILED : sum.stopped ? EM_RUN_STOPPED : EM_RUN_COMPLETED,
               st != EM_OK ? err.msg : NULL);
  if (st != EM_OK && !o.ddp && sinks.said[0] && strcmp(sinks.said, err.msg) == 0) {
    /* not its text again (a data-parallel job keeps it: it tells the other ranks) */
    fprintf(stderr, "ember: training stopped on that divergence\n");
    rc = 1;
    goto out;
  }
  if (st != EM_OK) {
    rc = cli_fail(&err, rank != 0                                   ? NULL /* rank 0 says it */
                        : sum.steps > 0 || sum.train_seconds > 0 ? "training stopped"
                                                                 : "training did not start");
    /* A checkpoint that could not be written (a full disk) leaves the
     * weights whole: --save, the user's own output, still gets them. */
    if (err.status == EM_ERR_IO && o.save && rank == 0 && sum.steps > 0) {
      if (em_model_save(model, o.save, &serr) == EM_OK)
        fprintf(stderr, "ember: the weights as training left them (step %lld) are in %s all the "
                "same\n", (long long)sum.steps, o.save);
      else
        cli_fail(&serr, o.save);
    }
    goto out;
  }
  if (!saved) {
    rc = cli_fail(&serr, o.save);
    goto out;
  }
  if (sum.stopped && run)
    fprintf(stderr, "ember: run %lld stopped at step %lld%s; continue it with: ember train "
            "--resume %lld\n",
            (long long)run, (long long)sum.steps, g_signal ? " by a signal" : "", (long long)run);
  else if (sum.stopped && cfg->checkpoint_dir[0] && rank == 0)
    fprintf(stderr, "ember: stopped at step %lld%s; the checkpoint is in %s (--init takes its "
            "weights; a recorded run, without --no-record, can be resumed exactly)\n",
            (long long)sum.steps, g_signal ? " by a signal" : "", cfg->checkpoint_dir);
  goto report;

save: /* --epochs 0: the initial weights */
  if (o.save && em_model_save(model, o.save, &err) != EM_OK) {
    rc = cli_fail(&err, o.save);
    goto out;
  }
report:
  if (rank == 0)
    train_print_result(cfg, &sum, em_spec_name(j.r.spec), em_spec_param_count(j.r.spec), run, &ws, tr);
  if (g_signal) {
    rc = 128 + g_signal;
    signalled = true;
  }
out:
  if (comm && em_comm_world(comm) > 1) rc = train_ddp_end(comm, rc, rc != 0 && !signalled);
  if (writer) em_store_writer_free(writer, NULL);
  em_trainer_free(tr);
  em_model_free(model);
  em_dataset_free(train);
  em_dataset_free(test);
  em_resume_clear(&j.r);
  em_store_close(store);
  em_comm_free(comm);
  return rc;
}
