// The device input generator and the device row comparison against their host versions, bit for
// bit: uniform inputs in every dtype with special values (NaN payloads, infinities, subnormals,
// -0), the per-row mask over rows that differ in one bit, a NaN payload or the sign of a zero, the
// output fingerprint of device rows, the chain's glue on the device, and the runner's cases with
// inputs generated and outputs compared on the device against the same cases all on the host.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <set>

#include "common/device_inputs.h"
#include "common/device_output_cuda.h"
#include "common/row_compare.h"
#include "common/runtime.h"
#include "core/rng.h"
#include "core/special_values.h"
#include "manifest.h"
#include "report/case_json.h"
#include "run/compare.h"
#include "run/host_held_output.h"
#include "run/input_generator.h"
#include "run/runner.h"
#include "spec/contract.h"

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

TEST_CASE("a CUDA output left on the device: its differing parts are the host's, read back whole",
          "[gpu][device-checks]") {
  // 16 parts of 64 KiB and a tail of 12 bytes; differences in part 0, part 7 and the tail.
  constexpr std::size_t part = std::size_t(1) << 16, bytes = 16 * part + 12;
  TensorDecl decl{
      "dw", TensorRole::reduction_output, DType::fp32, {static_cast<std::int64_t>(bytes / 4)}};
  Tensor expected = generate_input(decl, {1, decl.shape[0]}, 9, 0.25);
  Tensor actual = expected;
  for (std::int64_t element :
       {std::int64_t(3), std::int64_t(7 * part / 4 + 100), std::int64_t(bytes / 4 - 1)}) {
    actual.set_bits(element, actual.bits(element) ^ 1u);
  }
  cuda::DeviceBuffer e = uploaded(expected), a = uploaded(actual), again = uploaded(expected);
  const cuda_support::CudaDeviceOutput held_expected(std::move(e), bytes);
  const cuda_support::CudaDeviceOutput held_actual(std::move(a), bytes);
  const cuda_support::CudaDeviceOutput held_again(std::move(again), bytes);
  CHECK(held_actual.differing_parts(held_expected, part) == std::vector<std::int64_t>{0, 7, 16});
  CHECK(held_again.differing_parts(held_expected, part).empty());
  std::vector<unsigned char> back(bytes);
  held_actual.read(back.data(), 0, bytes);
  CHECK(std::memcmp(back.data(), actual.data(), bytes) == 0);
  std::vector<unsigned char> middle(100);
  held_actual.read(middle.data(), 5 * part + 3, middle.size());
  CHECK(std::memcmp(middle.data(), static_cast<const unsigned char*>(actual.data()) + 5 * part + 3,
                    middle.size()) == 0);
  CHECK_THROWS(held_actual.read(middle.data(), bytes - 10, middle.size()));
}

