/* test-ui-deploy.c: the Deploy page (issue 30, item 5) with a real
 * `ember serve`: two versions of an MLP trained by `ember train` on the
 * synthetic set and registered; the page starts a server for
 * mlp@production with version 2 as a 50% canary under an error-rate
 * objective of 0.2; a client thread sends requests with ids and, once the
 * page showed both versions answering, inputs that overflow the model
 * (3.4e38: NaN and Inf out, a fault of the version that answers). The page's table shows both versions with their
 * throughput and latency, then the canary's share going to 0, the
 * rollback counted and the server's own message of it among the events;
 * Stop ends the server with exit 0 ("The server stopped."). Screenshot:
 * workbench-deploy (the README's). Also em_scrape_parse and
 * em_scrape_quantile on a fixed exposition. */
#include <math.h>
#include <string.h>

#include "em-app-state.h"
#include "em-deploy-page.h"
#include "em-serve-scrape.h"
#include "ui-test-util.h"

static char *home;

static void ember(const char *const *args) {
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (char *)g_getenv("EMBER_EXE"));
  for (const char *const *a = args; *a; a++) g_ptr_array_add(argv, (char *)*a);
  g_ptr_array_add(argv, NULL);
  int status = 0;
  char *err = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL,
                             NULL, NULL, &err, &status, NULL));
  if (!g_spawn_check_wait_status(status, NULL)) g_error("ember %s failed:\n%s", args[0], err);
  g_free(err);
  g_ptr_array_unref(argv);
}

static void test_scrape(void) {
  const char *text =
      "# TYPE ember_serve_version_requests_total counter\n"
      "ember_serve_version_requests_total{role=\"stable\",version=\"3\"} 100\n"
      "ember_serve_version_requests_total{role=\"canary\",version=\"4\"} 10\n"
      "ember_serve_version_errors_total{role=\"canary\",version=\"4\"} 2\n"
      "ember_serve_version_accuracy{role=\"stable\",version=\"3\"} 0.875000\n"
      "ember_serve_version_infer_duration_seconds_bucket{role=\"stable\",version=\"3\",le=\"0.001\"} 50\n"
      "ember_serve_version_infer_duration_seconds_bucket{role=\"stable\",version=\"3\",le=\"0.002\"} 90\n"
      "ember_serve_version_infer_duration_seconds_bucket{role=\"stable\",version=\"3\",le=\"+Inf\"} 100\n"
      "ember_serve_drift_psi{role=\"stable\",version=\"3\",feature=\"c0_mean\"} 0.5\n"
      "ember_serve_drift_psi{role=\"stable\",version=\"3\",feature=\"c0_std\"} 0.7\n"
      "ember_serve_drift_detected{role=\"stable\",version=\"3\"} 1\n"
      "ember_serve_canary_share 0.100\n"
      "ember_serve_canary_rollbacks_total 1\n";
  EmScrape s, zero;
  em_scrape_parse(text, &s);
  g_assert_cmpstr(s.role[0].version, ==, "3");
  g_assert_cmpstr(s.role[1].version, ==, "4");
  g_assert_cmpfloat(s.role[0].requests, ==, 100);
  g_assert_cmpfloat(s.role[1].errors, ==, 2);
  g_assert_cmpfloat(s.role[0].accuracy, ==, 0.875);
  g_assert_true(isnan(s.role[1].accuracy));
  g_assert_cmpint(s.role[0].n_buckets, ==, 3);
  g_assert_cmpfloat(s.role[0].drift_psi_max, ==, 0.7);
  g_assert_cmpstr(s.role[0].drift_worst, ==, "c0_std");
  g_assert_cmpint(s.role[0].drift_detected, ==, 1);
  g_assert_cmpint(s.role[1].drift_detected, ==, -1);
  g_assert_cmpfloat(s.canary_share, ==, 0.1);
  g_assert_cmpfloat(s.canary_rollbacks, ==, 1);
  /* against an empty scrape of the same version: p50 is the 50th of 100
   * requests, at the first bucket's top edge; p75 the 75th, 25/40 of the
   * way through the second bucket (as histogram_quantile interpolates) */
  zero = s;
  memset(zero.role[0].cum, 0, sizeof zero.role[0].cum);
  g_assert_cmpfloat_with_epsilon(em_scrape_quantile(&zero.role[0], &s.role[0], 0.5), 0.001, 1e-12);
  g_assert_cmpfloat_with_epsilon(em_scrape_quantile(&zero.role[0], &s.role[0], 0.75),
                                 0.001 + 0.001 * 25 / 40, 1e-12);
  g_assert_cmpfloat(em_scrape_quantile(&zero.role[0], &s.role[0], 0.99), ==, 0.002); /* +Inf */
  g_assert_true(isnan(em_scrape_quantile(&s.role[0], &s.role[0], 0.5))); /* none in between */
}

