// CPU impls of attention. `cpu-fixed-order` writes each invocation's keys and values into a KV
// cache keyed by logical token, then reduces every query over KV blocks of 16 keys from position 0
// upward (online softmax), the same blocks whether the query came in a prefill, a chunk or a
// decode step; backward sums dq over key blocks in order and dk, dv over queries in order. The
// controls model real failures: split-KV with a split count from the batch, a KV block size from
// the sequence length, and dq accumulated in the (schedule-dependent) order atomics arrive.
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

#include "attention/attention.h"

namespace bitcheck {
namespace {

// Split-KV control: aims for this many (sequence x split) work items, so a lone sequence is split
// four ways and a batch of four or more is not split at all.
constexpr std::int64_t split_kv_target_items = 4;
// Block-size control: a sequence whose tokens so far end at or below this uses blocks of 16 keys,
// a longer one blocks of 32 (a prefill kernel picking its tile from the sequence length).
constexpr std::int64_t small_block_up_to_length = 32;

struct HeadShape {
  std::int64_t heads, kv_heads, dim;
  float scale;
};

// Keys and values of every token presented so far in this layout, in fp32 (exact dtype values).
struct KvCache {
  std::vector<float> k, v;
};

// The online-softmax state of one query row over a range of KV blocks.
struct Partial {
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  std::vector<float> acc;
};

class AttentionCpu : public Impl {
 public:
  enum class Kind { fixed_order, split_kv_by_batch, kv_block_by_length, atomic_dq };
  AttentionCpu(ImplInfo info, Kind kind) : Impl(std::move(info)), kind_(kind) {}

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    const HeadShape dims{spec.dim("H"), spec.dim("KVH"), spec.dim("D"),
                         attention::softmax_scale(spec)};
    if (batch.spec->pass == Pass::forward) {
      forward(batch, dims);
    } else {
      backward(batch, dims);
    }
  }

 private:
  KvCache& cache(Batch& batch, const HeadShape& dims) const {
    if (!batch.layout_state) {
      auto created = std::make_shared<KvCache>();
      const auto size = static_cast<std::size_t>(attention::sequence_offsets(*batch.spec).back() *
                                                 dims.kv_heads * dims.dim);
      created->k.assign(size, std::numeric_limits<float>::quiet_NaN());
      created->v.assign(size, std::numeric_limits<float>::quiet_NaN());
      batch.layout_state = created;
    }
    return *static_cast<KvCache*>(batch.layout_state.get());
  }

  // Online softmax of query row `q` (head h) over keys [first_key, last_key) of the sequence whose
  // position 0 is cache row `base`, in blocks of `block` keys aligned to position 0.
  static void attend(const float* q, std::int64_t h, const KvCache& cache, std::int64_t base,
                     std::int64_t first_key, std::int64_t last_key, std::int64_t block,
                     const HeadShape& dims, Partial& state) {
    const std::int64_t kv = h / (dims.heads / dims.kv_heads);
    state.acc.assign(static_cast<std::size_t>(dims.dim), 0.0f);
    std::vector<float> scores(static_cast<std::size_t>(block));
    for (std::int64_t start = first_key; start < last_key; start += block) {
      const std::int64_t end = std::min(last_key, start + block);
      float block_max = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = start; j < end; ++j) {
        const float* key =
            &cache.k[static_cast<std::size_t>(((base + j) * dims.kv_heads + kv) * dims.dim)];
        float dot = 0.0f;
        for (std::int64_t d = 0; d < dims.dim; ++d) dot += q[d] * key[d];
        scores[static_cast<std::size_t>(j - start)] = dot * dims.scale;
        block_max = std::max(block_max, dot * dims.scale);
      }
      const float m_new = std::max(state.m, block_max);
      const float alpha = std::exp(state.m - m_new);
      float block_sum = 0.0f;
      for (std::int64_t d = 0; d < dims.dim; ++d) state.acc[static_cast<std::size_t>(d)] *= alpha;
      for (std::int64_t j = start; j < end; ++j) {
        const float p = std::exp(scores[static_cast<std::size_t>(j - start)] - m_new);
        block_sum += p;
        const float* value =
            &cache.v[static_cast<std::size_t>(((base + j) * dims.kv_heads + kv) * dims.dim)];
        for (std::int64_t d = 0; d < dims.dim; ++d)
          state.acc[static_cast<std::size_t>(d)] += p * value[d];
      }
      state.l = state.l * alpha + block_sum;
      state.m = m_new;
    }
  }

