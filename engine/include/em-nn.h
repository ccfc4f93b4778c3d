/* em-nn.h: layers, the JSON model spec, shape inference and models.
 *
 * A model spec is a JSON file describing a DAG of named nodes:
 *
 *   { "name": "fmnist-mlp",
 *     "input": {"shape": [1, 28, 28]},      one sample; "dtype": "f32" | "i64"
 *     "nodes": [
 *       {"name": "flatten", "type": "Flatten"},
 *       {"name": "fc1", "type": "Linear", "out_features": 256},
 *       {"name": "relu1", "type": "ReLU"},
 *       {"name": "fc2", "type": "Linear", "out_features": 10, "inputs": ["relu1"]}
 *     ],
 *     "output": "fc2",                      optional: default the last node
 *     "loss": {...}, "training": {...},     optional, opaque here
 *     "tokenizer": {"type": "char", "vocab": "..."}   optional: a language
 *                                           model's (em-data.h), i64 input
 *     "description": "..." }                optional
 *
 * Each node takes the previous node's output unless it names its "inputs"
 * (earlier nodes, or "input" for the model input). Unknown keys anywhere
 * are errors, and every error names the node and says what is wrong.
 *
 * Parsing runs shape inference without allocating tensors, so a spec
 * knows every node's output shape and parameter count; a model is a spec
 * instantiated into persistent parameters and buffers (PyTorch's names,
 * shapes, state-dict order and default init distributions), whose
 * forward runs the DAG with engine ops (so backward comes free).
 *
 * Layer types are a small vtable (em_layer_type) kept in a registry; the
 * built-in types and plugins register the same way. */
#pragma once

#include <stdio.h>

#include <jansson.h>

#include "em-ops.h"

typedef struct em_tokenizer em_tokenizer; /* em-data.h */

/* ---- layer types ---------------------------------------------------------- */

#define EM_LAYER_API_VERSION 2
#define EM_LAYER_MAX_ATTRS 16
#define EM_LAYER_MAX_PARAMS 16 /* parameters + buffers of one node */
#define EM_LAYER_MAX_INPUTS 16

typedef enum {
  EM_ATTR_INT,   /* a JSON integer */
  EM_ATTR_FLOAT, /* a JSON number */
  EM_ATTR_BOOL,  /* true / false */
  EM_ATTR_INT2,  /* an integer or [h, w] (both entries filled) */
  EM_ATTR_INTS,  /* an integer or a list of 1..EM_MAX_DIMS-1 integers */
  EM_ATTR_CHOICE, /* one of the strings of `choices` ("relu|gelu"), held as
                     its index; def is the default's index */
} em_attr_kind;

typedef struct {
  const char *name;
  em_attr_kind kind;
  bool required;
  double def;      /* the default of an optional attribute (ignored when
                      the layer treats "not given" specially) */
  double min, max; /* inclusive range of every value */
  const char *help; /* one line, for the GUI */
  const char *choices; /* EM_ATTR_CHOICE: the strings, '|'-separated */
} em_attr_desc;

typedef struct {
  bool given;             /* present in the spec (else the default) */
  int n;                  /* values: 1, 2 for INT2, the list length for INTS */
  double v[EM_MAX_DIMS];
} em_attr_value;

/* A node as a layer type sees it. attr[] is indexed like type->attrs. */
typedef struct em_layer_node {
  const char *name;
  const struct em_layer_type *type;
  const em_attr_value *attr;
  const char *const *input_names; /* node names, or "input" */
  const json_t *json;             /* the node's JSON object (borrowed) */
} em_layer_node;

static inline int64_t em_attr_int(const em_layer_node *n, int i, int k) {
  return (int64_t)n->attr[i].v[k];
}
static inline double em_attr_float(const em_layer_node *n, int i) { return n->attr[i].v[0]; }
static inline bool em_attr_bool(const em_layer_node *n, int i) { return n->attr[i].v[0] != 0; }
/* An EM_ATTR_CHOICE's index into its choices. */
static inline int em_attr_choice(const em_layer_node *n, int i) { return (int)n->attr[i].v[0]; }
/* The k-th of a '|'-separated choices string into buf ("" past the end). */
const char *em_attr_choice_name(const char *choices, int k, char *buf, size_t n);
/* The index of name among choices, or -1. */
int em_attr_choice_find(const char *choices, const char *name);

