/* serve-private.h: what the files of `ember serve` share.
 *
 *   serve-model.c     the served model (reference counted) and its slot,
 *                     swapped atomically when the alias moves (reload)
 *   serve-batcher.c   the request queue and the compute workers that run
 *                     queued rows in micro-batches (max rows, max wait)
 *   serve-protocol.c  the Open Inference Protocol v2 JSON: parse and
 *                     validate an infer request, format responses
 *   serve-metrics.c   counters and histograms, /metrics in Prometheus text
 *   serve-guard.c     the front door: the listening socket, connection
 *                     limits, the thread that relays every connection
 *   serve-relay.c     one connection's relay to libmicrohttpd: each
 *                     request's head and body judged, deadlines, answers
 *   serve-head.c      the check of a request head (and its body's framing)
 *   serve-frame.c     where a body ends (Content-Length, chunked)
 *   serve-http.c      libmicrohttpd: routing, body caps, suspend/resume
 *   serve-reload.c    the registry watcher (re-resolves NAME@ALIAS)
 *   serve-route.c     which version answers a request: the stable one, or
 *                     the canary for its share (sticky per request id)
 *   serve-slo.c       the canary's objectives, judged over a sliding window:
 *                     broken, its traffic goes back to the stable version
 *   serve-drift.c     drift gauges: each version's last requests against
 *                     its reference, judged once a second
 *   serve-log.c       the request log: a JSON line per (sampled) request
 *   serve-feedback.c  labels for answered requests: each version's accuracy
 *   serve-generate.c  text from a language model (the generate extension)
 *   ../cmd-serve.c    the command: options, threads, signals, shutdown
 *
 * Threads: libmicrohttpd event threads (I/O, JSON parse and format: a
 * connection waiting for its rows is suspended, never blocking its
 * thread), W compute workers each running forwards with T intra-op
 * threads (W x T <= the cores), and the reload watcher. */
#pragma once

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli-common.h"
#include "cli-model.h"
#include "em-drift.h"
#include "em-error.h"
#include "em-nn.h"
#include "em-quant.h"

/* ---- the served model -------------------------------------------------------- */

typedef struct serve_model {
  atomic_int refs;
  cli_model cm;             /* spec + model with weights */
  char name[128];           /* the name clients use in /v2/models/NAME */
  char version[32];         /* "3"; "1" for a spec file */
  char sha256[72];          /* of the weights ("" for a spec file) */
  em_dtype in_dtype;        /* EM_DTYPE_F32 or EM_DTYPE_I64 */
  int in_ndim;              /* one sample's input shape (no batch dim) */
  int64_t in_shape[EM_MAX_DIMS];
  int64_t in_numel;
  int out_ndim;             /* one sample's output shape */
  int64_t out_shape[EM_MAX_DIMS];
  int64_t out_numel;
  struct serve_drift *drift; /* its window of live samples; NULL: no reference */
} serve_model;

/* Wraps an opened model (taken: cm is cleared), quantised when quant is
 * not EM_QUANT_NONE. refs starts at 1. */
serve_model *serve_model_new(cli_model *cm, const char *name, const char *version,
                             em_quant_mode quant, em_error *err);
void serve_model_ref(serve_model *m);
/* Whether b takes a's input and gives its output (dtype and shapes):
 * what a canary must to stand in for the stable version. */
bool serve_model_same_io(const serve_model *a, const serve_model *b);
void serve_model_unref(serve_model *m); /* frees at 0 */

/* The slot requests take the current model from. */
typedef struct {
  pthread_mutex_t mu;
  serve_model *cur;
} serve_slot;

void serve_slot_init(serve_slot *s, serve_model *m /* taken */);
/* The current model with a reference the caller drops. */
serve_model *serve_slot_acquire(serve_slot *s);
/* Puts m (taken) in the slot and drops the slot's reference to the old
 * one: requests holding it finish on it, new ones get m. */
void serve_slot_swap(serve_slot *s, serve_model *m);
void serve_slot_clear(serve_slot *s);

/* ---- metrics ------------------------------------------------------------------ */

#define SERVE_LAT_BUCKETS 16
#define SERVE_BATCH_BUCKETS 12

