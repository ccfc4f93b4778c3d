/* cli-progress.h: the terminal sink for trainer events: a progress bar
 * on a terminal, one line per epoch otherwise. */
#pragma once

#include <stdbool.h>

#include "em-train.h"

typedef struct {
  bool quiet, tty;
  bool closed; /* stderr's reader went away (EPIPE): printing stopped */
  const char *name;
  double last_draw;
} cli_progress;

void cli_progress_init(cli_progress *p, bool quiet, const char *name);
bool cli_progress_event(const em_train_event *ev, void *user);
void cli_progress_finish(cli_progress *p);