/* A shape during inference: shape[0] is the batch, held as -1 (N). dtype
 * is EM_DTYPE_F32 for float activations (whatever the model's float dtype)
 * or EM_DTYPE_I64 for indices. */
typedef struct {
  em_dtype dtype;
  int ndim;
  int64_t shape[EM_MAX_DIMS];
} em_shape;

/* "[N, 32, 7, 7]" into buf; returns buf. */
const char *em_shape_format(const em_shape *s, char *buf, size_t n);

typedef enum {
  EM_INIT_ZEROS,
  EM_INIT_ONES,
  EM_INIT_UNIFORM, /* U(-a, a) */
  EM_INIT_NORMAL,  /* N(0, a^2) */
  EM_INIT_WEIGHT,  /* the model's weight scheme over fan_in / fan_out
                      (default: PyTorch's kaiming_uniform(a=sqrt(5))) */
} em_init_kind;

/* A parameter or buffer a node declares. */
typedef struct {
  const char *name;  /* "weight", "bias", "running_mean"... (static string) */
  bool buffer;       /* saved with the model but not trained */
  em_dtype dtype;    /* EM_DTYPE_F32 = the model's float dtype; or EM_DTYPE_I64 */
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  em_init_kind init;
  double a;                /* UNIFORM bound, NORMAL std */
  int64_t fan_in, fan_out; /* for EM_INIT_WEIGHT */
} em_param_decl;

typedef struct {
  bool training;
  em_rng *rng; /* never NULL inside forward */
} em_forward_ctx;

typedef struct em_layer_type {
  int api_version;      /* EM_LAYER_API_VERSION */
  const char *name;     /* the spec's "type": "Linear" */
  const char *category; /* palette group: "linear", "conv", "norm",
                           "activation", "pool", "shape", "merge"... */
  const char *help;     /* one line */
  int min_inputs, max_inputs; /* max <= EM_LAYER_MAX_INPUTS */
  bool index_input;           /* takes i64 indices (Embedding), not floats */
  int n_attrs;
  const em_attr_desc *attrs;
  /* Output shape and parameter declarations from the input shapes; must
   * not allocate tensors. Reports problems (attribute combinations,
   * shapes) through err without the node prefix, which the caller adds:
   * "expects input of shape [N, D], got [N, 32, 7, 7]". */
  em_status (*infer)(const em_layer_node *node, int n_in, const em_shape *in, em_shape *out,
                     int *n_params, em_param_decl *params, em_error *err);
  /* Runs the layer with engine ops in the caller's scope. params holds
   * the node's tensors in declaration order. Inputs have the inferred
   * shapes (with a concrete batch). */
  em_tensor *(*forward)(const em_layer_node *node, int n_in, em_tensor **in,
                        em_tensor **params, const em_forward_ctx *ctx);
  /* Optional (may be NULL): checks inputs the forward cannot take (an
   * index out of range, one value per channel in training) before it
   * runs; a user error, not an assert. */
  em_status (*check_input)(const em_layer_node *node, int n_in, em_tensor **in,
                           em_tensor **params, const em_forward_ctx *ctx, em_error *err);
  /* For generation (em_decoder): a type whose forward treats each
   * position of an (N, T, ...) input on its own (Linear, LayerNorm, the
   * activations, Embedding) sets position_wise, and a decoder runs its
   * forward on the new positions alone. A type that looks across
   * positions gives step instead: the forward of positions [pos, pos + T)
   * of a sequence of at most max_len whose earlier positions it saw
   * before, keeping what it needs of them in *state (NULL at the first
   * call; it allocates it persistently, state_free frees it). A type with
   * neither cannot generate. */
  bool position_wise;
  em_tensor *(*step)(const em_layer_node *node, em_tensor *x, em_tensor **params, int64_t pos,
                     int64_t max_len, void **state, em_error *err);
  void (*state_free)(void *state);
} em_layer_type;

