/* cmd-predict.c: `ember predict`, inference on batches of inputs with the
 * top-k classes of each.
 *
 *   ember predict SPEC --weights FILE | NAME@ALIAS|NAME@VERSION  INPUT...
 *       [--top-k K] [--batch N] [--threads N] [--limit N] [--json]
 *       [--labels IDX] [--label-column C|last] [--quantize int8] [--registry DIR]
 *       [--device cpu|cuda[:N]|ref]   (the model runs there; outputs come back)
 *
 * INPUTs are PNG images, IDX images files and CSV files (predict-input.h).
 * The model runs in inference mode (no autograd tape, batch norm on its
 * running statistics, dropout off), a batch at a time. Each sample prints
 * one line: where it came from and its top-k classes with softmax
 * probabilities; --json prints an object per sample and a summary object
 * last. With labels (an IDX labels file or a CSV label column) the top-1
 * accuracy is reported as well. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "cli-model.h"
#include "em-device.h"
#include "em-ops.h"
#include "em-pool.h"
#include "em-quant.h"
#include "em-train.h"
#include "predict-input.h"

typedef struct {
  double p;
  int k;
} scored;

/* Highest probability first; equal ones by class index. */
static int by_prob(const void *a, const void *b) {
  const scored *x = a, *y = b;
  if (x->p != y->p) return x->p < y->p ? 1 : -1;
  return x->k - y->k;
}

/* Softmax of one row of logits (in double: the largest logit subtracted)
 * into s, sorted by probability. */
static void softmax_sorted(const float *logits /* (K) */, int classes, scored *s /* (K) */) {
  float mx = logits[0];
  for (int k = 1; k < classes; k++)
    if (logits[k] > mx) mx = logits[k];
  double sum = 0;
  for (int k = 0; k < classes; k++) {
    s[k].k = k;
    s[k].p = exp((double)logits[k] - (double)mx);
    sum += s[k].p;
  }
  for (int k = 0; k < classes; k++) s[k].p /= sum;
  qsort(s, (size_t)classes, sizeof *s, by_prob);
}

static const char *class_name(const char *const *names, int k, char *buf, size_t cap) {
  if (names) return names[k];
  snprintf(buf, cap, "class %d", k);
  return buf;
}


static void print_json(json_t *obj) {
  char *s = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9));
  if (s) puts(s);
  free(s);
  json_decref(obj);
}

static void print_sample(const char *source, const scored *s, int top_k, int64_t label,
                         const char *const *names, bool as_json) {
  char buf[32];
  if (as_json) {
    json_t *o = json_object(), *idx = json_array(), *nm = json_array(), *pr = json_array();
    for (int j = 0; j < top_k; j++) {
      json_array_append_new(idx, json_integer(s[j].k));
      json_array_append_new(nm, cli_json_text(class_name(names, s[j].k, buf, sizeof buf)));
      json_array_append_new(pr, cli_json_num(s[j].p));
    }
    json_object_set_new(o, "source", cli_json_text(source));
    json_object_set_new(o, "top_k", idx);
    json_object_set_new(o, "names", nm);
    json_object_set_new(o, "probs", pr);
    if (label >= 0) json_object_set_new(o, "label", json_integer(label));
    print_json(o);
    return;
  }
  fputs(source, stdout);
  for (int j = 0; j < top_k; j++)
    printf("%s%s (%.4f)", j ? ", " : "  ", class_name(names, s[j].k, buf, sizeof buf), s[j].p);
  if (label >= 0) printf("  [label: %s]", class_name(names, (int)label, buf, sizeof buf));
  putchar('\n');
}

/* A sample whose outputs hold a NaN or an infinity (its input overflows
 * the model in f32): no classes to rank, said in place of them. */
static const char overflow_msg[] = "the model's output holds NaN or Inf (the input overflows it)";

static bool row_finite(const float *v, int n) {
  for (int i = 0; i < n; i++)
    if (!isfinite(v[i])) return false;
  return true;
}

static void print_overflow(const char *source, bool as_json) {
  if (as_json) {
    json_t *o = json_object();
    json_object_set_new(o, "source", cli_json_text(source));
    json_object_set_new(o, "error", json_string(overflow_msg));
    print_json(o);
    return;
  }
  printf("%s  error: %s\n", source, overflow_msg);
}

typedef struct {
  int top_k, batch, threads;
  int64_t limit;
  bool json;
  const char *quantize;
  predict_input_options in;
} predict_opts;

