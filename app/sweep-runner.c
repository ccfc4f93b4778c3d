/* sweep-runner.c: runs a sweep's trials as `ember train` processes (see
 * sweep-runner.h).
 *
 * Exactly once: a trial's row (its number, settings and run name
 * "sweep-S-trial-N") is committed before its process starts. A runner
 * started again (after a kill, a crash or a stop) reconciles each
 * unfinished trial with the registry's runs of that name: none yet, it
 * starts it; one still training (a process the killed runner left), it
 * watches it through the registry; one that died or was stopped with a
 * checkpoint, it resumes it (`ember train --resume`, the same name: the
 * trial's run is its newest continuation); one that died before its
 * first checkpoint, it starts again (nothing of it was kept). Finished
 * trials are never run again.
 *
 * Watching: every 100 ms the runner reaps its children, marks runs whose
 * process is gone as killed, and reads each active trial's metric series;
 * a new evaluation at a pruner's rung is judged against the other trials'
 * values at the same evaluation (em_tune_should_prune) and a trial pruned
 * is sent SIGTERM (it stops after its step with a checkpoint), its row
 * keeping the decision's figures. Another process pausing or cancelling
 * the sweep (`ember sweep pause|cancel`) is seen at the next look. */
#include "sweep-runner.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli-common.h"

extern char **environ;

#define MAX_ACTIVE 64

typedef struct {
  int number;
  pid_t pid;        /* our child, or the pid its run recorded (an adopted one); 0: none */
  bool child;
  bool pruning;     /* sent SIGTERM as pruned */
  int64_t run;
} active;

typedef struct {
  const sweep_runner_options *o;
  em_store *s;
  em_tune_desc d;
  char dir[4096];   /* <registry>/artifacts/sweeps/<id> */
  active act[MAX_ACTIVE];
  int n_act;
  double t0;
} runner;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void say(runner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(runner *r, const char *fmt, ...) {
  if (r->o->quiet) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "sweep %lld: ", (long long)r->o->sweep);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- processes ------------------------------------------------------------------- */

/* <dir>/trial-N/<the base spec's file name>: the run's model is the base
 * spec's (ember train names it after the file). */
static void trial_spec_path(runner *r, int number, const char *params, char *out, size_t cap) {
  snprintf(out, cap, "%s/trial-%d/%s", r->dir, number, em_tune_trial_spec_name(&r->d, params));
}

static pid_t spawn_train(runner *r, int number, const char *params, int64_t resume_run) {
  char spec[4400], log[4200], name[64], threads[16], run[32];
  trial_spec_path(r, number, params, spec, sizeof spec);
  snprintf(log, sizeof log, "%s/trial-%d/train.log", r->dir, number);
  snprintf(name, sizeof name, "sweep-%lld-trial-%d", (long long)r->o->sweep, number);
  snprintf(threads, sizeof threads, "%d", r->o->threads);
  snprintf(run, sizeof run, "%lld", (long long)resume_run);
  const char *argv[16];
  int k = 0;
  argv[k++] = r->o->ember;
  argv[k++] = "train";
  if (resume_run) {
    argv[k++] = "--resume";
    argv[k++] = run;
  } else {
    argv[k++] = spec;
  }
  argv[k++] = "--name";
  argv[k++] = name;
  argv[k++] = "--threads";
  argv[k++] = threads;
  argv[k++] = "--quiet";
  argv[k++] = "--registry";
  argv[k++] = r->o->registry;
  argv[k] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, r->o->ember, &fa, &at, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) {
    fprintf(stderr, "ember: sweep %lld: cannot start trial %d: %s\n", (long long)r->o->sweep,
            number, strerror(rc));
    return 0;
  }
  return pid;
}

