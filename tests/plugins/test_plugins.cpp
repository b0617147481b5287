// Plugins for the CLI and unit tests, one shared library per variant (TEST_PLUGIN_*): each bad
// variant gets one thing wrong, the faulty one registers impls whose run returns an error or
// crashes, the device one registers host code as cuda impls for the unit tests' host stand-in of
// a device (the adapter's path without a GPU: staging, call descriptor, stream, downloads).
#include <bitcheck/plugin.h>

#include <csignal>
#include <cstdio>
#include <cstring>

namespace {

int run_error(const bitcheck_call* call, void*) {
  std::snprintf(call->error, call->error_capacity, "the plugin refused this call on purpose");
  return BITCHECK_PLUGIN_ERROR;
}

int run_crash(const bitcheck_call*, void*) {
  std::signal(SIGSEGV, SIG_DFL);
  std::raise(SIGSEGV);
  return BITCHECK_PLUGIN_ERROR;
}

bitcheck_impl_desc impl(const char* op, const char* name, const char* dtypes, bitcheck_run_fn run) {
  return {op, name, "cpu", "test plugin impl", 1, dtypes, "forward", 0, run, nullptr};
}

#ifdef TEST_PLUGIN_DEVICE
const bitcheck_tensor* find(const bitcheck_call* call, const char* name) {
  for (int32_t i = 0; i < call->tensor_count; ++i) {
    if (std::strcmp(call->tensors[i].name, name) == 0) return &call->tensors[i];
  }
  return nullptr;
}

// fp32 y = x w^T, K in index order; with `split`, below 4 real rows the K sum in two halves.
int matmul(const bitcheck_call* call, bool split) {
  const bitcheck_tensor *x = find(call, "x"), *w = find(call, "w"), *y = find(call, "y");
  if (call->stream != nullptr || call->workspace == nullptr || call->workspace_bytes != 64) {
    std::snprintf(call->error, call->error_capacity,
                  "expected the stand-in's null stream and "
                  "a 64-byte workspace");
    return BITCHECK_PLUGIN_ERROR;
  }
  int64_t real_rows = 0;
  for (int64_t s = 0; s < call->slots; ++s) real_rows += call->slot_rows[s] >= 0;
  const int64_t k = x->row_stride, half = split && real_rows < 4 ? k / 2 : k;
  const auto* xs = static_cast<const float*>(x->data);
  const auto* ws = static_cast<const float*>(w->data);
  for (int64_t s = 0; s < call->slots; ++s) {
    if (call->slot_rows[s] < 0) continue;
    for (int64_t j = 0; j < w->rows; ++j) {
      float first = 0.0f, second = 0.0f;
      for (int64_t i = 0; i < half; ++i) first += xs[s * k + i] * ws[j * k + i];
      for (int64_t i = half; i < k; ++i) second += xs[s * k + i] * ws[j * k + i];
      static_cast<float*>(y->data)[s * y->row_stride + j] = first + second;
    }
  }
  return BITCHECK_PLUGIN_OK;
}
int run_fixed_order(const bitcheck_call* call, void*) {
  return matmul(call, false);
}
int run_split(const bitcheck_call* call, void*) {
  return matmul(call, true);
}
#endif

}  // namespace

#ifdef TEST_PLUGIN_MISSING_SYMBOL
extern "C" int bitcheck_plugin_register_misspelled(const bitcheck_registrar*) {
  return 0;
}
#else
extern "C" int bitcheck_plugin_register(const bitcheck_registrar* registrar) {
#ifdef TEST_PLUGIN_WRONG_ABI
  const uint32_t version = BITCHECK_PLUGIN_ABI_VERSION + 98;
#else
  const uint32_t version = BITCHECK_PLUGIN_ABI_VERSION;
#endif
  if (registrar->declare(registrar->host, version, "test") != 0) return 1;
#if defined(TEST_PLUGIN_UNKNOWN_OP)
  bitcheck_impl_desc desc = impl("no-such-op", "bad-op", "fp32", run_error);
#elif defined(TEST_PLUGIN_BAD_DTYPE)
  bitcheck_impl_desc desc = impl("matmul", "bad-dtype", "fp32,fp8", run_error);
#elif defined(TEST_PLUGIN_DEVICE)
  bitcheck_impl_desc desc = {"matmul", "returns-error", "cuda", "test plugin impl", 1,
                             "fp32",   "forward",       0,      run_error,          nullptr};
  bitcheck_impl_desc fixed = {"matmul", "fixed-order", "cuda", "K in index order", 1,
                              "fp32",   "forward",     64,     run_fixed_order,    nullptr};
  bitcheck_impl_desc split = {"matmul",  "split-k", "cuda",    "control: K halves below 4 rows",
                              0,         "fp32",    "forward", 64,
                              run_split, nullptr};
  if (registrar->add_impl(registrar->host, &fixed) != 0) return 1;
  if (registrar->add_impl(registrar->host, &split) != 0) return 1;
#else
  bitcheck_impl_desc desc = impl("matmul", "returns-error", "fp32", run_error);
  bitcheck_impl_desc crash = impl("matmul", "crashes", "fp32", run_crash);
  if (registrar->add_impl(registrar->host, &crash) != 0) return 1;
#endif
  return registrar->add_impl(registrar->host, &desc);
}
#endif
