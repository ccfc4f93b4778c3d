/* em-cost-scatter.h: accuracy against cost, one labelled point per run,
 * drawn with Cairo (x: parameters, FLOPs or step time on a log axis when
 * the values span more than a decade; y: accuracy). */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define EM_TYPE_COST_SCATTER (em_cost_scatter_get_type())
G_DECLARE_FINAL_TYPE(EmCostScatter, em_cost_scatter, EM, COST_SCATTER, GtkWidget)

GtkWidget *em_cost_scatter_new(void);
/* Copies the points; NaN x or y: the point is listed as "no data". */
void em_cost_scatter_set_points(EmCostScatter *self, const double *x, const double *y,
                                const char *const *labels, int n);
/* x_unit: "params", "FLOP", "s" (formats the tick labels). */
void em_cost_scatter_set_axes(EmCostScatter *self, const char *x_title, const char *x_unit,
                              const char *y_title);
int em_cost_scatter_get_n_points(EmCostScatter *self);

G_END_DECLS
