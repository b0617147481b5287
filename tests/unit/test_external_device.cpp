// Impls from outside bitcheck on a device, without a GPU: the Python protocol's frames and
// base64, DeviceStaging (parameters kept by input id, one arena reused, retired allocations), and
// the plugin and Python adapters end to end on a host stand-in of a device whose allocations are
// POSIX shared memory, opened by the Python worker as CUDA IPC handles would be ("host-shm"). The
// same code runs on the GPU with the CUDA backend's ExternalDeviceMemory.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>

#include "external/external_device.h"
#include "external/plugin_loader.h"
#include "external/python_protocol.h"
#include "manifest.h"
#include "run/layout.h"
#include "run/runner.h"
#include "spec/contract.h"

using namespace bitcheck;

namespace {

// Device memory in POSIX shared-memory objects: the "handle" of an allocation is its name.
class HostSharedMemory : public ExternalDeviceMemory {
 public:
  ~HostSharedMemory() override {
    while (!allocations_.empty()) release(allocations_.begin()->first);
  }
  void* allocate(std::size_t bytes) override {
    const std::string name =
        "/bitcheck-stand-in-" + std::to_string(::getpid()) + "-" + std::to_string(++allocated);
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(base != MAP_FAILED);
    allocations_[base] = {name, bytes};
    return base;
  }
  void release(void* allocation) noexcept override {
    auto it = allocations_.find(allocation);
    if (it == allocations_.end()) return;
    ::munmap(allocation, it->second.second);
    ::shm_unlink(it->second.first.c_str());
    allocations_.erase(it);
    ++released;
  }
  void upload(void* device, const void* host, std::size_t bytes) override {
    std::memcpy(device, host, bytes);
    ++uploads;
  }
  void download(void* host, const void* device, std::size_t bytes) override {
    std::memcpy(host, device, bytes);
    ++downloads;
  }
  void fill_random(void* device, std::size_t count, DType dtype, std::uint64_t seed) override {
    for (std::size_t i = 0; i < count; ++i) {
      const float value = static_cast<float>((i * 7 + seed) % 13) / 8.0f - 0.75f;
      const std::uint32_t bits = encode_bits(dtype, value == 0 ? 0.5f : value);
      std::memcpy(static_cast<unsigned char*>(device) + i * dtype_size(dtype), &bits,
                  dtype_size(dtype));
    }
  }
  std::string export_handle(void* allocation) override {
    ++exports;
    std::string handle = allocations_.at(allocation).first.substr(1);
    handle.resize(64, '\0');
    return handle;
  }
  std::string handle_kind() const override { return "host-shm"; }
  int device_index() const override { return 0; }
  void* stream() override { return nullptr; }
  void synchronize() override { ++synchronizations; }
  Timing time_launches(int warmup, int repeats, const std::function<void(int)>& launch) override {
    for (int i = 0; i < warmup; ++i) launch(i);
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      launch(warmup + i);
      times.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(times.begin(), times.end());
    return {times[times.size() / 2], times.front()};
  }
  std::size_t live() const { return allocations_.size(); }

  int allocated = 0, released = 0, uploads = 0, downloads = 0, exports = 0, synchronizations = 0;

