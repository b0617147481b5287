// The plugin of docs/plugins.md's first example: y = x w^T in fp32, K summed in index order.
#include <bitcheck/plugin.h>

#include <cstring>

static const bitcheck_tensor* find(const bitcheck_call* call, const char* name) {
  for (int i = 0; i < call->tensor_count; ++i)
    if (std::strcmp(call->tensors[i].name, name) == 0) return &call->tensors[i];
  return nullptr;
}

static int run(const bitcheck_call* call, void*) {
  const bitcheck_tensor *x = find(call, "x"), *w = find(call, "w"), *y = find(call, "y");
  const float *xs = static_cast<const float*>(x->data), *ws = static_cast<const float*>(w->data);
  for (int64_t s = 0; s < call->slots; ++s) {
    if (call->slot_rows[s] < 0) continue;  // pad slot
    for (int64_t j = 0; j < w->rows; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < x->row_stride; ++k)
        sum += xs[s * x->row_stride + k] * ws[j * w->row_stride + k];
      static_cast<float*>(y->data)[s * y->row_stride + j] = sum;
    }
  }
  return BITCHECK_PLUGIN_OK;
}

extern "C" int bitcheck_plugin_register(const bitcheck_registrar* r) {
  if (r->declare(r->host, BITCHECK_PLUGIN_ABI_VERSION, "mine") != 0) return 1;
  bitcheck_impl_desc matmul = {
      "matmul", "fixed-order", "cpu", "K in index order", 1, "fp32", "forward", 0, run, nullptr};
  return r->add_impl(r->host, &matmul);
}
