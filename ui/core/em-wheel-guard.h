/* em-wheel-guard.h: form controls that take the mouse wheel only when
 * focused. A spin button (or a scale) under the pointer of a person who
 * scrolls a form to reach a button below it must not change its value:
 * unfocused, its own scroll controller is switched off (GTK_PHASE_NONE),
 * so the wheel goes on to the scrolled window around it; once it has the
 * focus (a click, Tab), the wheel changes its value as GTK's does. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

/* Guards widget, if it is a spin button or a scale. */
void em_wheel_guard(GtkWidget *widget);
/* Guards every spin button and scale under root (root included). */
void em_wheel_guard_all(GtkWidget *root);

G_END_DECLS
