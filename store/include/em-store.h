/* em-store.h: the registry, libember-store. One SQLite database (WAL) at
 * <dir>/registry.db and an artifacts folder beside it (<dir>/artifacts),
 * holding runs, metrics, checkpoints, models, versions, aliases with their
 * audit log, artifacts and dataset identities.
 *
 * Threads (house style 14): an em_store is one connection owned by the
 * thread that opened it; open one per thread. Training records through an
 * em_store_writer, which owns its own connection in its own thread,
 * batches rows and commits them in transactions, so the trainer never
 * waits on SQLite. Readers (CLI, GUI) use their own em_store; WAL lets
 * them read while a writer commits, and every connection waits
 * (busy_timeout) instead of failing with "database is locked".
 *
 * Errors: every function that can fail returns an em_status and fills an
 * em_error with a message a person can act on. Opening a file that is not
 * an Ember registry, or one written by a newer Ember (schema version
 * above em_store_schema_version()), is refused and the file is left as
 * it is.
 *
 * Times are UNIX seconds (double). Strings returned inside structs are
 * owned by the struct and freed with its _free function. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "em-error.h"
#include "em-quant.h"
#include "em-train.h" /* the events a run recorder turns into rows */

typedef struct em_store em_store;

/* The registry folder: $EMBER_HOME if set, else $XDG_DATA_HOME/ember, else
 * $HOME/.local/share/ember. */
em_status em_store_default_dir(char *out, size_t cap, em_error *err);

/* Opens (creating the folder, the database and artifacts/ when absent) and
 * migrates the registry in dir. read_only: never creates or migrates (an
 * absent registry is an error; an older schema is read as far as it can
 * be only after migration, so read_only on an old schema is an error that
 * says to run a writing command first). On open for writing, runs marked
 * "running" whose process (pid on this host) is gone are marked "killed". */
em_store *em_store_open(const char *dir, bool read_only, em_error *err);
void em_store_close(em_store *s); /* NULL is fine */
const char *em_store_dir(const em_store *s);
/* <dir>/artifacts/<rel>, into out. */
void em_store_artifact_path(const em_store *s, const char *rel, char *out, size_t cap);
/* The folder a recorded run's checkpoints go to:
 * <dir>/artifacts/runs/<run>/checkpoints, into out. */
void em_store_run_checkpoint_dir(const em_store *s, int64_t run, char *out, size_t cap);

/* The schema version this code writes (PRAGMA user_version). */
int em_store_schema_version(void);
/* Tests: creates a fresh database at path migrated only up to version v
 * (1 <= v <= em_store_schema_version()), to test migrations from it. */
em_status em_store_create_at_version(const char *path, int v, em_error *err);
/* PRAGMA integrity_check; EM_OK when it says "ok". */
em_status em_store_integrity_check(em_store *s, em_error *err);

/* SHA-256 of a file as 64 lowercase hex digits, and its size. */
em_status em_store_file_sha256(const char *path, char hex[65], int64_t *size, em_error *err);
/* The same of an open file (read with pread from its start); name is for
 * messages. */
em_status em_store_fd_sha256(int fd, const char *name, char hex[65], int64_t *size,
                             em_error *err);

/* ---- runs -------------------------------------------------------------- */

typedef enum {
  EM_RUN_RUNNING,
  EM_RUN_COMPLETED,
  EM_RUN_FAILED,  /* ended by an error (message kept) */
  EM_RUN_STOPPED, /* ended by a stop request (Ctrl-C, the GUI's stop) */
  EM_RUN_KILLED,  /* the process vanished while running */
} em_run_status;
const char *em_run_status_name(em_run_status st); /* "running", ... */
/* Parses a name; EM_ERR_INVALID with the list of names otherwise. */
em_status em_run_status_parse(const char *name, em_run_status *st, em_error *err);

/* What identifies a dataset: name, folder, and its files' total size and
 * combined SHA-256 (of the files' hashes in path order). */
