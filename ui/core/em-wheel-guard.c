/* em-wheel-guard.c: the wheel goes to a spin button or scale only when it
 * has the focus (em-wheel-guard.h). */
#include "em-wheel-guard.h"

/* The widget's own scroll controllers follow its focus. */
static void sync_phase(GtkWidget *w) {
  gboolean focused = (gtk_widget_get_state_flags(w) & GTK_STATE_FLAG_FOCUS_WITHIN) != 0;
  GListModel *ctrls = gtk_widget_observe_controllers(w);
  for (guint i = 0, n = g_list_model_get_n_items(ctrls); i < n; i++) {
    GtkEventController *c = g_list_model_get_item(ctrls, i);
    if (GTK_IS_EVENT_CONTROLLER_SCROLL(c))
      gtk_event_controller_set_propagation_phase(c, focused ? GTK_PHASE_BUBBLE : GTK_PHASE_NONE);
    g_object_unref(c);
  }
  g_object_unref(ctrls);
}

static void on_state_flags(GtkWidget *w, GtkStateFlags old, gpointer data) {
  (void)data;
  if ((old ^ gtk_widget_get_state_flags(w)) & GTK_STATE_FLAG_FOCUS_WITHIN) sync_phase(w);
}

void em_wheel_guard(GtkWidget *widget) {
  g_return_if_fail(GTK_IS_WIDGET(widget));
  if (!GTK_IS_SPIN_BUTTON(widget) && !GTK_IS_SCALE(widget)) return;
  if (g_object_get_data(G_OBJECT(widget), "em-wheel-guard")) return;
  g_object_set_data(G_OBJECT(widget), "em-wheel-guard", GINT_TO_POINTER(1));
  g_signal_connect(widget, "state-flags-changed", G_CALLBACK(on_state_flags), NULL);
  sync_phase(widget);
}

void em_wheel_guard_all(GtkWidget *root) {
  g_return_if_fail(GTK_IS_WIDGET(root));
  em_wheel_guard(root);
  for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c))
    em_wheel_guard_all(c);
}
