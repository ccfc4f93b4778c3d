/* spec-tokenizer.c: a spec's "tokenizer" section, the tokenizer of a
 * language model (em-data.h):
 *
 *   "tokenizer": {"type": "byte"}                      256 ids, the bytes
 *   "tokenizer": {"type": "char", "vocab": "\n !..."}  an id per character
 *
 * Why the spec and not the checkpoint's metadata: the vocabulary is the
 * model's, as much as its layer sizes are (an id means a character only
 * through it), and the spec is what every command already carries with
 * the weights: a run records it and its SHA-256 in the registry, a
 * checkpoint embeds it and refuses to load into a model whose spec
 * differs, `ember generate` and `ember export` read it. A weights file
 * saved by --save is plain safetensors with PyTorch's names, which the
 * vocabulary would not fit; and a spec that keeps its vocabulary decodes
 * ids without the data folder it was trained from. */
#include "nn-private.h"
#include "em-data.h"

#include <string.h>

static const char *const tokenizer_keys[] = {"type", "vocab"};

em_status em_spec_parse_tokenizer(const json_t *j, em_dtype input_dtype, em_tokenizer **out,
                                  em_error *err) {
  *out = NULL;
  if (!j) return EM_OK;
  if (!json_is_object(j))
    return em_error_set(err, EM_ERR_INVALID, "\"tokenizer\" must be an object, such as "
                        "{\"type\": \"byte\"}");
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)j, key, v) {
    bool known = false;
    for (size_t i = 0; i < sizeof tokenizer_keys / sizeof *tokenizer_keys; i++)
      known = known || !strcmp(key, tokenizer_keys[i]);
    if (!known)
      return em_error_set(err, EM_ERR_INVALID, "unknown key '%s' in \"tokenizer\"; known: type, "
                          "vocab", key);
  }
  json_t *ty = json_object_get(j, "type"), *vocab = json_object_get(j, "vocab");
  const char *name = json_string_value(ty);
  em_tokenizer_kind kind;
  if (name && !strcmp(name, "byte")) kind = EM_TOKENIZER_BYTE;
  else if (name && !strcmp(name, "char")) kind = EM_TOKENIZER_CHAR;
  else
    return em_error_set(err, EM_ERR_INVALID, "\"tokenizer\" needs a \"type\": \"byte\" (256 ids, "
                        "one per byte) or \"char\" (one per character of its \"vocab\")");
  if (vocab && !json_is_string(vocab))
    return em_error_set(err, EM_ERR_INVALID, "the tokenizer's \"vocab\" must be a string of its "
                        "characters, each once");
  if (input_dtype != EM_DTYPE_I64)
    return em_error_set(err, EM_ERR_INVALID, "a tokenizer is for a model of token ids: its "
                        "\"input\" must have \"dtype\": \"i64\"");
  em_error e = {0};
  *out = em_tokenizer_new(kind, vocab ? json_string_value(vocab) : NULL,
                          vocab ? json_string_length(vocab) : 0, &e);
  if (!*out) return em_error_set(err, e.status, "\"tokenizer\": %s", e.msg);
  return EM_OK;
}
