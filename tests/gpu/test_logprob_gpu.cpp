// logprob on the CUDA backend (small shapes): the fixed-order impl passes every layout forward and
// backward (one block per row, and the backward's row split over a cluster), its streamed (bulk
// copies through shared memory), 16-byte and entry-by-entry load paths give the same bits, the
// split-by-rows control drifts, an out-of-range target is reported by the device.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/runtime.h"
#include "common/vocab_device.h"
#include "logprob/logprob.h"
#include "logprob/logprob_kernels.h"
#include "unit/vocab_case.h"

using namespace bitcheck;
using vocab_test::describe;
using vocab_test::make_case;
using vocab_test::run;

TEST_CASE("logprob cuda fixed-order passes every layout, forward and backward", "[gpu][logprob]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (Pass pass : {Pass::forward, Pass::backward}) {
      // Several thousand entries per thread block; a row length that is not a multiple of 8 (the
      // entry-by-entry path); rows of 80-160 KB, which the backward splits over a cluster.
      for (std::int64_t vocab : {9000, 1001, 40000}) {
        CaseResult result =
            run(make_case("logprob", "fixed-order", dtype, pass, {{"V", vocab}}, 20));
        INFO(to_string(dtype) << " " << to_string(pass) << " V=" << vocab << ": "
                              << describe(result));
        CHECK(result.verdict == Verdict::pass);
      }
    }
  }
}

TEST_CASE("logprob cuda split-vocab-by-rows drifts", "[gpu][logprob][control]") {
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseResult result =
        run(make_case("logprob", "split-vocab-by-rows", DType::fp32, pass, {{"V", 5000}}, 20));
    INFO(to_string(pass) << ": " << describe(result));
    CHECK(result.verdict == Verdict::drift);
  }
}

TEST_CASE("logprob cuda reports an out-of-range target from the device", "[gpu][logprob][error]") {
  Registry registry = vocab_test::out_of_range_registry("logprob", register_logprob_cuda, "cuda");
  for (Pass pass : {Pass::forward, Pass::backward}) {
    CaseResult result =
        run(make_case("logprob", "fixed-order", DType::bf16, pass, {{"V", 64}}, 16), registry);
    INFO(to_string(pass) << ": " << describe(result));
    REQUIRE(result.verdict == Verdict::error);
    auto at = result.reason.find("token id ");
    REQUIRE(at != std::string::npos);
    CHECK(std::strtol(result.reason.c_str() + at + 9, nullptr, 10) >= 64);
  }
}

