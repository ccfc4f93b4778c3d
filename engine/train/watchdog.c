/* watchdog.c: the divergence detector and policy. A run diverges when a
 * loss is NaN or infinite, when the global gradient norm is, or when the
 * norm jumps above spike_factor times the largest of the last
 * EM_WATCHDOG_WINDOW norms (checked once EM_WATCHDOG_WARMUP norms were
 * seen, so that the first steps of a run, whose norms swing widely, do
 * not count). The policy then rolls back to the trainer's last checkpoint
 * with a lower learning rate, or stops the run with EM_ERR_NUMERIC. */
#include "train-private.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void em_watchdog_init(em_watchdog *w, double spike_factor) {
  memset(w, 0, sizeof *w);
  w->spike_factor = spike_factor;
}

void em_watchdog_reset(em_watchdog *w) { em_watchdog_init(w, w->spike_factor); }

em_watch_verdict em_watchdog_check_loss(const em_watchdog *w, double loss) {
  (void)w;
  return isfinite(loss) ? EM_WATCH_OK : EM_WATCH_LOSS_NONFINITE;
}

double em_watchdog_max(const em_watchdog *w) {
  double m = 0;
  for (int i = 0; i < w->n; i++)
    if (w->norms[i] > m) m = w->norms[i];
  return m;
}

em_watch_verdict em_watchdog_check_norm(em_watchdog *w, double norm) {
  if (!isfinite(norm)) return EM_WATCH_NORM_NONFINITE;
  if (w->spike_factor > 0 && w->seen >= EM_WATCHDOG_WARMUP &&
      norm > w->spike_factor * em_watchdog_max(w))
    return EM_WATCH_NORM_SPIKE;
  w->norms[w->head] = norm;
  w->head = (w->head + 1) % EM_WATCHDOG_WINDOW;
  if (w->n < EM_WATCHDOG_WINDOW) w->n++;
  w->seen++;
  return EM_WATCH_OK;
}

/* ---- the policy ------------------------------------------------------------- */

em_status em_trainer_diverged(em_trainer *t, em_watch_verdict v, double value, char *msg,
                              size_t cap, em_error *err) {
  const em_train_config *c = &t->cfg;
  long long at = (long long)t->pos.step + 1;
  char what[512];
  const char *kind = isnan(value) ? "NaN" : "infinite";
  if (v == EM_WATCH_LOSS_NONFINITE)
    snprintf(what, sizeof what, "the loss became %s at step %lld (epoch %lld, batch %lld)", kind,
             at, (long long)t->pos.epoch + 1, (long long)t->pos.batch + 1);
  else if (v == EM_WATCH_NORM_NONFINITE)
    snprintf(what, sizeof what, "the gradient norm became %s at step %lld", kind, at);
  else /* a converged run's norms shrink, so one hard batch can look like a spike */
    snprintf(what, sizeof what, "the gradient norm jumped to %.3g at step %lld, over %gx the "
             "largest of the last %d steps (%.3g; the norm before any clipping; if the run was "
             "converging, not blowing up, raise --divergence-spike-factor or set it to 0)",
             value, at, c->divergence_spike_factor, t->watch.n, em_watchdog_max(&t->watch));
  bool have = t->last_ckpt[0] != '\0';
  /* auto rolls back where checkpoints are written: before the first one,
   * the message says that (not to turn on the checkpoints already on) */
  bool rollback = c->on_divergence == EM_DIVERGENCE_ROLLBACK ||
                  (c->on_divergence == EM_DIVERGENCE_AUTO && (have || t->ckpt_dir[0]));
  if (!rollback && t->comm) { /* the ranks cannot all reach rank 0's checkpoints to roll back */
    snprintf(msg, cap, "%s; stopping (a data-parallel run does not roll back). Try a lower "
             "learning rate (--lr) or gradient clipping (--clip-grad-norm)", what);
    return em_error_set(err, EM_ERR_NUMERIC, "%s", msg);
  }
  if (!rollback) {
    snprintf(msg, cap, "%s; stopping. Try a lower learning rate (--lr), gradient clipping "
             "(--clip-grad-norm), or periodic checkpoints (--checkpoint-every) so that the "
             "trainer can roll back and lower the learning rate itself", what);
    return em_error_set(err, EM_ERR_NUMERIC, "%s", msg);
  }
  if (!have) {
    snprintf(msg, cap, "%s before any checkpoint was written, so there is nothing to roll back "
             "to; stopping. Write checkpoints more often (--checkpoint-every), or lower the "
             "learning rate (--lr) or clip gradients (--clip-grad-norm)", what);
    return em_error_set(err, EM_ERR_NUMERIC, "%s", msg);
  }
  if (v != EM_WATCH_NORM_SPIKE && t->last_ckpt_step == t->pos.step) {
    /* no step since the checkpoint: restoring it gives this step the same
     * weights and batch, and a step's loss and gradients do not depend on
     * the learning rate it is about to use, so it would fail again (a
     * spike is another matter: after a rollback the step is taken, at the
     * lower rate, while the emptied window cannot judge it) */
    snprintf(msg, cap, "%s; the last checkpoint holds the state just before this step, so "
             "rolling back to it would repeat the step exactly (a step's loss and gradients do "
             "not depend on its learning rate); stopping. Lower the learning rate (--lr) or "
             "clip gradients (--clip-grad-norm)%s", what,
             c->checkpoint_every == 1 ? ", or write checkpoints less often than every step so "
                                        "that a rollback reruns steps at the lower rate"
                                      : "");
    return em_error_set(err, EM_ERR_NUMERIC, "%s", msg);
  }
  if (t->rollbacks >= c->max_rollbacks) {
    snprintf(msg, cap, "%s; stopping after %d rollbacks (lr scale %g). Lower the learning rate "
             "(--lr) or clip gradients (--clip-grad-norm)", what, t->rollbacks, t->lr_scale);
    return em_error_set(err, EM_ERR_NUMERIC, "%s", msg);
  }
  t->rollbacks++;
  t->lr_scale *= c->divergence_lr_factor;
  em_error lerr = {0};
  if (em_trainer_restore(t, t->last_ckpt, true, &lerr) != EM_OK) {
    snprintf(msg, cap, "%s; rolling back to the last checkpoint failed: %s", what, lerr.msg);
    return em_error_set(err, lerr.status, "%s", msg);
  }
  em_watchdog_reset(&t->watch);
  snprintf(msg, cap, "%s; rolled back to step %lld and lowered the learning rate x%g (lr scale "
           "%g)", what, (long long)t->pos.step, c->divergence_lr_factor, t->lr_scale);
  return EM_OK;
}
