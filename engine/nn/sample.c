/* sample.c: the next token from a row of logits (em_sample_token,
 * em-nn.h): greedy, or drawn from softmax(logits / T) restricted to the
 * top k and to the nucleus of probability top_p, as Hugging Face's
 * generate and nanoGPT's sample filter them (top-k first, then top-p over
 * what is left). */
#include "em-nn.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
  float v;
  int64_t i;
} scored;

/* Descending by value, ties by the lower index (a stable, seed-free order). */
static int by_value(const void *a, const void *b) {
  const scored *x = a, *y = b;
  if (x->v != y->v) return x->v < y->v ? 1 : -1;
  return x->i < y->i ? -1 : x->i > y->i;
}

int64_t em_sample_token(const float *logits, int64_t V, const em_sample_params *p, em_rng *rng) {
  int64_t best = 0;
  for (int64_t k = 1; k < V; k++)
    if (logits[k] > logits[best] || isnan(logits[best])) best = k;
  if (!p || p->temperature <= 0 || V == 1) return best;
  scored *s = malloc((size_t)V * sizeof *s);
  if (!s) return best; /* out of memory: the most likely token, not a crash */
  for (int64_t k = 0; k < V; k++) s[k] = (scored){logits[k], k};
  qsort(s, (size_t)V, sizeof *s, by_value);
  int64_t n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
  /* probabilities relative to the best, in double */
  double total = 0, *pr = malloc((size_t)n * sizeof *pr);
  if (!pr) {
    free(s);
    return best;
  }
  for (int64_t k = 0; k < n; k++) total += pr[k] = exp(((double)s[k].v - s[0].v) / p->temperature);
  if (p->top_p > 0 && p->top_p < 1) { /* the smallest head whose mass reaches top_p */
    double acc = 0;
    int64_t keep = 0;
    while (keep < n && acc < p->top_p * total) acc += pr[keep++];
    n = keep > 0 ? keep : 1;
    total = acc > 0 ? acc : pr[0];
  }
  double u = em_rng_uniform(rng) * total, acc = 0;
  int64_t pick = s[n - 1].i;
  for (int64_t k = 0; k < n; k++) {
    acc += pr[k];
    if (u < acc) {
      pick = s[k].i;
      break;
    }
  }
  free(pr);
  free(s);
  return pick;
}
