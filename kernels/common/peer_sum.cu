// The fixed-order all-reduce over peer memory (common/peer_sum.h). Data moves by stores into the
// other ranks' memory (NVLink writes are posted; reads would wait on a round trip each):
//   one_shot_kernel  each rank writes its message into slot `rank` of every rank's staging buffer,
//                    meets the others once, and sums the tp slots of its own buffer. The staging
//                    buffer has two halves, one per call parity: the next call writes the other
//                    half, and the one after it cannot start before this call's meeting is passed
//                    by every rank, so one meeting a call is enough.
//   two_shot_kernel  the message in tp parts: rank r's part p goes to slot r of rank p's staging;
//                    after the first meeting rank p sums its slots and writes the summed part p
//                    into slot p of every rank's result buffer; after the second every rank copies
//                    its result buffer out. Nothing is rewritten before its reader passed a
//                    meeting.
// A block meets the same block of every other rank through flags in each rank's signal buffer (a
// release store of the call's epoch into every peer's, acquire loads of its own), so block b's
// packs are the same on every rank and no meeting waits on another block. Each element's sum is the
// rank tree of common/rank_tree.cuh whatever the shape or the block: the gathered paths' bits.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "common/dtype_dispatch.cuh"
#include "common/nccl_ranks.h"
#include "common/peer_sum.h"
#include "common/rank_tree.cuh"