static bool alive(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

/* ---- trials --------------------------------------------------------------------------- */

static active *find_active(runner *r, int number) {
  for (int i = 0; i < r->n_act; i++)
    if (r->act[i].number == number) return &r->act[i];
  return NULL;
}

static void drop_active(runner *r, int number) {
  for (int i = 0; i < r->n_act; i++)
    if (r->act[i].number == number) {
      r->act[i] = r->act[--r->n_act];
      return;
    }
}

static int write_trial_spec(runner *r, int number, const char *params) {
  em_error err = {0};
  char *spec = em_tune_trial_spec(&r->d, params, &err);
  if (!spec) return cli_fail(&err, "sweep");
  char path[4400];
  snprintf(path, sizeof path, "%s/trial-%d", r->dir, number);
  mkdir(path, 0755);
  trial_spec_path(r, number, params, path, sizeof path);
  FILE *f = fopen(path, "w");
  if (!f || fputs(spec, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "ember: sweep: cannot write %s: %s\n", path, strerror(errno));
    free(spec);
    return 1;
  }
  free(spec);
  return 0;
}

/* Starts (or resumes, from run) trial number (its settings params) and
 * watches it. */
static void launch(runner *r, int number, const char *params, int64_t resume_run) {
  pid_t pid = spawn_train(r, number, params, resume_run);
  em_error err = {0};
  if (!pid) {
    em_store_trial_update(r->s, r->o->sweep, number, EM_TRIAL_FAILED, resume_run, NAN, 0, 0,
                          "its process could not be started", &err);
    return;
  }
  em_store_trial_set_pid(r->s, r->o->sweep, number, pid, &err);
  r->act[r->n_act++] = (active){.number = number, .pid = pid, .child = true, .run = resume_run};
  em_store_trial_update(r->s, r->o->sweep, number, EM_TRIAL_RUNNING, resume_run, NAN, 0, 0, NULL,
                        &err);
  say(r, "trial %d %s (process %d)", number, resume_run ? "resumed" : "started", (int)pid);
}

/* What the registry says of trial t's run: its latest by name. */
static void trial_run(runner *r, const em_trial_row *t, em_run *run) {
  memset(run, 0, sizeof *run);
  int64_t id = 0;
  if (em_store_run_by_name(r->s, t->run_name, &id, NULL) == EM_OK && id)
    em_store_run_get(r->s, id, run, NULL);
}

static bool has_checkpoint(runner *r, int64_t run) {
  em_checkpoint_row c;
  memset(&c, 0, sizeof c);
  bool ok = em_store_checkpoint_latest_valid(r->s, run, &c, NULL) == EM_OK;
  em_checkpoint_row_clear(&c);
  return ok;
}

/* A started runner's view of its unfinished trials (see the top). */
static void reconcile(runner *r) {
  em_trial_row *t = NULL;
  int n = 0;
  em_store_mark_dead_runs(r->s, NULL);
  if (em_store_trials_list(r->s, r->o->sweep, &t, &n, NULL) != EM_OK) return;
  for (int i = 0; i < n && r->n_act < MAX_ACTIVE; i++) {
    if (t[i].status != EM_TRIAL_PENDING && t[i].status != EM_TRIAL_RUNNING) continue;
    em_run run;
    trial_run(r, &t[i], &run);
    if (!run.id && t[i].status == EM_TRIAL_RUNNING && alive((pid_t)t[i].pid)) {
      /* started by the runner before, its run not recorded yet: not twice */
      r->act[r->n_act++] = (active){.number = t[i].number, .pid = (pid_t)t[i].pid};
    } else if (!run.id) {
      if (!write_trial_spec(r, t[i].number, t[i].params_json))
        launch(r, t[i].number, t[i].params_json, 0);
    } else if (run.status == EM_RUN_RUNNING && alive((pid_t)run.pid)) {
      r->act[r->n_act++] = (active){.number = t[i].number, .pid = (pid_t)run.pid, .run = run.id};
      say(r, "trial %d is still training (process %lld): watching it", t[i].number,
          (long long)run.pid);
    } else if (run.status == EM_RUN_COMPLETED || run.status == EM_RUN_FAILED) {
      /* it ended while no runner watched: the next look records it */
      r->act[r->n_act++] = (active){.number = t[i].number, .run = run.id};
    } else if (has_checkpoint(r, run.id)) {
      launch(r, t[i].number, t[i].params_json, run.id);
    } else {
      say(r, "trial %d died before its first checkpoint: starting it again", t[i].number);
      launch(r, t[i].number, t[i].params_json, 0);
    }
    em_run_clear(&run);
  }
  em_trial_rows_free(t, n);
}

/* The e-th values of the sweep's metric of every trial but number. */
static int others_at(runner *r, const em_trial_row *t, int n, int number, int e, double *out) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (t[i].number == number || !t[i].run) continue;
    double *v = NULL;
    int nv = 0;
    int64_t last;
    if (em_store_run_metric_series(r->s, t[i].run, r->d.metric, &v, &nv, &last, NULL) == EM_OK &&
        nv >= e)
      out[k++] = v[e - 1];
    free(v);
  }
  return k;
}

