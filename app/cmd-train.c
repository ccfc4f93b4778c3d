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
#include "em-io.h"
#include "em-train.h"
#include "plugin-load.h"
#include "train-options.h"

#ifndef EMBER_VERSION
#define EMBER_VERSION "unknown"
#endif

/* What the run trains: from a spec file, or rebuilt from the registry. */
typedef struct {
  em_spec *spec;
  char *spec_text;          /* as recorded */
  int world;                /* --resume: the ranks the run trained on */
  char model[256];          /* the spec's file stem */
  em_train_config cfg;
  int64_t parent;           /* --resume: the run continued; 0 otherwise */
  em_checkpoint_row ckpt;   /* --resume: the checkpoint it continues from */
  /* --resume from a "final" checkpoint: what a divergence rolls back to
   * (rollback_path NULL: none), see rollback_point */
  bool set_rollback;
  char *rollback_path;
  int64_t rollback_step;
  bool ran_here;            /* --resume on the device it trained on: no pre-flight */
  double lr_scale;          /* --resume: the checkpoint's lr scale (0: none, 1) */
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

/* ---- data-parallel ------------------------------------------------------------- */

/* The recorded config with "ddp_world" added (malloc'd). */
static char *config_with_world(const char *config_json, int world) {
  json_t *o = json_loads(config_json, 0, NULL);
  if (!o) return cli_xstrdup(config_json);
  json_object_set_new(o, "ddp_world", json_integer(world));
  char *txt = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return txt ? txt : cli_xstrdup(config_json);
}

/* A recorded config without "ddp_world" (malloc'd); *world gets it (1
 * when absent). */
static char *config_without_world(const char *config_json, int *world) {
  *world = 1;
  json_t *o = json_loads(config_json, 0, NULL);
  if (!o) return cli_xstrdup(config_json);
  json_t *w = json_object_get(o, "ddp_world");
  if (json_is_integer(w)) *world = (int)json_integer_value(w);
  json_object_del(o, "ddp_world");
  char *txt = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return txt ? txt : cli_xstrdup(config_json);
}

/* Without --threads, the ranks on one machine share its cores: each gets
 * threads / (ranks on this machine), at least 1. */
static void ddp_default_threads(em_train_config *cfg) {
  const char *e = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int local = e ? atoi(e) : 0;
  if (local > 1) cfg->threads = cfg->threads / local > 0 ? cfg->threads / local : 1;
}

/* Rank 0 sends what the run trains (ok false: it failed before, and every
 * rank returns 1); the other ranks rebuild j from it. */
static int ddp_share(em_comm *comm, bool ok, train_job *j) {
  em_error err = {0};
  char *blob = NULL;
  int64_t len = 0;
  if (em_comm_rank(comm) == 0) {
    if (ok) {
      em_train_config c = j->cfg;
      c.checkpoint_dir[0] = '\0';
      char *cfg = em_train_config_to_json(&c);
      json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I}", "spec", j->spec_text ? j->spec_text : "",
                            "config", cfg ? cfg : "", "model", j->model, "resume",
                            j->parent ? j->ckpt.path : "", "step",
                            (json_int_t)(j->parent ? j->ckpt.step : 0));
      free(cfg);
      blob = o ? json_dumps(o, JSON_COMPACT) : NULL;
      json_decref(o);
    }
    len = blob ? (int64_t)strlen(blob) + 1 : 0;
  }
  if (em_comm_broadcast(comm, &len, sizeof len, 0, &err) != EM_OK) return cli_fail1(&err, "--ddp");
  if (len == 0) return 1; /* rank 0 failed and said why */
  if (em_comm_rank(comm) != 0) blob = cli_xmalloc((size_t)len);
  if (em_comm_broadcast(comm, blob, len, 0, &err) != EM_OK) {
    free(blob);
    return cli_fail1(&err, "--ddp");
  }
  int rc = 0;
  if (em_comm_rank(comm) != 0) {
    json_t *o = json_loads(blob, 0, NULL);
    const char *spec = NULL, *cfg = NULL, *model = NULL, *resume = NULL;
    json_int_t step = 0;
    if (!o || json_unpack(o, "{s:s, s:s, s:s, s:s, s:I}", "spec", &spec, "config", &cfg, "model",
                          &model, "resume", &resume, "step", &step) != 0) {
      fprintf(stderr, "ember: rank %d: rank 0 sent an unreadable run description\n",
              em_comm_rank(comm));
      rc = 1;
    } else if (!(j->spec = em_spec_parse(spec, "the spec sent by rank 0", &err))) {
      rc = cli_fail1(&err, "--ddp");
    } else {
      em_train_config_defaults(&j->cfg);
      if (em_train_config_from_json(&j->cfg, cfg, &err) != EM_OK) {
        rc = cli_fail1(&err, "--ddp: the config sent by rank 0");
      } else {
        j->spec_text = cli_xstrdup(spec);
        snprintf(j->model, sizeof j->model, "%s", model);
        if (resume[0]) {
          j->parent = 1; /* a resume: load the same checkpoint as rank 0 */
          j->ckpt.path = cli_xstrdup(resume);
          j->ckpt.step = step;
        }
      }
    }
    json_decref(o);
  }
  free(blob);
  return rc;
}

