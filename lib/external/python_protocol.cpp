// The frames and requests of the Python worker protocol (external/python_protocol.h).
#include "external/python_protocol.h"

namespace bitcheck::python_protocol {
namespace {

constexpr char base64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

nlohmann::json common_fields(const std::string& type, const std::string& function,
                             const CaseSpec& spec) {
  return {{"type", type},
          {"function", function},
          {"op", spec.op},
          {"dtype", spec.dtype_name},
          {"pass", to_string(spec.pass)},
          {"dims", spec.dims}};
}

}  // namespace

std::string encode_frame(const nlohmann::json& message) {
  const std::string payload =
      message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const auto length = static_cast<std::uint32_t>(payload.size());
  std::string frame(4, '\0');
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((length >> (8 * i)) & 0xFFu);
  return frame + payload;
}

std::uint32_t frame_length(const unsigned char header[4]) {
  return header[0] | (header[1] << 8) | (header[2] << 16) |
         (static_cast<std::uint32_t>(header[3]) << 24);
}

std::string base64_encode(const std::string& bytes) {
  std::string text;
  std::uint32_t group = 0;
  int bits = 0;
  for (unsigned char byte : bytes) {
    group = (group << 8) | byte;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      text += base64_alphabet[(group >> bits) & 0x3Fu];
    }
  }
  if (bits > 0) text += base64_alphabet[(group << (6 - bits)) & 0x3Fu];
  while (text.size() % 4) text += '=';
  return text;
}

std::optional<std::string> base64_decode(const std::string& text) {
  if (text.size() % 4) return std::nullopt;
  std::string bytes;
  std::uint32_t group = 0;
  int bits = 0;
  std::size_t padding = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '=') {
      if (i + 2 < text.size()) return std::nullopt;  // '=' only in the last two places
      ++padding;
      continue;
    }
    if (padding) return std::nullopt;
    const char* found = std::char_traits<char>::find(base64_alphabet, 64, c);
    if (!found) return std::nullopt;
    group = (group << 6) | static_cast<std::uint32_t>(found - base64_alphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((group >> bits) & 0xFFu);
    }
  }
  return bytes;
}

nlohmann::json tensor_entry(const StagedTensor& tensor) {
  return {{"name", tensor.name},
          {"role", to_string(tensor.role)},
          {"dtype", to_string(tensor.dtype)},
          {"shape", tensor.shape}};
}

nlohmann::json device_tensor_entry(const StagedTensor& tensor, const std::string& handle,
                                   std::size_t allocation_bytes) {
  nlohmann::json entry = tensor_entry(tensor);
  entry["handle"] = base64_encode(handle);
  entry["allocation_bytes"] = allocation_bytes;
  entry["offset"] = tensor.offset;
  return entry;
}

nlohmann::json call_request(const std::string& function, const Batch& batch,
                            nlohmann::json tensors) {
  nlohmann::json segments = nlohmann::json::array();
  for (const Segment& s : batch.invocation->segments) {
    segments.push_back({s.sequence, s.first_slot, s.length, s.start_position});
  }
  nlohmann::json request = common_fields("call", function, *batch.spec);
  request["slot_rows"] = batch.invocation->slot_rows;
  request["segments"] = segments;
  request["invocation_index"] = batch.invocation_index;
  request["invocation_count"] = batch.invocation_count;
  if (batch.captured) request["captured"] = true;
  request["tensors"] = std::move(tensors);
  if (kernels_wanted()) request["kernels"] = true;  // the worker's profiler records the call
  return request;
}

nlohmann::json device_block(const std::string& handle_kind, int device_index,
                            const std::vector<std::string>& close_handles) {
  nlohmann::json close = nlohmann::json::array();
  for (const auto& handle : close_handles) close.push_back(base64_encode(handle));
  return {{"kind", handle_kind}, {"index", device_index}, {"close", close}};
}

nlohmann::json bench_request(const std::string& function, const CaseSpec& spec, int warmup,
                             int repeats, nlohmann::json device, nlohmann::json sets) {
  nlohmann::json request = common_fields("bench", function, spec);
  request["warmup"] = warmup;
  request["repeats"] = repeats;
  request["device"] = std::move(device);
  request["sets"] = std::move(sets);
  return request;
}

}  // namespace bitcheck::python_protocol
