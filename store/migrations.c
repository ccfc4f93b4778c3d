/* migrations.c: the registry's schema history. migrations[i] takes a
 * database from version i to i + 1 (PRAGMA user_version); each runs in one
 * BEGIN IMMEDIATE transaction that also sets user_version, so a crash
 * leaves the old schema or the new one, never half of a step. Steps are
 * never edited once released: a change is a new step at the end.
 *
 * Conventions of the schema: times are UNIX seconds (REAL); a metric value
 * or checkpoint metric that is NaN is stored as NULL (SQLite turns NaN
 * into NULL; inside metric chunks it is kept as NaN); artifact paths are relative to artifacts/ when the file lies
 * under it, else absolute. */
#include "store-private.h"

#include <stdio.h>

typedef struct {
  const char *what;
  const char *sql;
  /* runs after sql, in the same transaction (NULL: none) */
  em_status (*fn)(em_store *s, em_error *err);
} em_migration;

static em_status metrics_to_chunks(em_store *s, em_error *err);

static const em_migration migrations[] = {
    /* 1 */
    {"runs and metrics",
     "PRAGMA application_id = 1164796530;\n" /* EM_STORE_APPLICATION_ID */
     "CREATE TABLE runs (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  name TEXT NOT NULL,\n"
     "  model TEXT NOT NULL,\n"
     "  spec_json TEXT NOT NULL,\n"
     "  spec_sha256 TEXT NOT NULL,\n"
     "  config_json TEXT NOT NULL,\n"
     "  seed INTEGER NOT NULL,\n" /* the uint64 seed's bits as int64 */
     "  device TEXT NOT NULL,\n"
     "  threads INTEGER NOT NULL,\n"
     "  status TEXT NOT NULL CHECK (status IN\n"
     "    ('running', 'completed', 'failed', 'stopped', 'killed')),\n"
     "  started REAL NOT NULL,\n"
     "  ended REAL,\n"
     "  host TEXT NOT NULL,\n"
     "  pid INTEGER NOT NULL,\n"
     "  engine_version TEXT NOT NULL,\n"
     "  message TEXT\n"
     ");\n"
     "CREATE INDEX runs_model ON runs (model);\n"
     "CREATE INDEX runs_status ON runs (status, host);\n"
     "CREATE TABLE metric_keys (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  key TEXT NOT NULL UNIQUE\n"
     ");\n"
     /* One row per (run, key, step): the primary key is the order reads
      * want, and WITHOUT ROWID makes it the table itself (no second
      * b-tree to update or to look rows up in). */
     "CREATE TABLE metrics (\n"
     "  run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,\n"
     "  key_id INTEGER NOT NULL REFERENCES metric_keys (id),\n"
     "  step INTEGER NOT NULL,\n"
     "  value REAL,\n"
     "  wall REAL NOT NULL,\n"
     "  PRIMARY KEY (run, key_id, step)\n"
     ") WITHOUT ROWID;\n",
     NULL},

    /* 2 */
    {"checkpoints, artifacts, models, versions and aliases",
     "ALTER TABLE runs ADD COLUMN parent_run INTEGER REFERENCES runs (id) ON DELETE SET NULL;\n"
     "CREATE TABLE artifacts (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  rel_path TEXT NOT NULL UNIQUE,\n"
     "  kind TEXT NOT NULL,\n"
     "  sha256 TEXT NOT NULL,\n"
     "  size INTEGER NOT NULL,\n"
     "  run INTEGER REFERENCES runs (id) ON DELETE SET NULL,\n"
     "  created REAL NOT NULL\n"
     ");\n"
     "CREATE INDEX artifacts_run ON artifacts (run);\n"
     "CREATE TABLE checkpoints (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,\n"
     "  artifact INTEGER NOT NULL REFERENCES artifacts (id),\n"
     "  step INTEGER NOT NULL,\n"
     "  epoch INTEGER NOT NULL,\n"
     "  kind TEXT NOT NULL CHECK (kind IN ('step', 'eval', 'final', 'rollback')),\n"
     "  metric REAL,\n"
     "  lower_is_better INTEGER NOT NULL DEFAULT 1,\n"
     "  created REAL NOT NULL\n"
     ");\n"
     "CREATE INDEX checkpoints_run ON checkpoints (run, step);\n"
     "CREATE INDEX checkpoints_artifact ON checkpoints (artifact);\n"
     "CREATE TABLE models (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  name TEXT NOT NULL UNIQUE,\n"
     "  created REAL NOT NULL\n"
     ");\n"
     "CREATE TABLE model_versions (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  model INTEGER NOT NULL REFERENCES models (id),\n"
     "  version INTEGER NOT NULL,\n"
     "  spec_json TEXT NOT NULL,\n"
     "  weights INTEGER NOT NULL REFERENCES artifacts (id),\n"
     "  weights_sha256 TEXT NOT NULL,\n"
     "  run INTEGER NOT NULL REFERENCES runs (id),\n"
     "  checkpoint INTEGER REFERENCES checkpoints (id),\n"
     "  metrics_json TEXT NOT NULL,\n"
     "  created REAL NOT NULL,\n"
     "  UNIQUE (model, version)\n"
     ");\n"
     "CREATE INDEX model_versions_run ON model_versions (run);\n"
     "CREATE INDEX model_versions_checkpoint ON model_versions (checkpoint);\n"
     "CREATE INDEX model_versions_weights ON model_versions (weights);\n"
     "CREATE TABLE aliases (\n"
     "  model INTEGER NOT NULL REFERENCES models (id),\n"
     "  alias TEXT NOT NULL,\n"
     "  version INTEGER NOT NULL,\n"
     "  updated REAL NOT NULL,\n"
     "  PRIMARY KEY (model, alias),\n"
     "  FOREIGN KEY (model, version) REFERENCES model_versions (model, version)\n"
     ");\n",
     NULL},

    /* 3 */
    {"alias audit log, dataset lineage, run tags, notes and events",
     "CREATE TABLE alias_audit (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  model INTEGER NOT NULL REFERENCES models (id),\n"
     "  alias TEXT NOT NULL,\n"
     "  action TEXT NOT NULL CHECK (action IN ('promote', 'rollback')),\n"
     "  from_version INTEGER NOT NULL,\n" /* 0: the alias was unset */
     "  to_version INTEGER NOT NULL,\n"
     "  user TEXT NOT NULL,\n"
     "  host TEXT NOT NULL,\n"
     "  time REAL NOT NULL\n"
     ");\n"
     "CREATE INDEX alias_audit_model ON alias_audit (model, alias, id);\n"
     "CREATE TRIGGER alias_audit_no_update BEFORE UPDATE ON alias_audit\n"
     "BEGIN SELECT RAISE(ABORT, 'alias_audit is append-only: rows cannot be changed'); END;\n"
     "CREATE TRIGGER alias_audit_no_delete BEFORE DELETE ON alias_audit\n"
     "BEGIN SELECT RAISE(ABORT, 'alias_audit is append-only: rows cannot be deleted'); END;\n"
     /* Aliases set before the log existed: their current value becomes
      * the first entry (from unset), so history and rollback start there. */
     "INSERT INTO alias_audit (model, alias, action, from_version, to_version, user, host, time)\n"
     "  SELECT model, alias, 'promote', 0, version, 'migration', '', updated\n"
     "  FROM aliases ORDER BY updated, model, alias;\n"
     "CREATE TABLE datasets (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  name TEXT NOT NULL,\n"
     "  path TEXT NOT NULL,\n"
     "  size INTEGER NOT NULL,\n"
     "  sha256 TEXT NOT NULL,\n"
     "  files_json TEXT NOT NULL,\n"
     "  created REAL NOT NULL,\n"
     "  UNIQUE (name, path, sha256)\n"
     ");\n"
     /* (path, size, mtime) -> SHA-256, so unchanged files are hashed once. */
     "CREATE TABLE file_hashes (\n"
     "  path TEXT PRIMARY KEY,\n"
     "  size INTEGER NOT NULL,\n"
     "  mtime_ns INTEGER NOT NULL,\n"
     "  sha256 TEXT NOT NULL\n"
     ") WITHOUT ROWID;\n"
     "ALTER TABLE runs ADD COLUMN dataset INTEGER REFERENCES datasets (id);\n"
     /* the process's start time (/proc/<pid>/stat field 22), against pid reuse */
     "ALTER TABLE runs ADD COLUMN pid_start INTEGER;\n"
     "CREATE INDEX runs_parent ON runs (parent_run);\n"
     "CREATE TABLE run_tags (\n"
     "  run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,\n"
     "  key TEXT NOT NULL,\n"
     "  value TEXT NOT NULL,\n"
     "  PRIMARY KEY (run, key)\n"
     ") WITHOUT ROWID;\n"
     "CREATE TABLE run_notes (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,\n"
     "  text TEXT NOT NULL,\n"
     "  created REAL NOT NULL\n"
     ");\n"
     "CREATE INDEX run_notes_run ON run_notes (run);\n"
     "CREATE TABLE run_events (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,\n"
     "  step INTEGER NOT NULL,\n"
     "  kind TEXT NOT NULL,\n"
     "  detail TEXT,\n"
     "  time REAL NOT NULL\n"
     ");\n"
     "CREATE INDEX run_events_run ON run_events (run, id);\n",
     NULL},

    /* 4 */
    {"metric points packed in chunks (see metric-chunks.c)",
     "CREATE TABLE metric_chunks (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,\n"
     "  key_id INTEGER NOT NULL REFERENCES metric_keys (id),\n"
     "  first_step INTEGER NOT NULL,\n"
     "  last_step INTEGER NOT NULL,\n"
     "  n INTEGER NOT NULL CHECK (n > 0),\n"
     "  min_value REAL,\n"   /* over the values that are not NaN */
     "  max_value REAL,\n"
     "  last_value REAL,\n"  /* the value at last_step */
     "  last_wall REAL NOT NULL,\n"
     "  points BLOB NOT NULL,\n" /* n x (step i64, value f64, wall f64), little-endian */
     "  UNIQUE (run, key_id, first_step)\n"
     ");\n",
     metrics_to_chunks},

    /* 5 */
    {"the kernels a run ran on",
     /* the CPU kernels of a CPU run, "avx512 kernels (processor
      * avx512_bf16), OpenBLAS Haswell"; NULL for runs recorded before and
      * runs on another device */
     "ALTER TABLE runs ADD COLUMN kernels TEXT;\n",
     NULL},

    /* 6 */
    {"serving events in the alias audit log (a canary's start, end and rollback, with figures)",
     /* SQLite cannot widen a CHECK: the log is copied into a table that
      * allows the new actions and has a detail column, row for row (ids
      * kept), and its index and append-only triggers are made again */
     "CREATE TABLE alias_audit_6 (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  model INTEGER NOT NULL REFERENCES models (id),\n"
     "  alias TEXT NOT NULL,\n"
     "  action TEXT NOT NULL CHECK (action IN ('promote', 'rollback', 'canary-start', "
     "'canary-end', 'canary-rollback')),\n"
     "  from_version INTEGER NOT NULL,\n"
     "  to_version INTEGER NOT NULL,\n"
     "  user TEXT NOT NULL,\n"
     "  host TEXT NOT NULL,\n"
     "  time REAL NOT NULL,\n"
     "  detail TEXT NOT NULL DEFAULT ''\n"
     ");\n"
     "INSERT INTO alias_audit_6 (id, model, alias, action, from_version, to_version, user, host, "
     "time) SELECT id, model, alias, action, from_version, to_version, user, host, time "
     "FROM alias_audit ORDER BY id;\n"
     "DROP TABLE alias_audit;\n"
     "ALTER TABLE alias_audit_6 RENAME TO alias_audit;\n"
     "CREATE INDEX alias_audit_model ON alias_audit (model, alias, id);\n"
     "CREATE TRIGGER alias_audit_no_update BEFORE UPDATE ON alias_audit\n"
     "BEGIN SELECT RAISE(ABORT, 'alias_audit is append-only: rows cannot be changed'); END;\n"
     "CREATE TRIGGER alias_audit_no_delete BEFORE DELETE ON alias_audit\n"
     "BEGIN SELECT RAISE(ABORT, 'alias_audit is append-only: rows cannot be deleted'); END;\n",
     NULL},

    /* 7 */
    {"drift: a version's reference statistics, and drift events in the audit log",
     /* reference_json: em-drift.h's reference (NULL: none built); the log
      * is copied as in 6 to allow "drift" and "drift-end" */
     "ALTER TABLE model_versions ADD COLUMN reference_json TEXT;\n"
     "CREATE TABLE alias_audit_7 (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  model INTEGER NOT NULL REFERENCES models (id),\n"
     "  alias TEXT NOT NULL,\n"
     "  action TEXT NOT NULL CHECK (action IN ('promote', 'rollback', 'canary-start', "
     "'canary-end', 'canary-rollback', 'drift', 'drift-end')),\n"
     "  from_version INTEGER NOT NULL,\n"
     "  to_version INTEGER NOT NULL,\n"
     "  user TEXT NOT NULL,\n"
     "  host TEXT NOT NULL,\n"
     "  time REAL NOT NULL,\n"
     "  detail TEXT NOT NULL DEFAULT ''\n"
     ");\n"
     "INSERT INTO alias_audit_7 (id, model, alias, action, from_version, to_version, user, host, "
     "time, detail) SELECT id, model, alias, action, from_version, to_version, user, host, time, "
     "detail FROM alias_audit ORDER BY id;\n"
     "DROP TABLE alias_audit;\n"
     "ALTER TABLE alias_audit_7 RENAME TO alias_audit;\n"
     "CREATE INDEX alias_audit_model ON alias_audit (model, alias, id);\n"
     "CREATE TRIGGER alias_audit_no_update BEFORE UPDATE ON alias_audit\n"
     "BEGIN SELECT RAISE(ABORT, 'alias_audit is append-only: rows cannot be changed'); END;\n"
     "CREATE TRIGGER alias_audit_no_delete BEFORE DELETE ON alias_audit\n"
     "BEGIN SELECT RAISE(ABORT, 'alias_audit is append-only: rows cannot be deleted'); END;\n",
     NULL},

    /* 8 */
    {"sweeps and their trials",
     "CREATE TABLE sweeps (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  name TEXT NOT NULL,\n"
     "  description_json TEXT NOT NULL,\n"
     "  status TEXT NOT NULL CHECK (status IN ('running', 'paused', 'completed', 'cancelled')),\n"
     "  runner_pid INTEGER NOT NULL DEFAULT 0,\n"
     "  runner_host TEXT NOT NULL DEFAULT '',\n"
     "  created REAL NOT NULL,\n"
     "  ended REAL\n"
     ");\n"
     "CREATE TABLE sweep_trials (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  sweep INTEGER NOT NULL REFERENCES sweeps (id),\n"
     "  number INTEGER NOT NULL,\n"
     "  params_json TEXT NOT NULL,\n"
     "  run_name TEXT NOT NULL,\n"
     "  run INTEGER,\n" /* no foreign key: a run deleted later leaves its trial */
     "  pid INTEGER NOT NULL DEFAULT 0,\n" /* its process, once started */
     "  status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed', "
     "'pruned', 'cancelled')),\n"
     "  metric REAL,\n"
     "  epochs INTEGER NOT NULL DEFAULT 0,\n"
     "  steps INTEGER NOT NULL DEFAULT 0,\n"
     "  decision TEXT NOT NULL DEFAULT '',\n"
     "  created REAL NOT NULL,\n"
     "  ended REAL,\n"
     "  UNIQUE (sweep, number)\n"
     ");\n",
     NULL},
};

