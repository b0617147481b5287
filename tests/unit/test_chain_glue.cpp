// The chain's glue between calls (column slices, concatenations, the stream's conversions) on the
// device gives every call the bytes the host's glue gives it: compose() run twice over an executor
// whose calls return the same bits, as host tensors and as outputs held as on a device
// (run/host_held_output.h), every call's inputs compared bit for bit. The calls' outputs are
// arbitrary bit patterns (NaNs with payloads, infinities, subnormals, signed zeros), so the
// conversions meet every class of value. Also the device-output conversions themselves against
// core/dtype.h's, over every 16-bit pattern and a spread of 32-bit ones.
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "case_support.h"
#include "chain/chain.h"
#include "core/counter_hash.h"
#include "run/host_held_output.h"

using namespace bitcheck;

namespace {

// Bits of element `i` of output `name`: a hash, with every eighth element a special value.
std::uint32_t pattern_bits(const std::string& name, std::uint64_t i) {
  std::uint64_t key = 1469598103934665603ull;
  for (char c : name) key = (key ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  const std::uint64_t hash = counter::mix64(key ^ counter::mix64(i + 1));
  static const std::uint32_t specials[] = {0x7fc00000u, 0x7f800001u, 0xffa5a5a5u, 0x7f800000u,
                                           0xff800000u, 0x00000001u, 0x80000000u, 0x477ff000u,
                                           0x33000000u, 0x387fe000u, 0x7f7fffffu, 0x3f808000u};
  if (i % 8 == 3) return specials[(hash >> 8) % (sizeof specials / sizeof specials[0])];
  return static_cast<std::uint32_t>(hash);
}

Tensor patterned(const std::string& name, DType dtype, std::vector<std::int64_t> shape) {
  Tensor tensor(dtype, std::move(shape), Tensor::uninitialized);
  const std::size_t element = dtype_size(dtype);
  auto* bytes = static_cast<unsigned char*>(tensor.data());
  for (std::int64_t i = 0; i < tensor.numel(); ++i) {
    const std::uint32_t bits = pattern_bits(name, static_cast<std::uint64_t>(i));
    std::memcpy(bytes + static_cast<std::size_t>(i) * element, &bits, element);
  }
  return tensor;
}

std::vector<std::int64_t> with_rows(std::int64_t rows, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> full = {rows};
  full.insert(full.end(), shape.begin(), shape.end());
  return full;
}

// Runs no op: records the bytes of every row input each call gets and returns patterned outputs,
// held as on a device when `device` is set (and then asks for the glue there).
class RecordingExecutor : public chain::Executor {
 public:
  RecordingExecutor(std::int64_t rows, bool device) : rows_(rows), device_(device) {}
  std::int64_t rows() const override { return rows_; }
  bool glue_on_device() const override { return device_; }

  chain::ValueMap run(const chain::Call& call, const CaseSpec& spec,
                      const chain::ValueMap& inputs) override {
    const OpDef& op = *case_support::world().registry.find_op(call.op);
    chain::ValueMap outputs;
    for (const TensorDecl& decl : op.tensors(spec)) {
      if (decl.role == TensorRole::row_input) {
        const chain::SharedValue& value = inputs.at(decl.name);
        REQUIRE(value->shape() == with_rows(rows_, decl.shape));
        REQUIRE(value->dtype() == decl.dtype);
        if (value->device()) ++device_inputs;
        const Tensor& host = *value->host();
        const auto* bytes = static_cast<const unsigned char*>(host.data());
        seen[call.name + "." + decl.name].assign(bytes, bytes + host.bytes());
      } else if (decl.role == TensorRole::row_output) {
        const std::string name = call.name + "." + decl.name;
        Tensor tensor = patterned(name, decl.dtype, with_rows(rows_, decl.shape));
        if (device_) {
          const std::vector<std::int64_t> shape = tensor.shape();
          outputs[decl.name] = std::make_shared<const chain::Value>(
              decl.dtype, shape, std::make_shared<HostHeldOutput>(std::move(tensor)));
        } else {
          outputs[decl.name] = chain::host_value(std::make_shared<const Tensor>(std::move(tensor)));
        }
      }
    }
    return outputs;
  }

  std::map<std::string, std::vector<unsigned char>> seen;
  int device_inputs = 0;

 private:
  std::int64_t rows_;
  bool device_;
};

// The chain's inputs for `rows` rows: its row inputs and parameters, patterned, and positions.
chain::ValueMap chain_inputs(const CaseSpec& spec, std::int64_t rows) {
  chain::ValueMap inputs;
  const OpDef& chain_op = *case_support::world().registry.find_op("chain");
  for (const TensorDecl& decl : chain_op.tensors(spec)) {
    if (decl.role == TensorRole::row_input) {
      inputs[decl.name] = chain::host_value(std::make_shared<const Tensor>(
          patterned(decl.name, decl.dtype, with_rows(rows, decl.shape))));
    } else if (decl.role == TensorRole::parameter) {
      inputs[decl.name] = chain::host_value(
          std::make_shared<const Tensor>(patterned(decl.name, decl.dtype, decl.shape)));
    }
  }
  inputs["positions"] = chain::host_value(
      std::make_shared<const Tensor>(patterned("positions", DType::i32, {rows, 1})));
  return inputs;
}

}  // namespace

TEST_CASE("the chain's glue on the device gives every call the host glue's bytes",
          "[chain][device_outputs]") {
  const Dims dense = {{"layers", 2}, {"H", 24}, {"heads", 4}, {"kv_heads", 2},
                      {"D", 6},      {"I", 20}, {"V", 40},    {"L", 9}};
  Dims moe = dense;
  moe["H"] = 64;
  moe["I"] = 32;
  moe["E"] = 4;
  moe["topk"] = 2;
  for (const Dims& dims : {dense, moe}) {
    for (DType dtype : {DType::bf16, DType::fp16, DType::fp32}) {
      const CaseSpec spec =
          case_support::make_case("chain", "cpu-fixed-order", dtype, Pass::backward, dims, 4, 1);
      INFO(to_string(dtype) << (dims.count("E") ? " moe" : " dense"));
      constexpr std::int64_t rows = 11;
      const chain::ValueMap inputs = chain_inputs(spec, rows);
      RecordingExecutor host(rows, false), device(rows, true);
      chain::compose(spec, inputs, host);
      chain::compose(spec, inputs, device);
      CHECK(host.device_inputs == 0);
      // The glue's own values reached the calls on the "device": slices, concatenations and
      // conversions all made there.
      CHECK(device.device_inputs > 10);
      REQUIRE(device.seen.size() == host.seen.size());
      for (const auto& [name, bytes] : host.seen) {
        INFO(name);
        REQUIRE(device.seen.count(name) == 1);
        CHECK(device.seen.at(name) == bytes);
      }
    }
  }
}

TEST_CASE("device-output conversions have core/dtype.h's bits, NaN payloads included",
          "[device_outputs]") {
  // Every 16-bit pattern widened to fp32.
  Tensor halves(DType::bf16, {65536}, Tensor::uninitialized);
  for (std::uint32_t bits = 0; bits < 65536; ++bits) halves.set_bits(bits, bits);
  for (DType from : {DType::bf16, DType::fp16}) {
    INFO(to_string(from));
    HostHeldOutput held(halves);
    auto widened = held.converted(from, DType::fp32);
    REQUIRE(widened->bytes() == 65536 * 4);
    std::vector<std::uint32_t> out(65536);
    widened->read(out.data(), 0, widened->bytes());
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
      const float expected = decode_bits(from, bits);
      std::uint32_t expected_bits;
      std::memcpy(&expected_bits, &expected, 4);
      if (out[bits] != expected_bits) FAIL_CHECK("pattern " << bits);
    }
  }
  // A spread of 32-bit patterns narrowed: every exponent, the rounding boundaries, NaN payloads.
  std::vector<std::uint32_t> words;
  for (std::uint32_t exponent = 0; exponent < 256; ++exponent) {
    for (std::uint32_t low : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u, 0x7fffu, 0x8000u,
                              0x8001u, 0x18000u, 0x7fffffu, 0x400000u, 0x5a5a5au}) {
      for (std::uint32_t sign : {0u, 0x80000000u}) words.push_back(sign | exponent << 23 | low);
    }
  }
  for (std::uint64_t i = 0; i < 20000; ++i)
    words.push_back(static_cast<std::uint32_t>(counter::mix64(i + 7)));
  Tensor floats(DType::fp32, {static_cast<std::int64_t>(words.size())}, Tensor::uninitialized);
  std::memcpy(floats.data(), words.data(), words.size() * 4);
  HostHeldOutput held(floats);
  for (DType to : {DType::bf16, DType::fp16, DType::fp32}) {
    INFO(to_string(to));
    auto narrowed = held.converted(DType::fp32, to);
    std::vector<unsigned char> out(narrowed->bytes());
    narrowed->read(out.data(), 0, out.size());
    for (std::size_t i = 0; i < words.size(); ++i) {
      float value;
      std::memcpy(&value, &words[i], 4);
      const std::uint32_t expected = to == DType::fp32 ? words[i] : encode_bits(to, value);
      std::uint32_t got = 0;
      std::memcpy(&got, out.data() + i * dtype_size(to), dtype_size(to));
      if (got != expected) FAIL_CHECK("word " << std::hex << words[i]);
    }
  }
  CHECK_THROWS_AS(held.converted(DType::bf16, DType::fp16), std::invalid_argument);
  CHECK_THROWS_AS(held.converted(DType::fp32, DType::i32), std::invalid_argument);
}

TEST_CASE("device-output column copies move the named columns of every row and nothing else",
          "[device_outputs]") {
  Tensor source = patterned("source", DType::fp32, {5, 7});
  HostHeldOutput from(source);
  HostHeldOutput to(5 * 4 * 4, 0xAAAAAAAAu, 4);
  ColumnCopy copy;
  copy.rows = 5;
  copy.source_pitch = 7 * 4;
  copy.source_offset = 2 * 4;
  copy.pitch = 4 * 4;
  copy.offset = 1 * 4;
  copy.width = 3 * 4;
  to.copy_columns(from, copy);
  std::vector<std::uint32_t> out(20);
  to.read(out.data(), 0, 80);
  for (std::int64_t r = 0; r < 5; ++r) {
    CHECK(out[static_cast<std::size_t>(r * 4)] == 0xAAAAAAAAu);
    for (std::int64_t c = 0; c < 3; ++c)
      CHECK(out[static_cast<std::size_t>(r * 4 + 1 + c)] == source.bits(r * 7 + 2 + c));
  }
  copy.rows = 6;  // one row past the end of both
  CHECK_THROWS_AS(to.copy_columns(from, copy), std::out_of_range);
}