/* Rank 0: another rank's error, unless rank 0's own message said it. */
static void print_peer_failure(void *user, int rank, const char *msg) {
  (void)user;
  const char *said = cli_first_error();
  const char *rest = strstr(msg, ": "); /* "what: message": rank 0 may have said another what */
  if (!msg[0] || (said[0] && (strstr(said, msg) || (rest && strstr(said, rest + 2))))) return;
  fprintf(stderr, "ember: rank %d: %s\n", rank, msg);
}

/* The end of a data-parallel job (rc: this rank's exit code; failed: not
 * an orderly end or stop): a rank's own failure is told to the others
 * first (a peer stuck in a collective stops waiting for it), then the
 * ranks agree on the ending (em_comm_end). A failed job ends here, with
 * MPI_Abort; else the job's exit code is returned. */
static int ddp_end(em_comm *comm, int rc, bool failed) {
  int rank = em_comm_rank(comm);
  bool echo = em_comm_peer_failed(comm) >= 0; /* it failed because a peer did */
  if (failed && !echo) {
    em_error e = {.status = rc == CLI_EXIT_USAGE ? EM_ERR_INVALID : EM_ERR_IO};
    snprintf(e.msg, sizeof e.msg, "%s", cli_first_error());
    em_comm_say_failed(comm, &e);
  }
  em_comm_ending end;
  em_comm_end(comm, rc, failed, echo ? "" : cli_first_error(), print_peer_failure, NULL, &end);
  if (rank != 0 && !end.heard) cli_print_held(); /* rank 0 did not answer: say it here */
  if (end.failed) {
    fflush(stdout);
    fflush(stderr);
    em_comm_abort(comm, end.code ? end.code : 1);
  }
  return end.code;
}

/* ---- setup ------------------------------------------------------------------ */

/* The text of a regular file (NULL for anything else: a spec given
 * through a pipe was read once by em_spec_load, and the caller records
 * the parsed spec instead). */
static char *read_text(const char *path) {
  FILE *f = em_fopen_read(path, true);
  if (!f) return NULL;
  size_t cap = 1 << 14, n = 0;
  char *buf = cli_xmalloc(cap);
  size_t got;
  while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      char *b = realloc(buf, cap * 2);
      if (!b) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = b;
      cap *= 2;
    }
  }
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static void file_stem(const char *path, char *out, size_t cap) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  snprintf(out, cap, "%s", base);
  char *dot = strrchr(out, '.');
  if (dot && dot != out) *dot = '\0';
}