/* Migration 4: the per-point rows of metrics, read in primary key order,
 * become chunks; then the table goes. */
static em_status metrics_to_chunks(em_store *s, em_error *err) {
  sqlite3_stmt *q = NULL;
  em_status st = EM_SQL_CHECK(s, sqlite3_prepare_v2(s->db,
                                  "SELECT run, key_id, step, value, wall FROM metrics "
                                  "ORDER BY run, key_id, step", -1, &q, NULL), err);
  em_metric_point *buf = g_new(em_metric_point, EM_METRIC_CHUNK_POINTS);
  size_t n = 0;
  int64_t run = 0, key = 0;
  int rc = SQLITE_DONE;
  while (!st && (rc = sqlite3_step(q)) == SQLITE_ROW) {
    int64_t r = sqlite3_column_int64(q, 0), k = sqlite3_column_int64(q, 1);
    if (n && (r != run || k != key || n == EM_METRIC_CHUNK_POINTS)) {
      st = em_metric_chunks_write_new(s, run, key, buf, n, err);
      n = 0;
    }
    run = r;
    key = k;
    buf[n].step = sqlite3_column_int64(q, 2);
    buf[n].value = em_col_double(q, 3);
    buf[n].wall = sqlite3_column_double(q, 4);
    n++;
  }
  if (!st && rc != SQLITE_DONE) st = EM_SQL_CHECK(s, rc, err);
  if (!st && n) st = em_metric_chunks_write_new(s, run, key, buf, n, err);
  sqlite3_finalize(q);
  g_free(buf);
  if (!st) st = EM_SQL_CHECK(s, sqlite3_exec(s->db, "DROP TABLE metrics", NULL, NULL, NULL), err);
  return st;
}

