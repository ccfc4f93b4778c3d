/* cli-progress.c: progress bar (step, loss, samples/s, ETA) on stderr,
 * redrawn at most ten times a second. */
#include "cli-progress.h"
#include "cli-common.h"
#include "cli-table.h"
#include "plugin-load.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

void cli_progress_init(cli_progress *p, bool quiet, const char *name) {
  p->quiet = quiet;
  p->tty = isatty(2);
  p->closed = false;
  p->name = name;
  p->last_draw = 0;
}

static void fmt_time(double s, char *buf, size_t n) {
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* A failed write to stderr: a pipe whose reader went away (EPIPE; SIGPIPE
 * is ignored) or a closed descriptor stops the printing, never the run. */
static void check_closed(cli_progress *p) {
  if (!ferror(stderr)) return;
  if (errno == EPIPE || errno == EBADF) p->closed = true;
  clearerr(stderr);
}

bool cli_progress_event(const em_train_event *ev, void *user) {
  cli_progress *p = user;
  if (p->quiet || p->closed) return true;
  char eta[32];
  switch (ev->kind) {
  case EM_EVENT_START: {
    char *shown = cli_display_text(p->name);
    fprintf(stderr, "training %s: %lld epochs of %lld batches\n", shown, (long long)ev->epochs,
            (long long)ev->batches_per_epoch);
    free(shown);
    break;
  }
  case EM_EVENT_STEP: {
    if (!p->tty) break;
    double t = cli_mono_now();
    if (t - p->last_draw < 0.1 && ev->batch != ev->batches_per_epoch) break;
    p->last_draw = t;
    int width = 24, filled = (int)(width * ev->batch / (ev->batches_per_epoch ? ev->batches_per_epoch : 1));
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    fmt_time(ev->eta_s, eta, sizeof eta);
    fprintf(stderr, "\repoch %lld/%lld [%s] %lld/%lld step %lld loss %.4f %.0f samples/s ETA %s  ",
            (long long)ev->epoch + 1, (long long)ev->epochs, bar, (long long)ev->batch,
            (long long)ev->batches_per_epoch, (long long)ev->step, ev->loss,
            ev->samples_per_sec, eta);
    break;
  }
  case EM_EVENT_EPOCH_END:
    if (p->tty) fprintf(stderr, "\n");
    fprintf(stderr, "epoch %lld/%lld: train loss %.4f", (long long)ev->epoch + 1,
            (long long)ev->epochs, ev->loss);
    if (ev->samples_per_sec > 0) /* none when a resume found the epoch's batches done */
      fprintf(stderr, ", %.0f samples/s", ev->samples_per_sec);
    fputc('\n', stderr);
    break;
  case EM_EVENT_EVAL:
  {
    char mbuf[512]; /* plugin metrics, if any were asked for */
    fprintf(stderr, "epoch %lld/%lld: test loss %.4f, accuracy %.2f%%%s (%lld samples)\n",
            (long long)ev->epoch + 1, (long long)ev->epochs, ev->test_loss,
            100 * ev->test_accuracy, app_metrics_text(mbuf, sizeof mbuf),
            (long long)ev->test_samples);
    break;
  }
  case EM_EVENT_DONE:
  case EM_EVENT_CHECKPOINT:
  case EM_EVENT_WARNING:
  case EM_EVENT_PROFILE:
  case EM_EVENT_DIVERGENCE: /* printed by the command whether quiet or not */
    break;
  }
  check_closed(p);
  return true;
}

void cli_progress_finish(cli_progress *p) { fflush(stderr); (void)p; }
