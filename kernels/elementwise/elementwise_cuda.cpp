// CUDA impls of the elementwise family: `fixed-order` (one formula in the vector body and the
// scalar tail) and the tail controls (tail-approx, tail-downcast-bf16, tail-round-toward-zero),
// with scale's dscale accumulated over tokens in token order; and their device-resident benchmark.
// Each call's launches go between its uploads and its downloads, so the graph layout captures them.
#include <memory>

#include "common/adapter_support.h"
#include "common/graph_capture.h"
#include "common/runtime.h"
#include "common/token_columns.h"
#include "core/op.h"
#include "elementwise/elementwise.h"
#include "elementwise/elementwise_ops.h"
#include "elementwise_kernels.h"

namespace bitcheck {
namespace {

using cuda::DeviceBuffer;
using elementwise::Variant;
namespace support = cuda_support;

class CudaElementwise : public ElementwiseImpl {
 public:
  CudaElementwise(ImplInfo info, ElementwiseOpInfo op, elementwise::Variant tail)
      : ElementwiseImpl(std::move(info.reading_row_inputs_on_device()), std::move(op), tail) {}

  void run(Batch& batch) override {
    const std::int64_t h = batch.spec->dim("H");
    cuda::ElementwiseLaunch launch = base_launch(*batch.spec, batch.slots() * h);
    std::vector<DeviceBuffer> inputs, outputs;
    std::vector<Tensor*> host_outputs;
    std::vector<std::string> output_names;
    std::string reduction;
    for (const auto& decl : elementwise_tensors(op_.op, *batch.spec)) {
      if (decl.role == TensorRole::row_input) {
        inputs.push_back(support::input_rows(batch, decl.name));
        launch.in[inputs.size() - 1] = inputs.back().get();
      } else if (decl.role == TensorRole::parameter) {
        launch.parameter = parameters_.get(batch, decl.name).as<float>();
      } else if (decl.role == TensorRole::row_output) {
        host_outputs.push_back(&batch.out(decl.name));
        output_names.push_back(decl.name);
        outputs.emplace_back(std::max<std::size_t>(host_outputs.back()->bytes(), 16));
        launch.out[outputs.size() - 1] = outputs.back().get();
      } else {
        reduction = decl.name;
      }
    }
    // dscale += dy * x over the real tokens, in order: inputs[0] is x, inputs[1] is dy.
    Tensor* dscale = reduction.empty() ? nullptr : &batch.out(reduction);
    DeviceBuffer accumulator, token_buffer;
    const std::vector<std::int32_t> tokens = support::real_slot_list(batch);
    if (dscale) {
      accumulator = support::upload(*dscale);
      token_buffer = support::upload(tokens);
    }
    cuda::run_launches(batch.captured, [&](CUstream_st* stream) {
      cuda::elementwise_launch(launch, stream);
      if (!dscale) return;
      cuda::token_column_accumulate(
          support::device_dtype(batch.spec->dtype), inputs[1].get(), inputs[0].get(), nullptr,
          nullptr, token_buffer.as<std::int32_t>(), static_cast<std::int64_t>(tokens.size()), h,
          accumulator.as<float>(), stream);
    });
    std::vector<cuda::HostCopy> copies;
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      if (batch.rows_stay_on_device)
        support::hand_over_rows(batch, output_names[k], outputs[k]);
      else
        copies.push_back({host_outputs[k]->data(), outputs[k].get(), host_outputs[k]->bytes()});
    }
    if (dscale) copies.push_back({dscale->data(), accumulator.get(), dscale->bytes()});
    cuda::copy_to_host_all(copies);  // one wait for every output
  }

