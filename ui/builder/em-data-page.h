/* em-data-page.h: the Data page: choose a dataset (Fashion-MNIST at its
 * Debian folder by default, a CSV file, a CIFAR-10 folder, or a synthetic
 * set), preview samples as images with their labels, and see how many
 * samples each class has. Loading runs in a worker thread; a missing or
 * broken file is shown inline. The choice goes to em_app_state_set_dataset.
 * The first load starts when the page is first shown. */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"

G_BEGIN_DECLS

#define EM_TYPE_DATA_PAGE (em_data_page_get_type())
G_DECLARE_FINAL_TYPE(EmDataPage, em_data_page, EM, DATA_PAGE, GtkBox)

GtkWidget *em_data_page_new(EmAppState *state);
/* Starts loading name ("fashion-mnist", "cifar10", "csv", "synthetic")
 * from path (NULL: the default folder; required for csv and cifar10). */
void em_data_page_load(EmDataPage *self, const char *name, const char *path);
gboolean em_data_page_is_loading(EmDataPage *self);
/* After a load: previews shown, samples in the set, classes and the
 * samples of class k; the error text of a failed load (NULL: none). */
int em_data_page_get_n_previews(EmDataPage *self);
gint64 em_data_page_get_n_samples(EmDataPage *self);
int em_data_page_get_n_classes(EmDataPage *self);
gint64 em_data_page_get_class_count(EmDataPage *self, int k);
const char *em_data_page_get_error(EmDataPage *self);

G_END_DECLS
