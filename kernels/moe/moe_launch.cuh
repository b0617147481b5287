// What the moe kernel files share on the host side of a launch: the block size, the grid for a
// count of items, the stream cast, and the dispatch of a launch on the case's element type.
// Included only by .cu files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.cuh"
#include "common/device_dtype.h"

namespace bitcheck::cuda::moe_launch {

constexpr int kThreads = 256;

inline cudaStream_t as_stream(CUstream_st* stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

inline unsigned blocks_for(std::int64_t items, int per_block = kThreads) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

// Runs `launch` with the element type of `dtype` (a value of that type as its argument), then
// checks the launch.
template <typename Launch>
void with_type(DeviceDType dtype, Launch&& launch) {
  switch (dtype) {
    case DeviceDType::bf16:
      launch(__nv_bfloat16{});
      break;
    case DeviceDType::fp16:
      launch(__half{});
      break;
    case DeviceDType::fp32:
      launch(float{});
      break;
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda::moe_launch