  std::optional<BenchMeasurement> benchmark(const CaseSpec& spec,
                                            const BenchSettings& settings) override {
    const std::int64_t h = spec.dim("H"), count = spec.rows * h;
    std::vector<TensorDecl> decls = elementwise_tensors(op_.op, spec);
    std::size_t set_bytes = 0;
    for (const auto& decl : decls) {
      if (decl.role == TensorRole::row_input || decl.role == TensorRole::row_output) {
        set_bytes += static_cast<std::size_t>(count) * dtype_size(decl.dtype);
      }
    }
    const std::size_t sets = support::rotation_sets(set_bytes, settings);
    std::vector<cuda::ElementwiseLaunch> launches(sets, base_launch(spec, count));
    std::vector<DeviceBuffer> buffers;
    DeviceBuffer parameter, accumulator, tokens;
    std::vector<std::int32_t> token_list(static_cast<std::size_t>(spec.rows));
    for (std::size_t t = 0; t < token_list.size(); ++t)
      token_list[t] = static_cast<std::int32_t>(t);
    double bytes_moved = static_cast<double>(set_bytes);
    for (const auto& decl : decls) {
      if (decl.role == TensorRole::parameter || decl.role == TensorRole::reduction_output) {
        const std::size_t bytes = static_cast<std::size_t>(h) * sizeof(float);
        (decl.role == TensorRole::parameter ? parameter : accumulator) =
            support::random_input(bytes, DType::fp32, 1);
        bytes_moved += static_cast<double>(bytes) * (decl.role == TensorRole::parameter ? 1 : 2);
      }
    }
    if (accumulator.get()) tokens = support::upload(token_list);
    for (std::size_t s = 0; s < sets; ++s) {
      int in = 0, out = 0;
      for (const auto& decl : decls) {
        const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(decl.dtype);
        if (decl.role == TensorRole::row_input) {
          buffers.push_back(support::random_input(bytes, decl.dtype, 2 + buffers.size()));
          launches[s].in[in++] = buffers.back().get();
        } else if (decl.role == TensorRole::row_output) {
          buffers.emplace_back(std::max<std::size_t>(bytes, 16));
          launches[s].out[out++] = buffers.back().get();
        }
      }
      launches[s].parameter = parameter.get() ? parameter.as<float>() : nullptr;
    }
    const cuda::DeviceDType dtype = support::device_dtype(spec.dtype);
    BenchMeasurement measurement = support::time_rotated(settings, sets, [&](std::size_t s) {
      cuda::elementwise_launch(launches[s], nullptr);
      if (accumulator.get()) {
        cuda::token_column_accumulate(dtype, launches[s].in[1], launches[s].in[0], nullptr, nullptr,
                                      tokens.as<std::int32_t>(), spec.rows, h,
                                      accumulator.as<float>(), nullptr);
      }
    });
    measurement.bytes_moved = bytes_moved;
    measurement.config = {{"vector_elements", elementwise::vector_elements},
                          {"rotated_sets", sets}};
    return measurement;
  }

 private:
  cuda::ElementwiseLaunch base_launch(const CaseSpec& spec, std::int64_t count) const {
    cuda::ElementwiseLaunch launch;
    launch.op = static_cast<int>(op_.op);
    launch.backward = spec.pass == Pass::backward;
    launch.tail_variant = static_cast<int>(tail_);
    launch.count = count;
    launch.width = spec.dim("H");
    for (const auto& decl : elementwise_tensors(op_.op, spec)) {
      if (decl.role == TensorRole::row_input)
        launch.in_dtype[launch.inputs++] = support::device_dtype(decl.dtype);
      if (decl.role == TensorRole::row_output)
        launch.out_dtype[launch.outputs++] = support::device_dtype(decl.dtype);
    }
    return launch;
  }

  support::ParameterCache& parameters_ = support::ParameterCache::process();
};

}  // namespace

void register_elementwise_cuda(Registry& registry) {
  const ElementwiseBackend cuda = {
      "cuda",
      "",
      {{Variant::exact,
        "16-byte vector body and scalar tail evaluate the same explicitly rounded fp32 formula; "
        "dscale summed over tokens in token order (no atomics)"},
       {Variant::tail_approx,
        "control: the scalar tail (the partial last 2048-element tile) evaluates tanh with the "
        "packed-bf16 hardware approximation tanh.approx.bf16 (sigmoid through tanh; gelu_erf: the "
        "tanh form) while the vector body uses the accurate fp32 formula"},
       {Variant::downcast_intermediate,
        "control: the scalar tail (the partial last 2048-element tile) rounds its key "
        "intermediate to bf16 (a tail written with __nv_bfloat16 temporaries)"},
       {Variant::round_toward_zero,
        "control: the scalar tail (the partial last 2048-element tile) narrows fp32 with "
        "round-toward-zero (__float2bfloat16_rz) instead of round-to-nearest-even"}}};
  register_elementwise_impls(registry, cuda,
                             [](ImplInfo info, const ElementwiseOpInfo& op, Variant tail) {
                               info.capturable_in_graphs();
                               return std::make_unique<CudaElementwise>(std::move(info), op, tail);
                             });
}

}  // namespace bitcheck
