/* fuzz-spec.c: the bytes as a model spec's JSON text: em_spec_parse (the
 * text up to a NUL, as em_spec_load hands it over), then the parts a
 * caller reads: the nodes and the `ember info` table. */
#include "em-nn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  em_error err;
  em_spec *spec = em_spec_parse(text, "<fuzz>", &err);
  free(text);
  if (!spec) return 0;
  (void)strlen(em_spec_name(spec));
  (void)strlen(em_spec_description(spec));
  int64_t shape[EM_MAX_DIMS];
  (void)em_spec_input_shape(spec, shape);
  (void)em_spec_loss_json(spec);
  (void)em_spec_training_json(spec);
  (void)em_spec_output_shape(spec, shape);
  (void)em_spec_param_count(spec);
  for (int i = 0; i < em_spec_node_count(spec); i++) {
    int idx[EM_LAYER_MAX_INPUTS];
    (void)strlen(em_spec_node_name(spec, i));
    (void)em_spec_node_type(spec, i);
    (void)em_spec_node_output(spec, i);
    (void)em_spec_node_inputs(spec, i, idx);
  }
  char table[4096];
  (void)em_spec_format_summary(spec, table, sizeof table);
  em_spec_free(spec);
  return 0;
}
