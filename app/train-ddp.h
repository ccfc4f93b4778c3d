/* train-ddp.h: the processes of a data-parallel `ember train --ddp`
 * (under mpirun): rank 0 reads the spec or the registry and sends the job
 * to the other ranks, and at the end the ranks agree on how it ended.
 * See cmd-train.c's top comment for the whole protocol. */
#pragma once

#include <stdbool.h>

#include "em-train-job.h"
#include "em-train.h"

/* Without --threads, the ranks on one machine share its cores: each gets
 * threads / (ranks on this machine), at least 1. */
void train_ddp_default_threads(em_train_config *cfg);
/* Rank 0 sends what the run trains (ok false: it failed before, and every
 * rank returns 1); the other ranks rebuild j from it (a resume: parent 1,
 * the checkpoint's path and step). Returns an exit code. */
int train_ddp_share(em_comm *comm, bool ok, em_resume *j);
/* The end of the job (rc: this rank's exit code; failed: not an orderly
 * end or stop): a failed job ends here, with MPI_Abort; else the job's
 * exit code is returned. */
int train_ddp_end(em_comm *comm, int rc, bool failed);