  // The KV block size and split count this impl uses for one segment of the invocation.
  std::int64_t block_size(const Segment& segment) const {
    if (kind_ != Kind::kv_block_by_length) return attention::cpu_kv_block;
    return segment.start_position + segment.length <= small_block_up_to_length ? 16 : 32;
  }
  std::int64_t splits(const Batch& batch) const {
    if (kind_ != Kind::split_kv_by_batch) return 1;
    const auto sequences = static_cast<std::int64_t>(batch.invocation->segments.size());
    return std::max<std::int64_t>(1, (split_kv_target_items + sequences - 1) / sequences);
  }

  // Attention of query row q (head h) at `position` over keys 0..position: o (normalized) and lse.
  void query(const float* q, std::int64_t h, const KvCache& kv_cache, std::int64_t base,
             std::int64_t position, std::int64_t block, std::int64_t split_count,
             const HeadShape& dims, std::vector<float>& o, float& lse) const {
    const std::int64_t blocks = position / block + 1;
    const std::int64_t blocks_per_split = (blocks + split_count - 1) / split_count;
    Partial total;
    for (std::int64_t first = 0; first < blocks; first += blocks_per_split) {
      Partial part;
      attend(q, h, kv_cache, base, first * block,
             std::min(position + 1, (first + blocks_per_split) * block), block, dims, part);
      if (first == 0) {
        total = part;
        continue;
      }
      // Split-KV combine: rescale both partials to the larger maximum.
      const float m = std::max(total.m, part.m);
      const float a = std::exp(total.m - m), b = std::exp(part.m - m);
      for (std::size_t d = 0; d < total.acc.size(); ++d)
        total.acc[d] = total.acc[d] * a + part.acc[d] * b;
      total.l = total.l * a + part.l * b;
      total.m = m;
    }
    o.resize(static_cast<std::size_t>(dims.dim));
    for (std::int64_t d = 0; d < dims.dim; ++d)
      o[static_cast<std::size_t>(d)] = total.acc[static_cast<std::size_t>(d)] / total.l;
    lse = total.m + std::log(total.l);
  }

  // Writes the invocation's keys and values into the cache (before any query reads it); returns
  // the cache row of position 0 of each segment's sequence.
  static std::vector<std::int64_t> write_cache(const Batch& batch, KvCache& cache,
                                               const HeadShape& dims) {
    const Tensor &k = batch.in("k"), &v = batch.in("v");
    const std::int64_t width = dims.kv_heads * dims.dim;
    std::vector<std::int64_t> bases;
    for (const Segment& segment : batch.invocation->segments) {
      const std::int64_t base =
          batch.invocation->slot_rows[static_cast<std::size_t>(segment.first_slot)] -
          segment.start_position;
      bases.push_back(base);
      for (std::int64_t i = 0; i < segment.length; ++i) {
        const std::int64_t slot = segment.first_slot + i, row = base + segment.start_position + i;
        for (std::int64_t c = 0; c < width; ++c) {
          cache.k[static_cast<std::size_t>(row * width + c)] = k.get(slot * width + c);
          cache.v[static_cast<std::size_t>(row * width + c)] = v.get(slot * width + c);
        }
      }
    }
    return bases;
  }

  static std::vector<float> head_row(const Tensor& tensor, std::int64_t slot, std::int64_t h,
                                     std::int64_t dim) {
    std::vector<float> row(static_cast<std::size_t>(dim));
    const std::int64_t width = tensor.row_size();
    for (std::int64_t d = 0; d < dim; ++d)
      row[static_cast<std::size_t>(d)] = tensor.get(slot * width + h * dim + d);
    return row;
  }

