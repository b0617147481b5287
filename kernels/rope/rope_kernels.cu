// rope/* kernels: rotary position embedding (a vectorized kernel and a scalar one for shapes or
// pointers it cannot take), beside their launcher.
//
// What an element's bits depend on: the angle of a (position, pair) is always
// fp32(position) * inv_freq[i] (one __fmul_rn; the control composes it from chunk_start instead),
// sin/cos come from sincosf (the accurate function; no --use_fast_math, never __sinf), and the
// rotation uses explicitly rounded operations (rope_math.h) on the element converted to
// fp32, rounded back to the dtype once (round to nearest even); dimensions past rotary_dim are
// copied bit for bit. Both kernels evaluate exactly that per element, so the result is a function
// of the element's input, its position and its pair index only: not of the batch, the slot, the
// neighbours, the padding, how elements are grouped into threads and blocks, or which kernel ran.
//
// Vectorized kernel: a unit is two 8-element groups of one head, read and written with 16-byte
// accesses (two per group for fp32): the groups at 8k and rotary_dim / 2 + 8k, which hold 8
// rotary pairs in either pairing, or two groups of the pass-through part. A block covers
// `slots_per_block` whole slots (or, for wide rows, one slot split over grid.y): each thread loads
// its unit, the block computes sin/cos once per (slot, pair) into shared memory meanwhile, then
// each thread rotates its unit with them and stores it. Taken when the buffers are 16-byte aligned,
// head_dim % 8 == 0 and rotary_dim % 16 == 0; otherwise the scalar kernel (one block per slot,
// thread i on pair i of every head) runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/convert.cuh"
#include "common/cuda_check.cuh"
#include "common/vector_io.cuh"
#include "core/paths.h"
#include "rope_kernels.h"
#include "rope_math.h"