 private:
  std::map<void*, std::pair<std::string, std::size_t>> allocations_;
};

class StandInBackend : public DeviceBackend {
 public:
  nlohmann::json meta() const override { return {{"stand_in", true}}; }
  double copy_bandwidth_gbps() const override { return -1.0; }
  double copy_bandwidth_gbps(double, int, int, std::size_t) const override { return -1.0; }
  std::optional<std::size_t> free_memory_bytes() const override { return std::nullopt; }
  std::optional<std::string> context_fault() const override { return std::nullopt; }
  ExternalDeviceMemory* external_memory() const override { return &memory; }
  mutable HostSharedMemory memory;
};

// A python3 that has numpy (BITCHECK_PYTHON, python3, /usr/bin/python3), or "".
std::string python_with_numpy() {
  std::vector<std::string> candidates;
  if (const char* chosen = std::getenv("BITCHECK_PYTHON")) candidates.push_back(chosen);
  candidates.insert(candidates.end(), {"python3", "/usr/bin/python3"});
  for (const auto& python : candidates) {
    if (std::system((python + " -c 'import numpy' > /dev/null 2>&1").c_str()) == 0) return python;
  }
  return "";
}

// Every op and CPU impl, the stand-in as the cuda backend, the device test plugin and, with numpy,
// the Python device impls of python/tests/host_device_impls.py.
struct StandInWorld {
  Registry registry;
  Contract contract;
  StandInBackend* backend = nullptr;
  bool python = false;
  StandInWorld() {
    register_ops_and_cpu(registry);
    auto stand_in = std::make_unique<StandInBackend>();
    backend = stand_in.get();
    registry.set_device_backend("cuda", std::move(stand_in));
    registry.set_backend_status("cuda", true, "");
    contract = load_embedded_contract(registry);
    load_external_impls(registry, {{BITCHECK_TEST_DEVICE_PLUGIN}, {}});
    const std::string interpreter = python_with_numpy();
    if (interpreter.empty()) return;
    ::setenv("BITCHECK_PYTHON", interpreter.c_str(), 1);
    ::setenv("PYTHONPATH", BITCHECK_SOURCE_DIR "/python/tests", 1);
    for (const char* function :
         {"host_device_impls:fixed_order", "host_device_impls:split_k", "host_device_impls:raises"})
      register_python_impl(registry, function);
    python = true;
  }
};

StandInWorld& world() {
  static StandInWorld instance;
  return instance;
}

CaseSpec matmul_case(const std::string& impl, std::int64_t rows) {
  CaseSpec spec;
  spec.op = "matmul";
  spec.impl = impl;
  spec.dtype = DType::fp32;
  spec.dtype_name = "fp32";
  spec.dims = {{"N", 24}, {"K", 40}};
  spec.rows = rows;
  spec.seed = 5;
  spec.layouts = known_layouts();
  return spec;
}

CaseResult run(const CaseSpec& spec) {
  Runner runner(world().registry, world().contract);
  return runner.run_case(spec);
}

std::string describe(const CaseResult& result) {
  return to_string(result.verdict) + " " + result.reason;
}

// A batch of matmul tensors as the runner makes them: x rows, a parameter w with an input id, y
// poisoned, dw an fp32 accumulator.
struct MatmulBatch {
  CaseSpec spec = matmul_case("any", 3);
  Invocation invocation;
  Batch batch;
  std::vector<TensorDecl> decls;
  MatmulBatch(std::int64_t slots, std::uint64_t weight_id) {
    spec.pass = Pass::backward;
    for (std::int64_t s = 0; s < slots; ++s) invocation.slot_rows.push_back(s);
    batch.spec = &spec;
    batch.invocation = &invocation;
    decls = {{"x", TensorRole::row_input, DType::fp32, {40}},
             {"w", TensorRole::parameter, DType::fp32, {24, 40}},
             {"dy", TensorRole::row_input, DType::fp32, {24}},
             {"dx", TensorRole::row_output, DType::fp32, {40}},
             {"dw", TensorRole::reduction_output, DType::fp32, {24, 40}}};
    auto filled = [](std::vector<std::int64_t> shape, float base) {
      Tensor tensor(DType::fp32, std::move(shape));
      for (std::int64_t i = 0; i < tensor.numel(); ++i) tensor.set(i, base + static_cast<float>(i));
      return std::make_shared<const Tensor>(std::move(tensor));
    };
    batch.inputs["x"] = filled({slots, 40}, 1);
    batch.inputs["w"] = filled({24, 40}, 2);
    batch.inputs["dy"] = filled({slots, 24}, 3);
    batch.input_ids = {{"x", 900 + weight_id}, {"w", weight_id}, {"dy", 800 + weight_id}};
    batch.outputs.emplace("dx", Tensor(DType::fp32, {slots, 40}));
    batch.outputs["dx"].fill_nan();
    batch.outputs.emplace("dw", Tensor(DType::fp32, {24, 40}));
  }
};

}  // namespace

TEST_CASE("the Python protocol: frames, base64 and the device tensor entries", "[external]") {
  const std::string frame = python_protocol::encode_frame({{"type", "call"}});
  REQUIRE(frame.size() == 4 + 15);
  CHECK(python_protocol::frame_length(reinterpret_cast<const unsigned char*>(frame.data())) == 15);
  CHECK(frame.substr(4) == R"({"type":"call"})");

  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  for (std::size_t length : {0, 1, 2, 3, 64, 256}) {
    const std::string bytes = every_byte.substr(0, length);
    CHECK(python_protocol::base64_decode(python_protocol::base64_encode(bytes)) == bytes);
  }
  CHECK(python_protocol::base64_encode("bit") == "Yml0");
  CHECK(python_protocol::base64_encode("bi") == "Ymk=");
  CHECK_FALSE(python_protocol::base64_decode("Ymk"));
  CHECK_FALSE(python_protocol::base64_decode("Y=k="));
  CHECK_FALSE(python_protocol::base64_decode("Ym*="));

  StagedTensor tensor;
  tensor.name = "w";
  tensor.role = TensorRole::parameter;
  tensor.dtype = DType::bf16;
  tensor.shape = {8, 16};
  tensor.offset = 512;
  const nlohmann::json entry =
      python_protocol::device_tensor_entry(tensor, std::string(64, '\x01'), 4096);
  CHECK(entry["name"] == "w");
  CHECK(entry["role"] == "parameter");
  CHECK(entry["dtype"] == "bf16");
  CHECK(entry["shape"] == nlohmann::json({8, 16}));
  CHECK(entry["offset"] == 512);
  CHECK(entry["allocation_bytes"] == 4096);
  CHECK(python_protocol::base64_decode(entry["handle"]) == std::string(64, '\x01'));
  const nlohmann::json device = python_protocol::device_block("cuda", 1, {"ab"});
  CHECK(device == nlohmann::json({{"kind", "cuda"}, {"index", 1}, {"close", {"YWI="}}}));
}

