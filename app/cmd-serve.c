/* cmd-serve.c: `ember serve` answers inference requests over HTTP with
 * the Open Inference Protocol v2 (app/serve/ holds the server).
 *
 *   ember serve NAME@ALIAS|NAME@VERSION [options]   reloads when the alias moves
 *   ember serve SPEC --weights FILE [options]       a fixed model
 *
 * Threads: W compute workers (--workers) each run forwards with T
 * intra-op threads (--threads: OpenBLAS and Ember's pool). W x T may not
 * exceed the cores this process may run on: asking for more is refused
 * (exit 2) rather than silently clamped, since the person asked for those
 * numbers; when only one is given the other is derived (T = cores / W,
 * or W = cores / T), and by default W = cores, T = 1: measured on
 * fmnist-mlp with 2 cores and 2 HTTP threads, 2 x 1 answered 11190 req/s
 * at 64 clients where 1 x 2 answered 7722 (OpenBLAS's threads spin
 * against the HTTP threads), and the same at 1 client. The HTTP side is a
 * pool of libmicrohttpd event threads (--http-threads, default one per
 * core up to 4) that parse and format JSON and otherwise wait on sockets;
 * they are not counted against W x T.
 *
 * SIGINT / SIGTERM: readiness goes false (new inference requests get
 * 503), requests in flight finish and are answered, then the server
 * stops and the command exits 0. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-model.h"
#include "em-pool.h"
#include "serve/serve-private.h"

#define DEFAULT_MAX_BATCH 32
/* No wait by default: a worker takes whatever queued while it was busy
 * (up to max batch). Measured on fmnist-mlp with 2 cores, waiting 1 ms
 * cost 7x the throughput of one client (690 vs 4680 req/s) and gained
 * only at 16 clients (6821 vs 6193); a heavier model may want a wait. */
#define DEFAULT_MAX_WAIT_MS 0.0
#define DEFAULT_MAX_BODY (8u << 20)
#define DEFAULT_BODY_BUDGET_FACTOR 8 /* x --max-body-bytes: 64 MiB by default */

/* SIGINT / SIGTERM, caught on whichever thread they land, to main. */
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  (void)!write(stop_pipe[1], &b, 1);
  errno = saved;
}

