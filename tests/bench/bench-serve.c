/* bench-serve.c: a load generator for `ember serve` on loopback.
 *
 * Closed-loop clients (each a thread with one libcurl easy handle, so one
 * kept-alive connection) send Open Inference Protocol infer requests as
 * fast as answers come back, at several concurrency levels for a bounded
 * time each, against a server started with batching on and then off.
 * Per level it prints requests/s, p50/p95/p99 latency, errors, and the
 * server's RSS (VmRSS from /proc/PID/status) before and after.
 *
 *   bench-serve --ember EMBER --spec SPEC [--weights FILE] [--levels 1,4,16,64]
 *               [--seconds 3] [--batching both|on|off] [--rows 1]
 *               [--serve-on "--max-batch 32 --max-wait-ms 0"] [--serve-args "--workers 2"]
 *   bench-serve ... --duration 60 [--concurrency 16]
 *       a soak: one level for 60 s, RSS sampled every 5 s; exits 1 on any
 *       error or when RSS grows by more than 10% after the first sample.
 *   bench-serve --url http://127.0.0.1:8000 --pid PID --model NAME ...
 *       an already running server instead of starting one.
 *   --server-cpus 0-1 (or 0,1): pin the server to these CPUs (it sees them as
 *       its cores); pin the clients elsewhere with taskset, so that the load
 *       generator does not take the server's cores.
 *   --input-shape 1,28,28: the shape of one row of the input.
 *
 * Without --weights the spec's initial weights are made with
 * `ember train SPEC --epochs 0 --dataset synthetic --save` (the numbers do
 * not depend on them).
 * Input: a (rows, ...) batch of deterministic pseudo-random floats. */
#include <curl/curl.h>
#include <sched.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-timing.h"

static _Noreturn void die(const char *fmt, const char *arg) {
  fprintf(stderr, "bench-serve: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(2);
}

/* ---- the server ------------------------------------------------------------------ */

typedef struct {
  pid_t pid;
  char url[256];
  char model[128];
} server;

/* "VmRSS:   12345 kB" of pid, in MiB (-1 when unreadable). */
static double rss_mib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  double kb = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = atof(line + 6);
  fclose(f);
  return kb < 0 ? -1 : kb / 1024.0;
}

/* Starts `ember serve SPEC --weights W --port 0 EXTRA...` and reads the URL
 * from the line it prints when ready. */
/* "0-3,6" into set. */
static void parse_cpus(const char *text, cpu_set_t *set) {
  CPU_ZERO(set);
  for (const char *p = text; *p;) {
    long a = strtol(p, (char **)&p, 10), b = a;
    if (*p == '-') b = strtol(p + 1, (char **)&p, 10);
    for (long c = a; c <= b && c < CPU_SETSIZE; c++) CPU_SET((int)c, set);
    if (*p == ',') p++;
    else if (*p) die("bad --server-cpus %s", text);
  }
}

static const char *server_cpus;

