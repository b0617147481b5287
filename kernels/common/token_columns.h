// The launcher of the token-ordered column accumulation (token_columns.cu) behind the RMSNorms'
// dweight and the scale op's dscale. Plain C++ header, no CUDA headers.
#pragma once
#include <cstdint>

#include "common/device_dtype.h"

struct CUstream_st;

namespace bitcheck::cuda {

// accumulator[c] (fp32, in/out) += dy[t, c] * v[t, c] * (inverse_rms ? inverse_rms[t] : 1) for
// t = tokens[0], tokens[1], ... in order, one fp32 add per token into the running value, where v
// is x, or dtype(x + residual) when residual is set. The running value lives in `accumulator`
// between calls, so splitting the tokens into consecutive calls gives identical bits.
void token_column_accumulate(DeviceDType dtype, const void* dy, const void* x, const void* residual,
                             const float* inverse_rms, const int32_t* tokens, int64_t token_count,
                             int64_t width, float* accumulator, CUstream_st* stream);

}  // namespace bitcheck::cuda