int em_store_schema_version(void) { return (int)G_N_ELEMENTS(migrations); }

static em_status user_version(em_store *s, int *v, em_error *err) {
  sqlite3_stmt *q;
  bool row;
  em_status st = EM_SQL_PREPARE(s, "PRAGMA user_version", &q, err);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st) *v = row ? sqlite3_column_int(q, 0) : 0;
  if (q) sqlite3_reset(q);
  return st;
}

em_status em_store_migrate(em_store *s, int target, em_error *err) {
  for (;;) {
    em_status st = EM_SQL_BEGIN(s, err);
    /* every writing open passes here: most find nothing to migrate */
    if (st)
      return em_error_prefix(err, "opening the registry to write (its schema is checked first)");
    /* read inside the write transaction: another process may have
     * migrated since we looked */
    int v = 0;
    st = user_version(s, &v, err);
    if (st || v >= target) {
      if (st) em_db_rollback(s);
      else st = EM_SQL_COMMIT(s, err);
      return st;
    }
    char bump[64];
    snprintf(bump, sizeof bump, "PRAGMA user_version = %d", v + 1);
    st = EM_SQL_CHECK(s, sqlite3_exec(s->db, migrations[v].sql, NULL, NULL, NULL), err);
    if (!st && migrations[v].fn) st = migrations[v].fn(s, err);
    if (!st) st = EM_SQL_CHECK(s, sqlite3_exec(s->db, bump, NULL, NULL, NULL), err);
    if (!st) st = EM_SQL_COMMIT(s, err);
    if (st) {
      em_db_rollback(s);
      return em_error_prefix(err, "migrating %s from schema %d to %d (%s); nothing was changed",
                             s->db_path, v, v + 1, migrations[v].what);
    }
  }
}

em_status em_store_create_at_version(const char *path, int v, em_error *err) {
  int cur = em_store_schema_version();
  if (!path || v < 1 || v > cur)
    return em_error_set(err, EM_ERR_INVALID, "create_at_version: version %d is not in 1..%d", v,
                        cur);
  if (g_file_test(path, G_FILE_TEST_EXISTS))
    return em_error_set(err, EM_ERR_INVALID,
                        "create_at_version: %s exists; give the path of a new file", path);
  em_store *s = em_store_connect(path, false, err);
  if (!s) return err ? err->status : EM_ERR_IO;
  em_status st = EM_SQL_CHECK(s, sqlite3_exec(s->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL), err);
  if (!st) st = em_store_migrate(s, v, err);
  em_store_close(s);
  return st;
}