TEST_CASE("device staging keeps parameters, reuses its arena and retires what it replaces",
          "[external]") {
  HostSharedMemory memory;
  {
    DeviceStaging staging(memory);
    MatmulBatch first(3, 1);
    std::vector<StagedTensor> staged = staging.stage(first.batch, first.decls);
    REQUIRE(staged.size() == 5);
    CHECK(memory.allocated == 2);  // the arena and w
    for (const StagedTensor& tensor : staged) {
      CHECK(tensor.offset % DeviceStaging::alignment == 0);
      const DeviceAllocation& allocation = staging.allocation_of(tensor);
      CHECK(static_cast<unsigned char*>(tensor.data) ==
            static_cast<unsigned char*>(allocation.base) + tensor.offset);
      CHECK(tensor.offset + tensor.bytes <= allocation.bytes);
    }
    CHECK(staged[1].offset == 0);  // a parameter in an allocation of its own
    CHECK(staged[0].allocation == staged[2].allocation);
    CHECK(std::memcmp(staged[1].data, first.batch.in("w").data(), staged[1].bytes) == 0);
    CHECK(memory.synchronizations == 1);  // the uploads waited for before the call

    // The impl writes its outputs on the device; they come back into the batch.
    static_cast<float*>(staged[3].data)[0] = 42.0f;
    static_cast<float*>(staged[4].data)[5] = 7.0f;
    staging.download_outputs(first.batch, staged);
    CHECK(first.batch.out("dx").get(0) == 42.0f);
    CHECK(first.batch.out("dw").get(5) == 7.0f);

    // The same weight (same input id) again: no new allocation and no upload of w.
    const int uploads = memory.uploads;
    MatmulBatch again(2, 1);
    std::vector<StagedTensor> second = staging.stage(again.batch, again.decls);
    CHECK(memory.allocated == 2);
    CHECK(second[1].allocation == staged[1].allocation);
    CHECK(memory.uploads == uploads + 4);  // x, dy, dx, dw
    // A layout whose reductions no check reads: dw neither uploaded nor downloaded.
    again.batch.reductions_wanted = false;
    const int downloads = memory.downloads;
    staging.stage(again.batch, again.decls);
    staging.download_outputs(again.batch, second);
    CHECK(memory.uploads == uploads + 4 + 3);
    CHECK(memory.downloads == downloads + 1);

    // A larger batch replaces the arena; the old one is retired, not freed, until released.
    const std::string arena_handle = staging.handle(staged[0]);
    CHECK(staging.retired_handles().empty());
    MatmulBatch larger(40, 1);
    std::vector<StagedTensor> grown = staging.stage(larger.batch, larger.decls);
    CHECK(grown[0].allocation != staged[0].allocation);
    CHECK(staging.retired_handles() == std::vector<std::string>{arena_handle});
    CHECK(memory.released == 0);
    staging.release_retired();
    CHECK(memory.released == 1);
    CHECK(staging.retired_handles().empty());

    // Weights of four more cases: the oldest parameter is retired (never exported: no handle).
    for (std::uint64_t id = 2; id <= 5; ++id) {
      MatmulBatch other(2, id);
      staging.stage(other.batch, other.decls);
    }
    CHECK(memory.live() == 1 + DeviceStaging::cached_parameters + 1);  // arena, 4 cached, retired
    CHECK(staging.retired_handles().empty());
    staging.release_retired();
    CHECK(memory.live() == 1 + DeviceStaging::cached_parameters);
  }
  CHECK(memory.live() == 0);  // the staging frees everything it holds
}