typedef struct {
  const char *name;     /* "fashion-mnist" */
  const char *path;     /* folder or file */
  int n_files;
  const char *const *files; /* absolute paths */
} em_dataset_identity;
/* The recorded SHA-256 of a dataset with no files (synthetic, a plugin's
 * kind): its contents are not identified. */
#define EM_DATASET_SHA_UNKNOWN "unknown"
/* Whether a recorded dataset SHA-256 identifies its contents (not NULL,
 * not EM_DATASET_SHA_UNKNOWN). */
static inline bool em_dataset_sha_known(const char *sha) {
  return sha && strcmp(sha, EM_DATASET_SHA_UNKNOWN) != 0;
}

typedef struct {
  const char *name;           /* run name; NULL or "": "<model>-<id>" */
  const char *model;          /* model name: the spec's file stem */
  const char *spec_json;      /* the spec as given */
  const char *config_json;    /* the full training config as JSON */
  uint64_t seed;
  const char *device;         /* "cpu" */
  int threads;
  const char *engine_version;
  int64_t parent_run;         /* the run this resumes; 0: none */
  const em_dataset_identity *dataset; /* NULL: none recorded */
  const char *kernels;        /* the CPU kernels it runs on ("avx512 kernels
                               * (processor avx512_bf16), OpenBLAS Haswell");
                               * NULL: unknown, or a run on another device */
} em_run_new;

/* Creates a run with status "running", started now, host and pid of this
 * process; the spec's SHA-256 is computed here. Dataset files are hashed
 * once per (path, size, mtime) and the result is remembered. */
em_status em_store_run_create(em_store *s, const em_run_new *r, int64_t *run_id, em_error *err);
/* Ends a run: status, end time, message (may be NULL). */
em_status em_store_run_finish(em_store *s, int64_t run, em_run_status st, const char *message,
                              em_error *err);

/* Starting a training run's record (run-start.c), as `ember train` and
 * the workbench both do: the dataset's identity (the files its kind reads,
 * hashed), the config as JSON, the device and the CPU kernels, the run
 * row, the plugins loaded, and its checkpoint folder, made and written
 * into cfg->checkpoint_dir. What goes unrecorded without stopping the run
 * (the dataset's files, the plugins) is said through warn. */
typedef struct {
  const char *name;           /* NULL: "<model>-<id>" */
  const char *model;
  const char *spec_json;
  const char *config_json;    /* NULL: em_train_config_to_json(cfg) */
  const char *engine_version;
  int64_t parent_run;         /* the run this resumes; 0: none */
  const char *shorter_registry; /* how to choose a shorter registry path, for the
                                   message when checkpoints' paths would not fit */
  void (*warn)(void *user, const char *msg);
  void *user;
} em_run_start;
/* *run gets the new run's id; an error after the row exists marks the
 * run failed and leaves *run 0. */
em_status em_store_run_start(em_store *s, const em_run_start *o, em_train_config *cfg,
                             int64_t *run, em_error *err);
/* Ends a run through a connection of its own, opened on the registry in
 * dir and closed again (the writer's is closed by then). */
em_status em_store_run_end(const char *dir, int64_t run, em_run_status st, const char *message,
                           em_error *err);

typedef struct {
  int64_t id;
  char *name, *model, *host, *device, *engine_version, *message;
  em_run_status status;
  int64_t parent_run;
  uint64_t seed;
  int threads;
  int64_t pid;
  double started, ended; /* ended 0 while running */
  /* From the metrics: last recorded values (NAN when absent). */
  double final_test_accuracy, final_test_loss, final_train_loss;
  int64_t steps; /* last recorded step */
  /* Filled by em_store_run_get only (NULL in lists): */
  char *spec_json, *config_json, *spec_sha256;
  char *dataset_name, *dataset_path, *dataset_sha256; /* NULL when none */
  int64_t dataset_size;
  char *kernels; /* NULL: not recorded (runs from before schema 5) */
} em_run;

typedef struct {
  const char *model;  /* NULL: any */
  /* lineage, walked backwards: runs on a dataset (its name or a prefix of
   * its SHA-256) or of a spec (a prefix of the spec's SHA-256); NULL: any */
  const char *dataset;
  const char *spec_sha256;
  bool any_status;    /* false: only runs with status == status */
  em_run_status status;
  int limit;          /* 0: no limit; newest first */
} em_run_filter;

