/* train-report.h: the JSON line `ember train` prints when it ends: the
 * run's results, its speed, which kernels and BLAS core ran, memory. */
#pragma once

#include <stdint.h>

#include "em-store.h"
#include "em-train.h"

void train_print_result(const em_train_config *cfg, const em_train_summary *s,
                        const char *spec_name, int64_t params, int64_t run_id,
                        const em_store_writer_stats *ws, const em_trainer *tr);