TEST_CASE("packed rows placed at their slots on the device: each row at its slot, pads 0xFF",
          "[gpu][device-checks]") {
  // 5 packed rows of 12 bytes into 9 slots: runs {0, 1}, {3, 4}, {7}; slots 2, 5, 6, 8 pads.
  constexpr std::size_t row_bytes = 12;
  const std::vector<std::int32_t> slots = {0, 1, 3, 4, 7};
  std::vector<unsigned char> packed(slots.size() * row_bytes);
  for (std::size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<unsigned char>(i + 1);
  cuda::DeviceBuffer device(packed.size());
  cuda::copy_to_device(device.get(), packed.data(), packed.size());
  cuda::DeviceBuffer placed = cuda_support::rows_at_slots(device, slots, 9, row_bytes);
  std::vector<unsigned char> back(9 * row_bytes);
  cuda::copy_to_host(back.data(), placed.get(), back.size());
  std::vector<unsigned char> expected(9 * row_bytes, 0xFF);
  for (std::size_t r = 0; r < slots.size(); ++r)
    std::memcpy(expected.data() + static_cast<std::size_t>(slots[r]) * row_bytes,
                packed.data() + r * row_bytes, row_bytes);
  CHECK(back == expected);
  // No real row: every slot a pad.
  cuda::DeviceBuffer pads = cuda_support::rows_at_slots(device, {}, 3, row_bytes);
  std::vector<unsigned char> pad_bytes(3 * row_bytes);
  cuda::copy_to_host(pad_bytes.data(), pads.get(), pad_bytes.size());
  CHECK(pad_bytes == std::vector<unsigned char>(3 * row_bytes, 0xFF));
  CHECK_THROWS(cuda_support::rows_at_slots(device, {0, 9}, 9, row_bytes));
}

TEST_CASE("CUDA conversions and column copies have the host-held outputs' bits",
          "[gpu][device-checks]") {
  // Every 16-bit pattern widened, a spread of 32-bit patterns narrowed (the host-held output is
  // checked against core/dtype.h by the unit tests; here the CUDA one against it).
  Tensor halves(DType::bf16, {65536}, Tensor::uninitialized);
  for (std::uint32_t bits = 0; bits < 65536; ++bits) halves.set_bits(bits, bits);
  std::vector<std::uint32_t> words;
  for (std::uint32_t exponent = 0; exponent < 256; ++exponent) {
    for (std::uint32_t low : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u, 0x7fffu, 0x8000u,
                              0x8001u, 0x18000u, 0x7fffffu, 0x400000u, 0x5a5a5au}) {
      for (std::uint32_t sign : {0u, 0x80000000u}) words.push_back(sign | exponent << 23 | low);
    }
  }
  for (std::uint32_t i = 0; i < 100000; ++i) words.push_back(i * 2654435761u);
  Tensor floats(DType::fp32, {static_cast<std::int64_t>(words.size())}, Tensor::uninitialized);
  std::memcpy(floats.data(), words.data(), words.size() * 4);
  struct Conversion {
    const Tensor* source;
    DType from, to;
  };
  for (const Conversion& c : {Conversion{&halves, DType::bf16, DType::fp32},
                              Conversion{&halves, DType::fp16, DType::fp32},
                              Conversion{&floats, DType::fp32, DType::bf16},
                              Conversion{&floats, DType::fp32, DType::fp16},
                              Conversion{&floats, DType::fp32, DType::fp32}}) {
    INFO(to_string(c.from) << " -> " << to_string(c.to));
    const HostHeldOutput host(*c.source);
    const cuda_support::CudaDeviceOutput device(uploaded(*c.source), c.source->bytes());
    auto expected = host.converted(c.from, c.to);
    auto actual = device.converted(c.from, c.to);
    REQUIRE(actual->bytes() == expected->bytes());
    std::vector<unsigned char> e(expected->bytes()), a(actual->bytes());
    expected->read(e.data(), 0, e.size());
    actual->read(a.data(), 0, a.size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < e.size(); ++i) differing += e[i] != a[i];
    CHECK(differing == 0);
  }
  // Columns 2..4 of 5 rows of 7 fp32 into columns 1..3 of rows of 4.
  Tensor source(DType::fp32, {5, 7}, Tensor::uninitialized);
  for (std::int64_t i = 0; i < 35; ++i)
    source.set_bits(i, 0x3f800000u + static_cast<std::uint32_t>(i));
  const cuda_support::CudaDeviceOutput from(uploaded(source), source.bytes());
  auto to = from.make_output(5 * 4 * 4, 0xAAAAAAAAu, 4);
  ColumnCopy copy;
  copy.rows = 5;
  copy.source_pitch = 7 * 4;
  copy.source_offset = 2 * 4;
  copy.pitch = 4 * 4;
  copy.offset = 1 * 4;
  copy.width = 3 * 4;
  to->copy_columns(from, copy);
  std::vector<std::uint32_t> out(20);
  to->read(out.data(), 0, 80);
  for (std::int64_t r = 0; r < 5; ++r) {
    CHECK(out[static_cast<std::size_t>(r * 4)] == 0xAAAAAAAAu);
    for (std::int64_t col = 0; col < 3; ++col)
      CHECK(out[static_cast<std::size_t>(r * 4 + 1 + col)] == source.bits(r * 7 + 2 + col));
  }
}