typedef struct {
  uint64_t by_code[600];      /* HTTP responses by status code */
  uint64_t lat_counts[SERVE_LAT_BUCKETS + 1]; /* per bucket (not cumulative), +Inf last */
  double lat_sum;
  uint64_t batch_counts[SERVE_BATCH_BUCKETS + 1];
  uint64_t batch_rows_sum;
  uint64_t refused[4];        /* connections answered by the front door, by serve_refused */
  uint64_t reloads, reload_failures;
  int reload_attempts;        /* failed loads of the pending version (0: none pending) */
  double reload_last_failure, reload_next_retry; /* unix seconds, 0: none */
  char model[128], version[32], sha256[72];
} serve_counters;

/* Per served version (the stable one and the canary): what its requests
 * got. role 0 is the stable version, 1 the canary. */
typedef struct {
  char version[32];
  uint64_t requests, errors;
  uint64_t lat_counts[SERVE_LAT_BUCKETS + 1];
  double lat_sum;
  uint64_t labelled, correct; /* rows given feedback, and those it answered right */
} serve_version_counters;

/* The canary's requests in one second of the sliding window. */
#define SERVE_SLO_RING 3600 /* seconds a window may span */
typedef struct {
  int64_t sec; /* monotonic second this slot holds (older: empty) */
  uint32_t n, faults;
  uint32_t lat[SERVE_LAT_BUCKETS + 1];
  uint32_t labelled, correct; /* feedback that arrived in this second */
} serve_second;

typedef struct {
  pthread_mutex_t mu;
  serve_counters c;           /* under mu */
  serve_version_counters role[2]; /* under mu */
  serve_second canary_ring[SERVE_SLO_RING]; /* under mu */
  uint64_t canary_rollbacks;  /* under mu */
  atomic_int canary_permille; /* the canary's share, for /metrics */
  atomic_int queue_jobs, queue_rows;
  atomic_int inflight;        /* infer requests between parse and response (the drain waits) */
  char *drift_text;           /* under mu: the drift judge's /metrics block (NULL: none) */
  double started; /* monotonic seconds */
} serve_metrics;

void serve_metrics_init(serve_metrics *m);
void serve_metrics_destroy(serve_metrics *m);
void serve_metrics_response(serve_metrics *m, int code);
void serve_metrics_infer_latency(serve_metrics *m, double seconds);
void serve_metrics_batch(serve_metrics *m, int64_t rows);
void serve_metrics_model(serve_metrics *m, const serve_model *model, bool reloaded);
void serve_metrics_reload_failed(serve_metrics *m);
/* An infer request answered by version (role 0 stable, 1 canary) with
 * HTTP status code after seconds; fault: the version's failure (a 5xx, or
 * an output that overflowed), not the request's. */
void serve_metrics_version(serve_metrics *m, int role, const char *version, int code,
                           double seconds, bool fault);
/* The canary's requests over the last window_s seconds: count, faults and
 * the latency under which 99% of them were answered (the upper edge of
 * the histogram bucket; INFINITY past the last). */
void serve_metrics_canary_window(serve_metrics *m, double window_s, int64_t *n, int64_t *faults,
                                 double *p99);
/* Feedback on rows version answered as role: labelled rows, correct. */
void serve_metrics_feedback(serve_metrics *m, int role, const char *version, int labelled,
                            int correct);
/* The canary's feedback that arrived in the last window_s seconds. */
void serve_metrics_canary_accuracy(serve_metrics *m, double window_s, int64_t *labelled,
                                   int64_t *correct);
/* The lat_le bucket edges (seconds), SERVE_LAT_BUCKETS of them. */
extern const double serve_lat_le[SERVE_LAT_BUCKETS];
typedef enum {
  SERVE_REFUSED_LIMIT,          /* --max-connections: 503 */
  SERVE_REFUSED_PER_IP,         /* --max-connections-per-ip: 503 */
  SERVE_REFUSED_BAD_REQUEST,    /* a request line or Content-Length that is not one: 400 */
  SERVE_REFUSED_HEADER_TIMEOUT, /* --header-timeout: 408 */
} serve_refused;
void serve_metrics_refused(serve_metrics *m, serve_refused why);
/* The retry state: attempts so far (0: nothing pending), next try in next_in_s. */
void serve_metrics_reload_retry(serve_metrics *m, int attempts, double next_in_s);
/* Replaces the drift block /metrics ends with (text taken; NULL: none). */
void serve_metrics_set_drift(serve_metrics *m, char *text);
/* The Prometheus text exposition (malloc'd, NUL-terminated). */
char *serve_metrics_format(serve_metrics *m, size_t *len);

/* ---- the batcher ------------------------------------------------------------- */

