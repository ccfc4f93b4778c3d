/* fuzz-csv.c: the bytes as a CSV file: em_csv_table_read with the default
 * options (label last, no header) and with an automatic header, no label
 * and ';' (the options the CLI and em_dataset_csv pass), then
 * em_dataset_csv_split as training takes it. */
#include "fuzz-file.h"

#include "em-data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size);
  em_error err;
  em_csv_table t = {0};
  (void)em_csv_table_read(path, NULL, &t, &err);
  em_csv_table_clear(&t);

  em_csv_table_options o;
  em_csv_table_options_defaults(&o);
  o.header = EM_CSV_HEADER_AUTO;
  o.label_column = size ? (data[0] % 2 ? EM_CSV_NO_LABEL : 0) : EM_CSV_NO_LABEL;
  o.delimiter = size > 1 && data[1] == ';' ? ';' : ',';
  em_csv_table t2 = {0};
  if (em_csv_table_read(path, &o, &t2, &err) == EM_OK) {
    volatile float s = 0;
    for (int64_t i = 0; i < t2.rows * t2.features; i++) s += t2.x[i];
    (void)s;
  }
  em_csv_table_clear(&t2);

  em_dataset *ds = em_dataset_csv_split(path, NULL, true, &err);
  if (ds && em_dataset_len(ds) > 0) {
    float *x = malloc((size_t)em_dataset_sample_numel(ds) * sizeof *x);
    int64_t y;
    if (x) (void)em_dataset_get(ds, em_dataset_len(ds) - 1, x, &y, &err);
    free(x);
  }
  em_dataset_free(ds);
  return 0;
}