namespace bitcheck::cuda {
namespace {

constexpr int threads = 256;
constexpr int max_blocks = 128;  // every block resident at once on every rank: meetings never wait
constexpr int phases = 2;        // meetings per call, at most (two_shot)
constexpr std::size_t pack_bytes = sizeof(uint4);
constexpr std::size_t signal_count = std::size_t(phases) * max_blocks * max_tree_ranks;

struct PeerPointers {
  uint4* staging[max_tree_ranks];
  uint4* result[max_tree_ranks];
  unsigned* signals[max_tree_ranks];
};

__device__ __forceinline__ void store_release(unsigned* flag, unsigned value) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* flag) {
  unsigned value;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

// Block b of this rank and block b of every other rank: none leaves before all have arrived, and
// what each wrote before arriving is visible to the others after.
__device__ void meet(const PeerPointers& peers, int rank, int tp, unsigned epoch, int phase) {
  __syncthreads();
  const int peer = static_cast<int>(threadIdx.x);
  if (peer < tp) {
    const std::size_t slot =
        (static_cast<std::size_t>(phase) * max_blocks + blockIdx.x) * max_tree_ranks;
    __threadfence_system();
    store_release(peers.signals[peer] + slot + rank, epoch);
    while (load_acquire(peers.signals[rank] + slot + peer) < epoch) {
    }
  }
  __syncthreads();
}

// Pack `pack` of each of the tp slots (`slot_packs` apart) of this rank's buffer, each element
// summed in the rank tree, rounded once. TP > 0: the rank count known at compile time (the tree
// unrolled, in registers); 0: `tp`.
template <typename T, int TP>
__device__ uint4 sum_slots(const uint4* slots, std::size_t slot_packs, std::size_t pack,
                           int runtime_tp) {
  const int tp = TP > 0 ? TP : runtime_tp;
  constexpr int lanes = static_cast<int>(pack_bytes / sizeof(T));
  uint4 loaded[max_tree_ranks];
#pragma unroll
  for (int r = 0; r < max_tree_ranks; ++r) {
    if (r < tp) loaded[r] = __ldcg(slots + r * slot_packs + pack);
  }
  uint4 sum;
  T* out = reinterpret_cast<T*>(&sum);
#pragma unroll
  for (int lane = 0; lane < lanes; ++lane) {
    float values[max_tree_ranks];
#pragma unroll
    for (int r = 0; r < max_tree_ranks; ++r) {
      if (r < tp) values[r] = to_float(reinterpret_cast<const T*>(&loaded[r])[lane]);
    }
    out[lane] = from_float<T>(rank_tree(values, tp));
  }
  return sum;
}

template <typename T, int TP>
__global__ void __launch_bounds__(threads)
    one_shot_kernel(PeerPointers peers, const uint4* send, uint4* out, std::size_t packs, int rank,
                    int tp, unsigned epoch) {
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t half = (epoch & 1u) * packs * static_cast<std::size_t>(tp);
  for (std::size_t p = first; p < packs; p += stride) {
    const uint4 value = send[p];
    for (int r = 0; r < tp; ++r) peers.staging[r][half + rank * packs + p] = value;
  }
  meet(peers, rank, tp, epoch, 0);
  const uint4* slots = peers.staging[rank] + half;
  for (std::size_t p = first; p < packs; p += stride)
    out[p] = sum_slots<T, TP>(slots, packs, p, tp);
}

template <typename T, int TP>
__global__ void __launch_bounds__(threads)
    two_shot_kernel(PeerPointers peers, const uint4* send, uint4* out, std::size_t packs, int rank,
                    int tp, unsigned epoch) {
  const std::size_t part = packs / static_cast<std::size_t>(tp);
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = first; j < part; j += stride) {
    for (int r = 0; r < tp; ++r) peers.staging[r][rank * part + j] = send[r * part + j];
  }
  meet(peers, rank, tp, epoch, 0);
  for (std::size_t j = first; j < part; j += stride) {
    const uint4 sum = sum_slots<T, TP>(peers.staging[rank], part, j, tp);
    for (int r = 0; r < tp; ++r) peers.result[r][rank * part + j] = sum;
  }
  meet(peers, rank, tp, epoch, 1);
  const uint4* result = peers.result[rank];
  for (std::size_t j = first; j < part; j += stride) {
    for (int r = 0; r < tp; ++r) out[r * part + j] = __ldcg(result + r * part + j);
  }
}

// The chunk tree of a TP GEMM (PeerSum::finish_chunk_tree): 4 fp32 values of each of the rank's
// leaves ([leaf][packs] packs of 4), summed per element in the rank tree over the leaves, the
// rank's subtree.
__device__ __forceinline__ float4 subtree_pack(const float4* leaves, int leaves_per_rank,
                                               std::size_t packs, std::size_t pack) {
  float4 loaded[max_tree_ranks];
#pragma unroll
  for (int c = 0; c < max_tree_ranks; ++c) {
    if (c < leaves_per_rank) loaded[c] = __ldg(leaves + c * packs + pack);
  }
  float4 subtree;
  float* sum = reinterpret_cast<float*>(&subtree);
#pragma unroll
  for (int lane = 0; lane < 4; ++lane) {
    float values[max_tree_ranks];
#pragma unroll
    for (int c = 0; c < max_tree_ranks; ++c) {
      if (c < leaves_per_rank) values[c] = reinterpret_cast<const float*>(&loaded[c])[lane];
    }
    sum[lane] = rank_tree(values, leaves_per_rank);
  }
  return subtree;
}

// 4 values of the output dtype: one store of 8 (bf16, fp16) or 16 (fp32) bytes.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T value[4];
};

template <typename T>
__device__ __forceinline__ Quad<T> load_quad(const Quad<T>* from) {
  Quad<T> quad;
  if constexpr (sizeof(Quad<T>) == 16) {
    *reinterpret_cast<uint4*>(&quad) = __ldcg(reinterpret_cast<const uint4*>(from));
  } else {
    *reinterpret_cast<uint2*>(&quad) = __ldcg(reinterpret_cast<const uint2*>(from));
  }
  return quad;
}

// Pack `pack` of each of the tp fp32 subtrees (`slot_packs` apart), each element summed in the rank
// tree over the ranks and rounded once to T.
template <typename T, int TP>
__device__ Quad<T> finish_slots(const uint4* slots, std::size_t slot_packs, std::size_t pack,
                                int runtime_tp) {
  const int tp = TP > 0 ? TP : runtime_tp;
  uint4 loaded[max_tree_ranks];
#pragma unroll
  for (int r = 0; r < max_tree_ranks; ++r) {
    if (r < tp) loaded[r] = __ldcg(slots + r * slot_packs + pack);
  }
  Quad<T> quad;
#pragma unroll
  for (int lane = 0; lane < 4; ++lane) {
    float values[max_tree_ranks];
#pragma unroll
    for (int r = 0; r < max_tree_ranks; ++r) {
      if (r < tp) values[r] = reinterpret_cast<const float*>(&loaded[r])[lane];
    }
    quad.value[lane] = from_float<T>(rank_tree(values, tp));
  }
  return quad;
}