/* Runs the model over every input, printing as it goes. */
static int predict_all(cli_model *m, predict_inputs *in, const predict_opts *o) {
  const em_spec *spec = m->spec;
  int64_t shape[EM_MAX_DIMS + 1], numel = 1; /* (N, ...sample) */
  int nd = em_spec_input_shape(spec, shape + 1);
  for (int i = 0; i < nd; i++) numel *= shape[i + 1];
  int classes = o->in.classes, top_k = o->top_k < classes ? o->top_k : classes;
  const char *const *names = cli_class_names(spec, classes);
  int64_t count = predict_inputs_count(in);
  if (o->limit > 0 && o->limit < count) count = o->limit;

  float *x = cli_xmalloc(sizeof(float) * (size_t)(o->batch * numel)); /* (B, ...sample) */
  int64_t *y = cli_xmalloc(sizeof(int64_t) * (size_t)o->batch);       /* (B) */
  scored *s = cli_xmalloc(sizeof(scored) * (size_t)classes);          /* (K) */
  int64_t labelled = 0, correct = 0, overflowed = 0;
  em_error err = {0};
  int rc = 0;
  char source[4200];
  bool prev = em_no_grad_begin();
  double t0 = cli_mono_now();
  for (int64_t first = 0; first < count && rc == 0; first += o->batch) {
    int64_t n = count - first < o->batch ? count - first : o->batch;
    if (predict_inputs_read(in, first, n, x, y, &err) != EM_OK) {
      rc = cli_fail1(&err, NULL);
      break;
    }
    em_scope *sc = em_scope_begin();
    shape[0] = n;
    em_tensor *xt = em_tensor_wrap(EM_DTYPE_F32, nd + 1, shape, x);
    em_device dev = em_model_device(m->model); /* --device: there and back */
    if (!em_device_is_cpu(dev)) xt = em_to_device(xt, dev);
    em_tensor *out = em_model_forward(m->model, xt, false, NULL, &err);
    if (out && em_on_device(out)) out = em_to_device(out, em_device_cpu());
    if (em_device_error_pending()) {
      em_device_error_take(&err);
      rc = cli_fail(&err, m->label);
    } else if (!out) {
      rc = cli_fail(&err, m->label);
    } else {
      const float *logits = em_f32(em_contiguous(out)); /* (n, K) */
      for (int64_t i = 0; i < n; i++) {
        predict_inputs_source(in, first + i, source, sizeof source);
        if (!row_finite(logits + i * classes, classes)) {
          overflowed++;
          print_overflow(source, o->json);
          continue;
        }
        softmax_sorted(logits + i * classes, classes, s);
        if (y[i] >= 0) {
          labelled++;
          correct += s[0].k == y[i];
        }
        print_sample(source, s, top_k, y[i], names, o->json);
      }
    }
    em_scope_end(sc);
  }
  double secs = cli_mono_now() - t0;
  em_grad_mode_restore(prev);
  free(x);
  free(y);
  free(s);
  if (rc) return rc;

  double rate = secs > 0 ? (double)count / secs : 0;
  double acc = labelled ? (double)correct / (double)labelled : 0;
  if (o->json) {
    json_t *sum = json_pack("{s:b, s:s, s:I, s:f, s:f, s:i, s:i, s:s}", "summary", 1, "model",
                            m->label, "count", (json_int_t)count, "seconds", secs,
                            "samples_per_s", rate, "batch", o->batch, "threads", o->threads,
                            "quantize", o->quantize ? o->quantize : "none");
    if (sum && labelled) {
      json_object_set_new(sum, "labelled", json_integer(labelled));
      json_object_set_new(sum, "correct", json_integer(correct));
      json_object_set_new(sum, "accuracy", cli_json_num(acc));
    }
    if (sum && overflowed) json_object_set_new(sum, "overflowed", json_integer(overflowed));
    if (sum) print_json(sum);
  }
  fprintf(stderr, "predicted %lld sample%s in %.3f s (%.0f samples/s, batch %d, %d thread%s)",
          (long long)count, count == 1 ? "" : "s", secs, rate, o->batch, o->threads,
          o->threads == 1 ? "" : "s");
  if (labelled)
    fprintf(stderr, "; accuracy %.2f%% (%lld of %lld labelled)", 100 * acc, (long long)correct,
            (long long)labelled);
  fputc('\n', stderr);
  if (overflowed) {
    fprintf(stderr, "ember: %lld sample%s got no answer: %s; %s marked 'error' above\n",
            (long long)overflowed, overflowed == 1 ? "" : "s", overflow_msg,
            overflowed == 1 ? "it is" : "they are");
    return 1;
  }
  return 0;
}

