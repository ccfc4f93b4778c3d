/* tune-private.h: what engine/tune's files share (tune-queue.c's part of
 * parsing, recording and sampling a queue). */
#pragma once

#include <jansson.h>

#include "em-tune.h"

/* The "queue" list into d (its specs read from base_dir, or the recorded
 * copies). */
em_status em_tune_queue_parse(em_tune_desc *d, json_t *queue, const char *base_dir,
                              em_error *err);
/* o (the description) with each entry's spec kept in it (malloc'd JSON). */
char *em_tune_queue_recorded(json_t *o, const em_tune_desc *d);
/* The queue entry a trial's parameters name ({"queue": i}); -1: none. */
int em_tune_queue_index(const em_tune_desc *d, const char *params_json);
/* path under dir unless it is absolute or dir is NULL or "" (malloc'd). */
char *em_tune_dir_join(const char *dir, const char *path);