/* ---- the client ---------------------------------------------------------------- */

typedef struct {
  char host[64];
  int port;
  volatile gint stop, sent, failed;
  volatile gint faulty; /* set by the test once it saw the 50% split: overflowing inputs start */
} client;

static int post(client *c, const char *body) {
  GSocketClient *sc = g_socket_client_new();
  GSocketConnection *conn = g_socket_client_connect_to_host(sc, c->host, (guint16)c->port, NULL,
                                                            NULL);
  int code = -1;
  if (conn) {
    char *req = g_strdup_printf("POST /v2/models/mlp/infer HTTP/1.0\r\nHost: x\r\nContent-Type: "
                                "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                                strlen(body), body);
    GOutputStream *os = g_io_stream_get_output_stream(G_IO_STREAM(conn));
    GInputStream *is = g_io_stream_get_input_stream(G_IO_STREAM(conn));
    char buf[512] = "";
    if (g_output_stream_write_all(os, req, strlen(req), NULL, NULL, NULL)) {
      gssize n = g_input_stream_read(is, buf, sizeof buf - 1, NULL, NULL);
      if (n > 12) code = atoi(buf + 9);
      while (g_input_stream_read(is, buf, sizeof buf, NULL, NULL) > 0) {}
    }
    g_free(req);
    g_object_unref(conn);
  }
  g_object_unref(sc);
  return code;
}

static char *body_of(const char *id, float v) {
  GString *s = g_string_new(NULL);
  g_string_append_printf(s, "{\"id\":\"%s\",\"inputs\":[{\"name\":\"input\",\"shape\":[1,1,28,28],"
                         "\"datatype\":\"FP32\",\"data\":[", id);
  for (int i = 0; i < 784; i++) g_string_append_printf(s, "%s%g", i ? "," : "", (double)v);
  g_string_append(s, "]}]}");
  return g_string_free(s, FALSE);
}

static gpointer client_main(gpointer data) {
  client *c = data;
  for (int k = 0; !g_atomic_int_get(&c->stop); k++) {
    char id[32];
    g_snprintf(id, sizeof id, "u%d", k % 40);
    /* good inputs until the test has seen both versions answer, then every
     * third one overflows (a timed warm-up raced the page's first scrapes) */
    char *b = body_of(id, g_atomic_int_get(&c->faulty) && k % 3 == 0 ? 3.4e38f : 0.25f);
    int code = post(c, b);
    g_free(b);
    if (code != 200 && code != 400) g_atomic_int_inc(&c->failed); /* 400: the overflow's answer */
    g_atomic_int_inc(&c->sent);
    g_usleep(5000);
  }
  return NULL;
}

/* ---- the page ----------------------------------------------------------------- */

static gboolean have_url(gpointer p) { return em_deploy_page_get_url(p) != NULL; }

static gboolean both_roles_scraped(gpointer p) {
  const EmScrape *s = em_deploy_page_get_scrape(p);
  return s && s->role[0].requests > 5 && s->role[1].requests > 5 &&
         em_deploy_page_get_n_scrapes(p) >= 2;
}

static gboolean rolled_back(gpointer p) {
  const EmScrape *s = em_deploy_page_get_scrape(p);
  return s && s->canary_rollbacks >= 1 && s->canary_share == 0 &&
         strstr(em_deploy_page_get_events(p), "broke its objective");
}

static gboolean stopped(gpointer p) { return !em_deploy_page_is_running(p); }

static void test_canary_rollback(void) {
  EmAppState *state = em_app_state_new(home);
  GtkWidget *page = em_deploy_page_new(state);
  GtkWindow *win = ui_test_show(page, 1024, 700);
  EmDeployPage *d = EM_DEPLOY_PAGE(page);
  em_deploy_page_set_form(d, "mlp@production", "2", 50, 0, 0.2, 0, 0);
  em_deploy_page_start(d);
  g_assert_true(em_deploy_page_is_running(d));
  g_assert_true(ui_test_wait(have_url, d, 30000));
  g_assert_nonnull(strstr(em_deploy_page_get_status(d), "ready at http://127.0.0.1:"));
  client c = {.port = 0};
  const char *url = em_deploy_page_get_url(d) + strlen("http://");
  const char *colon = strrchr(url, ':');
  g_snprintf(c.host, sizeof c.host, "%.*s", (int)(colon - url), url);
  c.port = atoi(colon + 1);
  GThread *t = g_thread_new("client", client_main, &c);
  g_assert_true(ui_test_wait(both_roles_scraped, d, 30000));
  char *row = em_deploy_page_dup_row_text(d, 1);
  g_assert_nonnull(row);
  g_assert_true(g_str_has_prefix(row, "v2 | canary | 50.0% | "));
  g_free(row);
  g_atomic_int_set(&c.faulty, 1);
  g_assert_true(ui_test_wait(rolled_back, d, 30000));
  ui_test_spin(1500); /* a second scrape after the rollback: the chart's canary line falls */
  row = em_deploy_page_dup_row_text(d, 1);
  g_assert_true(g_str_has_prefix(row, "v2 | canary | 0.0% | "));
  g_free(row);
  row = em_deploy_page_dup_row_text(d, 0);
  g_assert_true(g_str_has_prefix(row, "v1 | stable | 100.0% | "));
  g_free(row);
  g_free(ui_test_screenshot(page, "workbench-deploy"));
  g_atomic_int_set(&c.stop, 1);
  g_thread_join(t);
  g_assert_cmpint(g_atomic_int_get(&c.failed), ==, 0); /* no request failed for the switch */
  em_deploy_page_stop(d);
  g_assert_true(ui_test_wait(stopped, d, 30000));
  g_assert_cmpstr(em_deploy_page_get_status(d), ==, "The server stopped.");
  gtk_window_destroy(win);
  g_object_unref(state);
}

static void test_refusals(void) {
  GtkWidget *page = em_deploy_page_new(NULL);
  EmDeployPage *d = EM_DEPLOY_PAGE(page);
  em_deploy_page_set_form(d, "not-a-ref", NULL, 10, 0, 0, 0, 0);
  em_deploy_page_start(d);
  g_assert_false(em_deploy_page_is_running(d));
  g_assert_nonnull(strstr(em_deploy_page_get_status(d), "NAME@ALIAS"));
  /* an alias that does not exist: the server says so and ends */
  g_setenv("EMBER_HOME", home, TRUE);
  em_deploy_page_set_form(d, "mlp@nope", NULL, 10, 0, 0, 0, 0);
  em_deploy_page_start(d);
  g_assert_true(ui_test_wait(stopped, d, 30000));
  g_assert_nonnull(strstr(em_deploy_page_get_status(d), "exit status 1"));
  g_assert_nonnull(strstr(em_deploy_page_get_events(d), "no alias 'nope'"));
  g_object_ref_sink(page);
  g_object_unref(page);
}

int main(int argc, char **argv) {
  home = g_dir_make_tmp("ember-ui-deploy-XXXXXX", NULL);
  g_setenv("EMBER_HOME", home, TRUE);
  g_setenv("EMBER_CLI", g_getenv("EMBER_EXE"), TRUE);
  ui_test_init(&argc, &argv);
  char *spec = g_build_filename(g_getenv("EMBER_SOURCE_ROOT"), "data", "models", "fmnist-mlp.json",
                                NULL);
  for (int seed = 1; seed <= 2; seed++) {
    char s[8];
    g_snprintf(s, sizeof s, "%d", seed);
    ember((const char *[]){"train", spec, "--dataset", "synthetic", "--epochs", "1", "--seed", s,
                           "--threads", "1", "--quiet", NULL});
    ember((const char *[]){"model", "register", s, "--name", "mlp", NULL});
  }
  ember((const char *[]){"model", "promote", "mlp", "1", "--alias", "production", NULL});
  g_free(spec);
  g_test_add_func("/deploy/scrape", test_scrape);
  g_test_add_func("/deploy/canary-rollback", test_canary_rollback);
  g_test_add_func("/deploy/refusals", test_refusals);
  int rc = g_test_run();
  char *rm[] = {"rm", "-rf", home, NULL};
  g_spawn_sync(NULL, rm, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, NULL, NULL);
  g_free(home);
  return rc;
}
