/* fuzz-driver.c: a small stand-in for libFuzzer, linked with each target
 * (tests/fuzz/fuzz-*.c) in gcc builds.
 *
 * Why: CI builds with gcc (a release and an ASan+UBSan build), and
 * libFuzzer (-fsanitize=fuzzer) comes with clang only. libFuzzer's own
 * StandaloneFuzzTargetMain.c replays files but does not mutate; this
 * driver replays every file it is given (a corpus folder: each file in it,
 * in name order), then, for a time budget, calls the target on seeded
 * random mutations of the corpus: bit flips, bytes set to 0/0xff/0x7f/0x80,
 * truncation, a chunk duplicated, two files spliced (1-4 of them at once).
 * No coverage feedback: a bounded smoke fuzz for CI, not a replacement for
 * a libFuzzer run (README.md: the same targets build with clang's).
 *
 *   fuzz-X [-seconds S] [-seed N] [-runs N] CORPUS_DIR|FILE...
 *
 * S defaults to $EMBER_FUZZ_SECONDS, else 5 (0: replay only); the seed to
 * $EMBER_FUZZ_SEED, else one from the clock, printed so a run can be
 * repeated; -runs caps the mutated inputs. When an input fails (the
 * sanitizer's report ends in its death callback; a signal, an abort
 * without one), it is written to $EMBER_FUZZ_OUT/crash-<target>-<seed>-<run>
 * (default: the current folder), named on the last line of stderr: add it
 * to the corpus once fixed.
 * EMBER_FUZZ_LEAK_CHECK=1 runs LeakSanitizer after every input, to name
 * the input that leaked (slow); otherwise a leak is reported at exit. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

#define FUZZ_MAX_INPUT (64 * 1024)

typedef struct {
  uint8_t *data;
  size_t size;
} blob;

static const uint8_t *cur_data; /* the input being run, for the crash file */
static size_t cur_size;
static char crash_path[4096];

static void save_input(void) {
  if (!cur_data) return;
  int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    for (size_t done = 0; done < cur_size;) {
      ssize_t w = write(fd, cur_data + done, cur_size - done);
      if (w <= 0) break;
      done += (size_t)w;
    }
    close(fd);
  }
  static const char note[] = "fuzz-driver: the failing input is in ";
  (void)!write(2, note, sizeof note - 1);
  (void)!write(2, crash_path, strlen(crash_path));
  (void)!write(2, "\n", 1);
  cur_data = NULL;
}

static void on_signal(int sig) {
  save_input();
  signal(sig, SIG_DFL);
  raise(sig);
}

static uint64_t rng;
static uint64_t next(void) { /* xorshift64* */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return rng * 2685821657736338717ull;
}
static size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }

static int add_file(blob **c, int *n, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  uint8_t *buf = malloc(FUZZ_MAX_INPUT);
  size_t got = buf ? fread(buf, 1, FUZZ_MAX_INPUT, f) : 0;
  fclose(f);
  if (!buf) return 0;
  *c = realloc(*c, (size_t)(*n + 1) * sizeof **c);
  (*c)[(*n)++] = (blob){buf, got};
  return 1;
}

static void run_one(const uint8_t *src, size_t size) {
  uint8_t *copy = malloc(size ? size : 1); /* exactly size: ASan sees an overread */
  memcpy(copy, src, size);
  cur_data = copy, cur_size = size;
  LLVMFuzzerTestOneInput(copy, size);
  if (getenv("EMBER_FUZZ_LEAK_CHECK") && __lsan_do_recoverable_leak_check &&
      __lsan_do_recoverable_leak_check()) {
    save_input();
    _exit(1);
  }
  cur_data = NULL;
  free(copy);
}