static void server_start(server *s, const char *ember, const char *spec, const char *weights,
                         const char *extra) {
  int fd[2];
  if (pipe(fd) != 0) die("pipe: %s", strerror(errno));
  char *argv[64];
  int n = 0;
  argv[n++] = (char *)ember;
  argv[n++] = "serve";
  argv[n++] = (char *)spec;
  argv[n++] = "--weights";
  argv[n++] = (char *)weights;
  argv[n++] = "--port";
  argv[n++] = "0";
  char *copy = strdup(extra ? extra : "");
  for (char *tok = strtok(copy, " "); tok && n < 62; tok = strtok(NULL, " ")) argv[n++] = tok;
  argv[n] = NULL;
  s->pid = fork();
  if (s->pid < 0) die("fork: %s", strerror(errno));
  if (s->pid == 0) {
    if (server_cpus) {
      cpu_set_t set;
      parse_cpus(server_cpus, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execv(ember, argv);
    _exit(127);
  }
  free(copy);
  close(fd[1]);
  FILE *f = fdopen(fd[0], "r");
  char line[1024] = "";
  if (!fgets(line, sizeof line, f)) die("%s serve printed no ready line", ember);
  fclose(f);
  const char *u = strstr(line, "http://");
  if (!u) die("no URL in the ready line: %s", line);
  size_t len = strcspn(u, " \n");
  snprintf(s->url, sizeof s->url, "%.*s", (int)len, u);
}

static int server_stop(server *s) {
  kill(s->pid, SIGTERM);
  int st = 0;
  waitpid(s->pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- clients ----------------------------------------------------------------------- */

typedef struct {
  const char *url;   /* .../infer */
  const char *body;
  size_t body_len;
  double stop_at;
  atomic_bool *go;
  /* results */
  double *lat;
  size_t n, cap;
  long errors;
  char first_error[256];
} client;

typedef struct {
  char buf[4096];
  size_t len;
} reply;

static size_t on_data(char *p, size_t size, size_t n, void *user) {
  reply *r = user;
  size_t k = size * n, room = sizeof r->buf - 1 - r->len;
  memcpy(r->buf + r->len, p, k < room ? k : room);
  r->len += k < room ? k : room;
  r->buf[r->len] = '\0';
  return size * n;
}

static void *client_main(void *arg) {
  client *c = arg;
  CURL *h = curl_easy_init();
  struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
  hdr = curl_slist_append(hdr, "Expect:"); /* no 100-continue round trip */
  reply r;
  curl_easy_setopt(h, CURLOPT_URL, c->url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)c->body_len);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  while (!atomic_load(c->go)) usleep(100);
  for (;;) {
    double t0 = bench_now_s();
    if (t0 >= c->stop_at) break;
    r.len = 0;
    CURLcode rc = curl_easy_perform(h);
    double t1 = bench_now_s();
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK || code != 200 || !strstr(r.buf, "\"outputs\"")) {
      if (!c->errors++)
        snprintf(c->first_error, sizeof c->first_error, "%s (HTTP %ld) %.150s",
                 rc != CURLE_OK ? curl_easy_strerror(rc) : "", code, r.buf);
      continue;
    }
    if (c->n == c->cap) {
      c->cap = c->cap ? c->cap * 2 : 4096;
      c->lat = realloc(c->lat, c->cap * sizeof *c->lat);
      if (!c->lat) die("%s", "out of memory");
    }
    c->lat[c->n++] = t1 - t0;
  }
  curl_slist_free_all(hdr);
  curl_easy_cleanup(h);
  return NULL;
}

static double pct(const double *v, size_t n, double p) {
  if (!n) return NAN;
  size_t i = (size_t)ceil(p / 100.0 * (double)n);
  return v[i ? i - 1 : 0];
}

typedef struct {
  double rps, p50, p95, p99;
  long ok, errors;
  double rss0, rss1;
} level_result;

/* Runs conc clients for seconds; samples RSS every sample_s (0: only at
 * the ends) into rss_samples (when given). */
static level_result run_level(const server *s, const char *body, int conc, double seconds,
                              double sample_s, bool print_samples) {
  char url[512];
  snprintf(url, sizeof url, "%s/v2/models/%s/infer", s->url, s->model);
  client *cs = calloc((size_t)conc, sizeof *cs);
  pthread_t *ts = calloc((size_t)conc, sizeof *ts);
  atomic_bool go = false;
  level_result res = {0};
  res.rss0 = rss_mib(s->pid);
  for (int i = 0; i < conc; i++) {
    cs[i] = (client){.url = url, .body = body, .body_len = strlen(body), .go = &go};
    cs[i].stop_at = 1e18;
    pthread_create(&ts[i], NULL, client_main, &cs[i]);
  }
  usleep(20000); /* threads up and connected-ready */
  double t0 = bench_now_s(), stop = t0 + seconds;
  for (int i = 0; i < conc; i++) cs[i].stop_at = stop;
  atomic_store(&go, true);
  if (sample_s > 0) {
    for (double next = t0 + sample_s; next <= stop + 1e-6; next += sample_s) {
      double wait = next - bench_now_s();
      if (wait > 0) usleep((useconds_t)(wait * 1e6));
      double rss = rss_mib(s->pid);
      if (print_samples) {
        long done = 0;
        for (int i = 0; i < conc; i++) done += (long)cs[i].n; /* racy read: progress only */
        printf("  t=%5.1fs  rss %.1f MiB  (~%ld answers so far)\n", next - t0, rss, done);
        fflush(stdout);
      }
    }
  }
  for (int i = 0; i < conc; i++) pthread_join(ts[i], NULL);
  double elapsed = bench_now_s() - t0;
  res.rss1 = rss_mib(s->pid);
  size_t total = 0;
  for (int i = 0; i < conc; i++) total += cs[i].n;
  double *all = malloc((total ? total : 1) * sizeof *all);
  size_t k = 0;
  for (int i = 0; i < conc; i++) {
    memcpy(all + k, cs[i].lat, cs[i].n * sizeof *all);
    k += cs[i].n;
    res.errors += cs[i].errors;
    if (cs[i].errors) fprintf(stderr, "  client %d: %ld errors, first: %s\n", i, cs[i].errors,
                              cs[i].first_error);
    free(cs[i].lat);
  }
  qsort(all, total, sizeof *all, bench_cmp_double);
  res.ok = (long)total;
  res.rps = (double)total / elapsed;
  res.p50 = 1000 * pct(all, total, 50);
  res.p95 = 1000 * pct(all, total, 95);
  res.p99 = 1000 * pct(all, total, 99);
  free(all);
  free(cs);
  free(ts);
  return res;
}

/* ---- main ---------------------------------------------------------------------------- */

static char *make_body(int rows, const char *input_shape /* "1,28,28" */, long numel) {
  size_t cap = (size_t)rows * (size_t)numel * 16 + 256, len = 0;
  char *b = malloc(cap);
  len += (size_t)snprintf(b, cap, "{\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%s],"
                          "\"datatype\":\"FP32\",\"data\":[", rows, input_shape);
  uint64_t x = 88172645463325252ull; /* xorshift: the same body every run */
  for (long i = 0; i < (long)rows * numel; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    len += (size_t)snprintf(b + len, cap - len, i ? ",%.4f" : "%.4f",
                            (double)(x >> 11) / 9007199254740992.0);
  }
  snprintf(b + len, cap - len, "]}]}");
  return b;
}

/* The usage of the comment at the top, printed for --help / -h. */
static const char usage[] =
    "usage:\n"
    "  bench-serve --ember EMBER --spec SPEC [--weights FILE] [--levels 1,4,16,64]\n"
    "              [--seconds 3] [--batching both|on|off] [--rows 1]\n"
    "              [--serve-on \"--max-batch 32 --max-wait-ms 0\"] [--serve-args \"--workers 2\"]\n"
    "  bench-serve ... --duration 60 [--concurrency 16]\n"
    "      a soak: one level for 60 s, RSS sampled every 5 s; exits 1 on any\n"
    "      error or when RSS grows by more than 10% after the first sample.\n"
    "  bench-serve --url http://127.0.0.1:8000 --pid PID --model NAME ...\n"
    "      an already running server instead of starting one.\n"
    "  --server-cpus 0-1 (or 0,1): pin the server to these CPUs (it sees them as\n"
    "      its cores); pin the clients elsewhere with taskset, so that the load\n"
    "      generator does not take the server's cores.\n"
    "  --input-shape 1,28,28: the shape of one row of the input.\n"
    "Without --weights the spec's initial weights are made with\n"
    "`ember train SPEC --epochs 0 --dataset synthetic --save`.\n";

int main(int argc, char **argv) {
  const char *ember = NULL, *spec = NULL, *weights = NULL, *levels_s = "1,4,16,64",
             *batching = "both", *url = NULL, *model = "fmnist-mlp", *shape = "1,28,28",
             *serve_on = "--max-batch 32 --max-wait-ms 0", *serve_extra = "";
  double seconds = 3, duration = 0;
  int rows = 1, soak_conc = 16;
  long numel = 784;
  pid_t pid = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (!strcmp(a, name) && v && ++i)
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 0;
    } else if (OPT("--ember")) ember = v;
    else if (OPT("--spec")) spec = v;
    else if (OPT("--weights")) weights = v;
    else if (OPT("--levels")) levels_s = v;
    else if (OPT("--seconds")) seconds = atof(v);
    else if (OPT("--duration")) duration = atof(v);
    else if (OPT("--concurrency")) soak_conc = atoi(v);
    else if (OPT("--batching")) batching = v;
    else if (OPT("--rows")) rows = atoi(v);
    else if (OPT("--url")) url = v;
    else if (OPT("--pid")) pid = (pid_t)atoi(v);
    else if (OPT("--model")) model = v;
    else if (OPT("--input-shape")) shape = v;
    else if (OPT("--serve-on")) serve_on = v;
    else if (OPT("--serve-args")) serve_extra = v;
    else if (OPT("--server-cpus")) server_cpus = v;
    else die("unknown or incomplete option %s (see bench-serve --help)", a);
#undef OPT
  }
  numel = 1;
  for (const char *p = shape; *p;) {
    numel *= strtol(p, (char **)&p, 10);
    if (*p == ',') p++;
  }
  if (!url && (!ember || !spec))
    die("%s", "give --ember EMBER --spec SPEC, or --url URL --pid PID");
  curl_global_init(CURL_GLOBAL_DEFAULT);
  char *body = make_body(rows, shape, numel);

  char made[256] = "";
  if (!url && !weights) {
    snprintf(made, sizeof made, "/tmp/bench-serve-%d.safetensors", (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' train '%s' --epochs 0 --dataset synthetic --no-record "
             "--quiet --save '%s' "
             ">/dev/null", ember, spec, made);
    if (system(cmd) != 0) die("could not make initial weights: %s", cmd);
    weights = made;
  }

  int levels[16], nl = 0;
  for (const char *p = levels_s; *p && nl < 16;) {
    levels[nl++] = (int)strtol(p, (char **)&p, 10);
    if (*p == ',') p++;
  }
  const char *modes[2];
  int nm = 0;
  if (url) modes[nm++] = "given";
  else {
    if (!strcmp(batching, "both") || !strcmp(batching, "on")) modes[nm++] = "on";
    if (!strcmp(batching, "both") || !strcmp(batching, "off")) modes[nm++] = "off";
  }
  printf("bench-serve: %d row%s of %ld floats per request (%zu bytes of JSON), loopback\n",
         rows, rows == 1 ? "" : "s", numel, strlen(body));
  long total_errors = 0;
  int rc = 0;
  for (int mi = 0; mi < nm; mi++) {
    server s = {0};
    snprintf(s.model, sizeof s.model, "%s", model);
    char extra[512];
    if (url) {
      snprintf(s.url, sizeof s.url, "%s", url);
      s.pid = pid;
    } else {
      snprintf(extra, sizeof extra, "%s %s", !strcmp(modes[mi], "on") ? serve_on :
               "--no-batching", serve_extra);
      server_start(&s, ember, spec, weights, extra);
    }
    printf("\nbatching %s (%s)%s%s\n", modes[mi], s.url, url ? "" : ": ember serve ... ",
           url ? "" : extra);
    run_level(&s, body, 4, 1.0, 0, false); /* warm-up, not counted */
    if (duration > 0) {
      printf("soak: %d clients for %.0f s, RSS every 5 s\n", soak_conc, duration);
      level_result r = run_level(&s, body, soak_conc, duration, 5.0, true);
      printf("soak: %ld answers, %.0f req/s, p50 %.2f ms, p95 %.2f ms, p99 %.2f ms, errors %ld, "
             "RSS %.1f -> %.1f MiB\n", r.ok, r.rps, r.p50, r.p95, r.p99, r.errors, r.rss0,
             r.rss1);
      total_errors += r.errors;
      if (r.rss1 > 1.10 * r.rss0 && r.rss1 - r.rss0 > 2.0) {
        printf("soak: RSS grew by more than 10%%\n");
        rc = 1;
      }
    } else {
      printf("%6s %10s %9s %9s %9s %7s %14s\n", "conc", "req/s", "p50 ms", "p95 ms", "p99 ms",
             "errors", "RSS MiB");
      for (int li = 0; li < nl; li++) {
        level_result r = run_level(&s, body, levels[li], seconds, 0, false);
        printf("%6d %10.0f %9.2f %9.2f %9.2f %7ld %6.1f -> %.1f\n", levels[li], r.rps, r.p50,
               r.p95, r.p99, r.errors, r.rss0, r.rss1);
        fflush(stdout);
        total_errors += r.errors;
      }
    }
    if (!url) {
      int st = server_stop(&s);
      if (st != 0) {
        printf("the server exited with status %d\n", st);
        rc = 1;
      }
    }
  }
  if (made[0]) unlink(made);
  free(body);
  curl_global_cleanup();
  printf("\nerrors: %ld\n", total_errors);
  return total_errors ? 1 : rc;
}