/* Adds a type (kept by pointer: it must outlive its use). Fails on a
 * wrong api_version, a missing callback or a name already taken. The
 * built-in types are registered on first use of the registry. Plugins
 * do not call it: they stage their types with em_plugin_add_layer
 * (em-plugin.h), and a call from a plugin's init fails. */
em_status em_layer_register(const em_layer_type *type, em_error *err);
int em_layer_type_count(void);
const em_layer_type *em_layer_type_at(int i); /* in registration order */
const em_layer_type *em_layer_type_find(const char *name);

/* ---- generation ------------------------------------------------------------ */
/* A model run one step at a time over growing sequences (a language
 * model's generation): each node that looks across positions keeps what
 * it needs of the earlier ones (the attention layers their keys and
 * values: a KV cache), so a step costs the new positions alone. Inference
 * only (no grad, no dropout). The model's input is i64 tokens (N, L)
 * and its output (N, L, V) logits. */
typedef struct em_decoder em_decoder;
typedef struct em_model em_model;
typedef struct em_spec em_spec;

/* For `batch` sequences of up to max_len positions (at most what the
 * model's PositionalEmbedding holds). Fails, naming the node, when a
 * node can neither run position by position nor step. */
em_decoder *em_decoder_new(em_model *m, int64_t batch, int64_t max_len, em_error *err);
void em_decoder_free(em_decoder *d);
/* Whether every node the output depends on runs position by position or
 * steps (what em_decoder_new needs of a spec). */
bool em_spec_generates(const em_spec *spec);
/* Runs tokens (batch, T) i64 at the next T positions; returns the logits
 * of the last of them (batch, V), in the caller's scope. Fails past
 * max_len or on a token outside the vocabulary (nothing is cached then). */
em_tensor *em_decoder_step(em_decoder *d, em_tensor *tokens, em_error *err);
int64_t em_decoder_position(const em_decoder *d); /* positions run so far */
/* Back to position 0 (the caches kept, their contents dropped). */
void em_decoder_reset(em_decoder *d);

/* How the next token is chosen from a row of logits: greedy (the most
 * likely) when temperature is 0, else drawn from softmax(logits /
 * temperature) over the top_k most likely (0: all) and, of those, the
 * smallest set whose probability reaches top_p (1 or 0: all). */
typedef struct {
  double temperature;
  int64_t top_k;
  double top_p;
} em_sample_params;
int64_t em_sample_token(const float *logits, int64_t V, const em_sample_params *p, em_rng *rng);

/* Text from a language model (generate.c): prompt (prompt_len bytes;
 * source names it in messages: "--prompt") encoded by the spec's tokenizer, then n_new tokens drawn with sp and
 * rng, each token's text (1 to 4 bytes) given to sink as it is made (a
 * false return stops there). Refused (EM_ERR_INVALID, said why) for a
 * model without a tokenizer, an empty prompt or one the tokenizer cannot
 * encode. */
typedef bool (*em_generate_sink)(void *user, const char *text, int n);
typedef struct {
  int64_t prompt_tokens, tokens;
  double prompt_s, generate_s; /* the prompt's forward; the new tokens */
} em_generate_stats;
em_status em_generate(em_model *m, const char *prompt, size_t prompt_len, const char *source,
                      int64_t n_new,
                      const em_sample_params *sp, em_rng *rng, em_generate_sink sink, void *user,
                      em_generate_stats *stats, em_error *err);

/* ---- init ------------------------------------------------------------------ */
/* Fill a contiguous float tensor in place from rng. fan_in/fan_out
 * come from the shape like PyTorch's: (K, D) -> in D, out K; (K, C, kh,
 * kw) -> in C*kh*kw, out K*kh*kw. */