/* One look at every active trial. */
static void watch(runner *r) {
  int wst;
  while (waitpid(-1, &wst, WNOHANG) > 0) {}
  em_store_mark_dead_runs(r->s, NULL);
  em_trial_row *t = NULL;
  int n = 0;
  if (em_store_trials_list(r->s, r->o->sweep, &t, &n, NULL) != EM_OK) return;
  double *others = malloc(sizeof(double) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    active *a = find_active(r, t[i].number);
    if (!a) continue;
    em_run run;
    trial_run(r, &t[i], &run);
    if (!run.id) { /* not recorded yet: just started */
      if (!alive(a->pid)) {
        /* ours: it failed before its run existed (see its log); one a
         * killed runner started: it died with nothing kept, so again */
        bool ours = a->child;
        drop_active(r, t[i].number);
        if (ours)
          em_store_trial_update(r->s, r->o->sweep, t[i].number, EM_TRIAL_FAILED, 0, NAN, 0, 0,
                                "its process ended before it recorded a run (see its log)", NULL);
        else if (!g_stop)
          launch(r, t[i].number, t[i].params_json, 0);
      }
      continue;
    }
    a->run = run.id;
    if (!a->pid && run.status == EM_RUN_RUNNING) a->pid = (pid_t)run.pid;
    double *v = NULL;
    int nv = 0;
    int64_t last = 0;
    em_store_run_metric_series(r->s, run.id, r->d.metric, &v, &nv, &last, NULL);
    double metric = nv ? v[nv - 1] : NAN;
    int64_t steps = run.steps > last ? run.steps : last;
    em_trial_status st = EM_TRIAL_RUNNING;
    char why[400] = "";
    if (run.status == EM_RUN_RUNNING && nv > t[i].epochs && !a->pruning) {
      for (int e = t[i].epochs + 1; e <= nv && !why[0]; e++) {
        int k = others_at(r, t, n, t[i].number, e, others);
        if (em_tune_should_prune(&r->d, e, v[e - 1], others, k, why, sizeof why)) {
          a->pruning = true;
          kill(a->pid, SIGTERM);
          say(r, "trial %d pruned: %s", t[i].number, why);
        }
      }
    }
    if (a->pruning) st = EM_TRIAL_PRUNED;
    bool ended = run.status != EM_RUN_RUNNING;
    if (ended && !a->pruning) {
      if (run.status == EM_RUN_COMPLETED) st = EM_TRIAL_COMPLETED;
      else if (run.status == EM_RUN_FAILED) st = EM_TRIAL_FAILED;
      else { /* stopped or killed under it: continue it */
        em_store_trial_update(r->s, r->o->sweep, t[i].number, EM_TRIAL_RUNNING, run.id, metric,
                              nv, steps, NULL, NULL);
        drop_active(r, t[i].number);
        if (!g_stop)
          launch(r, t[i].number, t[i].params_json, has_checkpoint(r, run.id) ? run.id : 0);
        free(v);
        em_run_clear(&run);
        continue;
      }
    }
    em_store_trial_update(r->s, r->o->sweep, t[i].number, st, run.id, metric, nv, steps,
                          why[0] ? why : st == EM_TRIAL_FAILED ? run.message : NULL, NULL);
    if (ended) {
      drop_active(r, t[i].number);
      if (st == EM_TRIAL_COMPLETED)
        say(r, "trial %d completed: %s %.4f after %lld steps", t[i].number, r->d.metric, metric,
            (long long)steps);
      else if (st == EM_TRIAL_FAILED)
        say(r, "trial %d failed: %s", t[i].number, run.message ? run.message : "?");
    }
    free(v);
    em_run_clear(&run);
  }
  free(others);
  em_trial_rows_free(t, n);
}

/* Starts new trials while slots are free and the budgets allow. */
static int fill(runner *r, bool *exhausted) {
  em_trial_row *t = NULL;
  int n = 0;
  *exhausted = false;
  if (em_store_trials_list(r->s, r->o->sweep, &t, &n, NULL) != EM_OK) return 1;
  int rc = 0;
  bool over_time = r->d.time_budget_s > 0 && now_s() - r->t0 > r->d.time_budget_s;
  while (r->n_act < r->o->parallel && !rc) {
    if (n >= r->d.trials || over_time) {
      *exhausted = true;
      break;
    }
    em_tune_history *h = calloc((size_t)n + 1, sizeof *h);
    for (int i = 0; i < n; i++)
      h[i] = (em_tune_history){t[i].params_json, t[i].status == EM_TRIAL_COMPLETED ||
                                                         t[i].status == EM_TRIAL_PRUNED
                                                     ? t[i].metric
                                                     : NAN};
    em_error err = {0};
    char *params = em_tune_sample(&r->d, n, h, n, &err);
    free(h);
    if (!params) {
      if (err.status) rc = cli_fail(&err, "sweep");
      *exhausted = true;
      break;
    }
    char name[64];
    snprintf(name, sizeof name, "sweep-%lld-trial-%d", (long long)r->o->sweep, n);
    if (write_trial_spec(r, n, params) ||
        em_store_trial_add(r->s, r->o->sweep, n, params, name, &err) != EM_OK) {
      rc = err.status ? cli_fail(&err, "sweep") : 1;
      free(params);
      break;
    }
    say(r, "trial %d: %s", n, params);
    launch(r, n, params, 0);
    free(params);
    em_trial_rows_free(t, n);
    t = NULL;
    if (em_store_trials_list(r->s, r->o->sweep, &t, &n, NULL) != EM_OK) break;
  }
  em_trial_rows_free(t, n);
  return rc;
}