namespace {

using vocab_device::device_dtype;

struct FixedOrderOutputs {
  std::vector<float> logprob;
  std::vector<unsigned char> dlogits;
};

// The fixed-order forward and backward on `rows` rows of pseudo-random logits in [-4, 4) stored
// `offset` elements past an allocation (16-byte aligned), dlogits likewise.
FixedOrderOutputs run_fixed_order_at(DType dtype, std::int64_t vocab, std::int64_t rows,
                                     std::int64_t offset) {
  const std::size_t element = dtype_size(dtype);
  Tensor logits(dtype, {rows, vocab});
  std::uint32_t state = 12345;
  for (std::int64_t i = 0; i < rows * vocab; ++i) {
    state = state * 1664525u + 1013904223u;
    logits.set(i, static_cast<float>(state >> 8) / 16777216.0f * 8.0f - 4.0f);
  }
  const std::size_t shift = static_cast<std::size_t>(offset) * element;
  std::vector<unsigned char> padded(shift + logits.bytes(), 0);
  std::memcpy(padded.data() + shift, logits.data(), logits.bytes());
  std::vector<std::int32_t> row_list(static_cast<std::size_t>(rows)), target_list(row_list.size());
  std::vector<float> dlogprob_list(row_list.size());
  for (std::size_t r = 0; r < row_list.size(); ++r) {
    row_list[r] = static_cast<std::int32_t>(r);
    target_list[r] = static_cast<std::int32_t>((r * 7919) % static_cast<std::size_t>(vocab));
    dlogprob_list[r] = 0.5f + static_cast<float>(r);
  }
  cuda::DeviceBuffer logits_device(padded.size()), dlogits_device(padded.size());
  cuda::DeviceBuffer row_device(row_list.size() * 4), target_device(row_list.size() * 4);
  cuda::DeviceBuffer dlogprob_device(row_list.size() * 4), logprob_device(row_list.size() * 4);
  cuda::DeviceBuffer error_device(sizeof(std::uint64_t));
  logits_device.upload(padded.data(), padded.size());
  row_device.upload(row_list.data(), row_list.size() * 4);
  target_device.upload(target_list.data(), target_list.size() * 4);
  dlogprob_device.upload(dlogprob_list.data(), dlogprob_list.size() * 4);
  dlogits_device.fill_bytes(0);
  const std::uint64_t no_error = cuda::logprob_no_error;
  error_device.upload(&no_error, sizeof no_error);
  const void* logits_at = static_cast<const unsigned char*>(logits_device.get()) + shift;
  void* dlogits_at = static_cast<unsigned char*>(dlogits_device.get()) + shift;
  const cuda::LogprobSplit fixed_order{};
  cuda::logprob_forward(device_dtype(dtype), logits_at, target_device.as<std::int32_t>(),
                        row_device.as<std::int32_t>(), row_device.as<std::int32_t>(), rows, vocab,
                        logprob_device.as<float>(), fixed_order, nullptr,
                        error_device.as<std::uint64_t>(), nullptr);
  cuda::logprob_backward(device_dtype(dtype), logits_at, target_device.as<std::int32_t>(),
                         dlogprob_device.as<float>(), row_device.as<std::int32_t>(),
                         row_device.as<std::int32_t>(), rows, vocab, dlogits_at, fixed_order,
                         nullptr, error_device.as<std::uint64_t>(), nullptr);
  std::uint64_t error = 0;
  error_device.download(&error, sizeof error);
  REQUIRE(error == cuda::logprob_no_error);
  FixedOrderOutputs outputs;
  outputs.logprob.resize(row_list.size());
  logprob_device.download(outputs.logprob.data(), outputs.logprob.size() * 4);
  std::vector<unsigned char> dlogits(padded.size());
  dlogits_device.download(dlogits.data(), dlogits.size());
  outputs.dlogits.assign(dlogits.begin() + static_cast<std::ptrdiff_t>(shift), dlogits.end());
  return outputs;
}

}  // namespace

TEST_CASE(
    "logprob cuda fixed-order gives the same bits streamed, through 16-byte and per-entry loads",
    "[gpu][logprob]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (std::int64_t vocab : {4000, 40000}) {  // one block per row; the backward over a cluster
      INFO(to_string(dtype) << " V=" << vocab);
      // Aligned rows: on sm_90 the forward streams them through shared memory (bulk copies).
      const FixedOrderOutputs aligned = run_fixed_order_at(dtype, vocab, 5, 0);
      const FixedOrderOutputs shifted = run_fixed_order_at(dtype, vocab, 5, 1);  // per-entry loads
      CHECK(std::memcmp(aligned.logprob.data(), shifted.logprob.data(),
                        aligned.logprob.size() * sizeof(float)) == 0);
      CHECK(aligned.dlogits == shifted.dlogits);
      // The same aligned rows loaded 16 bytes at a time into registers.
      setenv("BITCHECK_LOGPROB_FORWARD", "registers", 1);
      const FixedOrderOutputs registers = run_fixed_order_at(dtype, vocab, 5, 0);
      unsetenv("BITCHECK_LOGPROB_FORWARD");
      CHECK(std::memcmp(aligned.logprob.data(), registers.logprob.data(),
                        aligned.logprob.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("logprob cuda fixed-order plan: one block per row forward and 64 KiB runs backward",
          "[gpu][logprob]") {
  const cuda::LogprobFixedPlan forward =
      cuda::logprob_fixed_plan(cuda::DeviceDType::bf16, 128256, false);
  CHECK(forward.blocks == 1);
  CHECK(forward.block_entries == 128256);
  const cuda::LogprobFixedPlan small =
      cuda::logprob_fixed_plan(cuda::DeviceDType::bf16, 32000, true);
  CHECK(small.blocks == 1);
  CHECK(small.staged);
  if (cuda::query_device().compute_capability_major >= 9) {
    // 250.5 KB bf16 rows: four runs of at most 64 KiB kept in shared memory, one cluster per row.
    const cuda::LogprobFixedPlan large =
        cuda::logprob_fixed_plan(cuda::DeviceDType::bf16, 128256, true);
    CHECK(large.blocks == 4);
    CHECK(large.block_entries == 32064);
    CHECK(large.staged);
    CHECK(cuda::logprob_fixed_plan(cuda::DeviceDType::bf16, 40000, true).blocks == 2);
  }
}