void em_init_uniform(em_tensor *t, double lo, double hi, em_rng *rng);
void em_init_normal(em_tensor *t, double mean, double std, em_rng *rng);
void em_init_fans(const em_tensor *t, int64_t *fan_in, int64_t *fan_out);
/* PyTorch's kaiming_uniform_/kaiming_normal_ (mode fan_in, leaky_relu
 * gain sqrt(2 / (1 + a^2))). a = sqrt(5) gives Linear/Conv2d's default,
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
void em_init_kaiming_uniform(em_tensor *t, double a, em_rng *rng);
void em_init_kaiming_normal(em_tensor *t, double a, em_rng *rng);
void em_init_xavier_uniform(em_tensor *t, double gain, em_rng *rng);
void em_init_xavier_normal(em_tensor *t, double gain, em_rng *rng);

typedef enum {
  EM_WEIGHT_INIT_DEFAULT = 0,     /* PyTorch: kaiming_uniform(a=sqrt(5)) */
  EM_WEIGHT_INIT_KAIMING_NORMAL,  /* a = 0 (ReLU) */
  EM_WEIGHT_INIT_XAVIER_UNIFORM,  /* gain 1 */
  EM_WEIGHT_INIT_XAVIER_NORMAL,   /* gain 1 */
} em_weight_init;

/* ---- spec ------------------------------------------------------------------ */
typedef struct em_spec em_spec;

/* Errors: EM_ERR_IO (cannot open or read), EM_ERR_FORMAT (not a JSON
 * text: invalid JSON, a NUL byte, over 16 MiB), EM_ERR_INVALID for a JSON
 * document that is not a valid spec (unknown or mistyped keys, missing
 * ones, bad names or attributes, in the model part as in "training" and
 * "loss": the CLI's exit 2), EM_ERR_SHAPE for shapes that do not fit.
 * A bare name (no '/') that is no file here is looked up in the model zoo
 * (em_data_dir "models": "fmnist-mlp" or "fmnist-mlp.json"). */
em_spec *em_spec_load(const char *path, em_error *err);
/* source_name names the text in messages (a path, "<builder>"). */
em_spec *em_spec_parse(const char *json_text, const char *source_name, em_error *err);
void em_spec_free(em_spec *spec);

const char *em_spec_name(const em_spec *spec);
const char *em_spec_description(const em_spec *spec); /* "" when absent */
/* The raw "loss" / "training" objects (borrowed, may be NULL). */
json_t *em_spec_loss_json(const em_spec *spec);
json_t *em_spec_training_json(const em_spec *spec);
/* The whole document (borrowed), e.g. to record the spec with a run. */
json_t *em_spec_json(const em_spec *spec);
/* The model's tokenizer, from its "tokenizer" section (borrowed; NULL
 * when it has none): how text becomes its input ids and its output ids
 * become text again. */
const em_tokenizer *em_spec_tokenizer(const em_spec *spec);
/* The text of a spec file for doc (any JSON value; malloc'd, free):
 * original itself, byte for byte, when doc is what original holds (the
 * same values, keys in the same order), so a spec opened and saved
 * unchanged is not rewritten; else em_json_write's layout of the zoo's
 * files (EM_JSON_SPEC_WIDTH: an object or array on one line where it
 * fits, numbers in their shortest round-tripping form) and a final
 * newline. original may be NULL. NULL for a non-finite real. */
char *em_spec_format(const json_t *doc, const char *original);
/* A count as Ember writes it everywhere (`ember info`, the workbench):
 * 235146 -> "235,146", whatever the locale; returns buf. */
const char *em_format_count(int64_t v, char *buf, size_t n);

/* One sample's input shape (no batch dim); returns ndim. */
int em_spec_input_shape(const em_spec *spec, int64_t *shape);
em_dtype em_spec_input_dtype(const em_spec *spec); /* F32 or I64 */
/* One sample's output shape (e.g. [10]); returns ndim. */
int em_spec_output_shape(const em_spec *spec, int64_t *shape);
int64_t em_spec_param_count(const em_spec *spec);  /* trainable */
int64_t em_spec_buffer_count(const em_spec *spec); /* elements of buffers */