typedef struct serve_job serve_job;
typedef void (*serve_job_done_fn)(serve_job *job);

struct serve_job {
  serve_job *next;
  serve_model *model;  /* a reference, held by the job's owner */
  int64_t rows;
  void *in;            /* (rows, in_numel) f32 or i64, per model->in_dtype */
  float *out;          /* (rows, out_numel), filled by a worker */
  double enqueued;     /* monotonic seconds */
  em_status status;    /* EM_OK, or the forward's error */
  char error[1024];
  serve_job_done_fn done; /* called on the worker once out or error is set */
  void *user;
  /* a job that is no forward of rows (a generation): the worker runs it
   * alone through custom, which sets status and calls done */
  void (*custom)(serve_job *job);
  struct serve_gen *user_gen;
};

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  serve_job *head, *tail;
  int64_t queued_rows;
  int max_batch;
  double max_wait_s;
  int n_workers;
  pthread_t *threads;
  bool stopping;
  serve_metrics *metrics;
} serve_batcher;

/* Starts n_workers compute threads. */
em_status serve_batcher_start(serve_batcher *b, int n_workers, int max_batch,
                              double max_wait_ms, serve_metrics *metrics, em_error *err);
void serve_batcher_submit(serve_batcher *b, serve_job *job);
/* Runs what is queued, then joins the workers. */
void serve_batcher_stop(serve_batcher *b);

/* ---- protocol ---------------------------------------------------------------- */

typedef struct {
  char *id;          /* the request's "id" (NULL when absent) */
  int64_t rows;      /* batch dimension */
  void *in;          /* (rows, in_numel) in the model's input dtype (malloc'd) */
  int classify;      /* > 0: the "classification" extension's top k */
  bool binary_out;   /* the output as raw FP32 after the JSON (binary tensor extension) */
} serve_infer_req;

/* Parses and validates an infer request body against model m. Returns 0,
 * or the HTTP status (400) with msg filled. json_len: the JSON header's
 * length (the Inference-Header-Content-Length of the binary tensor data
 * extension), the rest of the body being raw tensor bytes; len when the
 * request has no binary part. */
int serve_infer_parse(const char *body, size_t len, size_t json_len, const serve_model *m,
                      serve_infer_req *req, char *msg, size_t cap);
void serve_infer_req_clear(serve_infer_req *req);
/* The response body for out (rows, out_numel) (malloc'd); NULL when out
 * holds NaN or Inf and goes as JSON (JSON cannot carry them) or memory
 * ran out. With req->binary_out the body is the JSON header (*json_len
 * bytes) then the output's raw little-endian FP32, NaN and Inf as they
 * are; otherwise *json_len is *len. */
char *serve_infer_format(const serve_model *m, const serve_infer_req *req, const float *out,
                         size_t *len, size_t *json_len);
/* GET /v2/models/NAME: the model metadata object (malloc'd). */
char *serve_model_metadata(const serve_model *m, size_t *len);
/* {"error": msg} (malloc'd). */
char *serve_error_body(const char *msg, size_t *len);

/* ---- the server --------------------------------------------------------------- */

typedef struct {
  const char *host;       /* bind address */
  int port;               /* 0: any free port */
  size_t max_body_bytes;
  size_t body_budget;     /* bytes all request bodies in flight may hold together */
  int http_threads;
  double header_timeout_s; /* a request's head must be in by then (of the connect, or of
                              its first byte on a kept-alive connection) */
  double body_timeout_s;   /* a request's body must be in this long after its head */
  int max_connections, max_connections_per_ip;
} serve_http_config;

/* The front door (serve-guard.c): owns the listening socket and every
 * client connection, judges each request's head as it passes and relays
 * the bytes to and from libmicrohttpd over a socketpair. */
typedef struct {
  int listen_fd, wake[2], epoll_fd;
  pthread_t thread;
  bool started;
  atomic_bool stopping;       /* the thread ends once its connections are closed (2 s at most) */
  atomic_bool no_handoff;     /* asked: hand nothing more to libmicrohttpd */
  atomic_bool no_handoff_ack; /* the thread will not call MHD_add_connection again */
  atomic_int open;            /* client connections held */
  struct serve_conn **conns;  /* [cap_conns], NULL where free */
  int n_conns, cap_conns;
  int *again, *again_run;     /* [cap_conns] slots to run again, and those being run */
  int n_again;
  struct { unsigned char key[16]; int count; } *ips; /* open connections per address */
  int n_ips, cap_ips;
  pthread_mutex_t mu;         /* ips */
  serve_metrics *metrics;
} serve_guard;

