/* cli-commands.h: one entry point per `ember` command, each given the
 * whole argv (argv[1] is the command word). They return the exit status
 * (0 ok, 1 an error, 2 bad usage) or exit themselves on bad usage. */
#pragma once

int cli_cmd_train(int argc, char **argv);   /* cmd-train.c */
int cli_cmd_eval(int argc, char **argv);    /* cmd-eval.c */
int cli_cmd_info(int argc, char **argv);    /* cmd-eval.c */
int cli_cmd_runs(int argc, char **argv);    /* cmd-runs.c */
int cli_cmd_run(int argc, char **argv);     /* cmd-runs.c: run show|delete|tag|note */
int cli_cmd_compare(int argc, char **argv); /* cmd-compare.c */
int cli_cmd_metrics(int argc, char **argv); /* cmd-metrics.c */
int cli_cmd_models(int argc, char **argv);  /* cmd-models.c */
int cli_cmd_model(int argc, char **argv);   /* cmd-models.c: model register|versions|... */
int cli_cmd_gc(int argc, char **argv);      /* cmd-gc.c */
int cli_cmd_export(int argc, char **argv);  /* cmd-export.c */
int cli_cmd_plugins(int argc, char **argv); /* cmd-plugins.c */
int cli_cmd_predict(int argc, char **argv); /* cmd-predict.c */
int cli_cmd_drift(int argc, char **argv);   /* cmd-drift.c */
int cli_cmd_sweep(int argc, char **argv);   /* cmd-sweep.c */
int cli_cmd_queue(int argc, char **argv);   /* cmd-sweep.c */
int cli_cmd_serve(int argc, char **argv);   /* cmd-serve.c (+ serve/) */
int cli_cmd_devices(int argc, char **argv); /* cmd-devices.c */
int cli_cmd_generate(int argc, char **argv); /* cmd-generate.c */
