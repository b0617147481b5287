// attention on the GPU: the fixed-order CUDA impl passes every sequence layout (tensor-core
// forward and backward for bf16/fp16 at head dim 64 and 128, SIMT for fp32), the wgmma forward
// agrees with the mma.sync one, the tensor-core backward with the SIMT one, and each CUDA control
// drifts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "attention/attention_kernels.h"
#include "bitcheck/contract.h"
#include "bitcheck/dtype.h"
#include "bitcheck/runner.h"
#include "common/runtime.h"

using namespace bitcheck;

namespace {

struct GpuWorld {
  Registry registry;
  Contract contract;
  GpuWorld() {
    register_all(registry);
    contract = load_embedded_contract(registry);
  }
};

GpuWorld& gpu_world() {
  static GpuWorld instance;
  return instance;
}

CaseResult run_attention(const std::string& impl, DType dtype, Pass pass, std::int64_t head_dim,
                         std::int64_t sequences) {
  CaseSpec spec;
  spec.op = "attention";
  spec.impl = impl;
  spec.dtype = dtype;
  spec.dtype_name = to_string(dtype);
  spec.pass = pass;
  spec.dims = {{"H", 8}, {"KVH", 2}, {"D", head_dim}, {"L", 300}};
  spec.rows = sequences;
  spec.seed = 7;
  spec.layouts = {"seq_alone",  "varlen_packed", "padded",       "chunked_1",
                  "chunked_16", "chunked_64",    "chunked_1000", "decode"};
  Runner runner(gpu_world().registry, gpu_world().contract);
  return runner.run_case(spec);
}

std::string describe(const CaseResult& result) {
  std::string text = to_string(result.verdict) + " " + result.reason;
  for (const auto& drift : result.drift) text += " [" + drift.layout + " " + drift.tensor + "]";
  for (const auto& accuracy : result.accuracy) {
    text +=
        " {" + accuracy.tensor + " max_abs_error " + std::to_string(accuracy.max_abs_error) + "}";
  }
  return text;
}

// Half-precision bits of uniform values in [-1, 1].
std::vector<std::uint16_t> random_halves(DType dtype, std::size_t count, std::mt19937& generator) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::uint16_t> bits(count);
  for (std::uint16_t& b : bits)
    b = dtype == DType::bf16 ? float_to_bf16_bits(uniform(generator))
                             : float_to_fp16_bits(uniform(generator));
  return bits;
}

cuda::DeviceBuffer upload_halves(const std::vector<std::uint16_t>& bits) {
  cuda::DeviceBuffer buffer(bits.size() * sizeof(std::uint16_t));
  buffer.upload(bits.data(), buffer.bytes());
  return buffer;
}

template <typename T>
cuda::DeviceBuffer upload_items(const std::vector<T>& items) {
  cuda::DeviceBuffer buffer(items.size() * sizeof(T));
  buffer.upload(items.data(), buffer.bytes());
  return buffer;
}

std::vector<float> download_floats(DType dtype, const cuda::DeviceBuffer& buffer) {
  std::vector<std::uint16_t> bits(buffer.bytes() / sizeof(std::uint16_t));
  buffer.download(bits.data(), buffer.bytes());
  std::vector<float> values(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i)
    values[i] = dtype == DType::bf16 ? bf16_bits_to_float(bits[i]) : fp16_bits_to_float(bits[i]);
  return values;
}

// max |a - b| over the tensor, relative to max |reference|; infinite when either holds a NaN.
double relative_max_abs_diff(const std::vector<float>& a, const std::vector<float>& reference) {
  double diff = 0.0, magnitude = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(reference[i])) return INFINITY;
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - reference[i]));
    magnitude = std::max(magnitude, std::fabs(static_cast<double>(reference[i])));
  }
  return diff / std::max(magnitude, 1e-30);
}

struct BackwardGradients {
  std::vector<float> dq, dk, dv;
};