/* Nodes in spec order, with their inferred shapes (batch dim -1). */
int em_spec_node_count(const em_spec *spec);
/* The parsed nodes row `row` of the spec's JSON "nodes" stands for,
 * [*first, returned]: the row's node, or a repeated block's copies (its
 * "repeat" times its nodes); -1 past the last row. */
int em_spec_row_nodes(const em_spec *spec, int row, int *first);
const char *em_spec_node_name(const em_spec *spec, int i);
const em_layer_type *em_spec_node_type(const em_spec *spec, int i);
const em_shape *em_spec_node_output(const em_spec *spec, int i);
int64_t em_spec_node_param_count(const em_spec *spec, int i);
/* Input node indices (-1 = the model input); returns how many. */
int em_spec_node_inputs(const em_spec *spec, int i, int *idx);
int em_spec_output_node(const em_spec *spec);
/* Whether node i (a Linear or a Conv2d) runs with the ReLU node after it
 * as one op (em_linear_relu, em_conv2d_relu): node i + 1 is a ReLU that
 * alone reads node i's output, and both count towards the output. The
 * model fuses exactly these pairs; the memory estimate counts one output
 * tensor for the pair. */
bool em_spec_node_fuses_relu(const em_spec *spec, int i);

/* The `ember info` table (name, type, output shape, params) and totals. */
em_status em_spec_print_summary(const em_spec *spec, FILE *out, em_error *err);
/* The same into buf (always NUL-terminated); returns the length the whole
 * table needs, like snprintf. */
size_t em_spec_format_summary(const em_spec *spec, char *buf, size_t n);

/* ---- model ----------------------------------------------------------------- */
typedef struct em_model em_model;

typedef struct {
  em_dtype dtype;             /* F32 (default) or F64 (gradient checks) */
  em_weight_init weight_init; /* Linear/Conv2d weights */
} em_model_options;

/* Parameters and buffers with seeded init (each tensor's values depend
 * only on the seed and its name). The model keeps its own copy of the
 * spec. f32, PyTorch's default init. */
em_model *em_model_new(const em_spec *spec, uint64_t seed, em_error *err);
em_model *em_model_new_with(const em_spec *spec, uint64_t seed, const em_model_options *opts,
                            em_error *err);
void em_model_free(em_model *m);
const em_spec *em_model_spec(const em_model *m);
em_dtype em_model_dtype(const em_model *m);

/* Runs the DAG on x (N, ...input shape) in the caller's scope and returns
 * the output node's tensor (N, ...output shape), or NULL with err filled
 * when x does not fit the spec (shape, dtype, an index out of range).
 * rng drives dropout; NULL uses the model's own stream (seeded from the
 * model's seed). */
em_tensor *em_model_forward(em_model *m, em_tensor *x, bool training, em_rng *rng,
                            em_error *err);

/* Trainable parameters, in state-dict order ("fc1.weight"...). */
int em_model_param_count(const em_model *m);
em_tensor *em_model_param(const em_model *m, int i, const char **name);
/* Parameters and buffers, in PyTorch's state-dict order. */
int em_model_tensor_count(const em_model *m);
em_tensor *em_model_tensor(const em_model *m, int i, const char **name);
/* Index of a named tensor in em_model_tensor order, or -1. */
int em_model_tensor_find(const em_model *m, const char *name);
bool em_model_tensor_is_buffer(const em_model *m, int i);
void em_model_zero_grad(em_model *m);
/* Moves every parameter and buffer (and gradient) to d (em_tensor_move_:
 * pointers to them stay valid). f32 models only off the CPU; a quantised
 * model stays on the CPU. On failure (d unusable, out of its memory) the
 * tensors already moved go back and err says why. Forward then wants its
 * input on d (em_to_device). */
em_status em_model_to_device(em_model *m, em_device d, em_error *err);
/* Where the model's tensors live (the CPU until em_model_to_device). */
em_device em_model_device(const em_model *m);