TEST_CASE("benchmark staging: random floats, indices within bounds, zero outputs", "[external]") {
  HostSharedMemory memory;
  DeviceStaging staging(memory);
  CaseSpec spec = matmul_case("any", 6);
  spec.op = "embedding";
  const std::vector<TensorDecl> decls = {
      {"ids", TensorRole::row_input, DType::i32, {1}, Generator::index, 1.0f, 11},
      {"table", TensorRole::parameter, DType::bf16, {11, 8}},
      {"out", TensorRole::row_output, DType::bf16, {8}}};
  const auto sets = staging.stage_random(spec, decls, 3);
  REQUIRE(sets.size() == 3);
  CHECK(memory.allocated == 3);  // one allocation per set
  for (const auto& tensors : sets) {
    CHECK(tensors[0].shape == std::vector<std::int64_t>{6, 1});
    const auto* ids = static_cast<const std::int32_t*>(tensors[0].data);
    for (int i = 0; i < 6; ++i) CHECK((ids[i] >= 0 && ids[i] < 11));
    const auto* out = static_cast<const std::uint16_t*>(tensors[2].data);
    for (int i = 0; i < 48; ++i) CHECK(out[i] == 0);
  }
  CHECK(benchmark_set_bytes(spec, decls) == 6 * 4 + 11 * 8 * 2 + 6 * 8 * 2);
  BenchSettings settings;
  settings.rotate_bytes = 1000;
  CHECK(benchmark_sets(400, settings, std::nullopt) == 4);
  CHECK(benchmark_sets(400, settings, std::size_t(2000)) == 2);
  CHECK(benchmark_sets(1 << 30, settings, std::nullopt) == 2);  // never fewer than two sets
}

TEST_CASE("a cuda plugin impl runs on device buffers: invariant passes, control drifts",
          "[external][plugins]") {
  StandInWorld& w = world();
  const int synchronizations = w.backend->memory.synchronizations;
  CaseResult fixed = run(matmul_case("plugin:test/fixed-order", 7));
  INFO(describe(fixed));
  CHECK(fixed.verdict == Verdict::pass);
  CHECK(w.backend->memory.synchronizations > synchronizations);
  CaseResult control = run(matmul_case("plugin:test/split-k", 7));
  INFO(describe(control));
  CHECK(control.verdict == Verdict::drift);
  CaseResult failed = run(matmul_case("plugin:test/returns-error", 3));
  CHECK(failed.verdict == Verdict::error);
  CHECK_THAT(failed.reason, Catch::Contains("the plugin refused this call on purpose"));
  // Allocations stay bounded across cases: each impl's arena and cached parameters.
  CHECK(w.backend->memory.live() <= 3 * (1 + DeviceStaging::cached_parameters));

  Impl* impl = w.registry.find_impl("matmul", "plugin:test/fixed-order");
  BenchSettings settings;
  settings.warmup = 1;
  settings.repeats = 3;
  settings.rotate_bytes = 1 << 16;
  const auto measurement = impl->benchmark(matmul_case("plugin:test/fixed-order", 16), settings);
  REQUIRE(measurement);
  CHECK(measurement->median_ms >= measurement->min_ms);
  CHECK(measurement->flops == 2.0 * 16 * 24 * 40);
  CHECK(measurement->config["rotated_sets"] == 10);  // 64 KiB / 7936 bytes a set, plus one
}

TEST_CASE("a cuda Python impl runs on device buffers opened through handles",
          "[external][python]") {
  StandInWorld& w = world();
  if (!w.python) {
    WARN("no python3 with numpy: skipped");
    return;
  }
  const int exports = w.backend->memory.exports;
  CaseResult fixed = run(matmul_case("py:host_device_impls:fixed_order", 7));
  INFO(describe(fixed));
  CHECK(fixed.verdict == Verdict::pass);
  CHECK(w.backend->memory.exports > exports);  // the worker got handles, not shared-memory copies
  CaseResult control = run(matmul_case("py:host_device_impls:split_k", 7));
  INFO(describe(control));
  CHECK(control.verdict == Verdict::drift);
  CaseResult raised = run(matmul_case("py:host_device_impls:raises", 3));
  CHECK(raised.verdict == Verdict::error);
  CHECK_THAT(raised.reason, Catch::Contains("RuntimeError: this device impl raises on purpose"));

  Impl* impl = w.registry.find_impl("matmul", "py:host_device_impls:fixed_order");
  BenchSettings settings;
  settings.warmup = 1;
  settings.repeats = 3;
  settings.rotate_bytes = 1 << 14;
  const auto measurement =
      impl->benchmark(matmul_case("py:host_device_impls:fixed_order", 16), settings);
  REQUIRE(measurement);
  CHECK(measurement->median_ms > 0);
  CHECK(measurement->config["timer"] == "wall clock (host-shm)");
}