// One shot: the rank's subtree into slot `rank` of every rank's staging half (`half_packs` apart,
// from the buffer's capacity, so calls of any size alternate halves), one meeting, the tp slots
// finished into `out`.
template <typename T, int TP>
__global__ void __launch_bounds__(threads)
    tree_one_shot_kernel(PeerPointers peers, const float4* leaves, int leaves_per_rank,
                         Quad<T>* out, std::size_t packs, std::size_t half_packs, int rank, int tp,
                         unsigned epoch) {
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t half = (epoch & 1u) * half_packs;
  for (std::size_t p = first; p < packs; p += stride) {
    const float4 subtree = subtree_pack(leaves, leaves_per_rank, packs, p);
    const uint4 value = *reinterpret_cast<const uint4*>(&subtree);
    for (int r = 0; r < tp; ++r) peers.staging[r][half + rank * packs + p] = value;
  }
  meet(peers, rank, tp, epoch, 0);
  const uint4* slots = peers.staging[rank] + half;
  for (std::size_t p = first; p < packs; p += stride)
    out[p] = finish_slots<T, TP>(slots, packs, p, tp);
}

// Two shots: part p of the rank's subtree into slot `rank` of rank p's staging; rank p finishes
// part p of the tree and writes it rounded into every rank's result buffer; every rank copies its
// result out. The traffic of the scattered NCCL path (fp32 parts one way, rounded parts back) in
// one kernel.
// Written: the first shot was the GEMM's (PeerSum::finish_written_subtree); the rank's subtree
// parts are in the ranks' staging already, and the kernel starts at the first meeting.
template <typename T, int TP, bool Written = false>
__global__ void __launch_bounds__(threads)
    tree_two_shot_kernel(PeerPointers peers, const float4* leaves, int leaves_per_rank,
                         Quad<T>* out, std::size_t packs, int rank, int tp, unsigned epoch) {
  const std::size_t part = packs / static_cast<std::size_t>(tp);
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  if constexpr (!Written) {
    for (std::size_t j = first; j < part; j += stride) {
      for (int r = 0; r < tp; ++r) {
        const float4 subtree = subtree_pack(leaves, leaves_per_rank, packs, r * part + j);
        peers.staging[r][rank * part + j] = *reinterpret_cast<const uint4*>(&subtree);
      }
    }
  }
  // Each thread's packs j, j + stride, ... (the same ones in every phase) `unroll` at a time, their
  // loads issued together: at prefill sizes 256-thread blocks leave HBM latency-bound otherwise.
  constexpr int unroll = TP == 2 ? 4 : TP == 4 ? 2 : 1;
  meet(peers, rank, tp, epoch, 0);
  for (std::size_t j0 = first; j0 < part; j0 += unroll * stride) {
    Quad<T> sums[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const std::size_t j = j0 + u * stride;
      if (j < part) sums[u] = finish_slots<T, TP>(peers.staging[rank], part, j, tp);
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const std::size_t j = j0 + u * stride;
      if (j >= part) continue;
      for (int r = 0; r < tp; ++r)
        reinterpret_cast<Quad<T>*>(peers.result[r])[rank * part + j] = sums[u];
    }
  }
  meet(peers, rank, tp, epoch, 1);
  const Quad<T>* result = reinterpret_cast<const Quad<T>*>(peers.result[rank]);
  if constexpr (TP > 0) {
    for (std::size_t j0 = first; j0 < part; j0 += unroll * stride) {
      Quad<T> copied[unroll][TP];
#pragma unroll
      for (int u = 0; u < unroll; ++u) {
        const std::size_t j = j0 + u * stride;
#pragma unroll
        for (int r = 0; r < TP; ++r)
          if (j < part) copied[u][r] = load_quad(result + r * part + j);
      }
#pragma unroll
      for (int u = 0; u < unroll; ++u) {
        const std::size_t j = j0 + u * stride;
#pragma unroll
        for (int r = 0; r < TP; ++r)
          if (j < part) out[r * part + j] = copied[u][r];
      }
    }
  } else {
    for (std::size_t j = first; j < part; j += stride) {
      for (int r = 0; r < tp; ++r) out[r * part + j] = load_quad(result + r * part + j);
    }
  }
}

