/* node-params.c: convolution and pooling parameters in tape nodes
 * (node-params.h). */
#include "node-params.h"

void em_conv2d_params_save(em_node *nd, const em_conv2d_params *p) {
  nd->i[0] = p->stride[0];
  nd->i[1] = p->stride[1];
  nd->i[2] = p->padding[0];
  nd->i[3] = p->padding[1];
  nd->i[4] = p->dilation[0];
  nd->i[5] = p->dilation[1];
  nd->i[6] = p->groups;
}

em_conv2d_params em_conv2d_params_load(const em_node *nd) {
  em_conv2d_params p = {
      .stride = {(int)nd->i[0], (int)nd->i[1]},
      .padding = {(int)nd->i[2], (int)nd->i[3]},
      .dilation = {(int)nd->i[4], (int)nd->i[5]},
      .groups = (int)nd->i[6],
  };
  return p;
}

void em_pool2d_params_save(em_node *nd, const em_pool2d_params *p) {
  nd->i[0] = p->kernel[0];
  nd->i[1] = p->kernel[1];
  nd->i[2] = p->stride[0];
  nd->i[3] = p->stride[1];
  nd->i[4] = p->padding[0];
  nd->i[5] = p->padding[1];
  nd->i[6] = p->count_include_pad;
}

em_pool2d_params em_pool2d_params_load(const em_node *nd) {
  em_pool2d_params p = {
      .kernel = {(int)nd->i[0], (int)nd->i[1]},
      .stride = {(int)nd->i[2], (int)nd->i[3]},
      .padding = {(int)nd->i[4], (int)nd->i[5]},
      .count_include_pad = nd->i[6] != 0,
  };
  return p;
}
