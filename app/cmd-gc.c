/* cmd-gc.c: `ember gc [--dry-run]`: removes files under the registry's
 * artifacts/ that no row refers to (left by a run killed between writing
 * a checkpoint and recording it, or by hand; files younger than 5 minutes
 * are kept, a running training may still record them), and reports rows
 * whose file is gone. */
#include <jansson.h>
#include <stdio.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "em-store.h"

int cli_cmd_gc(int argc, char **argv) {
  const char *registry = NULL;
  bool json = false, dry = false;
  const cli_opt opts[] = {
      {"registry", &registry, NULL}, {"json", NULL, &json}, {"dry-run", NULL, &dry}, {0}};
  cli_parse_args(argc, argv, 2, opts, NULL, 0, 0, "gc");
  em_store *s = cli_store_open(registry, dry); /* a dry run writes nothing */
  if (!s) return 1;
  em_error err = {0};
  em_gc_report r = {0};
  em_status st = em_store_gc(s, dry, &r, &err);
  em_store_close(s);
  if (st != EM_OK) return cli_fail1(&err, "gc");
  if (json) {
    json_t *o = json_object();
    json_object_set_new(o, "dry_run", json_boolean(dry));
    json_object_set_new(o, "files_removed", json_integer(r.files_removed));
    json_object_set_new(o, "bytes_removed", json_integer(r.bytes_removed));
    json_object_set_new(o, "rows_missing_file", json_integer(r.rows_missing_file));
    json_object_set_new(o, "first_missing_file",
                        r.rows_missing_file ? cli_json_text(r.first_missing) : json_null());
    json_object_set_new(o, "files_too_new", json_integer(r.files_too_new));
    json_object_set_new(o, "files_to_record", json_integer(r.files_to_record));
    cli_json_print(o);
    return 0;
  }
  char size[32];
  cli_format_bytes(r.bytes_removed, size, sizeof size);
  printf("%s %d unreferenced file%s (%s)\n", dry ? "would remove" : "removed", r.files_removed,
         r.files_removed == 1 ? "" : "s", size);
  if (r.files_too_new)
    printf("kept %d unreferenced file%s modified in the last 5 minutes (a running training may "
           "still record %s)\n",
           r.files_too_new, r.files_too_new == 1 ? "" : "s", r.files_too_new == 1 ? "it" : "them");
  if (r.files_to_record)
    printf("%d unrecorded checkpoint%s of runs whose process ended %s recorded first, not "
           "removed\n",
           r.files_to_record, r.files_to_record == 1 ? "" : "s",
           r.files_to_record == 1 ? "is" : "are");
  if (r.rows_missing_file) /* where to look: run show marks each */
    printf("%d recorded file%s missing from artifacts/ (%s%s); 'ember run show RUN' marks a "
           "run's\n", r.rows_missing_file, r.rows_missing_file == 1 ? " is" : "s are",
           r.rows_missing_file == 1 ? "" : "the first: ", r.first_missing);
  return 0;
}
