/* node-params.h: the parameters of a convolution or pooling kept in a
 * tape node's integer slots i[0..6], so that its backward (on any device)
 * reads back what the forward used. */
#pragma once

#include "em-ops.h"

void em_conv2d_params_save(em_node *nd, const em_conv2d_params *p);
em_conv2d_params em_conv2d_params_load(const em_node *nd);
void em_pool2d_params_save(em_node *nd, const em_pool2d_params *p);
em_pool2d_params em_pool2d_params_load(const em_node *nd);
