// CPU impls of embedding. `cpu-fixed-order` copies table rows (a gather has no arithmetic) and
// reduces dtable by a stable sort of (id, token order) followed by one running sum per id in token
// order, started from the accumulator, so every element sees the same additions in the same order
// whatever the padding or micro-batching. The control reverses the token order when the batch is
// padded, as a scatter whose visiting order follows the physical layout does.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "common/token_reduction.h"
#include "common/vocab_cpu.h"
#include "embedding/embedding.h"

namespace bitcheck {
namespace {

struct TokenId {
  std::int64_t slot;
  std::int64_t id;
};

// The ids of the real slots, in slot order, each checked against the vocabulary.
std::vector<TokenId> checked_ids(const Batch& batch) {
  std::vector<TokenId> tokens;
  for (std::int64_t s : real_slots(batch)) tokens.push_back({s, checked_token_id(batch, s)});
  return tokens;
}

// dtable[id] += dout[slot] for each token in the order given, in fp32 from the accumulator.
void scatter_tokens(const Batch& batch, const std::vector<TokenId>& tokens, std::int64_t hidden,
                    Tensor& dtable) {
  const Tensor& dout = batch.in("dout");
  std::vector<float> accumulator = load_accumulator(dtable);
  for (const TokenId& token : tokens) {
    float* row = accumulator.data() + token.id * hidden;
    for (std::int64_t c = 0; c < hidden; ++c) row[c] += dout.get(token.slot * hidden + c);
  }
  store_accumulator(accumulator, dtable);
}

class EmbeddingCpu : public Impl {
 public:
  enum class Kind { fixed_order, reverse_when_padded };
  EmbeddingCpu(ImplInfo info, Kind kind) : Impl(std::move(info)), kind_(kind) {}

  void run(Batch& batch) override {
    const std::int64_t vocab = batch.spec->dim("V"), hidden = batch.spec->dim("H");
    std::vector<TokenId> tokens = checked_ids(batch);
    if (batch.spec->pass == Pass::forward) {
      const Tensor& table = batch.in("table");
      Tensor& out = batch.out("out");
      const std::size_t row_bytes = static_cast<std::size_t>(hidden) * dtype_size(table.dtype());
      for (const TokenId& token : tokens) {
        std::memcpy(
            static_cast<std::byte*>(out.data()) + static_cast<std::size_t>(token.slot) * row_bytes,
            static_cast<const std::byte*>(table.data()) +
                static_cast<std::size_t>(token.id) * row_bytes,
            row_bytes);
      }
      return;
    }
    Tensor& dtable = batch.out("dtable");
    if (kind_ == Kind::fixed_order) {
      embedding_table_grad_in_id_order(batch, 0, vocab, dtable);
      return;
    }
    if (tokens.size() != static_cast<std::size_t>(batch.slots()))
      std::reverse(tokens.begin(), tokens.end());
    scatter_tokens(batch, tokens, hidden, dtable);
  }

 private:
  Kind kind_;
};

}  // namespace

void embedding_table_grad_in_id_order(const Batch& batch, std::int64_t first_id,
                                      std::int64_t last_id, Tensor& dtable) {
  std::vector<TokenId> tokens = checked_ids(batch);
  tokens.erase(std::remove_if(tokens.begin(), tokens.end(),
                              [&](const TokenId& token) {
                                return token.id < first_id || token.id >= last_id;
                              }),
               tokens.end());
  // A segment per id, tokens in token order inside it.
  std::stable_sort(tokens.begin(), tokens.end(),
                   [](const TokenId& a, const TokenId& b) { return a.id < b.id; });
  scatter_tokens(batch, tokens, batch.spec->dim("H"), dtable);
}

void register_embedding_cpu(Registry& registry) {
  using Kind = EmbeddingCpu::Kind;
  register_impls<EmbeddingCpu, Kind>(
      registry, "embedding",
      {{ImplInfo::invariant("cpu-fixed-order", "cpu",
                            "forward copies table rows; dtable: stable sort of (id, token order), "
                            "then one running fp32 sum per id in token order started from the "
                            "accumulator"),
        Kind::fixed_order},
       {ImplInfo::control("cpu-reverse-when-padded", "cpu",
                          "control: dtable scattered token by token in reverse slot order when the "
                          "batch holds pad slots (a scatter whose order follows the physical "
                          "layout)")
            .drifting_in({Pass::backward}),
        Kind::reverse_when_padded}});
}

}  // namespace bitcheck