em_status em_store_runs_list(em_store *s, const em_run_filter *f, em_run **runs, int *n,
                             em_error *err);
void em_runs_free(em_run *runs, int n);
/* EM_ERR_INVALID "no run N" when absent. */
em_status em_store_run_get(em_store *s, int64_t id, em_run *out, em_error *err);
void em_run_clear(em_run *r);
/* The first run that resumed run (its lowest id) and got as far as
 * loading its checkpoint (a "resumed" event), or 0 in *child: an attempt
 * that failed before (a damaged checkpoint, a missing dataset) is
 * recorded as a failed run but continued nothing. */
em_status em_store_run_first_child(em_store *s, int64_t run, int64_t *child, em_error *err);
/* The newest run with at least one checkpoint (for --resume latest). */
em_status em_store_run_latest_with_checkpoint(em_store *s, int64_t *id, em_error *err);
/* Deletes a run with its metrics, checkpoints (rows and files), tags and
 * notes. Refused (EM_ERR_INVALID, naming the model versions) when a model
 * version was registered from it. */
em_status em_store_run_delete(em_store *s, int64_t id, em_error *err);

/* Tags (key -> value, replaced when set again) and free-text notes. Keys
 * starting EM_RUN_PLUGIN_TAG ("plugin.") are refused: the trainer writes
 * those (em_store_run_tag_plugins), and a resume loads the file they name. */
em_status em_store_run_tag(em_store *s, int64_t run, const char *key, const char *value,
                           em_error *err);
em_status em_store_run_note(em_store *s, int64_t run, const char *text, em_error *err);

/* Tags run with every plugin loaded in this process: EM_RUN_PLUGIN_TAG
 * "<name>" = "<version> sha256:<hex> <file>" (what it was trained with,
 * the file's SHA-256 then, and where a resume finds it again; the hash is
 * left out when the file cannot be read). */
#define EM_RUN_PLUGIN_TAG "plugin."
em_status em_store_run_tag_plugins(em_store *s, int64_t run, em_error *err);
/* A plugin tag's value read back; sha256 is "" for a tag without one
 * (written before hashes were recorded). False when there is no file. */
typedef struct {
  char version[64];
  char sha256[65];
  char file[1024];
} em_run_plugin;
bool em_run_plugin_parse(const char *value, em_run_plugin *out);

/* A run's events (divergence rollbacks, resumes, ...), appended. */
em_status em_store_run_event(em_store *s, int64_t run, int64_t step, const char *kind,
                             const char *detail, em_error *err);

/* What was added to a run, for `ember run show`: its tags (by key), then
 * its notes and its events (oldest first). */
typedef struct {
  char *kind;  /* "tag", "note", or the event's kind ("resumed", "divergence", ...) */
  char *key;   /* a tag's key; NULL otherwise */
  char *text;  /* a tag's value, a note's text, an event's detail ("" when none) */
  int64_t step; /* events; 0 otherwise */
  double time; /* notes and events; 0 for tags */
} em_run_annotation;
em_status em_store_run_annotations(em_store *s, int64_t run, em_run_annotation **out, int *n,
                                   em_error *err);
void em_run_annotations_free(em_run_annotation *a, int n);
/* Every run's tags in one query (a table of thousands of runs must not
 * ask once per run), ordered by run, then key. */
typedef struct {
  int64_t run;
  char *key, *value;
} em_run_tag;
em_status em_store_run_tags_all(em_store *s, em_run_tag **out, int *n, em_error *err);
void em_run_tags_free(em_run_tag *t, int n);

/* Any setting or metric as a column of a runs table (run-columns.c): one
 * value per run, newest first, from one query. column is
 * "config.<dotted setting>" (the recorded config: "config.optim.lr") or
 * "metrics.<key>" (the key's last value). text is what a table shows (""
 * when the run has none); number is its value, NAN when not a number. */