/* Quantises the model's Linear layers as --quantize asks. */
static int quantize(cli_model *m, em_quant_mode mode) {
  em_error err = {0};
  em_quant_report rep;
  memset(&rep, 0, sizeof rep);
  if (em_model_quantize(m->model, mode, &rep, &err) != EM_OK) return cli_fail(&err, m->label);
  if (cli_quant_check(&rep, em_spec_name(m->spec), &err) != EM_OK)
    return cli_fail(&err, "--quantize int8");
  fprintf(stderr, "quantised %d Linear layer%s to int8 (%s kernel; weights %.1f -> %.1f KiB)%s\n",
          rep.layers_quantized, rep.layers_quantized == 1 ? "" : "s",
          rep.kernel ? rep.kernel : "?", (double)rep.weight_bytes_f32 / 1024,
          (double)rep.weight_bytes_int8 / 1024,
          rep.layers_too_wide ? "; wider ones (over 65536 inputs) stay f32" : "");
  return 0;
}

int cli_cmd_predict(int argc, char **argv) {
  const char *weights = NULL, *top_k = NULL, *batch = NULL, *threads = NULL, *labels = NULL,
             *label_column = NULL, *limit = NULL, *quant = NULL, *registry = NULL,
             *device = NULL;
  bool json = false;
  const cli_opt opts[] = {{"weights", &weights, NULL},
                          {"top-k", &top_k, NULL},
                          {"batch", &batch, NULL},
                          {"threads", &threads, NULL},
                          {"labels", &labels, NULL},
                          {"label-column", &label_column, NULL},
                          {"limit", &limit, NULL},
                          {"quantize", &quant, NULL},
                          {"registry", &registry, NULL},
                          {"device", &device, NULL},
                          {"json", NULL, &json},
                          {0}};
  const char **pos = cli_xmalloc(sizeof(char *) * (size_t)argc);
  int np = cli_parse_args(argc, argv, 2, opts, pos, 0, argc, "predict");
  if (np < 2) cli_die_usage("predict expects a model (SPEC --weights FILE, or NAME@ALIAS) and "
                            "at least one INPUT (PNG, IDX or CSV file)");
  predict_opts o = {.json = json, .quantize = quant};
  o.top_k = top_k ? (int)cli_parse_int("--top-k", top_k, 1, INT_MAX) : 5;
  o.batch = batch ? (int)cli_parse_int("--batch", batch, 1, 1 << 20) : 256;
  o.threads = threads ? (int)cli_parse_int("--threads", threads, 1, 1024) : cli_usable_cores();
  o.limit = limit ? cli_parse_int("--limit", limit, 1, LLONG_MAX) : 0;
  o.in.labels_path = labels;
  o.in.label_column = EM_CSV_NO_LABEL;
  if (label_column)
    o.in.label_column = !strcmp(label_column, "last")
                            ? EM_CSV_LAST_COLUMN
                            : (int)cli_parse_int("--label-column", label_column, 0, INT_MAX);
  em_quant_mode qmode = cli_parse_quantize(quant);
  em_error err = {0};
  em_device dev = em_device_cpu();
  if (device && (em_device_parse(device, &dev, &err) != EM_OK ||
                 em_device_check(dev, &err) != EM_OK))
    cli_die_usage("--device %s: %s", device, err.msg);

  cli_model m;
  int rc = cli_model_open(pos[0], weights, registry, &m);
  if (rc) {
    free(pos);
    return rc;
  }
  int64_t out[EM_MAX_DIMS];
  char sh[96];
  int on = em_spec_output_shape(m.spec, out);
  o.in.ndim = em_spec_input_shape(m.spec, o.in.shape);
  predict_inputs *in = NULL;
  if (em_spec_input_dtype(m.spec) != EM_DTYPE_F32) {
    em_error_set(&err, EM_ERR_INVALID, "the model takes integer inputs (token ids); predict reads "
                 "images and feature rows");
    rc = cli_fail(&err, m.label);
  } else if (on != 1 || out[0] < 1 || out[0] > INT_MAX) {
    em_error_set(&err, EM_ERR_SHAPE, "the model outputs %s per sample; predict needs one score "
                 "per class (K)", em_shape_str(on, out, sh, sizeof sh));
    rc = cli_fail(&err, m.label);
  } else {
    o.in.classes = (int)out[0];
    if (!(in = predict_inputs_open(np - 1, pos + 1, &o.in, &err))) rc = cli_fail(&err, NULL);
  }
  if (rc == 0 && qmode != EM_QUANT_NONE) rc = quantize(&m, qmode);
  if (rc == 0 && em_model_to_device(m.model, dev, &err) != EM_OK) rc = cli_fail(&err, "--device");
  if (rc == 0) {
    em_set_num_threads(o.threads);
    rc = predict_all(&m, in, &o);
  }
  predict_inputs_free(in);
  cli_model_close(&m);
  free(pos);
  return rc;
}
