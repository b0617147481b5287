// The device input generator and the device row comparison against their host versions, bit for
// bit: uniform inputs in every dtype with special values (NaN payloads, infinities, subnormals,
// -0), the per-row mask over rows that differ in one bit, a NaN payload or the sign of a zero, and
// the output fingerprint of device rows.
#include <catch2/catch.hpp>
#include <cstring>
#include <set>

#include "common/device_inputs.h"
#include "common/row_compare.h"
#include "common/runtime.h"
#include "core/rng.h"
#include "core/special_values.h"
#include "run/compare.h"
#include "run/input_generator.h"

using namespace bitcheck;

namespace {

cuda::DeviceDType device_dtype_of(DType dtype) {
  if (dtype == DType::bf16) return cuda::DeviceDType::bf16;
  if (dtype == DType::fp16) return cuda::DeviceDType::fp16;
  return cuda::DeviceDType::fp32;
}

cuda::DeviceBuffer uploaded(const Tensor& tensor) {
  cuda::DeviceBuffer buffer(tensor.bytes());
  buffer.upload(tensor.data(), tensor.bytes());
  return buffer;
}

std::vector<unsigned char> downloaded(const cuda::DeviceBuffer& buffer) {
  std::vector<unsigned char> bytes(buffer.bytes());
  buffer.download(bytes.data(), bytes.size());
  return bytes;
}

bool same_bytes(const Tensor& host, const std::vector<unsigned char>& device) {
  return host.bytes() == device.size() &&
         std::memcmp(host.data(), device.data(), device.size()) == 0;
}

// Rows [first, first + rows) of the tensor the host generates for `decl`, from the device.
std::vector<unsigned char> device_rows(const TensorDecl& decl, std::uint64_t seed, double rate,
                                       std::int64_t first, std::int64_t rows) {
  const std::int64_t width = decl.shape.at(0);
  cuda::UniformInputKey key{device_dtype_of(decl.dtype), seed, hash_name(decl.name),
                            column_scales(decl, width), rate};
  cuda::DeviceBuffer out(static_cast<std::size_t>(rows * width) * dtype_size(decl.dtype));
  cuda::generate_uniform_on_device(key, first, rows, out.get(), nullptr);
  return downloaded(out);
}

}  // namespace

TEST_CASE("device inputs have the host generator's bits, special values included",
          "[gpu][device-checks]") {
  constexpr std::int64_t rows = 97, width = 300;
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    TensorDecl decl{"x", TensorRole::row_input, dtype, {width}};
    decl.scale = 3.0f;
    decl.group_scales = {1.0f, 64.0f, 1.0f / 1024.0f};  // wide and subnormal-bound columns too
    for (double rate : {0.0, 0.25}) {
      CAPTURE(to_string(dtype), rate);
      const Tensor host = generate_input(decl, {rows, width}, 7, rate);
      CHECK(same_bytes(host, device_rows(decl, 7, rate, 0, rows)));
      // A slice of rows from an offset: the same bits as those rows of the whole tensor.
      Tensor slice(dtype, {3, width});
      for (std::int64_t r = 0; r < 3; ++r) slice.copy_row_from(host, 40 + r, r);
      CHECK(same_bytes(slice, device_rows(decl, 7, rate, 40, 3)));
      if (rate == 0) continue;
      // The comparison above covered every kind of special value.
      std::set<SpecialValue> kinds;
      for (std::int64_t i = 0; i < host.numel(); ++i)
        kinds.insert(classify_bits(dtype, host.bits(i)));
      CHECK(kinds.count(SpecialValue::nan) == 1);
      CHECK(kinds.count(SpecialValue::positive_infinity) == 1);
      CHECK(kinds.count(SpecialValue::negative_infinity) == 1);
      CHECK(kinds.count(SpecialValue::subnormal) == 1);
      CHECK(kinds.count(SpecialValue::negative_zero) == 1);
    }
  }
}

TEST_CASE("a device input of another seed differs (the comparison can fail)",
          "[gpu][device-checks]") {
  TensorDecl decl{"x", TensorRole::row_input, DType::bf16, {128}};
  const Tensor host = generate_input(decl, {8, 128}, 7, 0);
  CHECK_FALSE(same_bytes(host, device_rows(decl, 8, 0, 0, 8)));
}

TEST_CASE("the device row mask finds the rows the host finds, one bit at a time",
          "[gpu][device-checks]") {
  for (std::int64_t width : {128, 77}) {  // whole 4-byte words, and rows of an odd byte count
    CAPTURE(width);
    TensorDecl decl{"y", TensorRole::row_output, DType::bf16, {width}};
    const std::int64_t rows = 300;
    Tensor expected = generate_input(decl, {rows, width}, 3, 0);
    expected.set_bits(150 * width + width - 1, 0x7fc0);  // the canonical quiet NaN
    Tensor actual = expected;
    actual.set_bits(0 * width + 5, expected.bits(0 * width + 5) ^ 1u);           // one low bit
    actual.set_bits(150 * width + width - 1, 0x7fc1);                            // a NaN payload
    actual.set_bits(299 * width + 2, expected.bits(299 * width + 2) ^ 0x8000u);  // the sign
    const auto expected_device = uploaded(expected), actual_device = uploaded(actual);
    const auto row_bytes = static_cast<std::size_t>(width) * 2;
    const std::vector<std::int64_t> found =
        cuda::differing_rows_on_device(expected_device.get(), actual_device.get(), rows, row_bytes);
    CHECK(found == std::vector<std::int64_t>{0, 150, 299});
    DriftComparator host("y", DType::bf16);
    for (std::int64_t r = 0; r < rows; ++r) host.compare_row(r, expected, r, actual, r);
    CHECK(host.metrics().rows_differing == static_cast<std::int64_t>(found.size()));
    CHECK(cuda::differing_rows_on_device(expected_device.get(), expected_device.get(), rows,
                                         row_bytes)
              .empty());
  }
}

TEST_CASE("the device fingerprint of rows is the host's", "[gpu][device-checks]") {
  TensorDecl decl{"y", TensorRole::row_output, DType::fp32, {33}};
  Tensor tensor = generate_input(decl, {70, 33}, 5, 0.25);
  const std::vector<std::int64_t> rows = {0, 3, 64, 69};
  const auto device = uploaded(tensor);
  const std::uint64_t seed = fingerprint_bytes("y", 1);
  CHECK(cuda::fingerprint_rows_on_device(device.get(), 33 * 4, rows, seed) ==
        fingerprint_rows(tensor, rows, seed));
  // One byte of one fingerprinted row changed: both fingerprints move, and stay equal.
  tensor.set_bits(64 * 33 + 10, tensor.bits(64 * 33 + 10) ^ 0x100u);
  const auto changed = uploaded(tensor);
  const std::uint64_t after = cuda::fingerprint_rows_on_device(changed.get(), 33 * 4, rows, seed);
  CHECK(after != cuda::fingerprint_rows_on_device(device.get(), 33 * 4, rows, seed));
  CHECK(after == fingerprint_rows(tensor, rows, seed));
}
