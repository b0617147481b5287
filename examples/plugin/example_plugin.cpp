// The example plugin: matmul (y = x w^T) impls registered through the C ABI alone. `fixed-order`
// sums K in index order, one row at a time, so no property of the batch reaches a row's
// arithmetic: it claims invariance. `split-k-by-batch` is a control: below 4 real rows it splits
// the K sum into 4 partials reduced in the output precision, as a heuristic picking split-K for
// small M does, so a row drifts by construction between batch sizes. In a CUDA build the same
// pair also runs on the GPU (example_plugin_cuda.cu): fixed-order-cuda and split-k-by-batch-cuda.
#include <bitcheck/plugin.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

float load(const bitcheck_tensor& t, std::int64_t i) {
  if (std::strcmp(t.dtype, "fp32") == 0) return static_cast<const float*>(t.data)[i];
  std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(t.data)[i])
                       << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;  // bf16 (the plugin declares fp32 and bf16 only)
}

float round_to_dtype(const char* dtype, float value) {
  if (std::strcmp(dtype, "fp32") == 0) return value;
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value)) return value;
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&value, &bits, 4);
  return value;
}

void store(const bitcheck_tensor& t, std::int64_t i, float value) {
  if (std::strcmp(t.dtype, "fp32") == 0) {
    static_cast<float*>(t.data)[i] = value;
    return;
  }
  std::uint32_t bits;
  value = round_to_dtype(t.dtype, value);
  std::memcpy(&bits, &value, 4);
  static_cast<std::uint16_t*>(t.data)[i] = static_cast<std::uint16_t>(bits >> 16);
}

const bitcheck_tensor* find(const bitcheck_call* call, const char* name) {
  for (int32_t i = 0; i < call->tensor_count; ++i) {
    if (std::strcmp(call->tensors[i].name, name) == 0) return &call->tensors[i];
  }
  return nullptr;
}

float dot(const bitcheck_tensor& x, std::int64_t row, const bitcheck_tensor& w, std::int64_t col,
          std::int64_t first, std::int64_t last) {
  float sum = 0.0f;
  for (std::int64_t k = first; k < last; ++k) {
    sum += load(x, row * x.row_stride + k) * load(w, col * w.row_stride + k);
  }
  return sum;
}

int matmul(const bitcheck_call* call, bool split_by_batch) {
  const bitcheck_tensor* x = find(call, "x");
  const bitcheck_tensor* w = find(call, "w");
  const bitcheck_tensor* y = find(call, "y");
  if (!x || !w || !y) {
    std::snprintf(call->error, call->error_capacity, "matmul forward needs x, w and y");
    return BITCHECK_PLUGIN_ERROR;
  }
  const std::int64_t n = w->rows, k = w->row_stride;
  std::int64_t real_rows = 0;
  for (std::int64_t s = 0; s < call->slots; ++s) real_rows += call->slot_rows[s] >= 0;
  const bool split = split_by_batch && real_rows < 4;
  const std::int64_t part = (k + 3) / 4;
  for (std::int64_t s = 0; s < call->slots; ++s) {
    if (call->slot_rows[s] < 0) continue;  // a pad slot: never read, never written
    for (std::int64_t j = 0; j < n; ++j) {
      float value = 0.0f;
      if (!split) {
        value = dot(*x, s, *w, j, 0, k);
      } else {
        for (std::int64_t first = 0; first < k; first += part) {
          const std::int64_t last = first + part < k ? first + part : k;
          value = round_to_dtype(
              call->dtype, value + round_to_dtype(call->dtype, dot(*x, s, *w, j, first, last)));
        }
      }
      store(*y, s * y->row_stride + j, value);
    }
  }
  return BITCHECK_PLUGIN_OK;
}

int run_fixed_order(const bitcheck_call* call, void*) {
  return matmul(call, false);
}
int run_split_k(const bitcheck_call* call, void*) {
  return matmul(call, true);
}

}  // namespace

#ifdef EXAMPLE_PLUGIN_WITH_CUDA
int example_plugin_run_fixed_order_cuda(const bitcheck_call* call, void* user_data);
int example_plugin_run_split_k_cuda(const bitcheck_call* call, void* user_data);
#endif

extern "C" int bitcheck_plugin_register(const bitcheck_registrar* registrar) {
  if (registrar->declare(registrar->host, BITCHECK_PLUGIN_ABI_VERSION, "example") != 0) return 1;
  bitcheck_impl_desc fixed_order = {"matmul",
                                    "fixed-order",
                                    "cpu",
                                    "K summed in index order, one row at a time",
                                    1,
                                    "fp32,bf16",
                                    "forward",
                                    0,
                                    run_fixed_order,
                                    nullptr};
  bitcheck_impl_desc split_k = {
      "matmul",    "split-k-by-batch",
      "cpu",       "control: below 4 rows, K split into 4 partials reduced in the output dtype",
      0,           "fp32,bf16",
      "forward",   0,
      run_split_k, nullptr};
  if (registrar->add_impl(registrar->host, &fixed_order) != 0) return 1;
  if (registrar->add_impl(registrar->host, &split_k) != 0) return 1;
#ifdef EXAMPLE_PLUGIN_WITH_CUDA
  bitcheck_impl_desc fixed_order_cuda = {
      "matmul",
      "fixed-order-cuda",
      "cuda",
      "one thread per output element, one fp32 FMA chain over K in index order (16x16 tiles "
      "staged in shared memory)",
      1,
      "fp32,bf16",
      "forward",
      0,
      example_plugin_run_fixed_order_cuda,
      nullptr};
  bitcheck_impl_desc split_k_cuda = {
      "matmul",
      "split-k-by-batch-cuda",
      "cuda",
      "control: K split into 4 slices below 4 rows, 2 below 64, reduced in the output dtype",
      0,
      "fp32,bf16",
      "forward",
      0,
      example_plugin_run_split_k_cuda,
      nullptr};
  if (registrar->add_impl(registrar->host, &fixed_order_cuda) != 0) return 1;
  if (registrar->add_impl(registrar->host, &split_k_cuda) != 0) return 1;
#endif
  return 0;
}
