/* em-deploy-page.h: the Deploy page: a local `ember serve` for a registered
 * version or alias (the program next to the workbench, or $EMBER_CLI, in
 * the background, on the Preferences' registry), with an optional canary
 * (its share and objectives: p99 latency, error rate, accuracy on
 * feedback), and what the server says of itself, read off its /metrics
 * once a second (em-serve-scrape.h): per version its throughput,
 * latency percentiles over the last second, errors, accuracy and drift,
 * the canary's share (0 after a rollback), a chart of requests/s per
 * role, and the server's own messages (a rollback, a drift, a reload).
 * Stopping sends SIGTERM: the server drains before it exits. */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"
#include "em-serve-scrape.h"

G_BEGIN_DECLS

#define EM_TYPE_DEPLOY_PAGE (em_deploy_page_get_type())
G_DECLARE_FINAL_TYPE(EmDeployPage, em_deploy_page, EM, DEPLOY_PAGE, GtkBox)

GtkWidget *em_deploy_page_new(EmAppState *state);

/* What the form says (the Start button reads it): model "NAME@ALIAS";
 * canary NULL or "" for none, else an alias or a version of the same
 * model with its share in percent; objectives 0 (or < 0 for the error
 * rate) when not judged; port 0: any free one. */
void em_deploy_page_set_form(EmDeployPage *self, const char *model, const char *canary,
                             double share_pct, double p99_ms, double error_rate,
                             double min_accuracy, int port);
/* Start and Stop, as the buttons do. */
void em_deploy_page_start(EmDeployPage *self);
void em_deploy_page_stop(EmDeployPage *self);
gboolean em_deploy_page_is_running(EmDeployPage *self);
/* "http://127.0.0.1:PORT" once the server said it is ready, else NULL. */
const char *em_deploy_page_get_url(EmDeployPage *self);
/* The latest scrape (NULL before the first) and how many were taken. */
const EmScrape *em_deploy_page_get_scrape(EmDeployPage *self);
int em_deploy_page_get_n_scrapes(EmDeployPage *self);
/* The status line and the server's messages (stderr), as shown. */
const char *em_deploy_page_get_status(EmDeployPage *self);
const char *em_deploy_page_get_events(EmDeployPage *self);
/* The table's text of a role (0 stable, 1 canary): its cells joined by
 * " | ", or NULL when the role serves nothing. */
char *em_deploy_page_dup_row_text(EmDeployPage *self, int role);

G_END_DECLS
