// The LM head's GEMMs as lm_head's CUDA impls run them and ops built on the LM head reuse them
// (lm_head_cuda.cpp, CUDA build): an impl's GEMM path, its identity, switch points and skip
// reason, and the three products on device buffers. Plain C++ header, no CUDA headers.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/runtime.h"
#include "core/op.h"

namespace bitcheck::lm_head {

// Our fixed-order GEMM, cuBLASLt with a pinned configuration, cuBLASLt's heuristic (the library
// default) or the split-K-by-rows control.
enum class GemmPath { fixed_order, cublaslt_pinned, cublaslt_heuristic, split_k_by_rows };

// The LM head impl on the path: its name, kind, description and launch paths.
ImplInfo gemm_info(GemmPath path);
// Where the path changes with M for the case's shape (spec.rows ignored), up to max_rows.
std::vector<SwitchPoint> gemm_switch_points(GemmPath path, const CaseSpec& spec,
                                            std::int64_t max_rows);
// A shape the path's GEMM cannot run, or nullopt.
std::optional<std::string> gemm_skip_reason(GemmPath path, const CaseSpec& spec);

// The three products of the LM head on one path, on device buffers; each records the
// configuration it used in batch.impl_config. V plays the GEMM's N and H its K.
class Gemms {
 public:
  virtual ~Gemms() = default;
  // logits[M,V] = h[M,H] · table[V,H]ᵀ
  virtual void logits(Batch& batch, const void* h, const void* table, void* logits,
                      std::int64_t m) = 0;
  // dh[M,H] = dlogits[M,V] · table[V,H]
  virtual void input_grad(Batch& batch, const void* dlogits, void* dh, std::int64_t m) = 0;
  // dtable[V,H] += dlogits[T,V]ᵀ · h[T,H] over T packed tokens, added into the carried dtable.
  virtual void table_grad_device(Batch& batch, const void* dlogits, const void* h,
                                 std::int64_t tokens, cuda::DeviceBuffer& dtable) = 0;
  // Times logits = h · tableᵀ on the device (the forward product, which dominates); nullopt for a
  // backward case and for the control.
  virtual std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                                    const BenchSettings& settings) = 0;
};
std::unique_ptr<Gemms> make_gemms(GemmPath path);

}  // namespace bitcheck::lm_head
