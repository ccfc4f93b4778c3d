/* serve-http.c: the HTTP side over libmicrohttpd. One event thread (or a
 * small pool) reads requests, parses and validates them, and answers
 * everything but inference at once. An inference request's connection is
 * suspended while its rows wait in the batcher (the event thread goes on
 * serving other connections) and resumed by the worker that ran them.
 *
 * Routes (the Open Inference Protocol v2 REST API, plus /metrics):
 *   GET  /v2                                     server metadata
 *   GET  /v2/health/live, /v2/health/ready       liveness, readiness
 *   GET  /v2/models/NAME[/versions/V]            model metadata
 *   GET  /v2/models/NAME[/versions/V]/ready      model readiness
 *   POST /v2/models/NAME[/versions/V]/infer      inference
 *   POST /v2/models/NAME/feedback                the true classes of an answered request
 *   POST /v2/models/NAME[/versions/V]/generate   text from a language model
 *   GET  /metrics                                Prometheus text
 * Errors are {"error": "..."}: 400 bad input, 404 unknown model, version
 * or path, 405 a wrong method (with Allow), 413 a body over the cap
 * (nothing past the cap is kept: refused from its Content-Length before
 * it is read when the client asked for "100 Continue", else read and
 * dropped as it arrives and refused at its end), 503 while the server is
 * not ready (draining). */
#include "serve-private.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <microhttpd.h>

#ifndef EMBER_VERSION
#define EMBER_VERSION "unknown"
#endif

/* Seconds a connection may sit silent before libmicrohttpd closes it. */
#define SERVE_IDLE_TIMEOUT_S 120

typedef enum { ST_NEW, ST_BODY, ST_WAITING, ST_ANSWERED } conn_state;

/* One request on a connection. */
typedef struct {
  serve_server *srv;
  struct MHD_Connection *conn;
  double started;
  conn_state state;
  bool too_big, is_infer;
  bool over_budget; /* the bodies in flight would pass --body-budget-bytes: 503 at its end */
  char *body;
  size_t len, cap;
  long long json_len; /* Inference-Header-Content-Length (-1: none) */
  size_t reserved;  /* bytes of srv->body_bytes this request holds (its body's capacity) */
  /* inference in flight */
  serve_model *model;
  int role; /* of model: 0 the stable version, 1 the canary */
  bool model_fault; /* the answer failed for the version's sake (an overflowed output) */
  serve_infer_req req;
  serve_job job;
  serve_gen *gen; /* a generate request's (NULL: an infer) */
  atomic_bool done;
} req_ctx;

/* Takes n bytes of the budget for bodies in flight (false: over it). */
static bool reserve(req_ctx *c, size_t n) {
  serve_server *srv = c->srv;
  size_t was = atomic_fetch_add(&srv->body_bytes, n);
  if (was + n > srv->http.body_budget) {
    atomic_fetch_sub(&srv->body_bytes, n);
    return false;
  }
  c->reserved += n;
  return true;
}

/* Frees the body and gives its bytes back to the budget. */
static void drop_body(req_ctx *c) {
  free(c->body);
  c->body = NULL;
  c->cap = 0;
  atomic_fetch_sub(&c->srv->body_bytes, c->reserved);
  c->reserved = 0;
}

static enum MHD_Result respond_h(req_ctx *c, int code, char *body, size_t len,
                                 const char *content_type, const char *header,
                                 const char *value) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  if (content_type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (header) MHD_add_response_header(r, header, value);
  enum MHD_Result ok = MHD_queue_response(c->conn, (unsigned)code, r);
  MHD_destroy_response(r);
  c->state = ST_ANSWERED;
  serve_metrics_response(&c->srv->metrics, code);
  if (c->is_infer) {
    double dt = cli_mono_now() - c->started;
    serve_metrics_infer_latency(&c->srv->metrics, dt);
    if (c->model) {
      serve_metrics_version(&c->srv->metrics, c->role, c->model->version, code, dt,
                            code >= 500 || c->model_fault);
      serve_log_entry e = {.model = c->model, .role = c->role, .id = c->req.id, .status = code,
                           .seconds = dt, .rows = c->req.rows, .in = c->req.in,
                           .out = code == 200 ? c->job.out : NULL};
      serve_log_request(c->srv->log, &e);
      if (code == 200)
        serve_feedback_answered(c->srv->feedback, c->model, c->role, c->req.id, c->job.out,
                                c->req.rows);
    }
  }
  return ok;
}