static int setup_from_spec(const cli_train_opts *o, train_job *j) {
  em_error err = {0};
  j->spec = em_spec_load(o->spec_path, &err);
  if (!j->spec) return cli_fail(&err, NULL);
  em_train_config_defaults(&j->cfg);
  if (em_train_config_from_spec(&j->cfg, j->spec, &err) != EM_OK)
    return cli_fail(&err, o->spec_path);
  cli_train_opts_apply(o, &j->cfg);
  cli_train_opts_check_amp(o, &j->cfg);
  /* recorded absolute (--data-dir or the spec's "data_dir"), so that
   * --resume from another folder finds the data */
  if (j->cfg.data_dir[0] && j->cfg.data_dir[0] != '/') {
    char *abs = realpath(j->cfg.data_dir, NULL);
    if (abs && strlen(abs) < sizeof j->cfg.data_dir)
      snprintf(j->cfg.data_dir, sizeof j->cfg.data_dir, "%s", abs);
    free(abs);
  }
  j->spec_text = read_text(o->spec_path);
  if (!j->spec_text) j->spec_text = em_spec_format(em_spec_json(j->spec), NULL);
  file_stem(o->spec_path, j->model, sizeof j->model);
  return 0;
}

/* The batch size the checkpoint at path was written with (its trainer's
 * config): the recorded one unless --auto-batch halved it; 0 when the
 * file does not say (loading it then reports what is wrong). */
static int checkpoint_batch_size(const char *path) {
  enum { CAP = 1 << 16 };
  char *text = malloc(CAP);
  int batch = 0;
  if (text && em_checkpoint_read_meta(path, "config", text, CAP, NULL) == EM_OK) {
    json_t *o = json_loads(text, 0, NULL);
    json_t *b = json_object_get(o, "batch_size");
    if (json_is_integer(b) && json_integer_value(b) > 0 && json_integer_value(b) <= INT_MAX)
      batch = (int)json_integer_value(b);
    json_decref(o);
  }
  free(text);
  return batch;
}

/* The checkpoint's lr scale (a pause's lr change or a divergence rollback
 * left it): 1 when the file does not say (loading it reports that). */
static double checkpoint_lr_scale(const char *path) {
  char text[64];
  double v = 1;
  if (em_checkpoint_read_meta(path, "lr_scale", text, sizeof text, NULL) == EM_OK) {
    char *end;
    v = strtod(text, &end);
    if (end == text || !(v > 0) || !isfinite(v)) v = 1;
  }
  return v;
}

/* The settings the trainer had when it wrote the checkpoint (its
 * "config"): false when the file does not say. */
static bool checkpoint_config(const char *path, em_train_config *out) {
  enum { CAP = 1 << 16 };
  char *text = malloc(CAP);
  bool ok = false;
  if (text && em_checkpoint_read_meta(path, "config", text, CAP, NULL) == EM_OK) {
    em_train_config_defaults(out);
    ok = em_train_config_from_json(out, text, NULL) == EM_OK;
  }
  free(text);
  return ok;
}

/* A stopped run's "final" checkpoint is where it resumes, but not what a
 * divergence after the resume rolls back to: the run that never stopped
 * wrote no checkpoint there, and rolled back to the one before (with the
 * stop's own, one step back, the resumed run gave up where it went on).
 * That one is the newest checkpoint other than a "final" at or before
 * the resume's step, of the run or else of the runs it continued. */
static void rollback_point(em_store *s, train_job *j) {
  if (!j->ckpt.kind || strcmp(j->ckpt.kind, "final") != 0)
    return; /* a periodic checkpoint: itself, as the trainer takes it */
  j->set_rollback = true;
  em_error err = {0};
  for (int64_t run = j->parent, hops = 0; run > 0 && hops < 1000; hops++) {
    em_checkpoint_row *rows = NULL;
    int n = 0;
    if (em_store_checkpoints_list(s, run, &rows, &n, &err) != EM_OK) break;
    const em_checkpoint_row *best = NULL;
    for (int i = 0; i < n; i++)
      if (strcmp(rows[i].kind, "final") != 0 && rows[i].step <= j->ckpt.step &&
          access(rows[i].path, R_OK) == 0 &&
          (!best || rows[i].step > best->step ||
           (rows[i].step == best->step && rows[i].id > best->id)))
        best = &rows[i];
    if (best) {
      j->rollback_path = cli_xstrdup(best->path);
      j->rollback_step = best->step;
    }
    em_checkpoint_rows_free(rows, n);
    em_run r;
    memset(&r, 0, sizeof r);
    if (best || em_store_run_get(s, run, &r, NULL) != EM_OK) break;
    run = r.parent_run;
    em_run_clear(&r);
  }
  em_error_clear(&err);
}

