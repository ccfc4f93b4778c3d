/* cli-usage.c: the text of `ember --help`. The training settings' flags
 * are printed from the settings table (em-train.h), with their ranges, so
 * the help cannot drift from what the flags accept. */
#include "cli-common.h"

#include <string.h>

#include "em-train.h"

static const char *const usage_head =
    "usage: ember train SPEC [options]          train (recorded in the registry), JSON last\n"
    "       ember train --resume RUN|latest [--save FILE] [--threads N] [--device D]\n"
    "       ember eval SPEC --weights FILE | NAME@ALIAS [--batch N] [--data-dir DIR] [--threads N]\n"
    "         [--quantize int8]                 Linear layers in dynamic int8 (CPU inference)\n"
    "         [--device cpu|cuda[:N]|ref]       evaluate on that device\n"
    "       ember info SPEC                     layers, output shapes, parameters\n"
    "       ember --version                     the version of Ember\n"
    "       ember devices [--json]              cpu, ref and each CUDA GPU: name, compute\n"
    "                                           capability, total and free memory\n"
    "       ember profile SPEC [--steps N] [--trace FILE]   op profile and memory of a few steps\n"
    "       ember export SPEC --weights FILE -o OUT.onnx   ONNX (opset 17) for deployment\n"
    "       ember export NAME@ALIAS|NAME@VERSION [-o OUT.onnx] [--registry DIR]   recorded as an artifact\n"
    "         either form: --quantize int8      int8 Linear layers (MatMulInteger), said in metadata\n"
    "       ember predict SPEC --weights FILE | NAME@ALIAS  INPUT... [options]   top-k classes\n"
    "         INPUT: PNG images, IDX images files (.gz or plain), CSV files of feature rows\n"
    "         --top-k K (default 5)  --batch N (default 256)  --threads N  --limit N  --json\n"
    "         --labels IDX (labels of the IDX input: prints accuracy)  --label-column C|last\n"
    "         (CSV, 0-based)  --quantize int8  --registry DIR  --device cpu|cuda[:N]|ref\n"
    "       ember generate SPEC --weights FILE | NAME@ALIAS --prompt TEXT [options]   text from a\n"
    "         language model (its spec's tokenizer), token by token with a KV cache.\n"
    "         --tokens N (200)  --temperature T (1; 0: the most likely)  --top-k K (0: all)\n"
    "         --top-p P (1: all)  --seed S (0)  --threads N  --registry DIR\n"
    "       ember serve NAME@ALIAS|SPEC --weights FILE [options]   Open Inference Protocol v2\n"
    "         over HTTP; reloads when the alias moves. --port P (default 8000; 0: any free)\n"
    "         --host H (127.0.0.1)  --max-batch N (32)  --max-wait-ms X (0)  --no-batching\n"
    "         --workers W (cores / T) x --threads T (1) <= cores  --max-body-bytes B (8 MiB)\n"
    "         --poll-ms MS (1000)  --http-threads N (cores, <= 4)  --quantize int8  --registry DIR\n"
    "         --body-budget-bytes B (8 x max body: bodies in flight together; past it 503)\n"
    "         --header-timeout S (10)  --body-timeout S (30)  --max-connections N (512)\n"
    "         --max-connections-per-ip N (256)   past a limit: 503; past a timeout: closed\n"
    "         --canary REF:PCT  NAME@REF (an alias or version) answers PCT% of the requests,\n"
    "         by a hash of the request's id (one client, one version); model_version and\n"
    "         /metrics (per version) say which answered. --slo-p99-ms X --slo-error-rate F\n"
    "         --slo-window-s S (30) --slo-min-requests N (20): the canary's objectives; one\n"
    "         broken, its traffic goes back to the stable version (in `ember model history`)\n"
    "         --slo-min-accuracy F: on the canary's rows labelled by POST /v2/models/NAME/\n"
    "         feedback {\"id\": ID, \"labels\": [CLASS...]} (per-version accuracy on /metrics)\n"
    "         --drift-window N (500; 0: off) --drift-min N (100) --drift-psi X (0.25)\n"
    "         --drift-js X (0.1): each version's last N requests against its drift reference,\n"
    "         on /metrics (ember_serve_drift_*); crossing a limit is a 'drift' in the history\n"
    "         a language model (its spec has a tokenizer) also answers POST .../generate\n"
    "         {\"text_input\": T, \"parameters\": {\"max_tokens\": N, \"temperature\": X, ...}}\n"
    "         --request-log FILE: a JSON line per request (id, version, status, latency, the\n"
    "         classes given) --request-log-sample F (1) --request-log-inputs (off)\n"
    "         --request-log-max-mb N (64; then FILE.1)\n"
    "       ember drift NAME@ALIAS INPUT... [--psi X (0.25)] [--js X (0.1)] [--limit N] [--json]\n"
    "         inputs (PNG, IDX, CSV) against the version's drift reference: PSI and KS per\n"
    "         feature, predicted classes by Jensen-Shannon; exit 3 when they drifted.\n"
    "         --reference: build the reference from its run's training data (register does)\n"
    "\n"
    "registry (each takes --registry DIR and --json):\n"
    "       ember runs [--model M] [--status S] [--limit N] [--dataset NAME|SHA] [--spec SHA]\n"
    "       ember run show RUN | run delete RUN | run tag RUN KEY=VALUE | run note RUN TEXT\n"
    "       ember compare RUN RUN... [--csv]     differing settings, final and best metrics\n"
    "       ember metrics RUN KEY [--csv]        step, value, wall time\n"
    "       ember models\n"
    "       ember model register RUN --name NAME [--checkpoint best|last|STEP]\n"
    "       ember model versions NAME | model history NAME\n"
    "       ember model promote NAME VERSION --alias ALIAS [--if-held 10m]   (--if-held: only a\n"
    "         canary that has served that long since its start without a rollback)\n"
    "       ember model rollback NAME --alias ALIAS\n"
    "       ember gc [--dry-run]                 remove artifact files no row refers to\n"
    "       ember sweep start FILE [--parallel P] | resume ID | status ID | list | pause ID |\n"
    "         cancel ID                          many trials from one description (README)\n"
    "       ember queue SPEC... [--training JSON] [--parallel P]   single runs, queued\n"
    "  RUN is a run id from 'ember runs', or 'latest'. The registry is --registry DIR,\n"
    "  else $EMBER_HOME, else $XDG_DATA_HOME/ember (~/.local/share/ember).\n"
    "\n"
    "train settings (defaults come from the spec's \"training\" section):\n";