/* ---- generation ----------------------------------------------------------------- */

#define SERVE_GENERATE_MAX_TOKENS 4096
typedef struct serve_gen {
  char *prompt, *id;
  size_t prompt_len;
  int64_t max_tokens;
  em_sample_params sp;
  uint64_t seed;
  char *out; /* the new text */
  size_t len, cap;
  em_generate_stats stats;
} serve_gen;
/* A generate body against model m: 0, or the HTTP status with msg. */
int serve_generate_parse(const char *body, size_t len, const serve_model *m, serve_gen *g,
                         char *msg, size_t cap);
void serve_gen_clear(serve_gen *g);
/* The job that runs g on a worker. */
void serve_generate_job(serve_job *j, serve_model *m, serve_gen *g, serve_job_done_fn done,
                        void *user);
/* The answer (malloc'd JSON). */
char *serve_generate_format(const serve_model *m, const serve_gen *g, size_t *len);

/* ---- the request log ---------------------------------------------------------- */

typedef struct {
  FILE *f; /* NULL: not logging */
  char path[4096];
  pthread_mutex_t mu; /* f, bytes */
  double sample;      /* the share of requests logged */
  bool inputs;        /* their inputs too */
  int64_t max_bytes;  /* rotate past it (0: never) */
  int64_t bytes;
  atomic_uint_fast64_t seq;
  bool said;
} serve_log;

typedef struct {
  const serve_model *model;
  int role;
  const char *id;   /* NULL: none */
  int status;
  double seconds;
  int64_t rows;
  const void *in;   /* (rows, in_numel) or NULL */
  const float *out; /* (rows, out_numel) or NULL (not answered) */
} serve_log_entry;

em_status serve_log_open(serve_log *l, const char *path, double sample, bool inputs,
                         int64_t max_bytes, em_error *err);
void serve_log_request(serve_log *l, const serve_log_entry *e); /* l NULL: nothing */
void serve_log_close(serve_log *l);

/* ---- feedback ------------------------------------------------------------------- */

#define SERVE_FEEDBACK_SLOTS 16384
#define SERVE_FEEDBACK_ROWS 32
typedef struct {
  char id[64];
  char version[32];
  int role, rows;
  bool labelled;
  int pred[SERVE_FEEDBACK_ROWS];
  uint64_t seq; /* 0: free */
} serve_feedback_slot;
typedef struct {
  pthread_mutex_t mu;
  uint64_t seq;
  serve_feedback_slot slot[SERVE_FEEDBACK_SLOTS];
} serve_feedback;
serve_feedback *serve_feedback_new(void);
void serve_feedback_free(serve_feedback *f);
/* Remembers an answered request (out: its rows' outputs). */
void serve_feedback_answered(serve_feedback *f, const serve_model *m, int role, const char *id,
                             const float *out, int64_t rows);
/* A feedback body: 0 with msg the JSON answer, or the HTTP status with
 * msg the reason. */
int serve_feedback_take(serve_feedback *f, serve_metrics *metrics, const char *body, size_t len,
                        char *msg, size_t cap);

typedef struct serve_server {
  serve_slot slot;
  serve_slot canary;      /* the version on trial (cur NULL: none) */
  atomic_int canary_permille; /* its share of requests, in thousandths */
  serve_batcher batcher;
  serve_metrics metrics;
  serve_http_config http;
  atomic_bool ready;      /* false while starting or draining */
  atomic_int open;        /* requests whose headers are in and whose answer is not sent */
  atomic_size_t body_bytes; /* held by request bodies in flight (<= http.body_budget) */
  struct MHD_Daemon *daemon;
  int bound_port;
  serve_guard guard;
  serve_log *log;         /* NULL: no request log */
  serve_feedback *feedback; /* the answered requests feedback can name */
} serve_server;

/* Binds the listening socket (sets bound_port). */
em_status serve_guard_listen(serve_server *srv, em_error *err);
em_status serve_guard_start(serve_server *srv, em_error *err);
/* Stops handing connections to libmicrohttpd (returns once the thread
 * will not); libmicrohttpd may then be stopped. */
void serve_guard_stop_handoff(serve_server *srv);
/* Relays what libmicrohttpd's closes left to send, then closes every
 * connection and joins the thread; serve_guard_free after. */
