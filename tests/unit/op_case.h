// Test support for the norm, elementwise and rope ops: one world (registry + embedded contract),
// a case over every default layout, and the two claims each impl makes (an invariant impl passes
// every dtype and pass; a control drifts where it says it does).
#pragma once
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "run/layout.h"
#include "run/runner.h"
#include "spec/contract.h"
#include "unit/case_support.h"

namespace op_test {

using case_support::describe;
using case_support::run;
using case_support::world;

// This family's cases use seed 3.
inline bitcheck::CaseSpec make_case(const std::string& op, const std::string& impl,
                                    bitcheck::DType dtype, bitcheck::Pass pass, bitcheck::Dims dims,
                                    std::int64_t rows) {
  return case_support::make_case(op, impl, dtype, pass, std::move(dims), rows, 3);
}

// The impl passes all three checks in every dtype and both passes, for each batch size.
inline void expect_passes(const std::string& op, const std::string& impl,
                          const bitcheck::Dims& dims, const std::vector<std::int64_t>& batches) {
  for (bitcheck::DType dtype :
       {bitcheck::DType::bf16, bitcheck::DType::fp32, bitcheck::DType::fp16}) {
    for (bitcheck::Pass pass : {bitcheck::Pass::forward, bitcheck::Pass::backward}) {
      for (std::int64_t rows : batches) {
        bitcheck::CaseResult result = run(make_case(op, impl, dtype, pass, dims, rows));
        INFO(op << "/" << impl << " " << bitcheck::to_string(dtype) << " "
                << bitcheck::to_string(pass) << " M=" << rows << ": " << describe(result));
        CHECK(result.verdict == bitcheck::Verdict::pass);
      }
    }
  }
}

// The control comes out `drift` for this dtype and pass in at least one of the batch sizes, and
// never passes where it ran (skips are allowed: e.g. a rounding control in fp32).
inline void expect_drifts(const std::string& op, const std::string& impl,
                          const bitcheck::Dims& dims, bitcheck::DType dtype, bitcheck::Pass pass,
                          const std::vector<std::int64_t>& batches) {
  bool drifted = false;
  std::string seen;
  for (std::int64_t rows : batches) {
    bitcheck::CaseResult result = run(make_case(op, impl, dtype, pass, dims, rows));
    drifted = drifted || result.verdict == bitcheck::Verdict::drift;
    seen += " M=" + std::to_string(rows) + ": " + describe(result) + ";";
  }
  INFO(op << "/" << impl << " " << bitcheck::to_string(dtype) << " " << bitcheck::to_string(pass)
          << seen);
  CHECK(drifted);
}

// Runs the op's FP32 reference on hand-made inputs (one row each, or as given) for all rows.
inline std::map<std::string, bitcheck::Tensor> reference(
    const std::string& op, bitcheck::DType dtype, bitcheck::Pass pass, const bitcheck::Dims& dims,
    std::map<std::string, bitcheck::Tensor> inputs, std::int64_t rows = 1) {
  bitcheck::CaseSpec spec = make_case(op, "cpu-fixed-order", dtype, pass, dims, rows);
  bitcheck::ReferenceRequest request;
  for (std::int64_t r = 0; r < rows; ++r) request.rows.push_back(r);
  request.reduction_rows = {0};
  std::map<std::string, bitcheck::Tensor> outputs;
  world().registry.find_op(op)->reference(spec, inputs, request, outputs);
  return outputs;
}

inline bitcheck::Tensor tensor(bitcheck::DType dtype, std::vector<std::int64_t> shape,
                               const std::vector<float>& values) {
  bitcheck::Tensor result(dtype, std::move(shape));
  for (std::size_t i = 0; i < values.size(); ++i)
    result.set(static_cast<std::int64_t>(i), values[i]);
  return result;
}

}  // namespace op_test
