/* summary.c: the `ember info` table of a spec (name, type, [inputs,]
 * output shape, params) with totals. The inputs column appears only when
 * some node does not simply take the previous one. */
#include "nn-private.h"
#include "em-data.h"

#include <stdlib.h>
#include <string.h>

/* 235146 -> "235,146" (em-nn.h) */
const char *em_format_count(int64_t v, char *buf, size_t n) {
  char raw[32];
  snprintf(raw, sizeof raw, "%lld", (long long)(v < 0 ? -v : v));
  size_t len = strlen(raw), o = 0;
  if (v < 0 && o + 1 < n) buf[o++] = '-';
  for (size_t i = 0; i < len && o + 1 < n; i++) {
    if (i && (len - i) % 3 == 0 && o + 1 < n) buf[o++] = ',';
    if (o + 1 < n) buf[o++] = raw[i];
  }
  buf[o] = '\0';
  return buf;
}

static bool is_sequential(const em_spec *s, int i) {
  const em_spec_node *nd = &s->nodes[i];
  return nd->n_in == 1 && nd->in[0] == i - 1;
}

static void inputs_text(const em_spec *s, int i, char *buf, size_t n) {
  const em_spec_node *nd = &s->nodes[i];
  size_t used = 0;
  buf[0] = '\0';
  for (int k = 0; k < nd->n_in && used < n; k++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s", k ? ", " : "", nd->in_names[k]);
}

static void format(const em_spec *s, em_strbuf *b) {
  char shape[160], num[48], ins[512];
  bool show_inputs = false;
  int wn = 4, wt = 4, wi = 6, ws = 12, wp = 6;
  for (int i = 0; i < s->n_nodes; i++) {
    const em_spec_node *nd = &s->nodes[i];
    if (!is_sequential(s, i)) show_inputs = true;
    int l;
    if ((l = (int)strlen(nd->name)) > wn) wn = l;
    if ((l = (int)strlen(nd->type->name)) > wt) wt = l;
    if ((l = (int)strlen(em_shape_format(&nd->out, shape, sizeof shape))) > ws) ws = l;
    if ((l = (int)strlen(em_format_count(nd->n_params, num, sizeof num))) > wp) wp = l;
    inputs_text(s, i, ins, sizeof ins);
    if ((l = (int)strlen(ins)) > wi) wi = l;
  }
  em_strbuf_printf(b, "model: %s\n", s->name);
  if (s->description[0]) em_strbuf_printf(b, "  %s\n", s->description);
  em_strbuf_printf(b, "input: %s %s\n\n", em_shape_format(&s->input, shape, sizeof shape),
                   em_dtype_name(s->input.dtype));
  em_strbuf_printf(b, "%-*s  %-*s  ", wn, "name", wt, "type");
  if (show_inputs) em_strbuf_printf(b, "%-*s  ", wi, "inputs");
  em_strbuf_printf(b, "%-*s  %*s\n", ws, "output shape", wp, "params");
  int rule = wn + wt + ws + wp + 6 + (show_inputs ? wi + 2 : 0);
  for (int k = 0; k < rule; k++) em_strbuf_printf(b, "-");
  em_strbuf_printf(b, "\n");
  for (int i = 0; i < s->n_nodes; i++) {
    const em_spec_node *nd = &s->nodes[i];
    em_strbuf_printf(b, "%-*s  %-*s  ", wn, nd->name, wt, nd->type->name);
    if (show_inputs) {
      inputs_text(s, i, ins, sizeof ins);
      em_strbuf_printf(b, "%-*s  ", wi, ins);
    }
    em_strbuf_printf(b, "%-*s  %*s%s\n", ws, em_shape_format(&nd->out, shape, sizeof shape), wp,
                     em_format_count(nd->n_params, num, sizeof num),
                     nd->live ? "" : "  (unused)");
  }
  for (int k = 0; k < rule; k++) em_strbuf_printf(b, "-");
  em_strbuf_printf(b, "\n");
  const em_spec_node *out = &s->nodes[s->output];
  em_strbuf_printf(b, "output: %s %s\n", out->name, em_shape_format(&out->out, shape, sizeof shape));
  em_strbuf_printf(b, "trainable parameters: %s (%.2f MiB in f32)\n",
                   em_format_count(s->n_params, num, sizeof num),
                   (double)s->n_params * 4.0 / (1024.0 * 1024.0));
  if (s->n_buffer)
    em_strbuf_printf(b, "buffer values: %s\n", em_format_count(s->n_buffer, num, sizeof num));
  if (s->tokenizer) {
    int64_t v = em_tokenizer_vocab_size(s->tokenizer);
    bool bytes = em_tokenizer_kind_of(s->tokenizer) == EM_TOKENIZER_BYTE;
    em_strbuf_printf(b, "tokenizer: %s, %lld %s\n",
                     em_tokenizer_kind_name(em_tokenizer_kind_of(s->tokenizer)), (long long)v,
                     bytes ? "ids (the byte values)"
                     : v ? "characters" : "characters (no vocabulary yet)");
  }
}

size_t em_spec_format_summary(const em_spec *spec, char *buf, size_t n) {
  em_strbuf b = {0};
  format(spec, &b);
  size_t len = b.len;
  if (n) {
    size_t c = len < n - 1 ? len : n - 1;
    if (b.s) memcpy(buf, b.s, c);
    buf[c] = '\0';
  }
  em_strbuf_free(&b);
  return len;
}

em_status em_spec_print_summary(const em_spec *spec, FILE *out, em_error *err) {
  em_strbuf b = {0};
  format(spec, &b);
  if (!b.s) return em_error_set(err, EM_ERR_NOMEM, "out of memory formatting the summary");
  size_t len = b.len, w = fwrite(b.s, 1, len, out);
  em_strbuf_free(&b);
  if (w != len || fflush(out) != 0)
    return em_error_set(err, EM_ERR_IO, "cannot write the model summary");
  return EM_OK;
}
