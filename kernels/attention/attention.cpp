// attention: causal self-attention with grouped-query heads over ragged sequences; its sequence
// layouts (alone, packed varlen, padded, chunked prefill against a KV cache, decode, speculative
// verification, decode captured into CUDA graphs) and the FP32 reference for forward (o, lse) and
// backward (dq, dk, dv) on sampled token rows.
#include "attention/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "common/eigen_view.h"
#include "core/host_threads.h"
#include "core/layout_names.h"
#include "core/rng.h"

namespace bitcheck {
namespace attention {

std::vector<std::int64_t> sequence_lengths(const CaseSpec& spec) {
  const std::int64_t longest = spec.dim("L");
  const std::uint64_t key = hash_name("attention/sequence_length");
  std::vector<std::int64_t> lengths;
  for (std::int64_t s = 0; s < spec.rows; ++s) {
    lengths.push_back(1 + static_cast<std::int64_t>(counter_index(
                              spec.seed, key, s, 0, static_cast<std::uint64_t>(longest))));
  }
  return lengths;
}

std::vector<std::int64_t> sequence_offsets(const CaseSpec& spec) {
  std::vector<std::int64_t> lengths = sequence_lengths(spec);
  std::vector<std::int64_t> offsets = {0};
  for (std::int64_t length : lengths) offsets.push_back(offsets.back() + length);
  return offsets;
}

float softmax_scale(const CaseSpec& spec) {
  return 1.0f / std::sqrt(static_cast<float>(spec.dim("D")));
}

}  // namespace attention

namespace {

const char* const seq_alone = "seq_alone";
const std::vector<std::int64_t> chunk_sizes = {1, 16, 64, 256, 1000};
// Speculative decoding's verification step: K drafted tokens and the last accepted one, K + 1 new
// tokens of every sequence per decode call.
const std::vector<std::int64_t> verify_ks = {1, 3, 7};

std::string verify_layout_name(std::int64_t k) {
  return "verify_" + std::to_string(k);
}

std::vector<std::string> attention_layout_names() {
  std::vector<std::string> names = {seq_alone, "varlen_packed", "padded"};
  for (std::int64_t chunk : chunk_sizes) names.push_back("chunked_" + std::to_string(chunk));
  names.push_back("decode");
  for (std::int64_t k : verify_ks) names.push_back(verify_layout_name(k));
  names.push_back(graph_layout);
  return names;
}

// Appends tokens [start, start + length) of `sequence` as one segment of `invocation`.
void append_segment(Invocation& invocation, const std::vector<std::int64_t>& offsets,
                    std::int64_t sequence, std::int64_t start, std::int64_t length) {
  Segment segment{sequence, invocation.slots(), length, start};
  for (std::int64_t p = start; p < start + length; ++p) {
    invocation.slot_rows.push_back(offsets[static_cast<std::size_t>(sequence)] + p);
  }
  invocation.segments.push_back(segment);
}

std::vector<std::int64_t> shuffled_sequences(std::int64_t count, LayoutRandom& random) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[random.next() % i]);
  return order;
}

// Chunked prefill: invocation j holds chunk j (tokens [j*chunk, (j+1)*chunk)) of every sequence
// still that long, sequences in a fresh random order each time, each against its KV cache.
Layout chunked(const std::string& name, std::int64_t chunk,
               const std::vector<std::int64_t>& lengths, const std::vector<std::int64_t>& offsets,
               LayoutRandom& random) {
  Layout layout{name, {}, false};
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  for (std::int64_t start = 0; start < longest; start += chunk) {
    Invocation invocation;
    for (std::int64_t s : shuffled_sequences(static_cast<std::int64_t>(lengths.size()), random)) {
      std::int64_t length = lengths[static_cast<std::size_t>(s)];
      if (length > start)
        append_segment(invocation, offsets, s, start, std::min(chunk, length - start));
    }
    layout.invocations.push_back(std::move(invocation));
  }
  return layout;
}

// Decode: a packed prefill of a random prompt of each sequence, then decode calls: call i holds
// the next `step` tokens of every unfinished sequence (its tokens from prompt + i * step on; 1:
// one-token decode, K + 1: speculative decoding's verification step), each position compared with
// the prefill row of that position.
Layout decode(const std::string& name, std::int64_t step, const std::vector<std::int64_t>& lengths,
              const std::vector<std::int64_t>& offsets, LayoutRandom& random) {
  Layout layout{name, {}, false};
  std::vector<std::int64_t> prompts;
  Invocation prefill;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    prompts.push_back(random.uniform_int(1, lengths[s]));
    append_segment(prefill, offsets, static_cast<std::int64_t>(s), 0, prompts.back());
  }
  layout.invocations.push_back(std::move(prefill));
  for (std::int64_t call_index = 0;; ++call_index) {
    Invocation call;
    for (std::size_t s = 0; s < lengths.size(); ++s) {
      const std::int64_t start = prompts[s] + call_index * step;
      if (start < lengths[s])
        append_segment(call, offsets, static_cast<std::int64_t>(s), start,
                       std::min(step, lengths[s] - start));
    }
    if (call.segments.empty()) return layout;
    layout.invocations.push_back(std::move(call));
  }
}