typedef struct {
  int64_t run;
  char *text;
  double number;
} em_run_value;
em_status em_store_run_values(em_store *s, const char *column, em_run_value **out, int *n,
                              em_error *err);
void em_run_values_free(em_run_value *v, int n);
/* The columns there are to add: every setting of the newest 50 runs'
 * configs and every metric key recorded, sorted, NULL-terminated
 * (g_strfreev). */
em_status em_store_run_columns(em_store *s, char ***keys, int *n, em_error *err);

/* ---- metrics ----------------------------------------------------------- */

/* The keys em_run's final_* values are read from (the last step of each). */
#define EM_METRIC_TRAIN_LOSS "train_loss"
#define EM_METRIC_TEST_LOSS "test_loss"
#define EM_METRIC_TEST_ACCURACY "test_accuracy"

typedef struct {
  int64_t step;
  double value;
  double wall; /* UNIX seconds */
} em_metric_point;

/* All points of one key, by step (a key never recorded: none, EM_OK).
 * *pts is malloc'd (free with free()). A NaN value reads back as NaN. */
em_status em_store_metrics_get(em_store *s, int64_t run, const char *key, em_metric_point **pts,
                               int64_t *n, em_error *err);

typedef struct {
  char *key;
  int64_t count;
  double last, min, max;
  int64_t last_step;
} em_metric_summary;
/* One entry per key the run recorded, keys sorted. */
em_status em_store_metrics_summary(em_store *s, int64_t run, em_metric_summary **out, int *n,
                                   em_error *err);
void em_metric_summaries_free(em_metric_summary *m, int n);

/* ---- checkpoints and artifacts ---------------------------------------- */

typedef struct {
  int64_t id, run, step, epoch;
  char *path;   /* absolute */
  char *sha256;
  int64_t size;
  char *kind;   /* "step", "eval", "final", "rollback" */
  double metric; /* test metric when kind == "eval" or "final", else NAN */
  double created;
} em_checkpoint_row;

em_status em_store_checkpoints_list(em_store *s, int64_t run, em_checkpoint_row **out, int *n,
                                    em_error *err);
void em_checkpoint_rows_free(em_checkpoint_row *c, int n);
/* The run's newest checkpoint whose file exists and matches its recorded
 * size and SHA-256 (older ones are tried when the newest is damaged; each
 * damaged one is reported through em_log_msg). */
em_status em_store_checkpoint_latest_valid(em_store *s, int64_t run, em_checkpoint_row *out,
                                           em_error *err);
void em_checkpoint_row_clear(em_checkpoint_row *c);
/* A run whose process ended without recording its last checkpoints
 * (killed while the writer was behind): records the newest whole
 * checkpoint file in the run's folder that is newer than its newest row,
 * with a "recovered" run event; *adopted is its step, -1 when there was
 * none. Damaged files are passed over (em_log_msg names each). The stale
 * sweep does this for every run it marks killed. Only for a run whose
 * process is gone: a live trainer's writer records its own files. */
em_status em_store_adopt_checkpoints(em_store *s, int64_t run, int64_t *adopted, em_error *err);

typedef struct {
  int64_t id;
  char *path;   /* absolute */
  char *kind;   /* "checkpoint", "export", ... */
  char *sha256;
  int64_t size;
  int64_t run;  /* 0: none */
  double created;
} em_artifact;
em_status em_store_artifacts_list(em_store *s, int64_t run /* 0: all */, em_artifact **out,
                                  int *n, em_error *err);
void em_artifacts_free(em_artifact *a, int n);
/* Records a file under artifacts/ (kind "export", ...): size and SHA-256
 * are computed here. */
em_status em_store_artifact_add(em_store *s, const char *abs_path, const char *kind, int64_t run,
                                int64_t *artifact_id, em_error *err);

/* Removes files under artifacts/ that no row refers to, and reports rows
 * whose file is gone. dry_run: only counts. Files modified in the last 5
 * minutes are left and counted in files_too_new (a running trainer may
 * have written a checkpoint its writer has not recorded yet). */