int cli_cmd_serve(int argc, char **argv) {
  const char *weights = NULL, *registry = NULL, *port_s = NULL, *host = "127.0.0.1",
             *max_batch_s = NULL, *max_wait_s = NULL, *workers_s = NULL, *threads_s = NULL,
             *body_s = NULL, *budget_s = NULL,
             *htimeout_s = NULL, *btimeout_s = NULL, *maxconn_s = NULL, *perip_s = NULL, *poll_s = NULL, *http_s = NULL, *quant_s = NULL, *canary_s = NULL, *slo_p99_s = NULL, *slo_err_s = NULL, *slo_win_s = NULL,
             *slo_min_s = NULL, *drift_win_s = NULL, *drift_min_s = NULL, *drift_psi_s = NULL,
             *drift_js_s = NULL, *slo_acc_s = NULL, *log_s = NULL, *log_sample_s = NULL, *log_max_s = NULL,
             *pos[1] = {NULL};
  bool no_batching = false, log_inputs = false;
  const cli_opt opts[] = {{"weights", &weights, NULL},       {"registry", &registry, NULL},
                          {"port", &port_s, NULL},           {"host", &host, NULL},
                          {"max-batch", &max_batch_s, NULL}, {"max-wait-ms", &max_wait_s, NULL},
                          {"workers", &workers_s, NULL},     {"threads", &threads_s, NULL},
                          {"max-body-bytes", &body_s, NULL}, {"poll-ms", &poll_s, NULL},
                          {"http-threads", &http_s, NULL},   {"no-batching", NULL, &no_batching},
                          {"quantize", &quant_s, NULL},      {"body-budget-bytes", &budget_s, NULL},
                          {"header-timeout", &htimeout_s, NULL}, {"body-timeout", &btimeout_s, NULL},
                          {"max-connections", &maxconn_s, NULL},
                          {"max-connections-per-ip", &perip_s, NULL},
                          {"canary", &canary_s, NULL},       {"slo-p99-ms", &slo_p99_s, NULL},
                          {"slo-error-rate", &slo_err_s, NULL},
                          {"slo-window-s", &slo_win_s, NULL},
                          {"slo-min-requests", &slo_min_s, NULL},
                          {"slo-min-accuracy", &slo_acc_s, NULL},
                          {"drift-window", &drift_win_s, NULL},
                          {"drift-min", &drift_min_s, NULL},
                          {"drift-psi", &drift_psi_s, NULL},
                          {"drift-js", &drift_js_s, NULL},
                          {"request-log", &log_s, NULL},
                          {"request-log-sample", &log_sample_s, NULL},
                          {"request-log-max-mb", &log_max_s, NULL},
                          {"request-log-inputs", NULL, &log_inputs}, {0}};
  cli_parse_args(argc, argv, 2, opts, pos, 1, 1, "serve");
  int port = port_s ? (int)cli_parse_int("--port", port_s, 0, 65535) : 8000;
  int max_batch = max_batch_s ? (int)cli_parse_int("--max-batch", max_batch_s, 1, 1 << 16)
                              : DEFAULT_MAX_BATCH;
  double max_wait = max_wait_s ? cli_parse_num("--max-wait-ms", max_wait_s, 0, 10000)
                               : DEFAULT_MAX_WAIT_MS;
  if (no_batching) {
    if (max_batch_s && max_batch > 1) cli_die_usage("--no-batching goes without --max-batch");
    max_batch = 1;
  }
  if (max_batch == 1) max_wait = 0; /* nothing to wait for */
  size_t max_body = body_s ? (size_t)cli_parse_int("--max-body-bytes", body_s, 64, 1LL << 32)
                           : DEFAULT_MAX_BODY;
  /* The bodies of requests in flight together: past it, 503 with
   * Retry-After (24 uploads near the 8 MiB cap held 338 MB at once). */
  size_t body_budget = budget_s ? (size_t)cli_parse_int("--body-budget-bytes", budget_s, 64,
                                                        1LL << 40)
                                : DEFAULT_BODY_BUDGET_FACTOR * max_body;
  if (body_budget <= max_body)
    cli_die_usage("--body-budget-bytes %zu must be more than --max-body-bytes %zu (else a body "
                  "at the cap is never taken)", body_budget, max_body);
  /* What one client may hold: each request's head within --header-timeout
   * s (of the connect for the first, of its first byte for a later one on
   * a kept-alive connection), a body within --body-timeout
   * s of its head (30 s: 8 MiB at 280 kB/s), --max-connections open in all
   * and --max-connections-per-ip from one address (503 past them). The
   * defaults held a loopback load test of 64 clients with hostile ones
   * alongside (tests/serve/test_serve_trust.py). */
  double header_timeout = htimeout_s ? cli_parse_num("--header-timeout", htimeout_s, 0.1, 3600)
                                     : 10;
  double body_timeout = btimeout_s ? cli_parse_num("--body-timeout", btimeout_s, 0.1, 3600) : 30;
  int max_conn = maxconn_s ? (int)cli_parse_int("--max-connections", maxconn_s, 1, 1 << 16)
                           : 512;
  int per_ip = perip_s ? (int)cli_parse_int("--max-connections-per-ip", perip_s, 1, 1 << 16)
                       : 256;
  int poll_ms = poll_s ? (int)cli_parse_int("--poll-ms", poll_s, 10, 3600 * 1000) : 1000;
  int cores = cli_usable_cores();
  /* Reading a request's JSON numbers costs more than a small model's
   * forward: one HTTP thread per core (at most 4) doubled fmnist-mlp's
   * throughput on 2 cores at 16-64 clients. They wait on sockets when the
   * compute is the bottleneck, so they are not counted against W x T. */
  int http_threads = http_s ? (int)cli_parse_int("--http-threads", http_s, 1, 64)
                            : (cores < 4 ? cores : 4);

  int workers = workers_s ? (int)cli_parse_int("--workers", workers_s, 1, 1024) : 0;
  int threads = threads_s ? (int)cli_parse_int("--threads", threads_s, 1, 1024) : 0;
  if (workers && threads && workers * threads > cores)
    cli_die_usage("--workers %d x --threads %d = %d compute threads, but this machine has %d "
                  "cores: lower one of them (workers x threads must not exceed the cores)",
                  workers, threads, workers * threads, cores);
  if (workers > cores || threads > cores)
    cli_die_usage("%s %d is more than the %d cores of this machine", workers > cores ?
                  "--workers" : "--threads", workers > cores ? workers : threads, cores);
  if (!workers && !threads) threads = 1;
  if (!threads) threads = cores / workers;
  if (!workers) workers = cores / threads;

  bool registered = em_version_ref_looks_like(pos[0]) && !weights;
  bool watch = registered && em_version_ref_names_alias(pos[0]); /* only an alias moves */
  if (registered && !watch && poll_s)
    cli_die_usage("--poll-ms goes with NAME@ALIAS; %s names a fixed version", pos[0]);
  if (!registered && poll_s) cli_die_usage("--poll-ms goes with NAME@ALIAS (a spec file is not "
                                           "reloaded)");
  /* --canary REF:PCT: the same model's alias or version REF takes PCT
   * percent of the requests */
  char canary_ref[300] = "";
  int canary_permille = 0;
  if (canary_s) {
    const char *colon = strrchr(canary_s, ':'), *at = strchr(pos[0], '@');
    if (!registered || !at)
      cli_die_usage("--canary goes with a registered NAME@ALIAS (its REF is another alias or "
                    "version of NAME)");
    if (!colon || colon == canary_s)
      cli_die_usage("--canary wants REF:PERCENT, e.g. staging:10%%, got '%s'", canary_s);
    char pct[32];
    snprintf(pct, sizeof pct, "%s", colon + 1);
    size_t pl = strlen(pct);
    if (pl && pct[pl - 1] == '%') pct[pl - 1] = '\0';
    canary_permille = (int)(cli_parse_num("--canary's share", pct, 0, 100) * 10 + 0.5);
    snprintf(canary_ref, sizeof canary_ref, "%.*s@%.*s", (int)(at - pos[0]), pos[0],
             (int)(colon - canary_s), canary_s);
  }
  /* the canary's objectives: broken, its traffic goes back (serve-slo.c) */
  serve_slo slo = {
      .p99_s = slo_p99_s ? cli_parse_num("--slo-p99-ms", slo_p99_s, 0.001, 3.6e6) / 1e3 : 0,
      .error_rate = slo_err_s ? cli_parse_num("--slo-error-rate", slo_err_s, 0, 1) : -1,
      .min_accuracy = slo_acc_s ? cli_parse_num("--slo-min-accuracy", slo_acc_s, 0, 1) : -1,
      .window_s = slo_win_s ? cli_parse_num("--slo-window-s", slo_win_s, 1, SERVE_SLO_RING) : 30,
      .min_requests = slo_min_s ? (int)cli_parse_int("--slo-min-requests", slo_min_s, 1, 1 << 30)
                                : 20};
  bool judged = slo_p99_s || slo_err_s || slo_acc_s;
  if ((judged || slo_win_s || slo_min_s) && !canary_s)
    cli_die_usage("the --slo-* objectives judge a canary: give --canary REF:PCT");
  /* drift gauges: each version's last requests against its reference
   * (serve-drift.c); --drift-window 0 turns them off */
  serve_drift_config drift = {
      .window = drift_win_s ? (int)cli_parse_int("--drift-window", drift_win_s, 0, 1 << 20) : 500,
      .limits = {.psi = drift_psi_s ? cli_parse_num("--drift-psi", drift_psi_s, 0, 100) : 0.25,
                 .js = drift_js_s ? cli_parse_num("--drift-js", drift_js_s, 0, 1) : 0.1}};
  drift.min_samples = drift_min_s ? (int)cli_parse_int("--drift-min", drift_min_s, 20, 1 << 20)
                                  : (drift.window < 100 ? drift.window : 100);
  if (drift.window && drift.min_samples > drift.window)
    cli_die_usage("--drift-min %d is more than the window holds (--drift-window %d)",
                  drift.min_samples, drift.window);
  if (!registered && (drift_win_s || drift_min_s || drift_psi_s || drift_js_s))
    cli_die_usage("the --drift-* options judge a registered version's inputs against its "
                  "reference: serve NAME@ALIAS");
  serve_drift_configure(&drift);
  if (!log_s && (log_sample_s || log_max_s || log_inputs))
    cli_die_usage("the --request-log-* options go with --request-log FILE");
  double log_sample = log_sample_s ? cli_parse_num("--request-log-sample", log_sample_s, 0, 1) : 1;
  int64_t log_max = log_max_s ? cli_parse_int("--request-log-max-mb", log_max_s, 0, 1 << 20) : 64;
  em_set_num_threads(threads);

  /* The stop signals are caught, whatever thread they land on, and told
   * to main through a pipe. Blocking them for sigwait was not enough:
   * OpenBLAS starts its threads as the library loads, before this code
   * runs, with nothing blocked, and a SIGTERM the kernel gave one of them
   * killed the process outright (no drain, no exit 0). The threads started
   * below still block them (inherited), so that their calls are not cut
   * short (EINTR); main unblocks them when it waits. */
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) {
    fprintf(stderr, "ember serve: cannot make a pipe: %s\n", strerror(errno));
    return 1;
  }
  struct sigaction sa = {.sa_handler = on_stop_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  signal(SIGPIPE, SIG_IGN);

  em_error err = {0};
  em_quant_mode quant = cli_parse_quantize(quant_s);
  cli_model cm;
  int rc = cli_model_open(pos[0], weights, registry, &cm);
  if (rc) return rc;
  char version[32];
  snprintf(version, sizeof version, "%d", cm.registered ? cm.ref.version : 1);
  const char *name = cm.registered ? cm.ref.name : em_spec_name(cm.spec);
  char label[300];
  snprintf(label, sizeof label, "%s", cm.label);
  int served_version = cm.registered ? cm.ref.version : 1;

  serve_model *model = serve_model_new(&cm, name, version, quant, &err);
  if (!model) return cli_fail(&err, pos[0]);

  static serve_server srv; /* zeroed; every thread holding its address ends before return */
  static serve_log request_log;
  if (log_s) {
    if (serve_log_open(&request_log, log_s, log_sample, log_inputs, log_max << 20, &err) != EM_OK) {
      serve_model_unref(model);
      return cli_fail(&err, NULL);
    }
    srv.log = &request_log;
  }
  if (!(srv.feedback = serve_feedback_new())) {
    serve_model_unref(model);
    fprintf(stderr, "ember serve: out of memory\n");
    return 1;
  }
  serve_metrics_init(&srv.metrics);
  serve_metrics_model(&srv.metrics, model, false);
  serve_slot_init(&srv.slot, model);
  srv.http = (serve_http_config){host,           port,         max_body, body_budget,
                                 http_threads,   header_timeout, body_timeout, max_conn,
                                 per_ip};
  atomic_init(&srv.ready, false);
  atomic_init(&srv.open, 0);

  serve_watcher watcher = {
      .srv = &srv, .poll_ms = poll_ms, .served_version = served_version, .quant = quant};
  serve_watcher canary_watcher = {.srv = &srv, .poll_ms = poll_ms, .quant = quant,
                                  .slot = &srv.canary, .role = "canary"};
  serve_judge judge = {.srv = &srv, .slo = slo, .stable_version = served_version};
  serve_drift_judge drift_judge = {.srv = &srv};
  if (canary_ref[0]) {
    em_store *store = cli_store_open(registry, true);
    cli_model ccm;
    serve_model *cm_model = NULL;
    if (store && cli_model_open_ref(store, canary_ref, &ccm, &err) == EM_OK) {
      char cv[32];
      snprintf(cv, sizeof cv, "%d", ccm.ref.version);
      canary_watcher.served_version = ccm.ref.version;
      cm_model = serve_model_new(&ccm, model->name, cv, quant, &err);
    }
    if (cm_model && !serve_model_same_io(model, cm_model)) {
      em_error_set(&err, EM_ERR_SHAPE, "the canary %s takes or gives other shapes than %s",
                   canary_ref, label);
      serve_model_unref(cm_model);
      cm_model = NULL;
    }
    if (!cm_model) {
      if (store) em_store_close(store);
      rc = store ? cli_fail(&err, canary_ref) : 1;
      goto out;
    }
    if (cm_model->cm.ref.version == served_version)
      fprintf(stderr, "ember serve: warning: the canary %s is version %d, the stable one too\n",
              canary_ref, served_version);
    serve_slot_init(&srv.canary, cm_model);
    atomic_store(&srv.canary_permille, canary_permille);
    atomic_store(&srv.metrics.canary_permille, canary_permille);
    if (em_version_ref_names_alias(canary_ref)) { /* it moves as its alias does */
      snprintf(canary_watcher.ref, sizeof canary_watcher.ref, "%s", canary_ref);
      canary_watcher.store = store;
    } else {
      em_store_close(store);
    }
  }
  if (serve_batcher_start(&srv.batcher, workers, max_batch, max_wait, &srv.metrics, &err) !=
      EM_OK) {
    rc = cli_fail(&err, NULL);
    goto out;
  }
  if (serve_http_start(&srv, &err) != EM_OK) {
    rc = cli_fail1(&err, NULL);
    goto out;
  }
  if (watch) {
    snprintf(watcher.ref, sizeof watcher.ref, "%s", pos[0]);
    if (!(watcher.store = cli_store_open(registry, true))) {
      rc = 1;
      goto out;
    }
    if (serve_watcher_start(&watcher, &err) != EM_OK) {
      rc = cli_fail1(&err, NULL);
      goto out;
    }
  }
  if (canary_watcher.store && serve_watcher_start(&canary_watcher, &err) != EM_OK) {
    rc = cli_fail1(&err, NULL);
    goto out;
  }
  if (srv.canary.cur) { /* its start and end are recorded; judged when objectives are set */
    snprintf(judge.model, sizeof judge.model, "%s", model->name);
    snprintf(judge.canary_ref, sizeof judge.canary_ref, "%s", canary_ref);
    judge.canary_version = atoi(srv.canary.cur->version);
    judge.store = cli_store_open(registry, false); /* its own connection, to write the log */
    if (serve_judge_start(&judge, &err) != EM_OK) {
      rc = cli_fail1(&err, NULL);
      goto out;
    }
  }
  serve_model *stable_now = serve_slot_acquire(&srv.slot);
  bool any_drift = stable_now->drift || (srv.canary.cur && srv.canary.cur->drift);
  serve_model_unref(stable_now);
  if (registered && drift.window && !any_drift)
    fprintf(stderr, "ember serve: %s has no drift reference: no drift gauges (build one with "
            "'ember drift %s --reference')\n", label, pos[0]);
  if (any_drift || watch) { /* a reload may bring a version with one */
    snprintf(drift_judge.stable_ref, sizeof drift_judge.stable_ref, "%s", pos[0]);
    snprintf(drift_judge.canary_ref, sizeof drift_judge.canary_ref, "%s", canary_ref);
    drift_judge.store = cli_store_open(registry, false); /* its own connection, for the log */
    if (serve_drift_judge_start(&drift_judge, &err) != EM_OK) {
      rc = cli_fail1(&err, NULL);
      goto out;
    }
  }
  char canary_line[400] = "";
  if (srv.canary.cur)
    snprintf(canary_line, sizeof canary_line, "; canary %s (version %s) takes %.1f%%", canary_ref,
             srv.canary.cur->version, canary_permille / 10.0);
  atomic_store(&srv.ready, true);
  bool v6 = strchr(host, ':') != NULL;
  printf("ember serve: %s ready at http://%s%s%s:%d (%d worker%s x %d thread%s of %d cores, "
         "%d HTTP thread%s, max batch %d, max wait %g ms%s%s%s)\n",
         label, v6 ? "[" : "", host, v6 ? "]" : "", srv.bound_port, workers,
         workers == 1 ? "" : "s", threads, threads == 1 ? "" : "s", cores, http_threads,
         http_threads == 1 ? "" : "s", max_batch, max_wait,
         quant == EM_QUANT_NONE ? "" : ", int8 Linear layers",
         watch ? ", reloads when the alias moves" : "", canary_line);
  fflush(stdout);

  pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
  unsigned char sig_byte = 0;
  while (read(stop_pipe[0], &sig_byte, 1) < 0 && errno == EINTR) {}
  int sig = sig_byte;
  atomic_store(&srv.ready, false);
  int left = atomic_load(&srv.metrics.inflight);
  fprintf(stderr, "ember serve: %s: finishing %d request%s in flight, then stopping\n",
          sig == SIGINT ? "interrupted" : "terminated", left, left == 1 ? "" : "s");
  /* The workers and the daemon keep running: requests in flight are
   * answered (30 s at most), and those still arriving, their body being
   * read, get 503 rather than a closed connection (5 s at most: a client
   * that stalls mid-upload does not hold the stop). */
  for (int i = 0; i < 3000 && (atomic_load(&srv.metrics.inflight) > 0 ||
                               (i < 500 && atomic_load(&srv.open) > 0));
       i++)
    usleep(10000);

out:
  serve_judge_stop(&judge);
  serve_drift_judge_stop(&drift_judge);
  serve_watcher_stop(&watcher);
  serve_watcher_stop(&canary_watcher);
  serve_batcher_stop(&srv.batcher); /* runs anything still queued */
  for (int i = 0; i < 500 && atomic_load(&srv.metrics.inflight) > 0; i++) usleep(10000);
  serve_http_stop(&srv);
  serve_slot_clear(&srv.slot);
  if (srv.canary.cur) serve_slot_clear(&srv.canary);
  serve_metrics_destroy(&srv.metrics);
  serve_log_close(&request_log);
  serve_feedback_free(srv.feedback);
  srv.feedback = NULL;
  em_pool_shutdown();
  if (!rc) fprintf(stderr, "ember serve: stopped\n");
  return rc;
}
