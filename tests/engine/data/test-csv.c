/* test-csv.c: the CSV table reader (em_csv_table_read) that the CSV
 * dataset and `ember predict` share: header detection, tables without a
 * label column, a required column count, and errors that name the file,
 * the line and the column. (The dataset on top: test-datasets.c.) */
#include "data-test-util.h"
#include "em-data.h"

#include <sys/resource.h>
#include <unistd.h>

/* Reads text written to dir/t.csv; returns the status, *t filled. */
static em_status table_try(const char *dir, const char *text, size_t n,
                           const em_csv_table_options *o, em_csv_table *t, em_error *err,
                           char **path) {
  char *p = dt_write(dir, "t.csv", text, n, false);
  em_status st = em_csv_table_read(p, o, t, err);
  if (path) *path = p;
  else g_free(p);
  return st;
}
#define TRY(text, o, t, err) table_try(dir, text, strlen(text), o, t, err, NULL)

static void test_header_auto(void) {
  char *dir = dt_tmpdir();
  em_error err = {0};
  em_csv_table t;
  em_csv_table_options o;
  em_csv_table_options_defaults(&o);
  o.header = EM_CSV_HEADER_AUTO;
  /* A line of words after blank lines is a header; trailing '\r' and
   * spaces are fine. */
  g_assert_cmpint(TRY("\n  \r\nlabel,a,b\r\n1,0.5,2 \r\n0, -1e1 ,3\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 2);
  g_assert_cmpint(t.features, ==, 2);
  g_assert_cmpint(t.label_column, ==, 2);
  g_assert_cmpint(t.labels[0], ==, 2);
  g_assert_cmpint(t.lines[0], ==, 4);
  g_assert_cmpint(t.lines[1], ==, 5);
  g_assert_cmpfloat(t.x[3], ==, -10.0f);
  em_csv_table_clear(&t);
  /* ... which needed a label-less first field to be a word: all numbers
   * is data. */
  o.label_column = 0;
  g_assert_cmpint(TRY("1,0.5,2\n0,-1,3\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 2);
  g_assert_cmpint(t.labels[0], ==, 1);
  g_assert_cmpfloat(t.x[0], ==, 0.5f);
  g_assert_cmpfloat(t.x[3], ==, 3.0f);
  em_csv_table_clear(&t);
  /* One word among numbers makes a header (a pandas index column leaves
   * its first field empty: that alone does not). */
  g_assert_cmpint(TRY(",p0,p1\n1,2,3\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 1);
  em_csv_table_clear(&t);
  /* A first line with numbers and a word is data with a bad field, not a
   * header that drops a row without a word (a typo, a stray quote). */
  static const char *const typos[] = {"1,1.2.3,3\n1,2,3\n", "1,\"2\",3\n1,2,3\n",
                                      "one,2,3\n1,2,3\n", "1,2,3e\n1,2,3\n"};
  for (unsigned i = 0; i < G_N_ELEMENTS(typos); i++) {
    g_assert_cmpint(TRY(typos[i], &o, &t, &err), ==, EM_ERR_FORMAT);
    dt_assert_msg(err.msg, "line 1, column", NULL);
    em_csv_table_clear(&t);
  }
  /* Numbers are decimal: C's hexadecimal floats are typos here. */
  g_assert_cmpint(TRY("0x2,1,2\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1, column 1", "not an integer", NULL);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("2,0x1p3,2\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1, column 2", "'0x1p3' is not a number", NULL);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("2,3.4028234e38,-3.4028234e38\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpfloat(t.x[0], ==, 3.4028234e38f); /* FLT_MAX is a float */
  em_csv_table_clear(&t);
  /* A UTF-8 byte order mark is not part of the first field. */
  g_assert_cmpint(TRY("\xEF\xBB\xBF" "1,2,3\n4,5,6\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 2);
  g_assert_cmpint(t.labels[0], ==, 1);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("\xEF\xBB\xBF" "y,a,b\n4,5,6\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 1);
  em_csv_table_clear(&t);
  /* A header names the data's columns; one that does not is refused. */
  g_assert_cmpint(TRY("title\n1,2,3\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1, taken as the header, has 1 column where the data has 3", NULL);
  em_csv_table_clear(&t);
  /* Lines ended by CR alone are one long line: said, not guessed at. */
  g_assert_cmpint(TRY("y,a,b\r1,2,3\r4,5,6\r", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1", "carriage return", NULL);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("1,,3\n1,2,3\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1, column 2", "empty value", NULL);
  em_csv_table_clear(&t);
  /* A whole-number label written as a decimal (pandas saves them so) is
   * that class; a fraction is not a label. */
  g_assert_cmpint(TRY("3.0,1,2\n1e0,1,2\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.labels[0], ==, 3);
  g_assert_cmpint(t.labels[1], ==, 1);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("3.5,1,2\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1, column 1", "label '3.5' is not an integer", NULL);
  em_csv_table_clear(&t);
  /* Only the first non-blank line may be a header. */
  g_assert_cmpint(TRY("a,b,c\n1,2,3\nx,y,z\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 3, column 1", "label 'x' is not an integer", NULL);
  em_csv_table_clear(&t);
  /* A header YES skips the first non-blank line even if it is numbers;
   * NO makes a word line an error. */
  o.header = EM_CSV_HEADER_YES;
  g_assert_cmpint(TRY("\n7,8,9\n1,2,3\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 1);
  g_assert_cmpint(t.labels[0], ==, 1);
  em_csv_table_clear(&t);
  o.header = EM_CSV_HEADER_NO;
  o.label_column = EM_CSV_LAST_COLUMN;
  char *p;
  const char *text = "a,b,c\n1,2,3\n";
  g_assert_cmpint(table_try(dir, text, strlen(text), &o, &t, &err, &p), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, p, "line 1, column 1", "'a' is not a number", NULL);
  g_free(p);
  em_csv_table_clear(&t);
  dt_tmpdir_free(dir);
}

static void test_no_label(void) {
  char *dir = dt_tmpdir();
  em_error err = {0};
  em_csv_table t;
  em_csv_table_options o;
  em_csv_table_options_defaults(&o);
  o.label_column = EM_CSV_NO_LABEL;
  o.header = EM_CSV_HEADER_AUTO;
  g_assert_cmpint(TRY("x\n1.5\n-2\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 2);
  g_assert_cmpint(t.features, ==, 1);
  g_assert_null(t.labels);
  g_assert_cmpint(t.label_column, ==, -1);
  g_assert_cmpfloat(t.x[1], ==, -2.0f);
  em_csv_table_clear(&t);
  /* Every column is a feature, 1.5 included. */
  g_assert_cmpint(TRY("1,2.5\n3,4\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.features, ==, 2);
  g_assert_cmpfloat(t.x[1], ==, 2.5f);
  em_csv_table_clear(&t);
  /* No data lines: an empty table, not an error (a dataset refuses it). */
  g_assert_cmpint(TRY("\n\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 0);
  em_csv_table_clear(&t);
  /* With a label column, one column is not enough. */
  o.label_column = EM_CSV_LAST_COLUMN;
  g_assert_cmpint(TRY("1\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1", "one column", NULL);
  em_csv_table_clear(&t);
  /* ... and when another separator is there, it is named */
  g_assert_cmpint(TRY("1;2;0\n3;4;1\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "one column", "semicolons", "separated by commas", NULL);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("1\t2\t0\n3\t4\t1\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "tabs", NULL);
  em_csv_table_clear(&t);
  dt_tmpdir_free(dir);
}

static void test_columns(void) {
  char *dir = dt_tmpdir();
  em_error err = {0};
  em_csv_table t;
  em_csv_table_options o;
  em_csv_table_options_defaults(&o);
  o.columns = 3;
  o.columns_why = "the model takes 2 features, plus the label column";
  g_assert_cmpint(TRY("1,2,0\n3,4,1\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 2);
  em_csv_table_clear(&t);
  /* The first data line is held to the count too, and the message says why. */
  g_assert_cmpint(TRY("1,2\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1", "2 columns, expected 3", "the model takes 2 features", NULL);
  em_csv_table_clear(&t);
  /* With the count given, a header and data one column wider: the data
   * line says so (the header's check claimed the data had the expected
   * count), and a line of another separator is said to be one. */
  o.header = EM_CSV_HEADER_AUTO;
  o.label_column = EM_CSV_NO_LABEL;
  o.columns = 2;
  o.columns_why = "the model takes 2 features";
  g_assert_cmpint(TRY("label,a,b\n0,1,2\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 2", "3 columns, expected 2", "the model takes 2 features", NULL);
  em_csv_table_clear(&t);
  /* A header of another width over data of the right one: refused as
   * without a count (predict took a 100,000-column header over 5-column
   * rows that train refused); a header of the data's width is read. */
  g_assert_cmpint(TRY("a,b,c,d,e\n1,2\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1, taken as the header, has 5 columns where the data has 2", NULL);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("a,b\n1,2\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.rows, ==, 1);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("1;2\n3;4\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "1 column, expected 2", "the line has semicolons", NULL);
  em_csv_table_clear(&t);
  o.header = EM_CSV_HEADER_NO;
  o.label_column = EM_CSV_LAST_COLUMN;
  /* Without a count, lines are held to the first data line. */
  o.columns = 0;
  o.columns_why = NULL;
  g_assert_cmpint(TRY("1,2,0\n3,4,5,1\n", &o, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 2", "4 columns, expected 3", "first data line", NULL);
  em_csv_table_clear(&t);
  /* A label column outside the count is refused before reading. */
  o.columns = 3;
  o.label_column = 3;
  g_assert_cmpint(TRY("1,2,0\n", &o, &t, &err), ==, EM_ERR_INVALID);
  dt_assert_msg(err.msg, "label column 4 does not exist", "3 columns", NULL);
  em_csv_table_clear(&t);
  /* Other delimiters. */
  o.label_column = 0;
  o.delimiter = ';';
  g_assert_cmpint(TRY("2;1.5;3\n", &o, &t, &err), ==, EM_OK);
  g_assert_cmpint(t.labels[0], ==, 2);
  g_assert_cmpfloat(t.x[0], ==, 1.5f);
  em_csv_table_clear(&t);
  o.delimiter = '.';
  g_assert_cmpint(TRY("1\n", &o, &t, &err), ==, EM_ERR_INVALID);
  dt_assert_msg(err.msg, "unusable delimiter", NULL);
  em_csv_table_clear(&t);
  dt_tmpdir_free(dir);
}

static void test_bad_files(void) {
  char *dir = dt_tmpdir();
  em_error err = {0};
  em_csv_table t;
  char *p;
  /* NUL bytes: not a text file. */
  g_assert_cmpint(table_try(dir, "1,2\n3,\0,4\n", 10, NULL, &t, &err, &p), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, p, "line 2", "NUL byte", "not a text (CSV) file", NULL);
  g_free(p);
  em_csv_table_clear(&t);
  /* gzip's bytes: said as such (a NUL byte on line 1 otherwise) */
  g_assert_cmpint(table_try(dir, "\x1f\x8b\x08\x00\x00\x00", 6, NULL, &t, &err, &p), ==,
                  EM_ERR_FORMAT);
  dt_assert_msg(err.msg, p, "gzip-compressed", NULL);
  g_free(p);
  em_csv_table_clear(&t);
  /* A line too long to be a row of numbers, and a big file with no line
   * end: refused without holding them in memory (the reader read a whole
   * line first: a 1 GiB file of zeros took 1 GiB before its NUL error). */
  struct rusage ru0, ru1;
  getrusage(RUSAGE_SELF, &ru0);
  char *big = g_build_filename(dir, "big.csv", NULL);
  FILE *f = fopen(big, "wb");
  g_assert_nonnull(f);
  g_assert_cmpint(ftruncate(fileno(f), (off_t)1 << 30), ==, 0); /* 1 GiB of NUL bytes */
  fclose(f);
  g_assert_cmpint(em_csv_table_read(big, NULL, &t, &err), ==, EM_ERR_FORMAT);
  getrusage(RUSAGE_SELF, &ru1);
  dt_assert_msg(err.msg, "line 1", "NUL byte", NULL);
  em_csv_table_clear(&t);
  g_assert_cmpint(ru1.ru_maxrss - ru0.ru_maxrss, <, 64 * 1024); /* KiB: not the 1 GiB */
  f = fopen(big, "wb");
  g_assert_nonnull(f);
  char *mib = g_strnfill(1 << 20, '1');
  for (int i = 0; i < 65; i++) /* 65 MiB of digits, no line end */
    g_assert_cmpuint(fwrite(mib, 1, 1 << 20, f), ==, 1 << 20);
  g_free(mib);
  fclose(f);
  g_assert_cmpint(em_csv_table_read(big, NULL, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1", "longer than 64 MiB", "not a table of numbers", NULL);
  em_csv_table_clear(&t);
  remove(big);
  g_free(big);
  /* Labels must be whole numbers >= 0; values finite floats. */
  g_assert_cmpint(TRY("1,2,-1\n", NULL, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1, column 3", "label -1", NULL);
  em_csv_table_clear(&t);
  /* a class index past a million: a typo, not a count to allocate for */
  g_assert_cmpint(TRY("1,2,0\n1,2,1048575\n", NULL, &t, &err), ==, EM_OK);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("1,2,0\n1,2,1048576\n", NULL, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 2, column 3", "label 1048576 is out of range", "0 to 1048575", NULL);
  em_csv_table_clear(&t);
  g_assert_cmpint(TRY("1,1e39,0\n", NULL, &t, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "line 1, column 2", "not a finite float", NULL);
  em_csv_table_clear(&t);
  /* Missing file; a folder. */
  g_assert_cmpint(em_csv_table_read("/nonexistent-ember/x.csv", NULL, &t, &err), ==, EM_ERR_IO);
  dt_assert_msg(err.msg, "/nonexistent-ember/x.csv", "cannot open", NULL);
  em_csv_table_clear(&t);
  g_assert_cmpint(em_csv_table_read(dir, NULL, &t, &err), !=, EM_OK);
  dt_assert_msg(err.msg, dir, NULL);
  em_csv_table_clear(&t);
  em_csv_table_clear(NULL);
  dt_tmpdir_free(dir);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/data/csv-table/header-auto", test_header_auto);
  g_test_add_func("/engine/data/csv-table/no-label", test_no_label);
  g_test_add_func("/engine/data/csv-table/columns", test_columns);
  g_test_add_func("/engine/data/csv-table/bad-files", test_bad_files);
  return g_test_run();
}