unsigned blocks_for(std::size_t work) {
  const std::size_t wanted = (work + threads - 1) / threads;
  return static_cast<unsigned>(wanted < 1 ? 1 : wanted > max_blocks ? max_blocks : wanted);
}

template <typename T, int TP>
void launch(PeerShape shape, const PeerPointers& peers, const uint4* in, uint4* sum,
            std::size_t packs, int rank, int tp, unsigned epoch, cudaStream_t queue) {
  if (shape == PeerShape::one_shot) {
    one_shot_kernel<T, TP>
        <<<blocks_for(packs), threads, 0, queue>>>(peers, in, sum, packs, rank, tp, epoch);
    return;
  }
  two_shot_kernel<T, TP><<<blocks_for(packs / static_cast<std::size_t>(tp)), threads, 0, queue>>>(
      peers, in, sum, packs, rank, tp, epoch);
}

template <typename T, int TP>
void launch_tree(PeerShape shape, const PeerPointers& peers, const float4* leaves,
                 int leaves_per_rank, Quad<T>* out, std::size_t packs, std::size_t half_packs,
                 int rank, int tp, unsigned epoch, cudaStream_t queue) {
  if (shape == PeerShape::one_shot) {
    tree_one_shot_kernel<T, TP><<<blocks_for(packs), threads, 0, queue>>>(
        peers, leaves, leaves_per_rank, out, packs, half_packs, rank, tp, epoch);
    return;
  }
  tree_two_shot_kernel<T, TP>
      <<<blocks_for(packs / static_cast<std::size_t>(tp)), threads, 0, queue>>>(
          peers, leaves, leaves_per_rank, out, packs, rank, tp, epoch);
}

template <typename T, int TP>
void launch_tree_written(const PeerPointers& peers, Quad<T>* out, std::size_t packs, int rank,
                         int tp, unsigned epoch, cudaStream_t queue) {
  tree_two_shot_kernel<T, TP, true>
      <<<blocks_for(packs / static_cast<std::size_t>(tp)), threads, 0, queue>>>(
          peers, nullptr, 1, out, packs, rank, tp, epoch);
}

// f(std::integral_constant<int, TP>{}) with TP the rank count the kernels unroll (2, 4, 8), else
// 0 (the count read at run time).
template <typename F>
void by_rank_count(int tp, F&& f) {
  switch (tp) {
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
    default:
      return f(std::integral_constant<int, 0>{});
  }
}

constexpr std::size_t handle_bytes = sizeof(cudaIpcMemHandle_t);
constexpr int buffers = 3;  // staging, result, signals

}  // namespace

std::optional<PeerShape> peer_shape(std::size_t bytes, int tp, std::optional<PeerShape> forced) {
  if (tp < 1 || tp > max_tree_ranks || bytes == 0 || bytes % pack_bytes != 0) return std::nullopt;
  const bool parts = (bytes / pack_bytes) % static_cast<std::size_t>(tp) == 0;
  if (forced) return *forced == PeerShape::two_shot && !parts ? std::nullopt : forced;
  if (bytes < peer_two_shot_from_bytes) return PeerShape::one_shot;
  return parts ? std::optional<PeerShape>(PeerShape::two_shot) : std::nullopt;
}

struct PeerSum::State {
  int tp = 1, rank = 0;
  PeerShape shape = PeerShape::one_shot;
  std::size_t bytes = 0;
  DeviceBuffer staging, result, signals;
  PeerPointers peers{};
  std::vector<void*> opened;  // peers' buffers this rank mapped, closed on destruction
  unsigned epoch = 0;
  bool usable = false;
  std::string problem;
};