/* A resumed run reads its dataset's files again: when their SHA-256 is
 * not the one the run it continues recorded, say so (the result will not
 * be the uninterrupted run's). Datasets without files ("unknown") are
 * not compared. */
static void warn_if_data_changed(em_store *s, int64_t parent, int64_t run) {
  em_run a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  if (em_store_run_get(s, parent, &a, NULL) == EM_OK &&
      em_store_run_get(s, run, &b, NULL) == EM_OK && em_dataset_sha_known(a.dataset_sha256) &&
      b.dataset_sha256 && strcmp(a.dataset_sha256, b.dataset_sha256))
    cli_warn("the dataset's files changed since run %lld read them (SHA-256 %.12s... then, "
             "%.12s... now): the resumed run trains on other data than an uninterrupted run "
             "would", (long long)parent, a.dataset_sha256, b.dataset_sha256);
  em_run_clear(&a);
  em_run_clear(&b);
}

/* --resume RUN|latest: the spec and config the run recorded, its threads
 * unless --threads is given, its newest valid checkpoint, and the batch
 * size it had reached there (--auto-batch may have halved it). */
static int setup_from_run(const cli_train_opts *o, em_store *s, train_job *j) {
  em_error err = {0};
  int64_t id = 0;
  if (strcmp(o->resume, "latest") == 0) {
    if (em_store_run_latest_with_checkpoint(s, &id, &err) != EM_OK)
      return cli_fail1(&err, "--resume latest");
  } else if (cli_run_id(s, o->resume, &id, &err) != EM_OK) {
    return cli_fail1(&err, "--resume");
  }
  em_run r;
  memset(&r, 0, sizeof r);
  if (em_store_run_get(s, id, &r, &err) != EM_OK) return cli_fail1(&err, "--resume");
  int rc = 0;
  if (r.status == EM_RUN_RUNNING) {
    fprintf(stderr,
            "ember: run %lld is still running (pid %lld on %s): stop it first (Ctrl-C where it "
            "runs, or kill -INT %lld), then resume it\n",
            (long long)id, (long long)r.pid, r.host ? r.host : "?", (long long)r.pid);
    rc = 1;
    goto out;
  }
  if (r.status == EM_RUN_COMPLETED) {
    fprintf(stderr,
            "ember: run %lld completed: there is nothing left to train; register it ('ember "
            "model register %lld --name NAME') or start a new run\n",
            (long long)id, (long long)id);
    rc = 1;
    goto out;
  }
  if (r.status == EM_RUN_FAILED) { /* by divergence: the same settings come back with it */
    em_run_annotation *ann = NULL;
    int n_ann = 0;
    bool diverged = false; /* the run's error is one of its divergence events */
    if (em_store_run_annotations(s, id, &ann, &n_ann, NULL) == EM_OK)
      for (int i = 0; i < n_ann && r.message; i++)
        diverged |= strcmp(ann[i].kind, "divergence") == 0 && strcmp(ann[i].text, r.message) == 0;
    if (diverged)
      cli_warn("run %lld stopped on a divergence (%s); a resumed run keeps its settings, so it "
               "will most likely diverge the same way: a new run with a lower --lr (or "
               "--clip-grad-norm) is the way on",
               (long long)id, r.message ? r.message : "");
    em_run_annotations_free(ann, n_ann);
  }
  int64_t child = 0; /* resumed before: this is a second continuation of the same point */
  if (em_store_run_first_child(s, id, &child, NULL) == EM_OK && child)
    cli_warn("run %lld was resumed before, as run %lld: this is another continuation of it, "
             "from its last checkpoint (resume run %lld to go on from where that one got to)",
             (long long)id, (long long)child, (long long)child);
  if (app_plugins_restore(s, id, &err) != EM_OK) { /* before the spec: it may name them */
    rc = cli_fail1(&err, "--resume");
    goto out;
  }
  char src[64];
  snprintf(src, sizeof src, "the spec recorded with run %lld", (long long)id);
  j->spec = em_spec_parse(r.spec_json ? r.spec_json : "", src, &err);
  if (!j->spec) {
    rc = cli_fail1(&err, "--resume");
    goto out;
  }
  em_train_config_defaults(&j->cfg);
  int world = 1;
  char *config = config_without_world(r.config_json ? r.config_json : "", &world);
  em_status cst = em_train_config_from_json(&j->cfg, config, &err);
  free(config);
  if (cst != EM_OK) {
    rc = cli_fail1(&err, "--resume: the recorded config");
    goto out;
  }
  j->world = world;
  if (world != o->world)
    cli_warn("run %lld trained on %d rank%s, this part on %d: the samples each step sees "
             "change, so the weights will differ from an uninterrupted run",
             (long long)id, world, world == 1 ? "" : "s", o->world);
  if (r.threads > 0) j->cfg.threads = r.threads;
  em_device recorded = j->cfg.device;
  if (o->threads_given || o->device_given) {
    cli_train_opts_apply(o, &j->cfg); /* only --threads, --device, --auto-batch can be there */
    if (!em_device_eq(recorded, j->cfg.device)) {
      char a[32], b[32];
      cli_warn("run %lld trained on %s, this part on %s: the weights will agree to rounding, "
               "not bit for bit, with an uninterrupted run", (long long)id,
               em_device_str(recorded, a, sizeof a), em_device_str(j->cfg.device, b, sizeof b));
    }
  }
  if (o->threads_given) {
    if (j->cfg.threads != r.threads)
      cli_warn("run %lld trained with %d threads, this part uses %d: the weights will not be "
               "bit-identical to an uninterrupted run",
               (long long)id, r.threads, j->cfg.threads);
  }
  j->cfg.checkpoint_dir[0] = '\0';
  j->spec_text = cli_xstrdup(r.spec_json);
  snprintf(j->model, sizeof j->model, "%s", r.model ? r.model : em_spec_name(j->spec));
  j->parent = id;

  /* a killed run's newest checkpoint may be a file its writer never
   * recorded (the registry records it when it finds the run killed; this
   * covers runs found killed before that) */
  if (r.status == EM_RUN_KILLED) {
    int64_t adopted;
    if (em_store_adopt_checkpoints(s, id, &adopted, &err) != EM_OK) {
      cli_warn("%s", err.msg);
      em_error_clear(&err);
    }
  }
  if (em_store_checkpoint_latest_valid(s, id, &j->ckpt, &err) != EM_OK) {
    fprintf(stderr, "ember: run %lld cannot be resumed: %s\n", (long long)id, err.msg);
    rc = 1;
    goto out;
  }
  /* Say so when a newer checkpoint was passed over as damaged. */
  em_checkpoint_row *rows = NULL;
  int n = 0;
  if (em_store_checkpoints_list(s, id, &rows, &n, &err) == EM_OK) {
    int newer = 0;
    for (int i = 0; i < n; i++)
      if (rows[i].step > j->ckpt.step || (rows[i].step == j->ckpt.step && rows[i].id > j->ckpt.id))
        newer++;
    if (newer)
      cli_warn("%d newer checkpoint%s of run %lld %s damaged or missing; resuming from step %lld",
               newer, newer == 1 ? "" : "s", (long long)id, newer == 1 ? "is" : "are",
               (long long)j->ckpt.step);
    em_checkpoint_rows_free(rows, n);
  }
  em_error_clear(&err);
  rollback_point(s, j);
  /* A run that halved its batch goes on at the halved batch: its position
   * (batches done in the epoch) counts in that size, and an uninterrupted
   * run would have kept it. */
  int reached = checkpoint_batch_size(j->ckpt.path);
  if (reached > 0 && reached != j->cfg.batch_size) {
    cli_warn("run %lld had halved its batch from %d to %d (--auto-batch): going on at %d",
             (long long)id, j->cfg.batch_size, reached, reached);
    j->cfg.batch_size = reached;
  }
  /* What a pause changed (the workbench's lr and gradient clipping, kept
   * in the checkpoint: the trainer's config and its lr scale) goes on, and
   * the new run records the settings it trains with (optim.lr 0.0005 after
   * 0.001 was halved while paused, where Compare reads it), not the
   * parent's recorded ones. The trainer keeps the base lr and the scale,
   * as an uninterrupted run would. */
  em_train_config at;
  if (checkpoint_config(j->ckpt.path, &at)) {
    if (at.clip_grad_norm != j->cfg.clip_grad_norm)
      cli_warn("run %lld's gradient clipping was changed while it trained (%g -> %g): going on "
               "at %g", (long long)id, j->cfg.clip_grad_norm, at.clip_grad_norm,
               at.clip_grad_norm);
    j->cfg.optim.lr = at.optim.lr;
    j->cfg.clip_grad_norm = at.clip_grad_norm;
  }
  j->lr_scale = checkpoint_lr_scale(j->ckpt.path);
  /* It trained at that batch on this device: that beats the pre-flight's
   * estimate, which errs high. */
  j->ran_here = em_device_eq(recorded, j->cfg.device);
out:
  em_run_clear(&r);
  return rc;
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

/* A warning the run's record gives (what it could not record). */
static void warn_line(void *user, const char *msg) {
  (void)user;
  cli_warn("%s", msg);
}

/* Ends a run through a connection of its own (see the writer's comment
 * in cli_cmd_train); a failure is only a warning: the run's results are
 * recorded, the registry will show it as killed. */
static void finish_run(const char *regdir, int64_t run, em_run_status st, const char *msg) {
  em_error err = {0};
  if (em_store_run_end(regdir, run, st, msg, &err) != EM_OK)
    cli_warn("run %lld's end is not recorded: %s", (long long)run, err.msg);
}

/* ---- the summary line ------------------------------------------------------ */

static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

static void print_result_json(const em_train_config *cfg, const em_train_summary *s,
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

/* ---- the command -------------------------------------------------------------- */

static void check_usage(const cli_train_opts *o) {
  if (o->weights)
    cli_die_usage("train: --weights is an 'ember eval' option; --init FILE starts training "
                  "from saved weights");
  if (o->quantize)
    cli_die_usage("train: --quantize is an 'ember eval' option (export, predict and serve take "
                  "it too)");
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
    if ((rc = ddp_share(comm, true, &j)) != 0) goto out;
  } else if (o.resume) {
    store = em_store_open(regdir, false, &err);
    if (!store) rc = cli_fail1(&err, "--resume");
    else rc = setup_from_run(&o, store, &j);
    if (comm) {
      int src = ddp_share(comm, rc == 0, &j);
      if (rc == 0) rc = src;
    }
    if (rc != 0) goto out;
  } else {
    rc = setup_from_spec(&o, &j);
    if (rc == 0 && o.world > 1 && !o.threads_given) ddp_default_threads(&j.cfg);
    if (comm) {
      int src = ddp_share(comm, rc == 0, &j);
      if (rc == 0) rc = src;
    }
    if (rc != 0) goto out;
  }
  /* data-parallel: each rank now sets up alone (its data read, rank 0's
   * dataset hashed and run recorded), however long that takes on a large
   * folder or a slow registry: the first to finish waits for the others
   * without the timeout, which starts again when they say they are done */
  if (comm) em_comm_say_busy(comm, true);
  em_train_config *cfg = &j.cfg;
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
    if (em_train_preflight(j.spec, cfg, &batch, note, sizeof note, &err) != EM_OK) {
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
  if (cfg->epochs > 0 && (!(train = open_data(j.spec, cfg, true, &rc)) ||
                          !(test = open_data(j.spec, cfg, false, &rc))))
    goto out;
  model = em_model_new(j.spec, cfg->seed, &err);
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
    /* the effective settings: a resumed run's lr is the base lr times the
     * scale its checkpoint carries (which the trainer applies) */
    em_train_config recorded = *cfg;
    if (j.lr_scale > 0) recorded.optim.lr *= j.lr_scale;
    char *config_json = em_train_config_to_json(&recorded); /* checkpoint_dir still empty */
    if (config_json && o.world > 1) {
      char *w = config_with_world(config_json, o.world);
      free(config_json);
      config_json = w;
    }
    em_run_start rs = {
        .name = o.name,
        .model = j.model,
        .spec_json = j.spec_text,
        .config_json = config_json ? config_json : "{}",
        .engine_version = EMBER_VERSION,
        .parent_run = j.parent,
        .shorter_registry = "use a shorter --registry or EMBER_HOME",
        .warn = warn_line,
    };
    em_status st = em_store_run_start(store, &rs, cfg, &run, &err);
    free(config_json);
    if (st != EM_OK) {
      rc = cli_fail1(&err, "cannot record the run");
      goto out;
    }
    if (j.parent) warn_if_data_changed(store, j.parent, run);
  }

  tr = em_trainer_new(model, cfg, train, test, &err);
  if (tr && comm) em_trainer_set_comm(tr, comm, &err);
  if (!tr || err.status != EM_OK) {
    if (run) em_store_run_finish(store, run, EM_RUN_FAILED, err.msg, NULL);
    rc = cli_fail(&err, NULL);
    goto out;
  }
  if (j.parent) {
    if (em_trainer_load_checkpoint(tr, j.ckpt.path, &err) != EM_OK) {
      if (rank == 0 && j.world > 0 && j.world != o.world) /* the likely cause: say it */
        em_error_prefix(&err, "run %lld trained on %d rank%s and this part runs on %d, so the "
                        "batches of an epoch are not those its checkpoint counted (resume a "
                        "checkpoint from the middle of an epoch on %d rank%s: mpirun -np %d "
                        "... --ddp)", (long long)j.parent, j.world, j.world == 1 ? "" : "s",
                        o.world, j.world, j.world == 1 ? "" : "s", j.world);
      if (run) em_store_run_finish(store, run, EM_RUN_FAILED, err.msg, NULL);
      rc = cli_fail1(&err, "--resume");
      goto out;
    }
    if (j.set_rollback) em_trainer_set_rollback_point(tr, j.rollback_path, j.rollback_step);
    char detail[160];
    snprintf(detail, sizeof detail, "resumed from run %lld step %lld", (long long)j.parent,
             (long long)j.ckpt.step);
    em_error e2 = {0};
    if (run && /* --ddp: only rank 0 records */
        (em_store_run_event(store, run, j.ckpt.step, "resumed", detail, &e2) != EM_OK ||
         (snprintf(detail, sizeof detail, "resumed from run %lld step %lld as run %lld",
                   (long long)j.parent, (long long)j.ckpt.step, (long long)run),
          em_store_run_event(store, j.parent, j.ckpt.step, "resumed", detail, &e2)) != EM_OK))
      cli_warn("the resume is not recorded as a run event: %s", e2.msg);
    if (!o.quiet)
      fprintf(stderr, "resuming run %lld from step %lld (epoch %lld) as run %lld\n",
              (long long)j.parent, (long long)j.ckpt.step, (long long)j.ckpt.epoch + 1,
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
  cli_progress_init(&sinks.prog, o.quiet, em_spec_name(j.spec));
  em_run_recorder_init(&sinks.rec, writer, run, o.keep_checkpoints);
  sinks.stop_after = o.stop_after_steps;
  sinks.speaks = rank == 0;
  sinks.last_step = j.parent ? j.ckpt.step : 0;
  if (run && !o.quiet) fprintf(stderr, "recording as run %lld in %s\n", (long long)run, regdir);
  if (j.cfg.amp == EM_AMP_BF16 && !o.quiet && em_device_is_cpu(j.cfg.device)) {
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
    print_result_json(cfg, &sum, em_spec_name(j.spec), em_spec_param_count(j.spec), run, &ws, tr);
  if (g_signal) {
    rc = 128 + g_signal;
    signalled = true;
  }
out:
  if (comm && em_comm_world(comm) > 1) rc = ddp_end(comm, rc, rc != 0 && !signalled);
  if (writer) em_store_writer_free(writer, NULL);
  em_trainer_free(tr);
  em_model_free(model);
  em_dataset_free(train);
  em_dataset_free(test);
  em_spec_free(j.spec);
  free(j.spec_text);
  free(j.rollback_path);
  em_checkpoint_row_clear(&j.ckpt);
  em_store_close(store);
  em_comm_free(comm);
  return rc;
}
