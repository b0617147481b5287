// rope on the CUDA backend (small shapes): fixed-order passes every layout, dtype and pass, on the
// vectorized kernel and on the scalar one, and both give the same bits; the CUDA control drifts.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "common/adapter_support.h"
#include "common/runtime.h"
#include "rope/rope_kernels.h"
#include "rope/rope_math.h"
#include "unit/op_case.h"

using namespace bitcheck;

TEST_CASE("rope cuda fixed-order passes every layout", "[gpu][rope]") {
  op_test::expect_passes("rope", "fixed-order",
                         {{"heads", 3}, {"head_dim", 32}, {"rotary_dim", 16}, {"style", 2}},
                         {1, 3, 33});
}

TEST_CASE("rope cuda chunk-relative-angle drifts", "[gpu][rope][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (DType dtype : {DType::bf16, DType::fp32, DType::fp16})
      op_test::expect_drifts("rope", "chunk-relative-angle",
                             {{"heads", 2}, {"head_dim", 64}, {"rotary_dim", 64}, {"style", 1}},
                             dtype, pass, {3, 16});
  }
}

TEST_CASE("rope cuda fixed-order passes with NeoX pairing", "[gpu][rope]") {
  op_test::expect_passes("rope", "fixed-order",
                         {{"heads", 2}, {"head_dim", 64}, {"rotary_dim", 64}, {"style", 1}},
                         {7, 64});
}

TEST_CASE("rope cuda fixed-order passes with a pass-through tail and rows wider than a block",
          "[gpu][rope]") {
  // 24 pass-through elements per head: the last unit holds one 16-byte group.
  op_test::expect_passes("rope", "fixed-order",
                         {{"heads", 5}, {"head_dim", 40}, {"rotary_dim", 16}, {"style", 1}},
                         {3, 9});
  // 320 units per slot: one slot over two blocks.
  op_test::expect_passes("rope", "fixed-order",
                         {{"heads", 40}, {"head_dim", 128}, {"rotary_dim", 64}, {"style", 2}}, {3});
}

TEST_CASE("rope cuda fixed-order passes on shapes the vector kernel does not take", "[gpu][rope]") {
  op_test::expect_passes("rope", "fixed-order",
                         {{"heads", 3}, {"head_dim", 20}, {"rotary_dim", 12}, {"style", 1}},
                         {1, 5});
  op_test::expect_passes("rope", "fixed-order",
                         {{"heads", 2}, {"head_dim", 18}, {"rotary_dim", 10}, {"style", 2}},
                         {1, 5});
}

namespace {

using cuda_support::device_dtype;

constexpr unsigned char kUntouched = 0x5A;

// Runs rope on 6 slots (one a pad slot) with input and output stored `offset` elements past an
// allocation (16-byte aligned); returns the output bytes.
std::vector<unsigned char> run_rope_at(DType dtype, std::int64_t style, bool backward,
                                       std::int64_t offset) {
  const std::int64_t heads = 4, head_dim = 64, rotary_dim = 32;
  const std::vector<std::int32_t> positions = {5, -1, 131071, 0, 77777, 4096};
  const auto slots = static_cast<std::int64_t>(positions.size());
  Tensor in(dtype, {slots, heads * head_dim});
  std::uint32_t state = 777;
  for (std::int64_t i = 0; i < in.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    in.set(i, static_cast<float>(state >> 8) / 16777216.0f * 4.0f - 2.0f);
  }
  const std::size_t shift = static_cast<std::size_t>(offset) * dtype_size(dtype);
  std::vector<unsigned char> padded(shift + in.bytes(), 0);
  std::memcpy(padded.data() + shift, in.data(), in.bytes());
  const std::vector<float> frequencies = rope::inverse_frequencies(rotary_dim);
  cuda::DeviceBuffer in_device(padded.size()), out_device(padded.size());
  cuda::DeviceBuffer position_device(positions.size() * 4),
      frequency_device(frequencies.size() * 4);
  in_device.upload(padded.data(), padded.size());
  out_device.fill_bytes(kUntouched);
  position_device.upload(positions.data(), positions.size() * 4);
  frequency_device.upload(frequencies.data(), frequencies.size() * 4);
  cuda::RopeLaunch launch;
  launch.dtype = device_dtype(dtype);
  launch.in = static_cast<const unsigned char*>(in_device.get()) + shift;
  launch.out = static_cast<unsigned char*>(out_device.get()) + shift;
  launch.positions = position_device.as<std::int32_t>();
  launch.inverse_frequency = frequency_device.as<float>();
  launch.slots = slots;
  launch.heads = heads;
  launch.head_dim = head_dim;
  launch.rotary_dim = rotary_dim;
  launch.style = style;
  launch.backward = backward;
  cuda::rope_launch(launch, nullptr);
  std::vector<unsigned char> out(padded.size());
  out_device.download(out.data(), out.size());
  return {out.begin() + static_cast<std::ptrdiff_t>(shift), out.end()};
}

}  // namespace

TEST_CASE("rope cuda fixed-order gives the same bits on the vector and the scalar kernel",
          "[gpu][rope]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (std::int64_t style : {rope::style_neox, rope::style_gptj}) {
      for (bool backward : {false, true}) {
        INFO(to_string(dtype) << " style " << style << (backward ? " backward" : " forward"));
        const std::vector<unsigned char> vector_kernel = run_rope_at(dtype, style, backward, 0);
        const std::vector<unsigned char> scalar_kernel =
            run_rope_at(dtype, style, backward, 1);  // unaligned
        CHECK(vector_kernel == scalar_kernel);
        // Slot 1 is a pad slot: never written.
        const std::size_t row_bytes = vector_kernel.size() / 6;
        bool pad_untouched = true;
        for (std::size_t b = row_bytes; b < 2 * row_bytes; ++b) {
          pad_untouched = pad_untouched && vector_kernel[b] == kUntouched;
        }
        CHECK(pad_untouched);
      }
    }
  }
}
