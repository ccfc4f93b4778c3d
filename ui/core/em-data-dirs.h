/* em-data-dirs.h: where the workbench finds its data folders (the model
 * zoo, "models"; "datasets"). One resolver that every page uses, so that
 * the Builder's "Model zoo..." list, the Train page's default model and
 * Ctrl+O's starting folder agree in a built tree and an installed one. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The engine's em_data_dir (em-io.h: $EMBER_SOURCE_ROOT/data/KIND, the
 * source tree built from, the installed <datadir>/ember/KIND, the XDG
 * data dirs), as the CLI resolves it. NULL when none exists; g_free. */
char *em_data_dir_find(const char *kind);

G_END_DECLS