std::optional<Layout> make_attention_layout(const std::string& name, const CaseSpec& spec) {
  const std::vector<std::int64_t> lengths = attention::sequence_lengths(spec);
  const std::vector<std::int64_t> offsets = attention::sequence_offsets(spec);
  const auto count = static_cast<std::int64_t>(lengths.size());
  LayoutRandom random(spec.seed ^ hash_name("attention/" + name) ^
                      static_cast<std::uint64_t>(spec.rows));
  if (name == seq_alone) {
    Layout layout{name, {}, true};
    for (std::int64_t s = 0; s < count; ++s) {
      Invocation invocation;
      append_segment(invocation, offsets, s, 0, lengths[static_cast<std::size_t>(s)]);
      layout.invocations.push_back(std::move(invocation));
    }
    return layout;
  }
  if (name == "varlen_packed") {
    Invocation invocation;
    for (std::int64_t s : shuffled_sequences(count, random)) {
      append_segment(invocation, offsets, s, 0, lengths[static_cast<std::size_t>(s)]);
    }
    return Layout{name, {std::move(invocation)}, false};
  }
  if (name == "padded") {
    // Every sequence in a block of (longest + a random margin) slots, NaN pad slots after it.
    const std::int64_t block =
        *std::max_element(lengths.begin(), lengths.end()) + random.uniform_int(0, 3);
    Invocation invocation;
    for (std::int64_t s : shuffled_sequences(count, random)) {
      append_segment(invocation, offsets, s, 0, lengths[static_cast<std::size_t>(s)]);
      invocation.slot_rows.resize(
          static_cast<std::size_t>(invocation.segments.back().first_slot + block), -1);
    }
    return Layout{name, {std::move(invocation)}, false};
  }
  // Chunked prefill and decode need a KV cache of earlier tokens; the backward pass takes whole
  // sequences (dk, dv reduce over every later query), so they apply to the forward pass only.
  if (spec.pass != Pass::forward) return std::nullopt;
  for (std::int64_t chunk : chunk_sizes) {
    if (name == "chunked_" + std::to_string(chunk))
      return chunked(name, chunk, lengths, offsets, random);
  }
  if (name == "decode") return decode(name, 1, lengths, offsets, random);
  for (std::int64_t k : verify_ks) {
    if (name == verify_layout_name(k)) return decode(name, k + 1, lengths, offsets, random);
  }
  if (name == graph_layout) {
    // Engines capture their decode steps in CUDA graphs: the decode layout's calls, captured.
    Layout layout = decode(name, 1, lengths, offsets, random);
    layout.captured = true;
    return layout;
  }
  return std::nullopt;
}

// Rows [first, last) of `tensor` restricted to columns of head `head` (width `dim`), as a matrix.
MatrixF head_rows(const Tensor& tensor, std::int64_t first, std::int64_t last, std::int64_t head,
                  std::int64_t dim) {
  const std::int64_t width = tensor.row_size();
  MatrixF m(last - first, dim);
  for (std::int64_t r = first; r < last; ++r) {
    for (std::int64_t d = 0; d < dim; ++d) m(r - first, d) = tensor.get(r * width + head * dim + d);
  }
  return m;
}

// Causal scores of queries at positions [q_first, q_last) against keys 0..q_last-1, scaled, with
// -inf above the diagonal.
MatrixF causal_scores(const MatrixF& q, const MatrixF& k, std::int64_t q_first, float scale) {
  MatrixF s = (q * k.transpose()) * scale;
  for (Eigen::Index i = 0; i < s.rows(); ++i) {
    for (Eigen::Index j = q_first + i + 1; j < s.cols(); ++j)
      s(i, j) = -std::numeric_limits<float>::infinity();
  }
  return s;
}

// Row-wise softmax in place; returns the natural log-sum-exp of each row.
Eigen::VectorXf softmax_rows(MatrixF& s) {
  Eigen::VectorXf lse(s.rows());
  for (Eigen::Index i = 0; i < s.rows(); ++i) {
    float m = s.row(i).maxCoeff();
    s.row(i) = (s.row(i).array() - m).exp();
    float l = s.row(i).sum();
    s.row(i) /= l;
    lse(i) = m + std::log(l);
  }
  return lse;
}