PeerSum::PeerSum(std::size_t bytes, int tp, PeerShape shape) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.tp = tp;
  s.shape = shape;
  s.rank = nccl::group().rank;
  s.bytes = bytes;
  // One shot: two halves of tp slots of the message; two shots: tp slots of a part each way.
  const bool one_shot = shape == PeerShape::one_shot;
  // Mapped by the other ranks (CUDA IPC): allocations of their own, never cached blocks.
  s.staging = DeviceBuffer(one_shot ? 2 * bytes * static_cast<std::size_t>(tp) : bytes,
                           DeviceBuffer::exported);
  s.result = DeviceBuffer(one_shot ? pack_bytes : bytes, DeviceBuffer::exported);
  s.signals = DeviceBuffer(signal_count * sizeof(unsigned), DeviceBuffer::exported);
  BITCHECK_CUDA_CALL(cudaMemset(s.signals.get(), 0, s.signals.bytes()));
  BITCHECK_CUDA_CALL(cudaDeviceSynchronize());
  // This rank's three handles, then every rank's, rank by rank (an exact copy through NCCL).
  std::vector<cudaIpcMemHandle_t> mine(buffers);
  void* const own[buffers] = {s.staging.get(), s.result.get(), s.signals.get()};
  for (int b = 0; b < buffers; ++b) BITCHECK_CUDA_CALL(cudaIpcGetMemHandle(&mine[b], own[b]));
  const std::size_t rank_bytes = buffers * handle_bytes;
  DeviceBuffer send(rank_bytes), gathered(rank_bytes * static_cast<std::size_t>(tp));
  send.upload(mine.data(), rank_bytes);
  nccl::all_gather(send.get(), gathered.get(), rank_bytes / sizeof(float), DeviceDType::fp32, tp,
                   nccl::library_default());
  std::vector<cudaIpcMemHandle_t> all(static_cast<std::size_t>(buffers * tp));
  gathered.download(all.data(), rank_bytes * static_cast<std::size_t>(tp));
  bool opened_all = true;
  for (int r = 0; r < tp; ++r) {
    for (int b = 0; b < buffers; ++b) {
      void* pointer = own[b];
      if (r != s.rank) {
        const cudaError_t status =
            cudaIpcOpenMemHandle(&pointer, all[static_cast<std::size_t>(r * buffers + b)],
                                 cudaIpcMemLazyEnablePeerAccess);
        if (status != cudaSuccess) {
          static_cast<void>(cudaGetLastError());
          if (opened_all)
            s.problem = "rank " + std::to_string(s.rank) + " cannot map rank " + std::to_string(r) +
                        "'s memory: " + cudaGetErrorString(status);
          opened_all = false;
          continue;
        }
        s.opened.push_back(pointer);
      }
      if (b == 0) s.peers.staging[r] = static_cast<uint4*>(pointer);
      if (b == 1) s.peers.result[r] = static_cast<uint4*>(pointer);
      if (b == 2) s.peers.signals[r] = static_cast<unsigned*>(pointer);
    }
  }
  s.usable = nccl::all_true(opened_all, tp);
  if (!s.usable && s.problem.empty()) s.problem = "another rank cannot map a peer's memory";
}

PeerSum::~PeerSum() {
  for (void* pointer : state_->opened) BITCHECK_CUDA_CALL_NOEXCEPT(cudaIpcCloseMemHandle(pointer));
  // No rank frees its buffers while another still has them mapped.
  try {
    nccl::all_true(true, state_->tp);
  } catch (const std::exception&) {
    return;
  }
}

PeerShape PeerSum::shape() const {
  return state_->shape;
}
bool PeerSum::usable() const {
  return state_->usable;
}
const std::string& PeerSum::problem() const {
  return state_->problem;
}

