// RoPE formulas shared by the CPU impls and the CUDA kernels (plain C++, host and device).
// The angle is defined in fp32, once, for every path:
//   inv_freq[i] = fp32(base^(-2i/R)), computed in double and rounded once (host, uploaded as is)
//   angle       = fp32(position) * inv_freq[i], one fp32 multiply (positions < 2^24 convert
//   exactly) sin, cos    = sinf(angle), cosf(angle): the accurate library functions, never
//   __sinf/__cosf
// and the rotation uses explicitly rounded multiplies and adds (no FMA contraction), so the same
// (token, position) gives the same bits in any batch, slot or chunk.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/elementwise_math.h"

namespace bitcheck::rope {

constexpr double base = 500000.0;  // rope theta (Llama 3 scale: positions up to 131072)
constexpr std::int64_t max_position = 131072;
constexpr std::int64_t style_neox = 1;  // pairs (i, i + R/2): rotate_half
constexpr std::int64_t style_gptj = 2;  // pairs (2i, 2i + 1): interleaved

inline std::vector<float> inverse_frequencies(std::int64_t rotary_dim) {
  std::vector<float> result(static_cast<std::size_t>(rotary_dim / 2));
  for (std::size_t i = 0; i < result.size(); ++i) {
    result[i] = static_cast<float>(
        std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim)));
  }
  return result;
}

// The element indices (within one head) of rotary pair i.
BITCHECK_HOST_DEVICE void pair_indices(std::int64_t style, std::int64_t rotary_dim, std::int64_t i,
                                       std::int64_t& first, std::int64_t& second) {
  first = style == style_gptj ? 2 * i : i;
  second = style == style_gptj ? 2 * i + 1 : i + rotary_dim / 2;
}

BITCHECK_HOST_DEVICE float angle(std::int32_t position, float inverse_frequency) {
  return elementwise::mul(static_cast<float>(position), inverse_frequency);
}

// The control's angle: from the position relative to the invocation's first position plus that
// offset's own angle, as a chunked-prefill kernel does when it rotates by (pos - chunk_start) and
// composes with the chunk's base angle. Mathematically equal, rounded differently per chunk start.
BITCHECK_HOST_DEVICE float chunk_relative_angle(std::int32_t position, std::int32_t chunk_start,
                                                float inverse_frequency) {
  return elementwise::add(
      elementwise::mul(static_cast<float>(position - chunk_start), inverse_frequency),
      elementwise::mul(static_cast<float>(chunk_start), inverse_frequency));
}

// Forward rotation by +angle; backward (the transpose) by -angle.
BITCHECK_HOST_DEVICE void rotate(bool backward, float cosine, float sine, float a, float b,
                                 float& out_a, float& out_b) {
  using elementwise::add;
  using elementwise::mul;
  using elementwise::sub;
  if (!backward) {
    out_a = sub(mul(a, cosine), mul(b, sine));
    out_b = add(mul(b, cosine), mul(a, sine));
  } else {
    out_a = add(mul(a, cosine), mul(b, sine));
    out_b = sub(mul(b, cosine), mul(a, sine));
  }
}

}  // namespace bitcheck::rope