// One packed batch of sequences (lengths 1, 63, 64, 65 and 200: every tile and block edge), forward
// on tensor cores, then the SIMT or the tensor-core backward on the same inputs.
BackwardGradients run_backward_paths(DType dtype, int head_dim, bool tensor_core) {
  const std::vector<int> lengths = {1, 63, 64, 65, 200};
  const cuda::AttentionShape shape{8, 2, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  std::vector<cuda::AttentionToken> tokens;
  std::vector<cuda::AttentionTile> forward_tiles;
  std::vector<cuda::AttentionBackwardTile> backward_tiles;
  int slots = 0, max_position = 0;
  for (int length : lengths) {
    for (int p = 0; p < length; ++p) tokens.push_back({slots + p, p, slots, length});
    for (int i = 0; i < length; i += cuda::attention_mma_tile_queries) {
      forward_tiles.push_back(
          {slots + i, std::min(cuda::attention_mma_tile_queries, length - i), i, slots});
    }
    for (int i = 0; i < length; i += cuda::attention_mma_backward_tile) {
      backward_tiles.push_back(
          {slots + i, std::min(cuda::attention_mma_backward_tile, length - i), i, slots, length});
    }
    slots += length;
    max_position = std::max(max_position, length - 1);
  }
  const std::size_t q_elements = static_cast<std::size_t>(slots) * shape.heads * head_dim;
  const std::size_t kv_elements = static_cast<std::size_t>(slots) * shape.kv_heads * head_dim;
  std::mt19937 generator(11);
  const cuda::DeviceBuffer q = upload_halves(random_halves(dtype, q_elements, generator));
  const cuda::DeviceBuffer k = upload_halves(random_halves(dtype, kv_elements, generator));
  const cuda::DeviceBuffer v = upload_halves(random_halves(dtype, kv_elements, generator));
  const cuda::DeviceBuffer dout = upload_halves(random_halves(dtype, q_elements, generator));
  cuda::DeviceBuffer o(q_elements * 2),
      lse(static_cast<std::size_t>(slots) * shape.heads * sizeof(float)), delta(lse.bytes());
  cuda::DeviceBuffer dq(q_elements * 2), dk(kv_elements * 2), dv(kv_elements * 2);
  for (cuda::DeviceBuffer* gradient : {&dq, &dk, &dv})
    gradient->fill_bytes(0xFF);  // NaN where a kernel writes nothing
  const cuda::DeviceBuffer token_buffer = upload_items(tokens),
                           forward_tile_buffer = upload_items(forward_tiles);
  const cuda::DeviceBuffer backward_tile_buffer = upload_items(backward_tiles);
  const cuda::DeviceDType device_dtype =
      dtype == DType::bf16 ? cuda::DeviceDType::bf16 : cuda::DeviceDType::fp16;
  cuda::attention_forward_mma(device_dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(),
                              forward_tile_buffer.as<cuda::AttentionTile>(),
                              static_cast<int>(forward_tiles.size()), shape, nullptr);
  if (tensor_core) {
    const auto* tiles = backward_tile_buffer.as<cuda::AttentionBackwardTile>();
    cuda::attention_backward_mma(device_dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(),
                                 dout.get(), delta.as<float>(), dq.get(), dk.get(), dv.get(),
                                 token_buffer.as<cuda::AttentionToken>(),
                                 static_cast<int>(tokens.size()), tiles, tiles,
                                 static_cast<int>(backward_tiles.size()), shape, nullptr);
  } else {
    cuda::attention_backward(
        device_dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(), dout.get(),
        delta.as<float>(), dq.get(), dk.get(), dv.get(), token_buffer.as<cuda::AttentionToken>(),
        static_cast<int>(tokens.size()), max_position, shape, nullptr, nullptr);
  }
  return {download_floats(dtype, dq), download_floats(dtype, dk), download_floats(dtype, dv)};
}

struct ForwardOutputs {
  std::vector<float> o, lse;
};

// The tensor-core forward over a packed batch of sequences (lengths 1, 63, 64, 65, 200 and 300:
// every tile and block edge, and a sequence of 3 tiles), on the device's path or on mma.sync.
ForwardOutputs run_forward_path(DType dtype, int head_dim, bool force_mma_sync) {
  const std::vector<int> lengths = {1, 63, 64, 65, 200, 300};
  const cuda::AttentionShape shape{8, 2, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  std::vector<cuda::AttentionTile> tiles;
  int slots = 0;
  for (int length : lengths) {
    for (int i = 0; i < length; i += cuda::attention_mma_tile_queries) {
      tiles.push_back(
          {slots + i, std::min(cuda::attention_mma_tile_queries, length - i), i, slots});
    }
    slots += length;
  }
  const std::size_t q_elements = static_cast<std::size_t>(slots) * shape.heads * head_dim;
  const std::size_t kv_elements = static_cast<std::size_t>(slots) * shape.kv_heads * head_dim;
  std::mt19937 generator(5);
  const cuda::DeviceBuffer q = upload_halves(random_halves(dtype, q_elements, generator));
  const cuda::DeviceBuffer k = upload_halves(random_halves(dtype, kv_elements, generator));
  const cuda::DeviceBuffer v = upload_halves(random_halves(dtype, kv_elements, generator));
  cuda::DeviceBuffer o(q_elements * 2),
      lse(static_cast<std::size_t>(slots) * shape.heads * sizeof(float));
  o.fill_bytes(0xFF);  // NaN where the kernel writes nothing
  lse.fill_bytes(0xFF);
  const cuda::DeviceBuffer tile_buffer = upload_items(tiles);
  const cuda::DeviceDType device_dtype =
      dtype == DType::bf16 ? cuda::DeviceDType::bf16 : cuda::DeviceDType::fp16;
  cuda::attention_forward_mma(device_dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(),
                              tile_buffer.as<cuda::AttentionTile>(), static_cast<int>(tiles.size()),
                              shape, nullptr, force_mma_sync);
  ForwardOutputs outputs{download_floats(dtype, o),
                         std::vector<float>(static_cast<std::size_t>(slots) * shape.heads)};
  lse.download(outputs.lse.data(), lse.bytes());
  return outputs;
}

// Each sequence's last query computed twice on the device's forward path: in a prefill launch of
// whole sequences (tiles of up to 128 queries) and in a decode launch (one one-query tile per
// sequence, the launch shape the decode layout gets). Returns the o and lse bits of those queries
// from both launches.
struct DecodeComparison {
  std::vector<std::uint16_t> prefill_o, decode_o;
  std::vector<float> prefill_lse, decode_lse;
};
DecodeComparison prefill_and_decode(DType dtype, int head_dim, int sequences) {
  const cuda::AttentionShape shape{8, 2, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  std::mt19937 generator(static_cast<unsigned>(sequences));
  std::uniform_int_distribution<int> length_of(1, 300);
  std::vector<cuda::AttentionTile> prefill_tiles, decode_tiles;
  std::vector<int> last_slots;
  int slots = 0;
  for (int s = 0; s < sequences; ++s) {
    const int length = length_of(generator);
    for (int i = 0; i < length; i += cuda::attention_mma_tile_queries) {
      prefill_tiles.push_back(
          {slots + i, std::min(cuda::attention_mma_tile_queries, length - i), i, slots});
    }
    decode_tiles.push_back({slots + length - 1, 1, length - 1, slots});
    last_slots.push_back(slots + length - 1);
    slots += length;
  }
  const std::size_t q_elements = static_cast<std::size_t>(slots) * shape.heads * head_dim;
  const std::size_t kv_elements = static_cast<std::size_t>(slots) * shape.kv_heads * head_dim;
  const cuda::DeviceBuffer q = upload_halves(random_halves(dtype, q_elements, generator));
  const cuda::DeviceBuffer k = upload_halves(random_halves(dtype, kv_elements, generator));
  const cuda::DeviceBuffer v = upload_halves(random_halves(dtype, kv_elements, generator));
  const cuda::DeviceDType device_dtype =
      dtype == DType::bf16 ? cuda::DeviceDType::bf16 : cuda::DeviceDType::fp16;
  const std::size_t row = static_cast<std::size_t>(shape.heads) * head_dim;
  DecodeComparison result;
  for (bool decode : {false, true}) {
    const std::vector<cuda::AttentionTile>& tiles = decode ? decode_tiles : prefill_tiles;
    cuda::DeviceBuffer o(q_elements * 2),
        lse(static_cast<std::size_t>(slots) * shape.heads * sizeof(float));
    o.fill_bytes(0xFF);
    lse.fill_bytes(0xFF);
    const cuda::DeviceBuffer tile_buffer = upload_items(tiles);
    cuda::attention_forward_mma(device_dtype, q.get(), k.get(), v.get(), o.get(), lse.as<float>(),
                                tile_buffer.as<cuda::AttentionTile>(),
                                static_cast<int>(tiles.size()), shape, nullptr, false,
                                decode ? 1 : cuda::attention_mma_tile_queries);
    std::vector<std::uint16_t> o_bits(q_elements);
    std::vector<float> lse_values(static_cast<std::size_t>(slots) * shape.heads);
    o.download(o_bits.data(), o.bytes());
    lse.download(lse_values.data(), lse.bytes());
    for (int slot : last_slots) {
      auto& o_out = decode ? result.decode_o : result.prefill_o;
      auto& lse_out = decode ? result.decode_lse : result.prefill_lse;
      o_out.insert(o_out.end(), o_bits.begin() + static_cast<std::ptrdiff_t>(slot * row),
                   o_bits.begin() + static_cast<std::ptrdiff_t>((slot + 1) * row));
      lse_out.insert(lse_out.end(), lse_values.begin() + slot * shape.heads,
                     lse_values.begin() + (slot + 1) * shape.heads);
    }
  }
  return result;
}

}  // namespace

TEST_CASE("attention decode launches give the prefill rows' bits", "[gpu][attention]") {
  // 40 sequences x 2 KV heads make the wgmma launcher pack the heads of a group into one CTA;
  // 8 sequences do not. Both must reproduce the prefill launch's rows bit for bit.
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (int head_dim : {64, 128}) {
      for (int sequences : {8, 40}) {
        const DecodeComparison result = prefill_and_decode(dtype, head_dim, sequences);
        INFO(to_string(dtype) << " D=" << head_dim << " sequences=" << sequences);
        // Both launches wrote these rows (the buffers start as NaN).
        CHECK(std::all_of(result.decode_lse.begin(), result.decode_lse.end(),
                          [](float x) { return std::isfinite(x); }));
        CHECK(std::none_of(result.decode_o.begin(), result.decode_o.end(),
                           [](std::uint16_t bits) { return bits == 0xFFFF; }));
        CHECK(result.decode_o == result.prefill_o);
        CHECK(std::memcmp(result.decode_lse.data(), result.prefill_lse.data(),
                          result.decode_lse.size() * sizeof(float)) == 0);
        std::vector<std::uint16_t> flipped = result.decode_o;
        flipped[flipped.size() / 2] ^= 1;
        CHECK(flipped != result.prefill_o);  // the comparison sees a one-bit change
      }
    }
  }
}

TEST_CASE("attention wgmma forward agrees with the mma.sync forward", "[gpu][attention]") {
  if (!cuda::attention_forward_uses_wgmma()) {
    WARN(
        "not an sm_90 device (or BITCHECK_ATTENTION_FORWARD=mma-sync): the forward runs on "
        "mma.sync only");
    return;
  }
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (int head_dim : {64, 128}) {
      const ForwardOutputs wgmma = run_forward_path(dtype, head_dim, false);
      const ForwardOutputs mma_sync = run_forward_path(dtype, head_dim, true);
      INFO(to_string(dtype) << " D=" << head_dim);
      // Both round P to the dtype for P·V and keep S and O in fp32; they differ in the tensor
      // cores' internal summation order only.
      const double tolerance = dtype == DType::bf16 ? 2e-2 : 4e-3;
      CHECK(relative_max_abs_diff(wgmma.o, mma_sync.o) < tolerance);
      CHECK(relative_max_abs_diff(wgmma.lse, mma_sync.lse) < 1e-4);
      std::vector<float> shifted(wgmma.o.begin() + 1, wgmma.o.end());
      shifted.push_back(wgmma.o.front());
      CHECK(relative_max_abs_diff(shifted, mma_sync.o) > tolerance);  // the check can fail
    }
  }
}

