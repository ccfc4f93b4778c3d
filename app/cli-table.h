/* cli-table.h: the registry commands' output. A table holds, per cell,
 * the text a person reads ("87.12%", "2026-11-29 21:04", "-") and the
 * value a program reads (0.8712, a UNIX time, null). It prints as
 * aligned columns (numbers right-aligned, widths in characters, not
 * bytes), as a JSON array of objects keyed by the columns' keys (--json),
 * or as CSV (--csv, full-precision values). */
#pragma once

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { CLI_ALIGN_LEFT, CLI_ALIGN_RIGHT } cli_align;

typedef struct cli_table cli_table;

cli_table *cli_table_new(void);
void cli_table_free(cli_table *t); /* NULL is fine */
/* Columns first: the header a person reads and the key of the JSON/CSV. */
void cli_table_column(cli_table *t, const char *header, const char *key, cli_align align);
int cli_table_rows(const cli_table *t);

/* Starts a row; then one call per column, left to right. */
void cli_table_row(cli_table *t);
/* A cell from its text and its value (the table takes the reference;
 * NULL value: JSON null). */
void cli_table_cell(cli_table *t, const char *text, json_t *value);
void cli_table_str(cli_table *t, const char *s);           /* NULL: "-", null */
void cli_table_int(cli_table *t, int64_t v);
void cli_table_num(cli_table *t, double v, const char *fmt); /* NaN: "-", null */
void cli_table_pct(cli_table *t, double fraction);          /* "87.12%", 0.8712 */
void cli_table_time(cli_table *t, double unix_s);           /* local time, seconds */
void cli_table_duration(cli_table *t, double seconds);     /* "1m 23s", seconds */
void cli_table_bytes(cli_table *t, int64_t n);             /* "1.4 MiB", bytes */

/* Aligned columns with a header line; each line starts with indent. */
void cli_table_print(const cli_table *t, FILE *f, const char *indent);
/* [{key: value, ...}, ...] (a new reference). */
json_t *cli_table_json(const cli_table *t);
/* A header line of keys, then the values. */
void cli_table_print_csv(const cli_table *t, FILE *f);

/* Prints v as indented JSON on stdout and drops the reference. */
void cli_json_print(json_t *v);
/* Text from a user (a run name, a tag, a note) as a terminal shows it:
 * valid UTF-8, control characters spelled out ("\n", "\x1b"). free(). */
char *cli_display_text(const char *s);
/* Text as JSON: bytes that are not UTF-8 become U+FFFD (json_string gives
 * NULL for them, and the value became null); NULL: null. */
json_t *cli_json_text(const char *s);
/* A double as JSON: null when not finite. */
json_t *cli_json_num(double v);