  void forward(Batch& batch, const HeadShape& dims) {
    KvCache& kv_cache = cache(batch, dims);
    const std::vector<std::int64_t> bases = write_cache(batch, kv_cache, dims);
    const Tensor& q = batch.in("q");
    Tensor &o = batch.out("o"), &lse = batch.out("lse");
    const std::int64_t split_count = splits(batch);
    std::vector<float> out;
    for (std::size_t s = 0; s < batch.invocation->segments.size(); ++s) {
      const Segment& segment = batch.invocation->segments[s];
      for (std::int64_t i = 0; i < segment.length; ++i) {
        const std::int64_t slot = segment.first_slot + i;
        for (std::int64_t h = 0; h < dims.heads; ++h) {
          float row_lse = 0.0f;
          query(head_row(q, slot, h, dims.dim).data(), h, kv_cache, bases[s],
                segment.start_position + i, block_size(segment), split_count, dims, out, row_lse);
          for (std::int64_t d = 0; d < dims.dim; ++d)
            o.set((slot * dims.heads + h) * dims.dim + d, out[static_cast<std::size_t>(d)]);
          lse.set(slot * dims.heads + h, row_lse);
        }
      }
    }
  }

  // Backward of whole sequences: per head, recompute P row by row, then dq over key blocks in
  // order, and dk, dv per key over queries in increasing position (heads of a group in order).
  void backward(Batch& batch, const HeadShape& dims) {
    KvCache& kv_cache = cache(batch, dims);
    const std::vector<std::int64_t> bases = write_cache(batch, kv_cache, dims);
    const Tensor &q = batch.in("q"), &dout = batch.in("do");
    Tensor &dq = batch.out("dq"), &dk = batch.out("dk"), &dv = batch.out("dv");
    const std::int64_t group = dims.heads / dims.kv_heads, block = attention::cpu_kv_block;
    for (std::size_t s = 0; s < batch.invocation->segments.size(); ++s) {
      const Segment& segment = batch.invocation->segments[s];
      if (segment.start_position != 0)
        throw std::invalid_argument("attention backward needs whole sequences");
      const std::int64_t n = segment.length, first = segment.first_slot;
      auto key_at = [&](const std::vector<float>& rows, std::int64_t j, std::int64_t kv) {
        return &rows[static_cast<std::size_t>(((bases[s] + j) * dims.kv_heads + kv) * dims.dim)];
      };
      std::vector<float> dk_acc(static_cast<std::size_t>(n * dims.kv_heads * dims.dim), 0.0f),
          dv_acc(dk_acc.size(), 0.0f);
      for (std::int64_t h = 0; h < dims.heads; ++h) {
        const std::int64_t kv = h / group;
        for (std::int64_t i = 0; i < n; ++i) {
          std::vector<float> qi = head_row(q, first + i, h, dims.dim),
                             doi = head_row(dout, first + i, h, dims.dim), o;
          float lse = 0.0f;
          query(qi.data(), h, kv_cache, bases[s], i, block, 1, dims, o, lse);
          float delta = 0.0f;
          for (std::int64_t d = 0; d < dims.dim; ++d)
            delta += doi[static_cast<std::size_t>(d)] * o[static_cast<std::size_t>(d)];
          std::vector<float> ds(static_cast<std::size_t>(i + 1)), p(ds.size());
          for (std::int64_t j = 0; j <= i; ++j) {
            const float *key = key_at(kv_cache.k, j, kv), *value = key_at(kv_cache.v, j, kv);
            float dot = 0.0f, dp = 0.0f;
            for (std::int64_t d = 0; d < dims.dim; ++d) {
              dot += qi[static_cast<std::size_t>(d)] * key[d];
              dp += doi[static_cast<std::size_t>(d)] * value[d];
            }
            p[static_cast<std::size_t>(j)] = std::exp(dot * dims.scale - lse);
            ds[static_cast<std::size_t>(j)] = p[static_cast<std::size_t>(j)] * (dp - delta);
          }
          dq_row(ds, i, kv, kv_cache, bases[s], first, dims, dq, h);
          for (std::int64_t j = 0; j <= i; ++j) {
            for (std::int64_t d = 0; d < dims.dim; ++d) {
              const auto at = static_cast<std::size_t>((j * dims.kv_heads + kv) * dims.dim + d);
              dk_acc[at] +=
                  ds[static_cast<std::size_t>(j)] * qi[static_cast<std::size_t>(d)] * dims.scale;
              dv_acc[at] += p[static_cast<std::size_t>(j)] * doi[static_cast<std::size_t>(d)];
            }
          }
        }
      }
      const std::int64_t width = dims.kv_heads * dims.dim;
      for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t c = 0; c < width; ++c) {
          dk.set((first + j) * width + c, dk_acc[static_cast<std::size_t>(j * width + c)]);
          dv.set((first + j) * width + c, dv_acc[static_cast<std::size_t>(j * width + c)]);
        }
      }
    }
  }

  // dq of query i (head h) = scale * sum_j ds_j k_j: one partial sum per KV block of 16, the
  // partials added in block order (fixed) or, for the atomic control, in an order rotated by the
  // sequence's first slot (the order atomicAdds from the KV-block CTAs happen to land) onto dq in
  // its own dtype, each sum rounded to it (atomicAdd on a bf16 or fp16 tensor, no fp32 scratch):
  // summed in fp32 and rounded once, a reordering moved a 16-bit row's bits only where a sum
  // happened to sit next to a rounding boundary (one element in tens of thousands), so the control
  // drifted by luck in small cases. A row of three or more partials whose rotation differs
  // between two layouts now differs in most of its elements.
  void dq_row(const std::vector<float>& ds, std::int64_t i, std::int64_t kv,
              const KvCache& kv_cache, std::int64_t base, std::int64_t first_slot,
              const HeadShape& dims, Tensor& dq, std::int64_t h) const {
    // The control's partials are per 4 keys: only a row of three partials or more can change
    // with their order (a + b = b + a), and with 16-key blocks that left the rows of short
    // sequences (the nightly's L = 33 cases) nothing to reorder.
    const std::int64_t block = kind_ == Kind::atomic_dq ? 4 : attention::cpu_kv_block,
                       blocks = i / block + 1;
    std::vector<float> acc(static_cast<std::size_t>(dims.dim), 0.0f), part(acc.size());
    const std::int64_t rotation = kind_ == Kind::atomic_dq ? first_slot % blocks : 0;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t start = ((b + rotation) % blocks) * block;
      std::fill(part.begin(), part.end(), 0.0f);
      for (std::int64_t j = start; j < std::min(i + 1, start + block); ++j) {
        const float* key =
            &kv_cache.k[static_cast<std::size_t>(((base + j) * dims.kv_heads + kv) * dims.dim)];
        for (std::int64_t d = 0; d < dims.dim; ++d)
          part[static_cast<std::size_t>(d)] += ds[static_cast<std::size_t>(j)] * key[d];
      }
      for (std::size_t d = 0; d < acc.size(); ++d) {
        acc[d] += part[d] * dims.scale;
        if (kind_ == Kind::atomic_dq) acc[d] = round_to(dq.dtype(), acc[d]);
      }
    }
    for (std::int64_t d = 0; d < dims.dim; ++d)
      dq.set(((first_slot + i) * dims.heads + h) * dims.dim + d, acc[static_cast<std::size_t>(d)]);
  }

  Kind kind_;
};

}  // namespace