namespace bitcheck::cuda {
namespace {

constexpr int kThreads = 256;        // vectorized kernel
constexpr int kScalarThreads = 128;  // scalar kernel
constexpr int kGroup = 8;            // elements per 16-byte group (two 16-byte accesses for fp32)
constexpr int kUnitPairs = 8;        // rotary pairs per unit
constexpr int kUnitElements = 16;    // rotary elements per unit
constexpr std::size_t kMaxAngleTableBytes = 48 * 1024;

// The one per-element formula of both kernels: the angle of (position, pair), and the rotation of a
// pair in fp32 rounded back to T.
__device__ __forceinline__ float pair_angle(const RopeLaunch& a, int32_t position,
                                            float inverse_frequency) {
  return a.chunk_relative ? rope::chunk_relative_angle(position, a.chunk_start, inverse_frequency)
                          : rope::angle(position, inverse_frequency);
}

template <typename T>
__device__ __forceinline__ void rotate_pair(bool backward, float cosine, float sine, T& first,
                                            T& second) {
  float out_first, out_second;
  rope::rotate(backward, cosine, sine, to_float(first), to_float(second), out_first, out_second);
  first = from_float<T>(out_first);
  second = from_float<T>(out_second);
}

template <typename T>
struct alignas(16) Group {
  T value[kGroup];
};

// Group `group` (elements group * 8 .. group * 8 + 7) of a 16-byte aligned buffer.
template <typename T>
__device__ __forceinline__ Group<T> load_group(const void* base, int64_t group) {
  const uint4* source = static_cast<const uint4*>(base) + group * (sizeof(Group<T>) / 16);
  Group<T> g;
  uint4* target = reinterpret_cast<uint4*>(g.value);
  target[0] = source[0];
  if constexpr (sizeof(T) == 4) target[1] = source[1];
  return g;
}

template <typename T>
__device__ __forceinline__ void store_group(void* base, int64_t group, const Group<T>& g) {
  uint4* target = static_cast<uint4*>(base) + group * (sizeof(Group<T>) / 16);
  const uint4* source = reinterpret_cast<const uint4*>(g.value);
  target[0] = source[0];
  if constexpr (sizeof(T) == 4) target[1] = source[1];
}

// The vectorized kernel's layout, from the shape only.
struct VectorPlan {
  int rotary_units;     // units of 8 pairs per head: rotary_dim / 16
  int pass_units;       // units of up to 16 pass-through elements per head
  int units_per_head;   // rotary_units + pass_units
  int units_per_slot;   // heads * units_per_head
  int slots_per_block;  // > 1 only when a block's threads cover several whole slots
};

// grid = (slot blocks, chunks of kThreads units within a slot); thread = one unit.
template <typename T>
__global__ void __launch_bounds__(kThreads) rope_vector_kernel(RopeLaunch a, VectorPlan p) {
  extern __shared__ float4 angle_table[];  // cos then sin, [slots_per_block][rotary_dim / 2] each
  const int pairs = static_cast<int>(a.rotary_dim / 2);
  float* cosines = reinterpret_cast<float*>(angle_table);
  float* sines = cosines + p.slots_per_block * pairs;
  const int64_t first_slot = static_cast<int64_t>(blockIdx.x) * p.slots_per_block;

  // 1. This thread's unit, loaded first so that the loads are in flight while the angles are
  // computed. The input of a pad slot may be read; nothing is computed from it or written.
  const int local = static_cast<int>(blockIdx.y) * kThreads + static_cast<int>(threadIdx.x);
  const int slot_in_block = local / p.units_per_slot;
  const int unit_in_slot = local - slot_in_block * p.units_per_slot;
  const int head = unit_in_slot / p.units_per_head;
  const int unit = unit_in_slot - head * p.units_per_head;
  const int64_t slot = first_slot + slot_in_block;
  const bool active = slot_in_block < p.slots_per_block && slot < a.slots;
  const bool rotary = unit < p.rotary_units;
  // Element offsets of the unit's two groups within the head, so that consecutive units of a warp
  // read consecutive groups in each of its two loads. Rotary unit k: groups at 8k and
  // rotary_dim / 2 + 8k (NeoX: the first and second elements of pairs 8k .. 8k + 7; GPT-J: pairs
  // 4k .. 4k + 3 and rotary_dim / 4 + 4k .. + 3). Pass-through unit j: groups j and j + pass_units
  // of the part past rotary_dim (the second absent when that part has an odd number of groups).
  const int64_t first = rotary
                            ? static_cast<int64_t>(unit) * kGroup
                            : a.rotary_dim + static_cast<int64_t>(unit - p.rotary_units) * kGroup;
  const int64_t second =
      first + (rotary ? a.rotary_dim / 2 : static_cast<int64_t>(p.pass_units) * kGroup);
  const bool has_second = second < a.head_dim;
  const int64_t head_start = (slot * a.heads + head) * a.head_dim;
  Group<T> x{}, y{};
  int32_t position = -1;
  if (active) {
    position = a.positions[slot];
    x = load_group<T>(a.in, (head_start + first) / kGroup);
    if (has_second) y = load_group<T>(a.in, (head_start + second) / kGroup);
  }

  // 2. sin/cos once per (slot, pair) of the block's slots.
  for (int item = threadIdx.x; item < p.slots_per_block * pairs; item += kThreads) {
    const int table_slot = item / pairs;
    const int pair = item - table_slot * pairs;
    if (first_slot + table_slot >= a.slots) break;  // items only grow past the last slot
    const int32_t table_position = a.positions[first_slot + table_slot];
    if (table_position < 0) continue;  // pad slot
    float sine, cosine;
    sincosf(pair_angle(a, table_position, a.inverse_frequency[pair]), &sine, &cosine);
    cosines[item] = cosine;
    sines[item] = sine;
  }
  __syncthreads();
  if (!active || position < 0) return;

  // 3. Rotate the unit's 8 pairs with their table entries and store.
  if (rotary) {
    const bool gptj = a.style == rope::style_gptj;
    const int table = slot_in_block * pairs;
    const int first_pairs = table + (gptj ? unit * 4 : unit * kUnitPairs);
    const int second_pairs = gptj ? table + pairs / 2 + unit * 4 : first_pairs + 4;
    const float4 c0 = *reinterpret_cast<const float4*>(cosines + first_pairs);
    const float4 c1 = *reinterpret_cast<const float4*>(cosines + second_pairs);
    const float4 s0 = *reinterpret_cast<const float4*>(sines + first_pairs);
    const float4 s1 = *reinterpret_cast<const float4*>(sines + second_pairs);
    const float cosine[kUnitPairs] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float sine[kUnitPairs] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
    if (gptj) {
#pragma unroll
      for (int j = 0; j < kUnitPairs / 2; ++j) {
        rotate_pair(a.backward, cosine[j], sine[j], x.value[2 * j], x.value[2 * j + 1]);
        rotate_pair(a.backward, cosine[j + 4], sine[j + 4], y.value[2 * j], y.value[2 * j + 1]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kUnitPairs; ++j) {
        rotate_pair(a.backward, cosine[j], sine[j], x.value[j], y.value[j]);
      }
    }
  }
  store_group<T>(a.out, (head_start + first) / kGroup, x);
  if (has_second) store_group<T>(a.out, (head_start + second) / kGroup, y);
}

// One block per slot; thread i handles rotary pair i for every head, then the pass-through part.
template <typename T>
__global__ void __launch_bounds__(kScalarThreads) rope_scalar_kernel(RopeLaunch a) {
  const int64_t slot = blockIdx.x;
  const int32_t position = a.positions[slot];
  if (position < 0) return;  // pad slot
  const T* in = static_cast<const T*>(a.in) + slot * a.heads * a.head_dim;
  T* out = static_cast<T*>(a.out) + slot * a.heads * a.head_dim;
  for (int64_t i = threadIdx.x; i < a.rotary_dim / 2; i += blockDim.x) {
    float sine, cosine;
    sincosf(pair_angle(a, position, a.inverse_frequency[i]), &sine, &cosine);
    int64_t first = 0, second = 0;
    rope::pair_indices(a.style, a.rotary_dim, i, first, second);
    for (int64_t head = 0; head < a.heads; ++head) {
      const int64_t base = head * a.head_dim;
      T value_first = in[base + first], value_second = in[base + second];
      rotate_pair(a.backward, cosine, sine, value_first, value_second);
      out[base + first] = value_first;
      out[base + second] = value_second;
    }
  }
  const int64_t rest = a.head_dim - a.rotary_dim;
  for (int64_t e = threadIdx.x; e < a.heads * rest; e += blockDim.x) {
    const int64_t index = (e / rest) * a.head_dim + a.rotary_dim + e % rest;
    out[index] = in[index];
  }
}

// The vectorized kernel's plan, grid and shared memory, or false where it does not apply.
bool plan_vector(const RopeLaunch& a, VectorPlan& plan, dim3& grid, std::size_t& shared) {
  if (!aligned_16(a.in) || !aligned_16(a.out) || a.head_dim % kGroup != 0 ||
      a.rotary_dim % kUnitElements != 0) {
    return false;
  }
  const int64_t rotary_units = a.rotary_dim / kUnitElements;
  const int64_t pass_units = ((a.head_dim - a.rotary_dim) / kGroup + 1) / 2;
  const int64_t units_per_head = rotary_units + pass_units;
  const int64_t units_per_slot = a.heads * units_per_head;
  const int64_t chunks = (units_per_slot + kThreads - 1) / kThreads;
  if (chunks > 65535) return false;
  const int64_t slots_per_block = units_per_slot >= kThreads ? 1 : kThreads / units_per_slot;
  const int64_t slot_blocks = (a.slots + slots_per_block - 1) / slots_per_block;
  shared = static_cast<std::size_t>(2 * slots_per_block * (a.rotary_dim / 2)) * sizeof(float);
  if (shared > kMaxAngleTableBytes || slot_blocks > 0x7fffffff) return false;
  plan = {static_cast<int>(rotary_units), static_cast<int>(pass_units),
          static_cast<int>(units_per_head), static_cast<int>(units_per_slot),
          static_cast<int>(slots_per_block)};
  grid = dim3(static_cast<unsigned>(slot_blocks), static_cast<unsigned>(chunks));
  return true;
}

template <typename T>
void launch(const RopeLaunch& a, cudaStream_t stream) {
  VectorPlan plan{};
  dim3 grid;
  std::size_t shared = 0;
  if (plan_vector(a, plan, grid, shared)) {
    record_path("vector");
    rope_vector_kernel<T><<<grid, kThreads, shared, stream>>>(a, plan);
  } else {
    record_path("scalar");
    rope_scalar_kernel<T><<<static_cast<unsigned>(a.slots), kScalarThreads, 0, stream>>>(a);
  }
  BITCHECK_CUDA_LAUNCH_CHECK();
}

}  // namespace

void rope_launch(const RopeLaunch& a, CUstream_st* stream) {
  if (a.slots == 0 || a.heads == 0 || a.head_dim == 0) return;
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  switch (a.dtype) {
    case DeviceDType::bf16:
      return launch<__nv_bfloat16>(a, s);
    case DeviceDType::fp16:
      return launch<__half>(a, s);
    case DeviceDType::fp32:
      return launch<float>(a, s);
  }
}

}  // namespace bitcheck::cuda