TEST_CASE("the runner's device comparisons give the host's results on CUDA impls",
          "[gpu][device-checks]") {
  Registry registry;
  register_all(registry);
  const Contract contract = load_embedded_contract(registry);
  const Dims sizes = {{"N", 256}, {"K", 512}, {"H", 256}, {"V", 4000},
                      {"KVH", 2}, {"D", 64},  {"L", 100}, {"I", 256}};
  const std::vector<std::string> generic = {"alone",    "batch",  "shuffled",  "pad_right",
                                            "pad_left", "ragged", "microbatch"};
  int compared = 0, drifted = 0, on_device = 0, fewer_uploads = 0;
  for (const char* op_name :
       {"matmul", "lm_head", "lm_head_logprob", "embedding", "rmsnorm", "add_rmsnorm", "silu",
        "swiglu", "residual_add", "logprob", "attention"}) {
    const OpDef& op = *registry.find_op(op_name);
    for (Pass pass : {Pass::forward, Pass::backward}) {
      for (Impl* impl : registry.impls(op_name)) {
        if (impl->backend() != "cuda" || !impl->supports(pass) ||
            impl->tensor_parallelism().max_tp > 1)
          continue;
        CaseSpec spec;
        spec.op = op_name;
        spec.impl = impl->name();
        spec.dtype = DType::bf16;
        spec.dtype_name = "bf16";
        spec.pass = pass;
        for (const std::string& dim : op.dim_names) spec.dims[dim] = sizes.at(dim);
        if (spec.op == "attention") spec.dims["H"] = 8;
        spec.rows = spec.op == "attention" ? 4 : 40;
        spec.alone_rows = 8;  // rows past the alone sample compared against the batch
        spec.layouts = op.layout_names.empty() ? generic : op.layout_names;
        CAPTURE(spec.id());
        Runner runner(registry, contract);
        setenv("BITCHECK_OUTPUTS_ON_HOST", "1", 1);
        const CaseResult host = runner.run_case(spec);
        unsetenv("BITCHECK_OUTPUTS_ON_HOST");
        const CaseResult device = runner.run_case(spec);
        if (host.verdict == Verdict::skipped) continue;
        REQUIRE(host.verdict != Verdict::error);
        REQUIRE(device.verdict != Verdict::error);
        nlohmann::json a = case_to_json(host), b = case_to_json(device);
        a.erase("timings");
        b.erase("timings");
        // Atomics controls differ from run to run by design: their verdicts only.
        const bool atomic = spec.impl.find("atomic") != std::string::npos;
        if (atomic) {
          CHECK(host.verdict == device.verdict);
        } else {
          CHECK(a == b);
        }
        CHECK(host.timings.profile[Phase::device_comparisons].bytes == 0);
        // (the impls that still download their rows, lm_head_logprob's forward and the split-K
        // controls of matmul, compare on the host both ways)
        if (device.timings.profile[Phase::device_comparisons].bytes > 0) ++on_device;
        // Row inputs generated on the device for the impls that read them there: fewer bytes
        // uploaded, the same results (above).
        if (device.timings.profile[Phase::uploads].bytes <
            host.timings.profile[Phase::uploads].bytes)
          ++fewer_uploads;
        ++compared;
        if (!device.drift.empty() || !device.nondeterminism.empty()) ++drifted;
      }
    }
  }
  // Invariant impls and controls that drift, both ways.
  CHECK(compared >= 40);
  CHECK(on_device >= compared - 6);
  CHECK(drifted >= 10);
  CHECK(fewer_uploads >= compared / 2);
}

TEST_CASE("the chain's values stay on the device between calls: the host's reports, fewer uploads",
          "[gpu][device-checks]") {
  Registry registry;
  register_all(registry);
  const Contract contract = load_embedded_contract(registry);
  const Dims dims = {{"layers", 1}, {"H", 256}, {"heads", 4}, {"kv_heads", 2},
                     {"D", 64},     {"I", 512}, {"V", 4000},  {"L", 48}};
  int compared = 0, fewer_uploads = 0;
  for (Pass pass : {Pass::forward, Pass::backward}) {
    for (Impl* impl : registry.impls("chain")) {
      if (impl->backend() != "cuda" || !impl->supports(pass) ||
          impl->tensor_parallelism().max_tp > 1 || impl->name().find("atomic") != std::string::npos)
        continue;
      CaseSpec spec;
      spec.op = "chain";
      spec.impl = impl->name();
      spec.dtype = DType::bf16;
      spec.dtype_name = "bf16";
      spec.pass = pass;
      spec.dims = dims;
      spec.rows = 4;
      spec.alone_rows = 8;
      spec.layouts =
          pass == Pass::forward
              ? std::vector<std::string>{"seq_alone",       "batch",      "varlen_packed", "padded",
                                         "padded_in_order", "chunked_16", "decode"}
              : std::vector<std::string>{"seq_alone", "batch", "varlen_packed", "padded",
                                         "padded_in_order"};
      CAPTURE(spec.id());
      Runner runner(registry, contract);
      setenv("BITCHECK_OUTPUTS_ON_HOST", "1", 1);
      const CaseResult host = runner.run_case(spec);
      unsetenv("BITCHECK_OUTPUTS_ON_HOST");
      const CaseResult device = runner.run_case(spec);
      if (host.verdict == Verdict::skipped) continue;
      REQUIRE(host.verdict != Verdict::error);
      REQUIRE(device.verdict != Verdict::error);
      nlohmann::json a = case_to_json(host), b = case_to_json(device);
      a.erase("timings");
      b.erase("timings");
      // The glue between calls on the device in every layout but the alone one (through the
      // host there): the same bits, the same verdicts, findings and paths.
      CHECK(a == b);
      ++compared;
      if (device.timings.profile[Phase::uploads].bytes < host.timings.profile[Phase::uploads].bytes)
        ++fewer_uploads;
    }
  }
  CHECK(compared >= 8);
  // The calls read their row inputs where the last call left them (a control that reads them on
  // the host gets them downloaded, so uploads as before).
  CHECK(fewer_uploads >= compared / 2);
}
