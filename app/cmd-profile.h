/* cmd-profile.h: `ember profile`, the op profiler and memory summary of a
 * few training steps. */
#pragma once

/* ember profile SPEC [--steps N] [--trace FILE] [options]
 *
 * argv[0] is the command word ("profile"), the rest its arguments (so
 * main calls em_cli_profile(argc - 1, argv + 1)). Prints the op table
 * (top ops, then per layer), the FLOPs of matmul and conv ops, the memory
 * summary and the leak check to stdout; returns the exit status (0, 1 on
 * a failure, 2 on bad usage). */
int em_cli_profile(int argc, char **argv);
