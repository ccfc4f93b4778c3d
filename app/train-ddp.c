/* train-ddp.c: the processes of a data-parallel job (train-ddp.h). */
#include "train-ddp.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-common.h"
#include "em-train.h"

/* Without --threads, the ranks on one machine share its cores: each gets
 * threads / (ranks on this machine), at least 1. */
void train_ddp_default_threads(em_train_config *cfg) {
  const char *e = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int local = e ? atoi(e) : 0;
  if (local > 1) cfg->threads = cfg->threads / local > 0 ? cfg->threads / local : 1;
}

/* Rank 0 sends what the run trains (ok false: it failed before, and every
 * rank returns 1); the other ranks rebuild j from it. */
int train_ddp_share(em_comm *comm, bool ok, em_resume *j) {
  em_error err = {0};
  char *blob = NULL;
  int64_t len = 0;
  if (em_comm_rank(comm) == 0) {
    if (ok) {
      em_train_config c = j->cfg;
      c.checkpoint_dir[0] = '\0';
      char *cfg = em_train_config_to_json(&c);
      json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I}", "spec", j->spec_text ? j->spec_text : "",
                            "config", cfg ? cfg : "", "model", j->model, "resume",
                            j->parent ? j->ckpt.path : "", "step",
                            (json_int_t)(j->parent ? j->ckpt.step : 0));
      free(cfg);
      blob = o ? json_dumps(o, JSON_COMPACT) : NULL;
      json_decref(o);
    }
    len = blob ? (int64_t)strlen(blob) + 1 : 0;
  }
  if (em_comm_broadcast(comm, &len, sizeof len, 0, &err) != EM_OK) return cli_fail1(&err, "--ddp");
  if (len == 0) return 1; /* rank 0 failed and said why */
  if (em_comm_rank(comm) != 0) blob = cli_xmalloc((size_t)len);
  if (em_comm_broadcast(comm, blob, len, 0, &err) != EM_OK) {
    free(blob);
    return cli_fail1(&err, "--ddp");
  }
  int rc = 0;
  if (em_comm_rank(comm) != 0) {
    json_t *o = json_loads(blob, 0, NULL);
    const char *spec = NULL, *cfg = NULL, *model = NULL, *resume = NULL;
    json_int_t step = 0;
    if (!o || json_unpack(o, "{s:s, s:s, s:s, s:s, s:I}", "spec", &spec, "config", &cfg, "model",
                          &model, "resume", &resume, "step", &step) != 0) {
      fprintf(stderr, "ember: rank %d: rank 0 sent an unreadable run description\n",
              em_comm_rank(comm));
      rc = 1;
    } else if (!(j->spec = em_spec_parse(spec, "the spec sent by rank 0", &err))) {
      rc = cli_fail1(&err, "--ddp");
    } else {
      em_train_config_defaults(&j->cfg);
      if (em_train_config_from_json(&j->cfg, cfg, &err) != EM_OK) {
        rc = cli_fail1(&err, "--ddp: the config sent by rank 0");
      } else {
        j->spec_text = cli_xstrdup(spec);
        snprintf(j->model, sizeof j->model, "%s", model);
        if (resume[0]) {
          j->parent = 1; /* a resume: load the same checkpoint as rank 0 */
          j->ckpt.path = cli_xstrdup(resume);
          j->ckpt.step = step;
        }
      }
    }
    json_decref(o);
  }
  free(blob);
  return rc;
}

/* Rank 0: another rank's error, unless rank 0's own message said it. */
static void print_peer_failure(void *user, int rank, const char *msg) {
  (void)user;
  const char *said = cli_first_error();
  const char *rest = strstr(msg, ": "); /* "what: message": rank 0 may have said another what */
  if (!msg[0] || (said[0] && (strstr(said, msg) || (rest && strstr(said, rest + 2))))) return;
  fprintf(stderr, "ember: rank %d: %s\n", rank, msg);
}

/* The end of a data-parallel job (rc: this rank's exit code; failed: not
 * an orderly end or stop): a rank's own failure is told to the others
 * first (a peer stuck in a collective stops waiting for it), then the
 * ranks agree on the ending (em_comm_end). A failed job ends here, with
 * MPI_Abort; else the job's exit code is returned. */
int train_ddp_end(em_comm *comm, int rc, bool failed) {
  int rank = em_comm_rank(comm);
  bool echo = em_comm_peer_failed(comm) >= 0; /* it failed because a peer did */
  if (failed && !echo) {
    em_error e = {.status = rc == CLI_EXIT_USAGE ? EM_ERR_INVALID : EM_ERR_IO};
    snprintf(e.msg, sizeof e.msg, "%s", cli_first_error());
    em_comm_say_failed(comm, &e);
  }
  em_comm_ending end;
  em_comm_end(comm, rc, failed, echo ? "" : cli_first_error(), print_peer_failure, NULL, &end);
  if (rank != 0 && !end.heard) cli_print_held(); /* rank 0 did not answer: say it here */
  if (end.failed) {
    fflush(stdout);
    fflush(stderr);
    em_comm_abort(comm, end.code ? end.code : 1);
  }
  return end.code;
}