void serve_guard_stop(serve_server *srv);
void serve_guard_free(serve_server *srv);

em_status serve_http_start(serve_server *srv, em_error *err);
void serve_http_stop(serve_server *srv);

/* Initialises mu and cv, cv's timed waits running on CLOCK_MONOTONIC
 * (cli_mono_now's clock). */
void serve_mutex_cond_init(pthread_mutex_t *mu, pthread_cond_t *cv);

/* ---- routing ------------------------------------------------------------------- */

/* The version that answers a request (a reference the caller drops), and
 * its role (0 stable, 1 canary): the one asked for by version (NULL when
 * neither serves it), else the canary for its share of requests, chosen
 * by a hash of the request's id when it has one (so one client sees one
 * version) and at random otherwise. */
serve_model *serve_route(serve_server *srv, const char *id, const char *version, int *role);
/* Whether the version a path names is served (stable or canary). */
bool serve_route_serves(serve_server *srv, const char *version);

/* ---- a periodic thread ------------------------------------------------------------ */

typedef struct {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopping, started;
  double period_s;
  bool (*tick)(void *user); /* false: the ticker ends */
  void *user;
} serve_ticker;
/* Calls tick(user) every period_s seconds on a thread of its own (what:
 * its name in the error). */
em_status serve_ticker_start(serve_ticker *t, double period_s, bool (*tick)(void *user),
                             void *user, const char *what, em_error *err);
void serve_ticker_stop(serve_ticker *t); /* fine when never started */

/* ---- the canary's objectives ---------------------------------------------------- */

typedef struct {
  double p99_s;       /* 0: not judged */
  double error_rate;  /* of faults among its requests; < 0: not judged */
  double min_accuracy; /* on its labelled rows (feedback); < 0: not judged */
  double window_s;
  int min_requests;   /* fewer in the window: not judged yet */
} serve_slo;

typedef struct {
  serve_server *srv;
  serve_slo slo;
  em_store *store;        /* owned (closed by serve_judge_stop); NULL: no record */
  char model[128], canary_ref[300];
  int canary_version, stable_version;
  serve_ticker ticker;
  atomic_bool rolled_back;
} serve_judge;

/* Judges the canary every 100 ms; records "canary-start" now. */
em_status serve_judge_start(serve_judge *j, em_error *err);
/* Records "canary-end" unless it rolled the canary back. */
void serve_judge_stop(serve_judge *j);

/* ---- reload ------------------------------------------------------------------- */

typedef struct {
  serve_server *srv;
  em_store *store;        /* owned by the watcher thread */
  char ref[300];          /* NAME@ALIAS as given */
  int poll_ms;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stopping, started;
  int served_version;     /* the version in the slot */
  serve_slot *slot;       /* the slot it fills (NULL: the stable one) */
  const char *role;       /* "canary" or NULL, for its messages */
  em_quant_mode quant;    /* applied to each version loaded */
} serve_watcher;

/* Polls every poll_ms; store is taken (closed by serve_watcher_stop). */
em_status serve_watcher_start(serve_watcher *w, em_error *err);
void serve_watcher_stop(serve_watcher *w);

/* ---- drift ------------------------------------------------------------------------ */

typedef struct {
  int window;      /* samples a version's window holds (0: no drift gauges) */
  int min_samples; /* fewer in the window: not judged */
  em_drift_limits limits;
} serve_drift_config;
/* Set once, before any model is loaded. */
void serve_drift_configure(const serve_drift_config *c);

typedef struct serve_drift serve_drift;
/* A version's window, from its reference (NULL reference_json, a window
 * of 0 or a reference that does not parse, said on stderr: NULL). */
serve_drift *serve_drift_new(const char *reference_json, const char *label);
void serve_drift_free(serve_drift *d);
/* Adds a request's rows (its inputs and outputs) to m's window. */
void serve_drift_observe(serve_drift *d, const serve_model *m, const void *in, const float *out,
                         int64_t rows);

typedef struct {
  serve_server *srv;
  em_store *store;            /* owned; NULL: nothing recorded */
  char stable_ref[300], canary_ref[300]; /* NAME@ALIAS as served: the audit rows' alias */
  uint64_t events;            /* judge thread only */
  serve_ticker ticker;
} serve_drift_judge;
em_status serve_drift_judge_start(serve_drift_judge *j, em_error *err);
void serve_drift_judge_stop(serve_drift_judge *j); /* closes the store; fine when never started */
