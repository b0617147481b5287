// The messages between bitcheck and its Python worker (python/bitcheck_py/__main__.py): frames of
// 4 bytes little-endian length then UTF-8 JSON, and the requests a Python impl sends. A call's
// tensors are in one POSIX shared-memory buffer on the CPU ("shm" + each tensor's "offset"), or on
// the device ("device" + each tensor's "handle" of its allocation, base64, and its "offset" from
// the allocation's base: the worker opens each allocation once and keeps it open until a later
// request lists it under "device"."close").
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"
#include "external/external_device.h"

namespace bitcheck::python_protocol {

// One frame: the length (4 bytes, little-endian) and the JSON text.
std::string encode_frame(const nlohmann::json& message);
// The payload length of a frame's 4-byte header.
std::uint32_t frame_length(const unsigned char header[4]);

std::string base64_encode(const std::string& bytes);
std::optional<std::string> base64_decode(const std::string& text);

// A tensor's description: name, role, dtype and full shape (where its bytes are is added by the
// caller: "offset" on the CPU, "handle" + "allocation_bytes" + "offset" on the device).
nlohmann::json tensor_entry(const StagedTensor& tensor);
// The same plus where it lives on the device.
nlohmann::json device_tensor_entry(const StagedTensor& tensor, const std::string& handle,
                                   std::size_t allocation_bytes);

// {"type": "call"} for one invocation of a layout: function, op, dtype, pass, dims, slot_rows,
// segments ([sequence, first slot, length, start position]), invocation index and count, tensors;
// "kernels": true when the runner records kernels (the worker then replies with those it saw).
nlohmann::json call_request(const std::string& function, const Batch& batch,
                            nlohmann::json tensors);

// The "device" block of a request: how the worker opens the handles, on which device, and the
// handles it must close first (allocations bitcheck frees after the reply).
nlohmann::json device_block(const std::string& handle_kind, int device_index,
                            const std::vector<std::string>& close_handles);

// {"type": "bench"}: time the function on each set of device tensors in turn, `warmup` untimed
// calls then `repeats` timed ones; the worker opens the handles for this request only.
nlohmann::json bench_request(const std::string& function, const CaseSpec& spec, int warmup,
                             int repeats, nlohmann::json device, nlohmann::json sets);

}  // namespace bitcheck::python_protocol