struct Shape {
  std::int64_t heads, kv_heads, dim;
  std::int64_t group() const { return heads / kv_heads; }
};

void reference_forward(const CaseSpec& spec, const Shape& shape,
                       const std::map<std::string, Tensor>& inputs,
                       const std::vector<std::int64_t>& rows,
                       std::map<std::string, Tensor>& outputs) {
  const std::vector<std::int64_t> offsets = attention::sequence_offsets(spec);
  const float scale = attention::softmax_scale(spec);
  const Tensor &q = inputs.at("q"), &k = inputs.at("k"), &v = inputs.at("v");
  MatrixF o(static_cast<Eigen::Index>(rows.size()), shape.heads * shape.dim);
  MatrixF lse(static_cast<Eigen::Index>(rows.size()), shape.heads);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t row = rows[i];
    const std::int64_t first = *(std::upper_bound(offsets.begin(), offsets.end(), row) - 1);
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const std::int64_t kv = h / shape.group();
      MatrixF keys = head_rows(k, first, row + 1, kv, shape.dim),
              values = head_rows(v, first, row + 1, kv, shape.dim);
      MatrixF s = (head_rows(q, row, row + 1, h, shape.dim) * keys.transpose()) * scale;
      lse(static_cast<Eigen::Index>(i), h) = softmax_rows(s)(0);
      o.block(static_cast<Eigen::Index>(i), h * shape.dim, 1, shape.dim) = s * values;
    }
  }
  outputs["o"] = from_matrix(o);
  outputs["lse"] = from_matrix(lse);
}

// Backward on the sequences holding requested rows: for each, queries from the earliest requested
// position on (dk, dv of a key reduce over the queries at or after it), per head, as matrices.
void reference_backward(const CaseSpec& spec, const Shape& shape,
                        const std::map<std::string, Tensor>& inputs,
                        const std::vector<std::int64_t>& rows,
                        std::map<std::string, Tensor>& outputs) {
  const std::vector<std::int64_t> offsets = attention::sequence_offsets(spec);
  const float scale = attention::softmax_scale(spec);
  const Tensor &q = inputs.at("q"), &k = inputs.at("k"), &v = inputs.at("v"),
               &dout = inputs.at("do");
  const auto count = static_cast<Eigen::Index>(rows.size());
  MatrixF dq(count, shape.heads * shape.dim), dk(count, shape.kv_heads * shape.dim),
      dv(count, shape.kv_heads * shape.dim);
  dk.setZero();
  dv.setZero();
  // Units of work: a sequence holding requested rows and one KV head, whose query heads run in
  // head order (they add into the same dk and dv rows); units write disjoint blocks, so they run
  // on several threads with the bits of one.
  struct Unit {
    std::int64_t first, end, q_first, kv;
    std::vector<std::size_t> mine;
  };
  std::vector<Unit> units;
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    const std::int64_t first = offsets[s], end = offsets[s + 1];
    std::vector<std::size_t> mine;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] >= first && rows[i] < end) mine.push_back(i);
    }
    if (mine.empty()) continue;
    std::int64_t q_first = end;
    for (std::size_t i : mine) q_first = std::min(q_first, rows[i]);
    for (std::int64_t kv = 0; kv < shape.kv_heads; ++kv)
      units.push_back({first, end, q_first, kv, mine});
  }
  auto run_unit = [&](const Unit& unit) {
    const std::int64_t first = unit.first, end = unit.end, q_first = unit.q_first, kv = unit.kv;
    for (std::int64_t h = kv * shape.group(); h < (kv + 1) * shape.group(); ++h) {
      MatrixF qh = head_rows(q, q_first, end, h, shape.dim),
              doh = head_rows(dout, q_first, end, h, shape.dim);
      MatrixF kh = head_rows(k, first, end, kv, shape.dim),
              vh = head_rows(v, first, end, kv, shape.dim);
      MatrixF p = causal_scores(qh, kh, q_first - first, scale);
      softmax_rows(p);
      MatrixF oh = p * vh;
      Eigen::VectorXf delta = (doh.array() * oh.array()).rowwise().sum();
      MatrixF dp = doh * vh.transpose();
      MatrixF ds = p.array() * (dp.array().colwise() - delta.array());
      MatrixF dqh = (ds * kh) * scale, dkh = (ds.transpose() * qh) * scale,
              dvh = p.transpose() * doh;
      for (std::size_t i : unit.mine) {
        const auto r = static_cast<Eigen::Index>(i);
        dq.block(r, h * shape.dim, 1, shape.dim) = dqh.row(rows[i] - q_first);
        dk.block(r, kv * shape.dim, 1, shape.dim) += dkh.row(rows[i] - first);
        dv.block(r, kv * shape.dim, 1, shape.dim) += dvh.row(rows[i] - first);
      }
    }
  };
  run_on_threads(units.size(), threads_for(units.size()),
                 [&](std::size_t u) { run_unit(units[u]); });
  outputs["dq"] = from_matrix(dq);
  outputs["dk"] = from_matrix(dk);
  outputs["dv"] = from_matrix(dv);
}

}  // namespace