TEST_CASE("attention tensor-core backward agrees with the SIMT backward", "[gpu][attention]") {
  for (DType dtype : {DType::bf16, DType::fp16}) {
    // P and dS enter the mma rounded to the dtype; the SIMT path keeps them in fp32.
    const double tolerance = dtype == DType::bf16 ? 3e-2 : 1e-2;
    for (int head_dim : {64, 128}) {
      const BackwardGradients simt = run_backward_paths(dtype, head_dim, false);
      const BackwardGradients mma = run_backward_paths(dtype, head_dim, true);
      INFO(to_string(dtype) << " D=" << head_dim);
      CHECK(relative_max_abs_diff(mma.dq, simt.dq) < tolerance);
      CHECK(relative_max_abs_diff(mma.dk, simt.dk) < tolerance);
      CHECK(relative_max_abs_diff(mma.dv, simt.dv) < tolerance);
      CHECK(relative_max_abs_diff(mma.dk, simt.dv) >
            tolerance);  // the check can fail: dk is not dv
    }
  }
}

TEST_CASE("attention fixed-order CUDA passes every sequence layout", "[gpu][attention]") {
  for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
    for (std::int64_t head_dim : {64, 128}) {
      for (Pass pass : {Pass::forward, Pass::backward}) {
        CaseResult result = run_attention("fixed-order", dtype, pass, head_dim, 4);
        INFO(to_string(dtype) << " D=" << head_dim << " " << to_string(pass) << ": "
                              << describe(result));
        CHECK(result.verdict == Verdict::pass);
      }
    }
  }
}

TEST_CASE("each attention CUDA control drifts", "[gpu][attention][control]") {
  struct Control {
    const char* impl;
    Pass pass;
  };
  for (Control control :
       {Control{"split-kv-by-batch", Pass::forward}, Control{"kv-block-by-length", Pass::forward},
        Control{"atomic-dq", Pass::backward}}) {
    CaseResult result = run_attention(control.impl, DType::bf16, control.pass, 128, 4);
    INFO(control.impl << ": " << describe(result));
    CHECK((result.verdict == Verdict::drift || result.verdict == Verdict::nondeterministic));
  }
}
