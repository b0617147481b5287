// Plugins for the CLI tests, one shared library per variant (TEST_PLUGIN_*): each bad variant gets
// one thing wrong, the faulty one registers impls whose run returns an error or crashes.
#include <bitcheck/plugin.h>

#include <csignal>
#include <cstdio>

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
#else
  bitcheck_impl_desc desc = impl("matmul", "returns-error", "fp32", run_error);
  bitcheck_impl_desc crash = impl("matmul", "crashes", "fp32", run_crash);
  if (registrar->add_impl(registrar->host, &crash) != 0) return 1;
#endif
  return registrar->add_impl(registrar->host, &desc);
}
#endif