typedef struct {
  int files_removed;
  int64_t bytes_removed;
  int rows_missing_file;
  char first_missing[4096]; /* the first such file's path ("" when none) */
  int files_too_new;
  /* a dry run on a registry not yet swept: the checkpoints a real gc
   * records first, for runs whose process ended (checkpoint-adopt.c) */
  int files_to_record;
} em_gc_report;
em_status em_store_gc(em_store *s, bool dry_run, em_gc_report *out, em_error *err);

/* ---- models, versions, aliases ----------------------------------------- */

/* Model and alias names: 1..100 of [A-Za-z0-9._-], not starting with '.'
 * or '-' (they become file names on export). */
em_status em_store_check_name(const char *what, const char *name, em_error *err);
/* An alias: a valid name that does not read as a version number in
 * MODEL@ALIAS (promote and rollback check it; so can a caller, first). */
em_status em_store_check_alias(const char *model, const char *alias, em_error *err);

typedef enum { EM_PICK_BEST, EM_PICK_LAST, EM_PICK_STEP } em_checkpoint_pick;

/* Registers a new version of model `name` (created when new) from a run's
 * checkpoint: best (by the run's eval metric), last, or the one at step.
 * Best ranks the run's "eval" and "final" checkpoints by their metric,
 * each with the lower_is_better recorded with it (see
 * em_store_writer_checkpoint); ties go to the later step. The file is
 * checked against its recorded size and SHA-256 first. Model names: 1 to
 * 100 of [A-Za-z0-9._-], not starting with '.' or '-' (aliases too).
 * Where the file is gone or changed, a checkpoint of the same step whose
 * file is whole is taken (eval and final ones share weights). The version
 * keeps the run, the checkpoint, the spec and the run's metrics at the
 * checkpoint's step (JSON: each key's last value at or before it, and
 * "checkpoint": step, kind, metric). Returns the version number (1, 2,
 * ...). A run deleted meanwhile is an error (nothing is recorded); a
 * checkpoint pruned meanwhile (the run trains on) is picked again. */
em_status em_store_model_register(em_store *s, int64_t run, const char *name,
                                  em_checkpoint_pick pick, int64_t step, int *version,
                                  em_error *err);

typedef struct {
  char *name;
  int versions;
  int latest;
  char *aliases; /* "production=3, staging=4" or "" */
  double created;
} em_model_row;
em_status em_store_models_list(em_store *s, em_model_row **out, int *n, em_error *err);
void em_model_rows_free(em_model_row *m, int n);

typedef struct {
  int version;
  int64_t run, checkpoint;
  char *weights_path; /* absolute */
  char *sha256;
  char *metrics_json;
  char *aliases;      /* "production" or "" */
  double created;
} em_version_row;
em_status em_store_model_versions(em_store *s, const char *name, em_version_row **out, int *n,
                                  em_error *err);

/* Before registering run under name: whether the run's model (its spec's
 * input and nodes) differs from that of name's latest version, so that a
 * different architecture is not registered under the name without a
 * word. When name has no version yet, d->latest_version is 0 and
 * d->differs false. The parameter counts are -1 where a spec does not
 * parse. */
typedef struct {
  bool differs;
  int latest_version;
  int64_t run_params, latest_params;
} em_arch_diff;
em_status em_store_model_arch_diff(em_store *s, const char *name, int64_t run, em_arch_diff *d,
                                   em_error *err);
void em_version_rows_free(em_version_row *v, int n);

/* A version named on the command line: "NAME@ALIAS" or "NAME@VERSION". */
typedef struct {
  char name[128];     /* the model's name */
  char selector[128]; /* what followed '@' */
  int version;
  int64_t run, checkpoint;
  char *weights_path; /* absolute: a checkpoint (em_model_load reads it) */
  char *sha256;       /* of the weights file */
  char *spec_json;    /* the spec the version's run recorded */
  char *reference_json; /* its drift reference (em-drift.h); NULL: none */
} em_version_ref;

/* True when text has the form NAME@SOMETHING (not a path). */
bool em_version_ref_looks_like(const char *text);
/* True when ref's selector names an alias (which can move), false when it
 * is a version number (a whole number above 0), as resolution reads it. */