void register_attention_op(Registry& registry) {
  OpDef op;
  op.name = "attention";
  op.summary =
      "causal self-attention, grouped-query heads, fp32 softmax and lse; backward dq (per query), "
      "dk and dv (per key, over queries)";
  op.dim_names = {"H", "KVH", "D", "L"};
  op.bench_external_baseline = "scripts/bench-attention-sdpa.py (PyTorch SDPA, same shapes)";
  op.tensors = [](const CaseSpec& spec) {
    const std::int64_t h = spec.dim("H"), kvh = spec.dim("KVH"), d = spec.dim("D");
    std::vector<TensorDecl> decls = {
        {"q", TensorRole::row_input, spec.dtype, {h, d}},
        {"k", TensorRole::row_input, spec.dtype, {kvh, d}},
        {"v", TensorRole::row_input, spec.dtype, {kvh, d}},
    };
    // Forward: every odd head's queries 8 times wider, scaled scores with a standard deviation of
    // about 2.7 (natural units) instead of 0.33, as trained models' heads have them, so that a
    // block after a row's first can raise the row max by more than the tensor-core forward's
    // rescale threshold (2^8 in p's units) and the reference max moves mid-row. The even heads
    // keep unit-size scores, where every key's p counts in the row sum. The backward recomputes
    // p from lse (no reference max) and keeps unit-size queries: the contract's tolerances for dq
    // and dk are derived for them (their errors grow with |q|).
    if (spec.pass == Pass::forward) {
      decls[0].group_scales.assign(static_cast<std::size_t>(h), 1.0f);
      for (std::int64_t head = 1; head < h; head += 2) {
        decls[0].group_scales[static_cast<std::size_t>(head)] = attention::wide_query_scale;
      }
      decls.push_back({"o", TensorRole::row_output, spec.dtype, {h, d}});
      decls.push_back({"lse", TensorRole::row_output, DType::fp32, {h}});
    } else {
      decls.push_back({"do", TensorRole::row_input, spec.dtype, {h, d}});
      decls.push_back({"dq", TensorRole::row_output, spec.dtype, {h, d}});
      // dk, dv reduce over queries but belong to one key token: row outputs keyed by that token.
      decls.push_back({"dk", TensorRole::row_output, spec.dtype, {kvh, d}});
      decls.push_back({"dv", TensorRole::row_output, spec.dtype, {kvh, d}});
    }
    return decls;
  };
  op.shape_problem = [](const CaseSpec& spec) -> std::optional<std::string> {
    if (spec.dim("KVH") > spec.dim("H") || spec.dim("H") % spec.dim("KVH")) {
      return std::string("kv heads KVH must divide heads H");
    }
    return std::nullopt;
  };
  op.reference = [](const CaseSpec& spec, const std::map<std::string, Tensor>& inputs,
                    const ReferenceRequest& request, std::map<std::string, Tensor>& outputs) {
    const Shape shape{spec.dim("H"), spec.dim("KVH"), spec.dim("D")};
    if (spec.pass == Pass::forward) {
      reference_forward(spec, shape, inputs, request.rows, outputs);
    } else {
      reference_backward(spec, shape, inputs, request.rows, outputs);
    }
  };
  op.logical_rows = [](const CaseSpec& spec) { return attention::sequence_offsets(spec).back(); };
  op.layout_names = attention_layout_names();
  op.canonical_layout = seq_alone;
  op.make_layout = make_attention_layout;
  registry.add_op(std::move(op));
}

namespace {
void register_cpu_impls(Registry& registry) {
  register_attention_cpu(registry);
  register_attention_tp_cpu(registry);
}
#if BITCHECK_HAVE_CUDA
void register_cuda_impls(Registry& registry) {
  register_attention_cuda(registry);
  register_attention_tp_cuda(registry);
}
#endif
}  // namespace

void register_attention(Registry& registry, OpPart part) {
  register_op_part(
      registry, part,
      {register_attention_op, register_cpu_impls, BITCHECK_CUDA_PART(register_cuda_impls)});
}

}  // namespace bitcheck