void PeerSum::all_reduce(DeviceDType dtype, const void* send, void* out, std::size_t count,
                         void* stream) {
  State& s = *state_;
  std::size_t element = 0;
  by_dtype(dtype, [&](auto type) { element = sizeof(decltype(type)); });
  const std::size_t bytes = count * element;
  if (!s.usable || bytes != s.bytes || peer_shape(bytes, s.tp, s.shape) != s.shape)
    throw std::logic_error("PeerSum::all_reduce: a message peer memory does not take");
  const std::size_t packs = bytes / pack_bytes;
  const unsigned epoch = ++s.epoch;
  const auto* in = static_cast<const uint4*>(send);
  auto* sum = static_cast<uint4*>(out);
  auto queue = static_cast<cudaStream_t>(stream);
  by_dtype(dtype, [&](auto type) {
    using T = decltype(type);
    by_rank_count(s.tp, [&](auto ranks) {
      launch<T, decltype(ranks)::value>(s.shape, s.peers, in, sum, packs, s.rank, s.tp, epoch,
                                        queue);
    });
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

std::size_t PeerSum::capacity_bytes() const {
  return state_->bytes;
}

void PeerSum::finish_chunk_tree(DeviceDType out_dtype, const float* leaves, int leaves_per_rank,
                                void* out, std::size_t count, void* stream) {
  State& s = *state_;
  const std::size_t bytes = count * sizeof(float);
  if (!s.usable || bytes > s.bytes || leaves_per_rank < 1 || leaves_per_rank > max_tree_ranks ||
      peer_shape(bytes, s.tp, s.shape) != s.shape)
    throw std::logic_error("PeerSum::finish_chunk_tree: a message peer memory does not take");
  const std::size_t packs = bytes / pack_bytes;
  // One shot: the halves of the staging buffer lie its capacity apart, whatever this call's size.
  const std::size_t half_packs = s.bytes / pack_bytes * static_cast<std::size_t>(s.tp);
  const unsigned epoch = ++s.epoch;
  const auto* in = reinterpret_cast<const float4*>(leaves);
  auto queue = static_cast<cudaStream_t>(stream);
  by_dtype(out_dtype, [&](auto type) {
    using T = decltype(type);
    auto* sum = static_cast<Quad<T>*>(out);
    by_rank_count(s.tp, [&](auto ranks) {
      launch_tree<T, decltype(ranks)::value>(s.shape, s.peers, in, leaves_per_rank, sum, packs,
                                             half_packs, s.rank, s.tp, epoch, queue);
    });
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

// The bytes of `count` fp32 subtree values, which a GEMM stores into the two-shot staging (throws
// naming `what` where this sum does not take them).
std::size_t written_subtree_bytes(const char* what, bool usable, PeerShape shape,
                                  std::size_t capacity, int tp, std::size_t count) {
  const std::size_t bytes = count * sizeof(float);
  if (!usable || shape != PeerShape::two_shot || bytes > capacity ||
      peer_shape(bytes, tp, shape) != shape)
    throw std::logic_error(std::string(what) + ": a message peer memory does not take");
  return bytes;
}

std::vector<float*> PeerSum::subtree_parts(std::size_t count) const {
  const State& s = *state_;
  const std::size_t bytes =
      written_subtree_bytes("PeerSum::subtree_parts", s.usable, s.shape, s.bytes, s.tp, count);
  const std::size_t part = bytes / pack_bytes / static_cast<std::size_t>(s.tp);
  std::vector<float*> parts(static_cast<std::size_t>(s.tp));
  for (int p = 0; p < s.tp; ++p)
    parts[static_cast<std::size_t>(p)] =
        reinterpret_cast<float*>(s.peers.staging[p] + static_cast<std::size_t>(s.rank) * part);
  return parts;
}

void PeerSum::finish_written_subtree(DeviceDType out_dtype, void* out, std::size_t count,
                                     void* stream) {
  State& s = *state_;
  const std::size_t bytes = written_subtree_bytes("PeerSum::finish_written_subtree", s.usable,
                                                  s.shape, s.bytes, s.tp, count);
  const std::size_t packs = bytes / pack_bytes;
  const unsigned epoch = ++s.epoch;
  auto queue = static_cast<cudaStream_t>(stream);
  by_dtype(out_dtype, [&](auto type) {
    using T = decltype(type);
    auto* sum = static_cast<Quad<T>*>(out);
    by_rank_count(s.tp, [&](auto ranks) {
      launch_tree_written<T, decltype(ranks)::value>(s.peers, sum, packs, s.rank, s.tp, epoch,
                                                     queue);
    });
  });
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace bitcheck::cuda