bool em_version_ref_names_alias(const char *ref);
/* A version as people write it, "3" or "v3" (as the workbench shows it):
 * true and *version (may be NULL) set; false for anything else (an
 * alias, 0, a sign or a space). */
bool em_version_parse(const char *text, int *version);
/* Resolves ref; an unknown model, alias or version is EM_ERR_INVALID with
 * a message that says how to list them. Clear out with
 * em_version_ref_clear. */
em_status em_store_resolve_version(em_store *s, const char *ref, em_version_ref *out,
                                   em_error *err);
void em_version_ref_clear(em_version_ref *r);

/* Points alias at version; appends to the audit log. The version the
 * alias already points at: EM_OK, and nothing changes or is logged. */
em_status em_store_model_promote(em_store *s, const char *name, int version, const char *alias,
                                 em_error *err);
/* Moves alias back to the version it pointed to before the last promote
 * that is still in effect (promotions form a stack: promote pushes,
 * rollback pops); appends to the audit log. *version: where it points now.
 * Error when there is nothing to roll back to. */
em_status em_store_model_rollback(em_store *s, const char *name, const char *alias, int *version,
                                  em_error *err);

/* A serving event in the audit log (the server's canary: "canary-start",
 * "canary-end", "canary-rollback"; its drift gauges: "drift" when the live
 * inputs crossed a limit, "drift-end" when they came back), from_version the canary, to_version
 * where its traffic went, detail the figures it was judged on. */
em_status em_store_model_audit(em_store *s, const char *name, const char *alias,
                               const char *action, int from_version, int to_version,
                               const char *detail, em_error *err);

/* A version's drift reference (em-drift.h, as JSON): built from the
 * version's run's training split (up to max_samples samples, spread over
 * it) with the version's weights, on the CPU, and kept with the version;
 * registering builds one (a failure there is a warning: the version
 * serves without drift gauges). set replaces it; get gives NULL in *json
 * when the version has none (registered before, or its data was gone). */
em_status em_store_version_build_reference(em_store *s, const char *name, int version,
                                           int64_t max_samples, em_error *err);
em_status em_store_version_set_reference(em_store *s, const char *name, int version,
                                         const char *json, em_error *err);
em_status em_store_version_reference(em_store *s, const char *name, int version, char **json,
                                     em_error *err);
#define EM_DRIFT_REFERENCE_SAMPLES 2000

typedef struct {
  int64_t id;
  char *alias, *action; /* "promote", "rollback", "canary-start", "canary-end", "canary-rollback",
                          "drift", "drift-end" */
  char *detail;         /* "" or a serving event's figures */
  int from_version;     /* 0: the alias was unset */
  int to_version;
  char *user, *host;
  double time;
} em_audit_row;
/* The model's alias moves, oldest first. The log is append-only: no code
 * path updates or deletes its rows (a trigger refuses it). */
em_status em_store_model_history(em_store *s, const char *name, em_audit_row **out, int *n,
                                 em_error *err);
void em_audit_rows_free(em_audit_row *a, int n);

/* ---- the writer (recording a training run) ----------------------------- */

typedef struct em_store_writer em_store_writer;

/* Opens its own connection to the registry in dir and starts its thread.
 * Rows are committed in one transaction every flush_ms (default 200) or
 * every 4096 rows, whichever comes first. */
em_store_writer *em_store_writer_new(const char *dir, int flush_ms, em_error *err);
/* Enqueues a metric point: copies key. A step recorded again for the same
 * run and key replaces the earlier point (last write wins: a divergence
 * rollback re-runs steps). Never blocks on SQLite (takes a
 * mutex, appends to an in-memory queue). One exception, for all enqueue
 * calls: when about a million rows are waiting (SQLite cannot keep up),
 * the caller waits for the writer thread rather than growing memory
 * without bound or dropping rows. */
void em_store_writer_metric(em_store_writer *w, int64_t run, int64_t step, const char *key,
                            double value, double wall);