/* One to four mutations of a random corpus file into buf; returns the size. */
static size_t mutate(uint8_t *buf, const blob *c, int n) {
  static const uint8_t interesting[] = {0, 0xff, 0x7f, 0x80};
  size_t size = 0;
  if (n) {
    const blob *b = &c[below((size_t)n)];
    memcpy(buf, b->data, size = b->size);
  }
  for (int k = 1 + (int)below(4); k > 0; k--) {
    switch (below(size ? 5 : 4)) {
    case 0: if (size) buf[below(size)] ^= (uint8_t)(1u << below(8)); break;
    case 1: if (size) buf[below(size)] = interesting[below(4)]; break;
    case 2: size = below(size + 1); break;
    case 3: { /* a chunk copied to another place */
      size_t len = below(size + 1), from = below(size - len + 1), to = below(size + 1);
      if (size + len > FUZZ_MAX_INPUT) break;
      memmove(buf + to + len, buf + to, size - to);
      memmove(buf + to, buf + (from >= to ? from + len : from), len);
      size += len;
      break;
    }
    default: { /* this one's head, another's tail */
      const blob *o = &c[below((size_t)n)];
      size_t cut = below(size + 1), from = below(o->size + 1);
      size_t len = o->size - from;
      if (cut + len > FUZZ_MAX_INPUT) len = FUZZ_MAX_INPUT - cut;
      memcpy(buf + cut, o->data + from, len);
      size = cut + len;
    }
    }
  }
  return size;
}

int main(int argc, char **argv) {
  const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  double seconds = getenv("EMBER_FUZZ_SECONDS") ? atof(getenv("EMBER_FUZZ_SECONDS")) : 5;
  uint64_t seed = getenv("EMBER_FUZZ_SEED") ? strtoull(getenv("EMBER_FUZZ_SEED"), NULL, 0)
                                            : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  long long max_runs = -1;
  blob *corpus = NULL;
  int n = 0, files = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "-seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "-runs") && i + 1 < argc) max_runs = atoll(argv[++i]);
    else {
      struct dirent **ents;
      int m = scandir(argv[i], &ents, NULL, alphasort);
      if (m < 0) { /* not a folder: a file */
        if (!add_file(&corpus, &n, argv[i])) {
          fprintf(stderr, "%s: cannot read '%s'\n", name, argv[i]);
          return 2;
        }
        files++;
        continue;
      }
      for (int j = 0; j < m; j++) {
        char p[4096];
        if (ents[j]->d_name[0] != '.' &&
            snprintf(p, sizeof p, "%s/%s", argv[i], ents[j]->d_name) < (int)sizeof p)
          files += add_file(&corpus, &n, p);
        free(ents[j]);
      }
      free(ents);
    }
  }
  if (!seed) seed = 1;
  rng = seed;
  const char *out = getenv("EMBER_FUZZ_OUT") ? getenv("EMBER_FUZZ_OUT") : ".";
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(save_input);
  signal(SIGSEGV, on_signal), signal(SIGABRT, on_signal), signal(SIGBUS, on_signal);
  signal(SIGFPE, on_signal), signal(SIGILL, on_signal);

  for (int i = 0; i < n; i++) { /* the corpus as it is */
    snprintf(crash_path, sizeof crash_path, "%s/crash-%s-corpus-%d", out, name, i);
    run_one(corpus[i].data, corpus[i].size);
  }
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint8_t *buf = malloc(FUZZ_MAX_INPUT);
  long long runs = 0;
  double el = 0;
  while (seconds > 0 && runs != max_runs) {
    if ((runs & 63) == 0) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      el = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
      if (el >= seconds) break;
    }
    size_t size = mutate(buf, corpus, n);
    snprintf(crash_path, sizeof crash_path, "%s/crash-%s-%llu-%lld", out, name,
             (unsigned long long)seed, runs);
    run_one(buf, size);
    runs++;
  }
  clock_gettime(CLOCK_MONOTONIC, &t);
  el = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
  printf("%s: %d corpus files, then %lld mutated inputs in %.1f s (%.0f/s), seed %llu\n", name,
         files, runs, el, el > 0 ? (double)runs / el : 0.0, (unsigned long long)seed);
  free(buf);
  for (int i = 0; i < n; i++) free(corpus[i].data);
  free(corpus);
  return 0;
}
