// The GEMMs of one moe impl's path (moe_gemms_cuda.cpp, CUDA build): the router's and each
// expert's three products on device buffers, through matmul's GEMMs. Plain C++ header, no CUDA
// headers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/runtime.h"
#include "core/op.h"

struct CUstream_st;

namespace bitcheck::moe {

// One weight of every expert as the GEMMs read it: `experts` row-major [n, k] matrices one after
// another, and (for the paths whose input gradient is a forward GEMM over it) their transposes.
struct ExpertWeight {
  const void* weights = nullptr;
  const void* transposed = nullptr;  // [k, n] per expert, or nullptr
  std::int64_t n = 0, k = 0;
  std::size_t element_bytes = 2;
  const void* at(std::int64_t expert) const;
  const void* transposed_at(std::int64_t expert) const;
};

// The GEMM path of an impl: our fixed-order GEMM (one tile shape whatever the load), the same
// with a split-K for experts with few tokens (the control), cuBLASLt with a pinned configuration,
// or cuBLASLt's heuristic per call (the library default).
enum class GemmPath { fixed_order, split_k_by_load, cublaslt_pinned, cublaslt_heuristic };

// Below this many tokens on an expert the split-K control splits its GEMMs' K sums in
// split_k_parts partials reduced in the dtype.
constexpr std::int64_t split_k_below_tokens = 4;
constexpr int split_k_parts = 4;

class Gemms {
 public:
  virtual ~Gemms() = default;
  // The case's dtype, and the batch whose impl_config records the configurations used (nullptr
  // in a benchmark).
  void set_case(DType dtype, Batch* batch) {
    dtype_ = dtype;
    batch_ = batch;
  }
  // y[m, n] = x[m, k] · W[e]ᵀ, in the dtype.
  virtual void forward(const void* x, const ExpertWeight& w, std::int64_t expert, void* y,
                       std::int64_t m, CUstream_st* stream) = 0;
  // dx[m, k] = dy[m, n] · W[e], in the dtype.
  virtual void input_grad(const void* dy, const ExpertWeight& w, std::int64_t expert, void* dx,
                          std::int64_t m, CUstream_st* stream) = 0;
  // dw[n, k] (fp32, carried) += dy[t, n]ᵀ · x[t, k], the t rows in order.
  virtual void weight_grad(const void* dy, const void* x, float* dw, std::int64_t t, std::int64_t n,
                           std::int64_t k, CUstream_st* stream) = 0;
  // Whether input_grad reads ExpertWeight::transposed.
  virtual bool needs_transposed() const = 0;
  // Scratch the calls of one layer may hold until the device is synchronized: released here.
  virtual void release_scratch() {}

 protected:
  DType dtype_ = DType::bf16;
  Batch* batch_ = nullptr;
};

std::unique_ptr<Gemms> make_gemms(GemmPath path);

// The fixed-order expert GEMMs' one tile, as its path is named ("tile.X-as-A.128x256").
const char* fixed_order_expert_tile_path();
// The path the fixed-order GEMMs take for `dtype` on this device: that tile, or "portable-fma"
// (fp32, and bf16/fp16 without the wgmma path).
std::string fixed_order_expert_gemm(DType dtype);
// The launch paths a path's GEMMs record (the fixed-order tile, portable-fma and
// dw.token-sequential; buckets and pins; the heuristic; the split-K control's two).
std::vector<PathDecl> gemm_paths(GemmPath path);
// Where a path's configuration changes with an expert's tokens, for GEMMs of (n, k) in the
// case's pass, up to max_rows; empty when it never does.
std::vector<SwitchPoint> gemm_switch_points(
    GemmPath path, const CaseSpec& spec,
    const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes, std::int64_t max_rows);

}  // namespace bitcheck::moe
