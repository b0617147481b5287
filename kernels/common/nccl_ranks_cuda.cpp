// NCCL loaded at run time (dlopen), the rank group, communicators per (tp, settings) met through
// unique ids in the group's directory, and the collectives with their paths recorded.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/nccl_ranks.h"
#include "core/paths.h"

extern char** environ;

namespace bitcheck::nccl {
namespace {

struct Library {
  void* handle = nullptr;
  std::string path;
  std::string problem;
  int version = 0;
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) receive = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  // The profiler plugin that reports NCCL's choices (libbitcheck-nccl-profiler.so beside the
  // binary), and its function that hands over what it saw since the last call.
  std::string profiler_path;
  int (*take_choices)(char* buffer, int size) = nullptr;
};

template <typename Function>
void bind(Library& library, Function& function, const char* name) {
  function = reinterpret_cast<Function>(dlsym(library.handle, name));
  if (!function && library.problem.empty()) library.problem = library.path + " has no " + name;
}

std::string executable_directory() {
  std::error_code ignored;
  return std::filesystem::read_symlink("/proc/self/exe", ignored).parent_path().string();
}

// The profiler plugin, when it is found and NCCL_PROFILER_PLUGIN names no other: NCCL loads it by
// the path we set, and dlopen hands both of us the same copy. A rank process inherits the path its
// parent set, and takes the plugin's recorder from it.
void load_profiler(Library& library) {
  std::vector<std::string> candidates;
  if (const char* named = std::getenv("NCCL_PROFILER_PLUGIN")) {
    if (std::string(named).find("bitcheck-nccl-profiler") == std::string::npos) return;
    candidates.push_back(named);
  }
  if (const char* path = std::getenv("BITCHECK_NCCL_PROFILER")) candidates.push_back(path);
  const std::string here = executable_directory();
  candidates.push_back(here + "/libbitcheck-nccl-profiler.so");
  candidates.push_back(here + "/../lib/libbitcheck-nccl-profiler.so");
  for (const auto& candidate : candidates) {
    if (!std::filesystem::exists(candidate)) continue;
    void* plugin = dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!plugin) continue;
    library.take_choices =
        reinterpret_cast<int (*)(char*, int)>(dlsym(plugin, "bitcheck_nccl_profiler_take"));
    if (!library.take_choices) continue;
    library.profiler_path = std::filesystem::canonical(candidate).string();
    setenv("NCCL_PROFILER_PLUGIN", library.profiler_path.c_str(), 1);
    return;
  }
}

Library load() {
  Library library;
  const char* chosen = std::getenv("BITCHECK_NCCL_LIBRARY");
  library.path = chosen ? chosen : "libnccl.so.2";
  library.handle = dlopen(library.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library.handle) {
    library.problem = "NCCL not found (" + std::string(dlerror()) +
                      "): install it or name it with BITCHECK_NCCL_LIBRARY";
    return library;
  }
  bind(library, library.get_version, "ncclGetVersion");
  bind(library, library.get_unique_id, "ncclGetUniqueId");
  bind(library, library.init_rank_config, "ncclCommInitRankConfig");
  bind(library, library.destroy, "ncclCommDestroy");
  bind(library, library.all_reduce, "ncclAllReduce");
  bind(library, library.reduce_scatter, "ncclReduceScatter");
  bind(library, library.all_gather, "ncclAllGather");
  bind(library, library.send, "ncclSend");
  bind(library, library.receive, "ncclRecv");
  bind(library, library.group_start, "ncclGroupStart");
  bind(library, library.group_end, "ncclGroupEnd");
  bind(library, library.error_string, "ncclGetErrorString");
  if (!library.problem.empty()) return library;
  library.get_version(&library.version);
  // ncclConfig_t as this build knows it (2.28) is read by any NCCL from 2.27 on.
  if (library.version < 22700) {
    library.problem = "NCCL " + std::to_string(library.version) + " at " + library.path +
                      " is older than 2.27, whose communicator settings bitcheck uses";
    return library;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(library.get_version), &info) && info.dli_fname)
    library.path = info.dli_fname;
  load_profiler(library);
  return library;
}

Library& library() {
  static Library loaded = load();
  return loaded;
}

void check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  throw std::runtime_error(std::string("NCCL ") + what + ": " + library().error_string(result));
}

