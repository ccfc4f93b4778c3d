/* em-data-dirs.h: where the workbench finds its data folders (the model
 * zoo, "models"; "datasets"). One resolver that every page uses, so that
 * the Builder's "Model zoo..." list, the Train page's default model and
 * Ctrl+O's starting folder agree in a built tree and an installed one. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The first folder that exists of, in order: $EMBER_SOURCE_ROOT/data/KIND,
 * the source tree this program was built from (<source>/data/KIND), the
 * installed <prefix>/<datadir>/ember/KIND, and <dir>/ember/KIND for each
 * of the XDG system data dirs. NULL when none exists; g_free the result. */
char *em_data_dir_find(const char *kind);

G_END_DECLS
