// CPU impls of rope. `cpu-fixed-order` computes every angle as fp32(pos) * inv_freq (see
// ops/rope_math.h) and sin/cos with sinf/cosf. The control composes the angle from the position
// relative to the invocation's first position plus that offset's angle, as a chunked-prefill
// kernel does: the rounding then depends on where the chunk starts.
#include <cmath>
#include <memory>

#include "common/token_reduction.h"
#include "rope/rope.h"
#include "rope/rope_math.h"

namespace bitcheck {
namespace {

class RopeCpu : public Impl {
 public:
  RopeCpu(ImplInfo info, bool chunk_relative)
      : Impl(std::move(info)), chunk_relative_(chunk_relative) {}

  void run(Batch& batch) override {
    const CaseSpec& spec = *batch.spec;
    const bool backward = spec.pass == Pass::backward;
    const std::int64_t heads = spec.dim("heads"), head_dim = spec.dim("head_dim");
    const std::int64_t rotary_dim = spec.dim("rotary_dim"), style = spec.dim("style");
    const std::int64_t width = heads * head_dim;
    const Tensor& in = batch.in(backward ? "dy" : "x");
    const Tensor& positions = batch.in("positions");
    Tensor& out = batch.out(backward ? "dx" : "y");
    const std::vector<float> inverse_frequency = rope::inverse_frequencies(rotary_dim);
    const std::vector<std::int64_t> slots = real_slots(batch);
    if (slots.empty()) return;
    const std::int32_t chunk_start = positions.get_int(slots.front());
    for (std::int64_t s : slots) {
      const std::int32_t position = positions.get_int(s);
      const std::int64_t row = s * width;
      for (std::int64_t e = 0; e < width; ++e)
        out.set(row + e, in.get(row + e));  // pass-through part
      for (std::int64_t i = 0; i < rotary_dim / 2; ++i) {
        const float f = inverse_frequency[static_cast<std::size_t>(i)];
        const float theta = chunk_relative_ ? rope::chunk_relative_angle(position, chunk_start, f)
                                            : rope::angle(position, f);
        const float c = std::cos(theta), sn = std::sin(theta);
        std::int64_t first = 0, second = 0;
        rope::pair_indices(style, rotary_dim, i, first, second);
        for (std::int64_t head = 0; head < heads; ++head) {
          const std::int64_t a = row + head * head_dim + first, b = row + head * head_dim + second;
          float out_a = 0, out_b = 0;
          rope::rotate(backward, c, sn, in.get(a), in.get(b), out_a, out_b);
          out.set(a, out_a);
          out.set(b, out_b);
        }
      }
    }
  }

 private:
  bool chunk_relative_;
};

}  // namespace

void register_rope_cpu(Registry& registry) {
  register_impls<RopeCpu, bool>(
      registry, "rope",
      {{ImplInfo::invariant("cpu-fixed-order", "cpu",
                            "angle = fp32(pos) * inv_freq in fp32, sinf/cosf, explicitly rounded "
                            "rotation: nothing depends on the batch"),
        false},
       {ImplInfo::control("cpu-chunk-relative-angle", "cpu",
                          "control: angle = (pos - chunk_start) * inv_freq + chunk_start * "
                          "inv_freq with chunk_start the invocation's first real position "
                          "(chunk-relative RoPE in chunked prefill)"),
        true}});
}

}  // namespace bitcheck