void register_attention_cpu(Registry& registry) {
  using Kind = AttentionCpu::Kind;
  register_impls<AttentionCpu, Kind>(
      registry, "attention",
      {{ImplInfo::invariant("cpu-fixed-order", "cpu",
                            "KV cache written first; KV blocks of 16 from position 0 upward for "
                            "prefill, chunks and decode; dq over key blocks in order, dk/dv over "
                            "queries in order"),
        Kind::fixed_order},
       {ImplInfo::control("cpu-split-kv-by-batch", "cpu",
                          "control: split-KV with ceil(4 / sequences in the batch) splits, "
                          "partials combined by log-sum-exp (flash-decoding sized by the batch)")
            .only_passes({Pass::forward}),
        Kind::split_kv_by_batch},
       {ImplInfo::control("cpu-kv-block-by-length", "cpu",
                          "control: KV block of 16 keys when the sequence so far is at most 32 "
                          "tokens, else 32 (a prefill tile picked from the sequence length)")
            .only_passes({Pass::forward}),
        Kind::kv_block_by_length},
       {ImplInfo::control("cpu-atomic-dq", "cpu",
                          "control: dq accumulated per 4-key block in arrival order, modelled as "
                          "rotated by the sequence's slot, onto dq in its dtype (atomicAdd in "
                          "flash-attention backward)")
            .only_passes({Pass::backward}),
        Kind::atomic_dq}});
}

}  // namespace bitcheck