void check_cuda(cudaError_t result, const char* what) {
  if (result == cudaSuccess) return;
  throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(result));
}

std::size_t element_bytes(cuda::DeviceDType dtype) {
  return dtype == cuda::DeviceDType::fp32 ? 4 : 2;
}

ncclDataType_t nccl_type(cuda::DeviceDType dtype) {
  switch (dtype) {
    case cuda::DeviceDType::bf16:
      return ncclBfloat16;
    case cuda::DeviceDType::fp16:
      return ncclFloat16;
    case cuda::DeviceDType::fp32:
      return ncclFloat32;
  }
  throw std::invalid_argument("nccl: unknown dtype");
}

RankGroup& current_group() {
  static RankGroup group;
  return group;
}

// Sets variables for the communicator being created and puts the old values back after.
class ScopedEnvironment {
 public:
  void set(const std::string& name, const std::string& value) {
    if (value.empty()) return;
    const char* old = std::getenv(name.c_str());
    saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
    setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnvironment() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        unsetenv(it->first.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Rank 0 writes the communicator's unique id into the group's directory; the others wait for it.
ncclUniqueId meet(const std::string& key, int rank) {
  const std::string path = current_group().directory + "/nccl-" + key + ".id";
  ncclUniqueId id;
  if (rank == 0) {
    check(library().get_unique_id(&id), "ncclGetUniqueId");
    {
      std::ofstream out(path + ".tmp", std::ios::binary);
      out.write(id.internal, sizeof(id.internal));
    }
    std::filesystem::rename(path + ".tmp", path);
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("rank " + std::to_string(rank) + ": no NCCL id " + path +
                               " from rank 0 in 5 minutes");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream in(path, std::ios::binary);
  in.read(id.internal, sizeof(id.internal));
  return id;
}

ncclComm_t communicator(int tp, const CommSettings& settings) {
  static std::map<std::string, ncclComm_t> communicators;
  const std::string key = settings.name + "-tp" + std::to_string(tp);
  auto found = communicators.find(key);
  if (found != communicators.end()) return found->second;
  if (auto problem = unavailable()) throw std::runtime_error(*problem);
  const RankGroup& group = current_group();
  if (group.size < tp || group.rank >= tp)
    throw std::runtime_error("rank " + std::to_string(group.rank) + " of " +
                             std::to_string(group.size) + " is not one of " + std::to_string(tp) +
                             " ranks");
  const ncclUniqueId id = meet(key, group.rank);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (settings.channels > 0) {
    config.minCTAs = settings.channels;
    config.maxCTAs = settings.channels;
  }
  ncclComm_t comm = nullptr;
  {
    ScopedEnvironment environment;
    environment.set("NCCL_ALGO", settings.algorithm);
    environment.set("NCCL_PROTO", settings.protocol);
    check(library().init_rank_config(&comm, tp, id, group.rank, &config), "ncclCommInitRankConfig");
  }
  communicators[key] = comm;
  return comm;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// What NCCL chose for the calls since the last one, as members of the launch-path family "nccl":
// "nccl:allreduce.ring.ll.ch16".
void record_choices() {
  if (!library().take_choices) return;
  std::vector<char> buffer(1 << 16);
  const int length = library().take_choices(buffer.data(), static_cast<int>(buffer.size()));
  std::istringstream lines(
      std::string(buffer.data(), static_cast<std::size_t>(std::max(0, length))));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string function, algorithm, protocol;
    int channels = 0;
    if (fields >> function >> algorithm >> protocol >> channels)
      record_path_member("nccl", lower(function) + "." + lower(algorithm) + "." + lower(protocol) +
                                     ".ch" + std::to_string(channels));
  }
}

bool& asynchronous() {
  static bool on = false;
  return on;
}

void finish(void* stream, const char* what) {
  if (asynchronous()) return;
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), what);
  record_choices();
}

}  // namespace

std::optional<std::string> unavailable() {
  const Library& loaded = library();
  if (loaded.problem.empty()) return std::nullopt;
  return loaded.problem;
}

nlohmann::json meta() {
  const Library& loaded = library();
  nlohmann::json meta = {{"library", loaded.path}};
  if (!loaded.problem.empty()) {
    meta["unavailable_reason"] = loaded.problem;
    return meta;
  }
  meta["version"] = std::to_string(loaded.version / 10000) + "." +
                    std::to_string(loaded.version / 100 % 100) + "." +
                    std::to_string(loaded.version % 100);
  meta["paths_recorded"] = loaded.take_choices != nullptr;
  nlohmann::json environment = nlohmann::json::object();
  for (char** variable = environ; *variable; ++variable) {
    const std::string entry = *variable;
    if (entry.rfind("NCCL_", 0) != 0) continue;
    const std::size_t equals = entry.find('=');
    environment[entry.substr(0, equals)] = entry.substr(equals + 1);
  }
  meta["environment"] = environment;
  return meta;
}

void join(const RankGroup& group) {
  if (auto problem = unavailable()) throw std::runtime_error(*problem);
  check_cuda(cudaSetDevice(0), "cudaSetDevice");  // CUDA_VISIBLE_DEVICES names the rank's GPU
  current_group() = group;
}

const RankGroup& group() {
  return current_group();
}

CommSettings library_default() {
  return {"default", "", "", 0};
}

CommSettings tree_simple() {
  return {"tree-simple", "allreduce:tree", "Simple", 16};
}

void all_reduce_sum(const void* send, void* receive, std::size_t count, cuda::DeviceDType dtype,
                    int tp, const CommSettings& settings, void* stream) {
  check(library().all_reduce(send, receive, count, nccl_type(dtype), ncclSum,
                             communicator(tp, settings), static_cast<cudaStream_t>(stream)),
        "ncclAllReduce");
  finish(stream, "after ncclAllReduce");
}

void reduce_scatter_sum(const void* send, void* receive, std::size_t count, cuda::DeviceDType dtype,
                        int tp, const CommSettings& settings, void* stream) {
  check(library().reduce_scatter(send, receive, count / static_cast<std::size_t>(tp),
                                 nccl_type(dtype), ncclSum, communicator(tp, settings),
                                 static_cast<cudaStream_t>(stream)),
        "ncclReduceScatter");
  finish(stream, "after ncclReduceScatter");
}

void all_gather(const void* send, void* receive, std::size_t count_per_rank,
                cuda::DeviceDType dtype, int tp, const CommSettings& settings, void* stream) {
  check(library().all_gather(send, receive, count_per_rank, nccl_type(dtype),
                             communicator(tp, settings), static_cast<cudaStream_t>(stream)),
        "ncclAllGather");
  finish(stream, "after ncclAllGather");
}

void all_to_all(const void* send, void* receive, std::size_t count_per_rank,
                cuda::DeviceDType dtype, int tp, const CommSettings& settings, void* stream) {
  ncclComm_t comm = communicator(tp, settings);
  const std::size_t bytes = count_per_rank * element_bytes(dtype);
  auto s = static_cast<cudaStream_t>(stream);
  check(library().group_start(), "ncclGroupStart");
  for (int peer = 0; peer < tp; ++peer) {
    check(library().send(static_cast<const char*>(send) + bytes * static_cast<std::size_t>(peer),
                         count_per_rank, nccl_type(dtype), peer, comm, s),
          "ncclSend");
    check(library().receive(static_cast<char*>(receive) + bytes * static_cast<std::size_t>(peer),
                            count_per_rank, nccl_type(dtype), peer, comm, s),
          "ncclRecv");
  }
  check(library().group_end(), "ncclGroupEnd");
  finish(stream, "after the all-to-all");
}

bool waits() {
  return !asynchronous();
}

Asynchronous::Asynchronous() {
  asynchronous() = true;
}
Asynchronous::~Asynchronous() {
  asynchronous() = false;
  record_choices();  // drained: the benchmark's calls are no case's paths
}

bool all_true(bool mine, int tp) {
  if (tp == 1) return mine;
  int* device = nullptr;
  check_cuda(cudaMalloc(&device, sizeof(int)), "cudaMalloc");
  std::unique_ptr<int, decltype(&cudaFree)> owned(device, &cudaFree);
  const int value = mine ? 1 : 0;
  check_cuda(cudaMemcpy(device, &value, sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(library().all_reduce(device, device, 1, ncclInt32, ncclMin,
                             communicator(tp, library_default()), nullptr),
        "ncclAllReduce (agreement)");
  int all = 0;
  check_cuda(cudaMemcpy(&all, device, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy");
  record_choices();  // drained here, outside any case's recording: not one of the impl's calls
  return all == 1;
}

}  // namespace bitcheck::nccl