static enum MHD_Result respond(req_ctx *c, int code, char *body, size_t len,
                               const char *content_type, const char *allow) {
  return respond_h(c, code, body, len, content_type, allow ? MHD_HTTP_HEADER_ALLOW : NULL, allow);
}

static enum MHD_Result respond_json(req_ctx *c, int code, char *body, size_t len) {
  if (!body) {
    static const char oom[] = "{\"error\":\"out of memory\"}";
    body = strdup(oom);
    len = body ? sizeof oom - 1 : 0;
    code = 500;
  }
  return respond(c, code, body, len, "application/json", NULL);
}

static enum MHD_Result respond_error(req_ctx *c, int code, const char *allow, const char *fmt,
                                     ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result respond_error(req_ctx *c, int code, const char *allow, const char *fmt,
                                     ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t len = 0;
  char *body = serve_error_body(msg, &len);
  if (!body) return respond_json(c, 500, NULL, 0);
  return respond(c, code, body, len, "application/json", allow);
}

/* 503 with Retry-After: the bodies in flight hold the whole budget. */
static enum MHD_Result respond_busy(req_ctx *c) {
  size_t len = 0;
  char msg[256];
  snprintf(msg, sizeof msg, "the server holds its limit of request bodies in flight (%zu bytes, "
           "--body-budget-bytes): retry shortly", c->srv->http.body_budget);
  char *body = serve_error_body(msg, &len);
  if (!body) return respond_json(c, 500, NULL, 0);
  return respond_h(c, 503, body, len, "application/json", "Retry-After", "1");
}

static enum MHD_Result respond_text(req_ctx *c, int code, const char *text) {
  char *body = NULL;
  size_t len = 0;
  if (asprintf(&body, "%s", text) < 0) return respond_json(c, 500, NULL, 0);
  len = strlen(body);
  return respond_json(c, code, body, len);
}

/* ---- routing ----------------------------------------------------------------- */

typedef enum {
  R_NONE,
  R_SERVER_META,
  R_LIVE,
  R_READY,
  R_MODEL_META,
  R_MODEL_READY,
  R_INFER,
  R_FEEDBACK,
  R_GENERATE,
  R_METRICS,
} route_kind;

typedef struct {
  route_kind kind;
  char model[160], version[40];
} route;

/* Copies the path segment at *p (up to '/' or the end) into out. */
static bool segment(const char **p, char *out, size_t cap) {
  size_t n = strcspn(*p, "/");
  if (n == 0 || n >= cap) return false;
  memcpy(out, *p, n);
  out[n] = '\0';
  *p += n;
  return true;
}

static route parse_route(const char *url) {
  route r = {R_NONE, "", ""};
  if (!strcmp(url, "/metrics")) r.kind = R_METRICS;
  else if (!strcmp(url, "/v2") || !strcmp(url, "/v2/")) r.kind = R_SERVER_META;
  else if (!strcmp(url, "/v2/health/live")) r.kind = R_LIVE;
  else if (!strcmp(url, "/v2/health/ready")) r.kind = R_READY;
  else if (!strncmp(url, "/v2/models/", 11)) {
    const char *p = url + 11;
    if (!segment(&p, r.model, sizeof r.model)) return r;
    if (!strncmp(p, "/versions/", 10)) {
      p += 10;
      if (!segment(&p, r.version, sizeof r.version)) return r;
    }
    if (!*p) r.kind = R_MODEL_META;
    else if (!strcmp(p, "/ready")) r.kind = R_MODEL_READY;
    else if (!strcmp(p, "/infer")) r.kind = R_INFER;
    else if (!strcmp(p, "/feedback") && !r.version[0]) r.kind = R_FEEDBACK;
    else if (!strcmp(p, "/generate")) r.kind = R_GENERATE;
  }
  return r;
}

/* 404 unless the route names the served model (and version, if any). */
static bool model_matches(req_ctx *c, const route *r, const serve_model *m) {
  if (strcmp(r->model, m->name)) {
    respond_error(c, 404, NULL, "unknown model '%.150s': this server serves '%s'", r->model,
                  m->name);
    return false;
  }
  if (r->version[0] && !serve_route_serves(c->srv, r->version)) {
    serve_model *k = c->srv->canary.cur ? serve_slot_acquire(&c->srv->canary) : NULL;
    respond_error(c, 404, NULL, "model '%s' has no version '%.30s' loaded: it serves version %s%s%s",
                  m->name, r->version, m->version, k ? " and, as its canary, version " : "",
                  k ? k->version : "");
    if (k) serve_model_unref(k);
    return false;
  }
  return true;
}

/* ---- inference ----------------------------------------------------------------- */

static void job_done(serve_job *job) {
  req_ctx *c = job->user;
  atomic_store(&c->done, true);
  MHD_resume_connection(c->conn);
}

/* The served model the route names, with a reference the caller drops;
 * NULL when the request was answered here (*res: what to return). */
static serve_model *take_model(req_ctx *c, const route *r, enum MHD_Result *res) {
  if (!atomic_load(&c->srv->ready)) {
    *res = respond_error(c, 503, NULL, "the server is not ready (shutting down)");
    return NULL;
  }
  serve_model *m = serve_slot_acquire(&c->srv->slot);
  if (model_matches(c, r, m)) return m;
  serve_model_unref(m);
  *res = MHD_YES;
  return NULL;
}

/* The version that answers: the one asked for, or the canary for its
 * share (it takes the stable version's input and output shapes: checked
 * when it was loaded, so a request parsed against either stands). Takes
 * m's reference; sets c->role. */
static serve_model *route_to(req_ctx *c, serve_model *m, const char *id, const route *r) {
  int role = 0;
  serve_model *pick = serve_route(c->srv, id, r->version, &role);
  if (pick) {
    serve_model_unref(m);
    m = pick;
  }
  c->role = role;
  return m;
}

/* Hands c->job (its model m) to the batcher; the connection waits,
 * suspended before the job can finish: its worker resumes it. */
static enum MHD_Result submit_job(req_ctx *c, serve_model *m, bool *submitted) {
  c->model = m;
  atomic_store(&c->done, false);
  c->state = ST_WAITING;
  *submitted = true;
  MHD_suspend_connection(c->conn);
  serve_batcher_submit(&c->srv->batcher, &c->job);
  return MHD_YES;
}

/* Parses the request and hands it to the batcher (*submitted), or
 * answers it. */
static enum MHD_Result submit_infer(req_ctx *c, const route *r, bool *submitted) {
  *submitted = false;
  enum MHD_Result res;
  serve_model *m = take_model(c, r, &res);
  if (!m) return res;
  char msg[512];
  size_t json_len = c->json_len >= 0 ? (size_t)c->json_len : c->len;
  int code = serve_infer_parse(c->body ? c->body : "", c->len, json_len, m, &c->req, msg,
                               sizeof msg);
  drop_body(c);
  if (code) {
    serve_model_unref(m);
    return respond_error(c, code, NULL, "%s", msg);
  }
  m = route_to(c, m, c->req.id, r);
  float *out = malloc(sizeof(float) * (size_t)(c->req.rows * m->out_numel));
  if (!out) {
    serve_model_unref(m);
    return respond_error(c, 500, NULL, "out of memory for %lld output rows",
                         (long long)c->req.rows);
  }
  c->job = (serve_job){.model = m, .rows = c->req.rows, .in = c->req.in, .out = out,
                       .done = job_done, .user = c};
  return submit_job(c, m, submitted);
}

/* A request counts as in flight from before the readiness check until its
 * answer is sent (release_infer). A stop clears ready and then waits for
 * none in flight, so each request either is waited for or is turned away;
 * none reaches the batcher after it stopped (the check used to come
 * first, and a request parsed during the stop was submitted to a stopped
 * batcher, its connection suspended as the daemon stopped: an abort). */
static enum MHD_Result start_job(req_ctx *c, const route *r,
                                 enum MHD_Result (*submit)(req_ctx *, const route *, bool *)) {
  c->is_infer = true; /* counted with its version's requests and latency */
  atomic_fetch_add(&c->srv->metrics.inflight, 1);
  bool submitted;
  enum MHD_Result res = submit(c, r, &submitted);
  if (!submitted) atomic_fetch_sub(&c->srv->metrics.inflight, 1);
  return res;
}

static void release_infer(req_ctx *c) {
  if (!c->model) return;
  if (c->gen) {
    serve_gen_clear(c->gen);
    free(c->gen);
    c->gen = NULL;
  }
  free(c->job.out);
  c->job.out = NULL;
  serve_infer_req_clear(&c->req);
  serve_model_unref(c->model);
  c->model = NULL;
  atomic_fetch_sub(&c->srv->metrics.inflight, 1);
}

static enum MHD_Result finish_infer(req_ctx *c) {
  serve_model *m = c->model;
  enum MHD_Result ok;
  if (c->job.status != EM_OK) {
    int code = c->job.status == EM_ERR_INVALID || c->job.status == EM_ERR_SHAPE ? 400 : 500;
    ok = respond_error(c, code, NULL, "%s", c->job.error);
  } else {
    size_t len = 0, json_len = 0;
    char *body = serve_infer_format(m, &c->req, c->job.out, &len, &json_len);
    if (body && json_len < len) { /* the binary tensor data extension */
      char hl[32];
      snprintf(hl, sizeof hl, "%zu", json_len);
      ok = respond_h(c, 200, body, len, "application/octet-stream",
                     "Inference-Header-Content-Length", hl);
    } else if (body) ok = respond_json(c, 200, body, len);
    else { /* the weights are finite (em_model_load): the input made the output overflow,
            * counted against the version (a canary that overflows is a faulty one) */
      c->model_fault = true;
      ok = respond_error(c, 400, NULL, "the model's output for this input holds NaN or Inf, "
                         "which JSON cannot carry: its values are far outside what the model "
                         "was trained on");
    }
  }
  release_infer(c);
  return ok;
}

static enum MHD_Result answer_feedback(req_ctx *c, const route *r) {
  serve_model *m = serve_slot_acquire(&c->srv->slot);
  bool ours = model_matches(c, r, m);
  serve_model_unref(m);
  if (!ours) return MHD_YES;
  char msg[600];
  int code = serve_feedback_take(c->srv->feedback, &c->srv->metrics, c->body ? c->body : "",
                                 c->len, msg, sizeof msg);
  drop_body(c);
  if (code) return respond_error(c, code, NULL, "%s", msg);
  char *body = strdup(msg);
  return respond_json(c, 200, body, body ? strlen(body) : 0);
}

/* ---- generation ------------------------------------------------------------------ */

static enum MHD_Result submit_generate(req_ctx *c, const route *r, bool *submitted) {
  *submitted = false;
  enum MHD_Result res;
  serve_model *m = take_model(c, r, &res);
  if (!m) return res;
  serve_gen *g = malloc(sizeof *g);
  char msg[512];
  int code = g ? serve_generate_parse(c->body ? c->body : "", c->len, m, g, msg, sizeof msg)
               : (snprintf(msg, sizeof msg, "out of memory"), 500);
  drop_body(c);
  if (code) {
    free(g);
    serve_model_unref(m);
    return respond_error(c, code, NULL, "%s", msg);
  }
  m = route_to(c, m, g->id, r);
  c->gen = g;
  serve_generate_job(&c->job, m, g, job_done, c);
  return submit_job(c, m, submitted);
}

static enum MHD_Result finish_generate(req_ctx *c) {
  enum MHD_Result ok;
  if (c->job.status != EM_OK) {
    int code = c->job.status == EM_ERR_INVALID || c->job.status == EM_ERR_FORMAT ? 400 : 500;
    ok = respond_error(c, code, NULL, "%s", c->job.error);
  } else {
    size_t len = 0;
    char *body = serve_generate_format(c->model, c->gen, &len);
    ok = respond_json(c, 200, body, len);
  }
  release_infer(c);
  return ok;
}

/* ---- the handler --------------------------------------------------------------- */

/* How much of a body over the cap is read (and dropped) to answer 413
 * cleanly: 4x the cap, at least 64 MiB. */
static size_t drop_limit(const serve_server *srv) {
  size_t limit = srv->http.max_body_bytes * 4;
  return limit > ((size_t)64 << 20) ? limit : ((size_t)64 << 20);
}

static enum MHD_Result answer_get(req_ctx *c, const route *r) {
  serve_server *srv = c->srv;
  bool ready = atomic_load(&srv->ready);
  size_t len = 0;
  switch (r->kind) {
  case R_LIVE: return respond_text(c, 200, "{\"live\":true}");
  case R_READY:
    return ready ? respond_text(c, 200, "{\"ready\":true}")
                 : respond_text(c, 503, "{\"ready\":false}");
  case R_SERVER_META:
    return respond_text(c, 200, "{\"name\":\"ember\",\"version\":\"" EMBER_VERSION
                                "\",\"extensions\":[\"classification\","
                                "\"binary_tensor_data\",\"generate\"]}");
  case R_METRICS: {
    char *text = serve_metrics_format(&srv->metrics, &len);
    if (!text) return respond_json(c, 500, NULL, 0);
    /* the request being answered is counted in the next scrape */
    return respond(c, 200, text, len, "text/plain; version=0.0.4; charset=utf-8", NULL);
  }
  case R_MODEL_META:
  case R_MODEL_READY: {
    serve_model *m = serve_slot_acquire(&srv->slot);
    enum MHD_Result ok = MHD_YES;
    if (model_matches(c, r, m)) {
      if (r->kind == R_MODEL_META) {
        char *body = serve_model_metadata(m, &len);
        ok = respond_json(c, 200, body, len);
      } else {
        json_t *o = json_pack("{s:s, s:b}", "name", m->name, "ready", ready);
        char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        ok = respond_json(c, ready ? 200 : 503, body, body ? strlen(body) : 0);
      }
    }
    serve_model_unref(m);
    return ok;
  }
  default: return respond_error(c, 404, NULL, "no such path");
  }
}

static int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* The URL's %XX escapes decoded in place, except %00: libmicrohttpd's own
 * decoding turned it into a NUL that ended the path early, so that
 * "/v2/health/live%00x" was answered as "/v2/health/live". Kept as the
 * three characters, it matches no route and no model name. */
static size_t unescape_but_nul(void *cls, struct MHD_Connection *conn, char *s) {
  (void)cls;
  (void)conn;
  size_t w = 0;
  for (size_t r = 0; s[r];) {
    int hi, lo;
    if (s[r] == '%' && (hi = hex_digit(s[r + 1])) >= 0 && (lo = hex_digit(s[r + 2])) >= 0 &&
        (hi | lo) != 0) {
      s[w++] = (char)(hi * 16 + lo);
      r += 3;
    } else {
      s[w++] = s[r++];
    }
  }
  s[w] = '\0';
  return w;
}

typedef struct {
  const char *first; /* the first Content-Length's value */
  bool conflict;
} length_scan;

static enum MHD_Result scan_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
  length_scan *ls = cls;
  (void)kind;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0 || !value) return MHD_YES;
  if (!ls->first) ls->first = value;
  else if (strcmp(ls->first, value) != 0) ls->conflict = true;
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version;
  serve_server *srv = cls;
  req_ctx *c = *con_cls;
  if (!c) { /* headers are in */
    if (!(c = calloc(1, sizeof *c))) return MHD_NO;
    c->srv = srv;
    c->conn = conn;
    c->started = cli_mono_now();
    *con_cls = c;
    atomic_fetch_add(&srv->open, 1);
    /* libmicrohttpd 0.9.75's epoll loop idles a connection resumed from
     * suspension (an answered inference) only if it is the oldest on the
     * daemon's default-timeout list; else the next pass reads it first,
     * with its request's state unchanged, and a client that half-closed
     * after sending (EOF) is taken for an abort: closed, its answer
     * unsent. While any other connection sat open (a garbage request line,
     * an idle keep-alive) most half-closed POSTs were dropped. A timeout
     * other than the default moves the connection to the manual-timeout
     * list, which every pass idles before it reads: the answer is queued
     * and sent first. Its value bounds a body that stops coming: the body
     * deadline (--body-timeout), rounded up, never the default. */
    unsigned body_idle = (unsigned)srv->http.body_timeout_s + 1;
    if (body_idle == SERVE_IDLE_TIMEOUT_S) body_idle++;
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, body_idle);
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    c->state = ST_BODY;
    /* the binary tensor data extension: the JSON header's length */
    const char *ihl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                  "Inference-Header-Content-Length");
    c->json_len = -1;
    if (ihl) {
      char *end = NULL;
      errno = 0;
      long long v = strtoll(ihl, &end, 10);
      if (end == ihl || *end || v < 0 || errno)
        return respond_error(c, 400, NULL, "Inference-Header-Content-Length \"%s\" is not a "
                             "byte count", ihl);
      c->json_len = v;
    }
    /* Two different lengths leave the body's end in doubt (a proxy in front
     * may take the other one): refused, as RFC 9112 asks (section 6.3). */
    length_scan ls = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, scan_length, &ls);
    if (ls.conflict)
      return respond_error(c, 400, NULL, "the request has Content-Length headers that differ: "
                           "send one");
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    if (n > srv->http.max_body_bytes) {
      /* Answer before the body when the client waits for "100 Continue" or
       * the body is huge; else read and drop it and answer at its end: a
       * client still sending when the connection closes would see a reset
       * instead of the 413. */
      const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                       MHD_HTTP_HEADER_EXPECT);
      if ((expect && !strcasecmp(expect, "100-continue")) || n > drop_limit(srv))
        return respond_error(c, 413, NULL, "the body (%s bytes) is over the limit of %zu bytes "
                             "(--max-body-bytes)", cl, srv->http.max_body_bytes);
      c->too_big = true;
    } else if (n > 0) {
      /* The whole body's room at once, from the budget for bodies in
       * flight: past it the body is read and dropped and 503 goes out at
       * its end (at once when the client waits for "100 Continue"). */
      const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                       MHD_HTTP_HEADER_EXPECT);
      if (!reserve(c, (size_t)n + 1)) {
        if (expect && !strcasecmp(expect, "100-continue")) return respond_busy(c);
        c->over_budget = true;
      } else if (!(c->body = malloc((size_t)n + 1))) {
        return MHD_NO;
      } else {
        c->cap = (size_t)n + 1;
      }
    }
    return MHD_YES;
  }
  if (c->state == ST_ANSWERED) { /* answered from its headers (413): drop the rest */
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    /* A body that trickles in (a byte a second resets the idle timeout)
     * is cut at its deadline; libmicrohttpd cannot answer mid-upload. */
    if (cli_mono_now() - c->started > srv->http.body_timeout_s) {
      serve_metrics_response(&srv->metrics, 408);
      return MHD_NO;
    }
    if (c->too_big || c->over_budget || c->len + n > srv->http.max_body_bytes) {
      /* Over the cap: nothing more is kept. libmicrohttpd cannot answer in
       * the middle of an upload, so the rest is read and dropped and 413
       * goes out at its end; a body that goes on past drop_limit has its
       * connection closed instead. Over the budget: the same, with 503. */
      drop_body(c);
      if (!c->over_budget) c->too_big = true;
      c->len += n;
      return c->len > drop_limit(srv) ? MHD_NO : MHD_YES;
    }
    if (c->len + n + 1 > c->cap) {
      size_t cap = c->cap ? c->cap * 2 : 16384;
      while (cap < c->len + n + 1) cap *= 2;
      if (cap > srv->http.max_body_bytes + 1) cap = srv->http.max_body_bytes + 1;
      if (!reserve(c, cap - c->cap)) { /* a chunked body grew past the budget */
        drop_body(c);
        c->over_budget = true;
        c->len += n;
        return MHD_YES;
      }
      char *b = realloc(c->body, cap);
      if (!b) return MHD_NO;
      c->body = b;
      c->cap = cap;
    }
    memcpy(c->body + c->len, upload_data, n);
    c->len += n;
    c->body[c->len] = '\0';
    return MHD_YES;
  }
  if (c->state == ST_WAITING) {
    if (!atomic_load(&c->done)) return MHD_YES; /* not ours yet */
    return c->gen ? finish_generate(c) : finish_infer(c);
  }

  /* the whole request is in */
  if (c->over_budget) return respond_busy(c);
  if (c->too_big)
    return respond_error(c, 413, NULL, "the body is over the limit of %zu bytes "
                         "(--max-body-bytes)", srv->http.max_body_bytes);
  route r = parse_route(url);
  bool get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
  bool post = !strcmp(method, MHD_HTTP_METHOD_POST);
  if (r.kind == R_NONE) return respond_error(c, 404, NULL, "no such path");
  if (r.kind == R_INFER) {
    if (!post) return respond_error(c, 405, "POST", "%s needs POST", "infer");
    return start_job(c, &r, submit_infer);
  }
  if (r.kind == R_GENERATE) {
    if (!post) return respond_error(c, 405, "POST", "%s needs POST", "generate");
    return start_job(c, &r, submit_generate);
  }
  if (r.kind == R_FEEDBACK) {
    if (!post) return respond_error(c, 405, "POST", "%s needs POST", "feedback");
    return answer_feedback(c, &r);
  }
  if (!get) return respond_error(c, 405, "GET, HEAD", "this path takes GET");
  return answer_get(c, &r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  serve_server *srv = cls;
  (void)conn;
  (void)toe;
  req_ctx *c = *con_cls;
  if (!c) return;
  release_infer(c); /* a connection closed with its answer unsent */
  drop_body(c);
  free(c);
  *con_cls = NULL;
  atomic_fetch_sub(&srv->open, 1);
}