/* Enqueues a checkpoint written at abs_path (under artifacts/): the writer
 * hashes it, records the artifact and checkpoint rows, then prunes the
 * run's checkpoints, keeping the newest keep_last (>= 1), the best by
 * metric (lower is better when lower_is_better), and any a model version
 * refers to; pruned rows are deleted (and committed) before their files.
 * lower_is_better is stored with the checkpoint; "register best" uses it.
 * metric: the test metric for kind "eval"/"final", NAN otherwise. */
void em_store_writer_checkpoint(em_store_writer *w, int64_t run, int64_t step, int64_t epoch,
                                const char *abs_path, const char *kind, double metric,
                                bool lower_is_better, int keep_last);
/* Enqueues a run event (see em_store_run_event). */
void em_store_writer_event(em_store_writer *w, int64_t run, int64_t step, const char *kind,
                           const char *detail);
/* Blocks until everything enqueued so far is committed. Returns the first
 * error the writer met (and clears it), EM_OK otherwise. Rows the database
 * refuses (a run id that does not exist) are skipped and reported; the
 * other rows of their transaction are still recorded. */
em_status em_store_writer_flush(em_store_writer *w, em_error *err);
/* Flushes, stops the thread, closes. NULL is fine. */
em_status em_store_writer_free(em_store_writer *w, em_error *err);
/* Counters for the benchmark: rows committed, transactions, seconds spent
 * committing (in the writer thread) and enqueueing (in callers). */
typedef struct {
  int64_t rows, transactions;
  double commit_seconds, enqueue_seconds;
} em_store_writer_stats;
void em_store_writer_get_stats(em_store_writer *w, em_store_writer_stats *out);

/* Exports model `name` version `version` to ONNX inside the registry
 * (artifacts/exports/NAME-vVERSION.onnx, or NAME-vVERSION-int8.onnx with
 * quant EM_QUANT_INT8_DYNAMIC: the version's weights, the spec of its run;
 * metadata names the model, version, run and quantisation) and records it
 * as an artifact of kind "export" on the version's run. path gets the file. */
em_status em_store_export_version(em_store *s, const char *name, int version,
                                  em_quant_mode quant, const char *ember_version, char *path,
                                  size_t cap, int64_t *artifact_id, em_error *err);

/* ---- showing and comparing what runs recorded ---------------------------
 * A JSON object (a run's config or spec) as dotted keys ("optim.lr" ->
 * 0.1): adds every leaf of v under prefix ("" for the top) to out; arrays
 * and empty objects are leaves. */
void em_json_flatten(const json_t *v, const char *prefix, json_t *out);
/* A leaf as a person reads it: strings bare, numbers %.6g, arrays and
 * objects as compact JSON, NULL (absent) as an em dash. Returns buf. */
const char *em_json_leaf_text(const json_t *v, char *buf, size_t cap);

/* ---- recording a training run ------------------------------------------
 * The sink that turns trainer events into registry rows through a writer,
 * shared by `ember train` and the workbench. It runs in the trainer's
 * thread and only enqueues (a mutex and a copy):
 *   STEP        loss, lr, grad_norm, mem_allocated_mb, mem_reserved_mb,
 *               mem_peak_mb                      at the optimiser step
 *   EPOCH_END   train_loss, samples_per_sec     at the step the epoch ended
 *   EVAL        test_loss, test_accuracy        at the step it evaluated
 *   CHECKPOINT  a checkpoint row (metric: the test loss of an "eval" or of
 *               a "final" that follows an evaluation; lower is better),
 *               pruned to keep_checkpoints + the best
 *   DIVERGENCE, WARNING, PROFILE   run events "divergence", "warning",
 *               "profile" (the trace's path) */
typedef struct {
  em_store_writer *writer; /* NULL: records nothing */
  int64_t run;
  int keep_checkpoints;
  double last_eval_loss;
  int64_t last_eval_step; /* -1: none yet */
  int64_t checkpoints, divergences;
} em_run_recorder;

void em_run_recorder_init(em_run_recorder *r, em_store_writer *w, int64_t run,
                          int keep_checkpoints);
void em_run_recorder_event(em_run_recorder *r, const em_train_event *ev);
