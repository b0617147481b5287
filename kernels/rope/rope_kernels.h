// rope/*: launcher of the rotary position embedding kernels (forward and backward, NeoX and GPT-J
// pairing, rotary dim <= head dim; a vectorized kernel where the shape and alignment allow, a
// scalar one otherwise, both with the same per-element arithmetic). Plain C++ header, no CUDA
// headers.
#pragma once
#include <cstdint>

#include "common/device_dtype.h"

struct CUstream_st;

namespace bitcheck::cuda {

struct RopeLaunch {
  DeviceDType dtype = DeviceDType::bf16;
  const void* in = nullptr;  // [slots, heads * head_dim]: x (forward) or dy (backward)
  void* out = nullptr;
  const int32_t* positions = nullptr;        // [slots]; negative = pad slot (skipped)
  const float* inverse_frequency = nullptr;  // [rotary_dim / 2], from rope::inverse_frequencies
  int64_t slots = 0, heads = 0, head_dim = 0, rotary_dim = 0, style = 1;
  bool backward = false;
  // Control only: angle composed from the position relative to chunk_start (see rope_math.h).
  bool chunk_relative = false;
  int32_t chunk_start = 0;
};

void rope_launch(const RopeLaunch& launch, CUstream_st* stream);

}  // namespace bitcheck::cuda