/* The listening socket and the clients' sockets are the front door's
 * (serve-guard.c): libmicrohttpd gets one end of a socketpair per client
 * once the head of its first request is in and looks sound, and every
 * request after it passes the same checks on the way. */
em_status serve_http_start(serve_server *srv, em_error *err) {
  if (serve_guard_listen(srv, err) != EM_OK) return err->status;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                   MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
  unsigned pool = srv->http.http_threads > 1 ? (unsigned)srv->http.http_threads : 0;
  /* libmicrohttpd's own limit, a backstop past the front door's (which
   * answers 503): it closes without a word */
  unsigned limit = (unsigned)srv->http.max_connections + 64;
  srv->daemon = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
      MHD_OPTION_UNESCAPE_CALLBACK, unescape_but_nul, NULL, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)SERVE_IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT, limit,
      pool ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, pool, MHD_OPTION_END);
  if (!srv->daemon) {
    serve_guard_stop(srv);
    serve_guard_free(srv);
    return em_error_set(err, EM_ERR_IO, "cannot start the HTTP threads");
  }
  if (serve_guard_start(srv, err) != EM_OK) {
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    serve_guard_stop(srv);
    serve_guard_free(srv);
    return err->status;
  }
  return EM_OK;
}

void serve_http_stop(serve_server *srv) {
  serve_guard_stop_handoff(srv); /* no more connections handed over */
  if (srv->daemon) MHD_stop_daemon(srv->daemon);
  srv->daemon = NULL;
  serve_guard_stop(srv); /* what libmicrohttpd wrote before it closed goes out */
  serve_guard_free(srv);
}