int sweep_runner_run(const sweep_runner_options *o, em_store *s) {
  runner r = {.o = o, .s = s, .t0 = now_s()};
  em_sweep_row sw;
  em_error err = {0};
  if (em_store_sweep_get(s, o->sweep, &sw, &err) != EM_OK) return cli_fail1(&err, "sweep");
  int rc = 0;
  if (sw.status == EM_SWEEP_COMPLETED || sw.status == EM_SWEEP_CANCELLED) {
    fprintf(stderr, "ember: sweep %lld is %s: nothing to run\n", (long long)o->sweep,
            em_sweep_status_name(sw.status));
    em_sweep_row_clear(&sw);
    return 1;
  }
  if (sw.runner_pid && sw.runner_pid != getpid() && !strcmp(sw.runner_host, em_store_this_host()) &&
      alive((pid_t)sw.runner_pid)) {
    fprintf(stderr, "ember: sweep %lld is being run by process %lld: one runner at a time (ember "
            "sweep pause|cancel %lld tells it)\n", (long long)o->sweep, (long long)sw.runner_pid,
            (long long)o->sweep);
    em_sweep_row_clear(&sw);
    return 1;
  }
  if (em_tune_desc_parse(&r.d, sw.description_json, NULL, &err) != EM_OK) {
    em_sweep_row_clear(&sw);
    return cli_fail1(&err, "the sweep's recorded description");
  }
  em_sweep_row_clear(&sw);
  snprintf(r.dir, sizeof r.dir, "%s/artifacts/sweeps/%lld", o->registry, (long long)o->sweep);
  char parent[4200];
  snprintf(parent, sizeof parent, "%s/artifacts/sweeps", o->registry);
  mkdir(parent, 0755);
  mkdir(r.dir, 0755);
  em_store_sweep_set_runner(s, o->sweep, getpid(), NULL);
  em_store_sweep_set_status(s, o->sweep, EM_SWEEP_RUNNING, NULL);
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  reconcile(&r);
  bool exhausted = false;
  for (;;) {
    watch(&r);
    em_sweep_status now = EM_SWEEP_RUNNING;
    if (em_store_sweep_get(s, o->sweep, &sw, NULL) == EM_OK) {
      now = sw.status;
      em_sweep_row_clear(&sw);
    }
    if (now == EM_SWEEP_CANCELLED || g_stop) break;
    if (now == EM_SWEEP_PAUSED && r.n_act == 0) break; /* its trials ended: resume goes on */
    if (now == EM_SWEEP_RUNNING && (rc = fill(&r, &exhausted)) != 0) break;
    if (exhausted && r.n_act == 0) break;
    usleep(100000);
  }
  em_sweep_status end = EM_SWEEP_COMPLETED;
  if (em_store_sweep_get(s, o->sweep, &sw, NULL) == EM_OK) {
    if (sw.status == EM_SWEEP_CANCELLED || sw.status == EM_SWEEP_PAUSED) end = sw.status;
    em_sweep_row_clear(&sw);
  }
  if (r.n_act && (g_stop || end == EM_SWEEP_CANCELLED)) { /* the trials stop with a checkpoint */
    for (int i = 0; i < r.n_act; i++) kill(r.act[i].pid, SIGTERM);
    for (int w = 0; w < 600 && r.n_act; w++) {
      for (int i = r.n_act - 1; i >= 0; i--)
        if (!alive(r.act[i].pid) || (r.act[i].child && waitpid(r.act[i].pid, NULL, WNOHANG) > 0)) {
          if (end == EM_SWEEP_CANCELLED)
            em_store_trial_update(s, o->sweep, r.act[i].number, EM_TRIAL_CANCELLED, r.act[i].run,
                                  NAN, 0, 0, "the sweep was cancelled", NULL);
          r.act[i] = r.act[--r.n_act];
        }
      usleep(100000);
    }
  }
  if (g_stop && end != EM_SWEEP_CANCELLED) {
    say(&r, "stopped by a signal: its trials stopped with checkpoints; 'ember sweep resume %lld' "
            "goes on", (long long)o->sweep);
    em_store_sweep_set_runner(s, o->sweep, 0, NULL);
    em_tune_desc_clear(&r.d);
    return 128 + g_stop;
  }
  if (!rc) em_store_sweep_set_status(s, o->sweep, end, NULL);
  em_store_sweep_set_runner(s, o->sweep, 0, NULL);
  em_tune_desc_clear(&r.d);
  return rc;
}