static const char *const usage_tail =
    "other train options:\n"
    "  --no-preflight        skip the device memory estimate (it errs high)\n"
    "  --init FILE           start from these weights (.safetensors)\n"
    "  --save FILE           write the final weights (.safetensors)\n"
    "  --quiet               no progress output\n"
    "  --ddp                 data-parallel over the ranks of an MPI job:\n"
    "                        mpirun -np N ember train SPEC --ddp (--batch is per rank;\n"
    "                        rank 0 records, prints and checkpoints); with --device cuda\n"
    "                        one rank per GPU (cuda:<local rank>), gradients over NCCL\n"
    "                        (EMBER_DDP_COMM=mpi: over MPI through host memory)\n"
    "\n"
    "recording and checkpoints:\n"
    "  --registry DIR        the registry to record into (default: see above)\n"
    "  --no-record           do not record this run\n"
    "  --name NAME           the run's name (default: <model>-<run id>)\n"
    "  --keep-checkpoints N  keep a recorded run's newest N checkpoints (default 3) and\n"
    "                        its best (lowest test loss)\n"
    "  --checkpoint-dir DIR  where a --no-record run writes its checkpoints (for its\n"
    "                        rollbacks and --init; --resume takes recorded runs)\n"
    "  --resume RUN|latest   continue a stopped or killed run from its newest valid\n"
    "                        checkpoint, as a new run; its settings come from the\n"
    "                        registry (only --save, --threads, --device, --auto-batch,\n"
    "                        --name, --quiet, --keep-checkpoints and --registry may be\n"
    "                        given)\n"
    "diagnostics (they never change the numbers):\n"
    "  --profile FILE        profile a window of batches (after 5 warm-up batches) and\n"
    "                        write it as a Chrome trace (Perfetto); prints the op table\n"
    "  --profile-steps N     batches in the profiled window (default 20)\n"
    "  --detect-anomaly      stop at the first op that produces NaN or Inf, naming its\n"
    "                        layer and op (slower)\n"
    "Ctrl-C (or SIGTERM) stops after the current step, writes a checkpoint and marks the\n"
    "run \"stopped\"; 'ember train --resume RUN' continues it.\n"
    "\n"
    "plugins (global options, anywhere on the line):\n"
    "       ember plugins [--json]              what loaded (layers, datasets, metrics), what\n"
    "                                           was refused and why, the folders searched\n"
    "  --plugin-dir DIR      also load the plugins (*.so) in DIR (repeatable); then those\n"
    "                        in $EMBER_PLUGIN_PATH (':'-separated) and the default\n"
    "                        registry's plugins ($EMBER_HOME/plugins; not --registry's)\n"
    "  --metric NAME         compute a plugin metric at every evaluation (repeatable), like\n"
    "                        the spec's \"training\": {\"metrics\": [NAME]}\n";

/* "  --flag M" padded to 24 columns, then the help, its later lines
 * indented as far, and the range of a number. */
static void print_setting(FILE *f, const em_setting *s) {
  char head[64];
  snprintf(head, sizeof head, "  --%s%s%s", s->flag, s->metavar ? " " : "",
           s->metavar ? s->metavar : "");
  fprintf(f, "%-22s", head);
  /* a name list read off the row: a CHOICE without help of its own, or
   * the names a STR row knows (the dataset kinds) before its help */
  bool list = s->choice_name && (s->type == EM_SETTING_STR || !s->help);
  char names[512] = "";
  if (list) {
    em_setting_choices(s, " | ", names, sizeof names);
    if (s->help)
      snprintf(names + strlen(names), sizeof names - strlen(names), " |%s%s",
               s->help[0] == '\n' ? "" : " ", s->help);
  }
  const char *help = list ? names : s->help ? s->help : "";
  for (const char *line = help; *line;) {
    const char *nl = strchr(line, '\n');
    int len = nl ? (int)(nl - line) : (int)strlen(line);
    const char *indent = line == help ? "  " : "                        ";
    fprintf(f, "%s%.*s\n", indent, len, line);
    line += len + (nl != NULL);
  }
  if (!*help) fputc('\n', f);
  if (s->metavar && (s->type == EM_SETTING_INT || s->type == EM_SETTING_SEED))
    fprintf(f, "                        (%lld to %lld)\n", (long long)s->min, (long long)s->max);
  else if (s->metavar && s->type == EM_SETTING_NUM)
    fprintf(f, "                        (%g to %g)\n", s->lo, s->hi);
}

void cli_usage_print(FILE *f) {
  fputs(usage_head, f);
  int n;
  const em_setting *rows = em_settings(&n);
  for (int i = 0; i < n; i++)
    if (rows[i].flag) print_setting(f, &rows[i]);
  fputs(usage_tail, f);
}
