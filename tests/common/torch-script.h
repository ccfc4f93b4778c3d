/* torch-script.h: engine tests that check numbers against PyTorch write
 * raw arrays into a folder and run a reference script under Debian's
 * /usr/bin/python3 (the one with torch), which compares and prints. */
#pragma once

#include <stddef.h>

/* dir/name.bin holds the n bytes at p (asserts on failure). */
void test_write_raw(const char *dir, const char *name, const void *p, size_t n);

/* Runs /usr/bin/python3 $EMBER_SOURCE_ROOT/script dir dims. The test is
 * skipped when the script exits 77 (no torch); any other failure fails
 * the test with the script's output; its output goes to the test log.
 * Call test_torch_available first. */
void test_run_torch_script(const char *script /* relative to the source root */, const char *dir,
                           const char *dims);

/* False (and the test skipped, saying why) when /usr/bin/python3 or
 * EMBER_SOURCE_ROOT is missing. */
int test_torch_available(void);
