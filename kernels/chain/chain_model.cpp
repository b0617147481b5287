// The chain's calls and their composition: which op runs where, with which dims, fed by which
// tensors. The glue between calls only moves bits (column slices, concatenations) or rounds the
// fp32 residual stream to the case dtype where an rmsnorm reads it, element by element, so nothing
// between two ops can depend on the batch: every drift the chain shows comes from an op.
#include <cstring>
#include <stdexcept>

#include "chain/chain.h"
#include "core/host_threads.h"

namespace bitcheck::chain {
namespace {

// The op of each call site (the part of a call name after "bwd." and "l<k>.").
const std::map<std::string, std::string>& site_ops() {
  static const std::map<std::string, std::string> sites = {
      {"embed", "embedding"},
      {"attn_norm", "rmsnorm"},
      {"qkv", "matmul"},
      {"rope", "rope"},
      {"attn", "attention"},
      {"o_proj", "matmul"},
      {"attn_resid", "residual_add"},
      {"mlp_norm", "rmsnorm"},
      {"gate_up", "matmul"},
      {"swiglu", "swiglu"},
      {"down", "matmul"},
      {"mlp_resid", "residual_add"},
      {"final_norm", "rmsnorm"},
      {"lm_head", "lm_head"},
      {"logprob", "logprob"},
      {"mlp_branch", "residual_add"},
      {"attn_branch", "residual_add"},
      {"moe", "moe"},
  };
  return sites;
}

Dims site_dims(const std::string& site, const Shape& s, std::int64_t longest) {
  const std::int64_t q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  if (site == "embed" || site == "lm_head") return {{"V", s.vocab}, {"H", s.hidden}};
  if (site == "logprob") return {{"V", s.vocab}};
  if (site == "qkv") return {{"N", q_width + 2 * kv_width}, {"K", s.hidden}};
  if (site == "o_proj") return {{"N", s.hidden}, {"K", q_width}};
  if (site == "gate_up") return {{"N", 2 * s.intermediate}, {"K", s.hidden}};
  if (site == "down") return {{"N", s.hidden}, {"K", s.intermediate}};
  // q and k heads rotated in one call: the whole head dim, NeoX pairs.
  if (site == "rope")
    return {{"heads", s.heads + s.kv_heads},
            {"head_dim", s.head_dim},
            {"rotary_dim", s.head_dim},
            {"style", 1}};
  if (site == "attn")
    return {{"H", s.heads}, {"KVH", s.kv_heads}, {"D", s.head_dim}, {"L", longest}};
  if (site == "swiglu") return {{"H", s.intermediate}};
  if (site == "moe")
    return {{"H", s.hidden}, {"I", s.intermediate}, {"E", s.experts}, {"topk", s.topk}};
  return {{"H", s.hidden}};  // rmsnorm, residual_add
}

Call make_call(const std::string& name, Pass pass, const Shape& shape, std::int64_t longest) {
  const std::string site = site_of(name);
  return Call{name, site_ops().at(site), pass, layer_of(name), site_dims(site, shape, longest)};
}

// One layer's calls in execution order, forward or backward; the MLP is gate/up, swiglu and down,
// or one moe call. The backward's *_branch calls are forward residual adds: the gradient reaching
// the stream through a norm's branch added to the one through the skip path.
std::vector<const char*> layer_sites(Pass pass, bool moe) {
  std::vector<const char*> mlp = {"gate_up", "swiglu", "down"};
  if (moe) mlp = {"moe"};
  std::vector<const char*> sites;
  if (pass == Pass::forward) {
    sites = {"attn_norm", "qkv", "rope", "attn", "o_proj", "attn_resid", "mlp_norm"};
    sites.insert(sites.end(), mlp.begin(), mlp.end());
    sites.push_back("mlp_resid");
    return sites;
  }
  sites = {"mlp_resid"};
  sites.insert(sites.end(), mlp.rbegin(), mlp.rend());
  for (const char* site : {"mlp_norm", "mlp_branch", "attn_resid", "o_proj", "attn", "rope", "qkv",
                           "attn_norm", "attn_branch"})
    sites.push_back(site);
  return sites;
}

std::string layer_prefix(std::int64_t layer) {
  return "l" + std::to_string(layer) + ".";
}

// Columns [first, first + count) of every row of `source`, as a tensor of rows x `row_shape`.
SharedTensor host_columns(const Tensor& source, std::int64_t first, std::int64_t count,
                          std::vector<std::int64_t> row_shape) {
  std::vector<std::int64_t> shape = {source.rows()};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  Tensor result(source.dtype(), shape, Tensor::uninitialized);  // every row copied below
  if (result.row_size() != count || first + count > source.row_size()) {
    throw std::logic_error("chain: column slice [" + std::to_string(first) + ", " +
                           std::to_string(first + count) + ") of a row of " +
                           std::to_string(source.row_size()) + " into rows of " +
                           std::to_string(result.row_size()));
  }
  const std::size_t element = dtype_size(source.dtype());
  for (std::int64_t r = 0; r < source.rows(); ++r) {
    std::memcpy(
        static_cast<std::byte*>(result.data()) + static_cast<std::size_t>(r * count) * element,
        static_cast<const std::byte*>(source.data()) +
            static_cast<std::size_t>(r * source.row_size() + first) * element,
        static_cast<std::size_t>(count) * element);
  }
  return std::make_shared<const Tensor>(std::move(result));
}

// The rows of `a` followed by the rows of `b`, column-wise, as rows of `width` elements.
SharedTensor host_concatenated(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.rows() != b.rows())
    throw std::logic_error("chain: concatenating unlike tensors");
  const std::int64_t width = a.row_size() + b.row_size();
  Tensor result(a.dtype(), {a.rows(), width}, Tensor::uninitialized);  // every row copied below
  const std::size_t element = dtype_size(a.dtype());
  for (std::int64_t r = 0; r < a.rows(); ++r) {
    auto* row =
        static_cast<std::byte*>(result.data()) + static_cast<std::size_t>(r * width) * element;
    std::memcpy(row,
                static_cast<const std::byte*>(a.data()) +
                    static_cast<std::size_t>(r * a.row_size()) * element,
                static_cast<std::size_t>(a.row_size()) * element);
    std::memcpy(row + static_cast<std::size_t>(a.row_size()) * element,
                static_cast<const std::byte*>(b.data()) +
                    static_cast<std::size_t>(r * b.row_size()) * element,
                static_cast<std::size_t>(b.row_size()) * element);
  }
  return std::make_shared<const Tensor>(std::move(result));
}

// `source` converted element by element to `dtype` (round to nearest even; NaN pads stay NaN): the
// bits of Tensor::get and Tensor::set, on the raw arrays, large tensors on several threads.
SharedTensor host_converted(const Tensor& source, DType dtype) {
  Tensor result(dtype, source.shape(), Tensor::uninitialized);  // every element written below
  const std::int64_t count = source.numel();
  const DType from = source.dtype();
  const auto* in = static_cast<const unsigned char*>(source.data());
  auto* out = static_cast<unsigned char*>(result.data());
  auto convert = [&](std::int64_t first, std::int64_t last) {
    if (from == DType::fp32 && (dtype == DType::bf16 || dtype == DType::fp16)) {
      std::uint16_t (*const encode)(float) =
          dtype == DType::bf16 ? float_to_bf16_bits : float_to_fp16_bits;
      for (std::int64_t i = first; i < last; ++i) {
        float value;
        std::memcpy(&value, in + 4 * i, 4);
        const std::uint16_t bits = encode(value);
        std::memcpy(out + 2 * i, &bits, 2);
      }
    } else if ((from == DType::bf16 || from == DType::fp16) && dtype == DType::fp32) {
      float (*const decode)(std::uint16_t) =
          from == DType::bf16 ? bf16_bits_to_float : fp16_bits_to_float;
      for (std::int64_t i = first; i < last; ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, in + 2 * i, 2);
        const float value = decode(bits);
        std::memcpy(out + 4 * i, &value, 4);
      }
    } else {
      for (std::int64_t i = first; i < last; ++i) result.set(i, source.get(i));
    }
  };
  run_in_parts(static_cast<std::size_t>(count), 1, std::size_t(1) << 20,
               [&](std::size_t first, std::size_t last) {
                 convert(static_cast<std::int64_t>(first), static_cast<std::int64_t>(last));
               });
  return std::make_shared<const Tensor>(std::move(result));
}

std::vector<std::int64_t> with_rows(std::int64_t rows, const std::vector<std::int64_t>& row_shape) {
  std::vector<std::int64_t> shape = {rows};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  return shape;
}

std::int64_t row_elements(const Value& value) {
  std::int64_t elements = 1;
  for (std::size_t i = 1; i < value.shape().size(); ++i) elements *= value.shape()[i];
  return elements;
}

// The glue on the device (Executor::glue_on_device) where every value it reads is there: the same
// bytes as the host's glue (DeviceOutput::copy_columns and converted give the host's bits).
SharedValue columns(const SharedValue& source, std::int64_t first, std::int64_t count,
                    const std::vector<std::int64_t>& row_shape, bool on_device) {
  if (!on_device || !source->device())
    return host_value(host_columns(*source->host(), first, count, row_shape));
  const std::size_t element = dtype_size(source->dtype());
  const auto rows = static_cast<std::size_t>(source->rows());
  const auto width = static_cast<std::size_t>(row_elements(*source));
  if (first + count > static_cast<std::int64_t>(width))
    throw std::logic_error("chain: a column slice past a row's end");
  auto result =
      source->device()->make_output(rows * static_cast<std::size_t>(count) * element, 0, 1);
  ColumnCopy copy;
  copy.rows = rows;
  copy.source_pitch = width * element;
  copy.source_offset = static_cast<std::size_t>(first) * element;
  copy.pitch = copy.width = static_cast<std::size_t>(count) * element;
  result->copy_columns(*source->device(), copy);
  return std::make_shared<const Value>(source->dtype(), with_rows(source->rows(), row_shape),
                                       std::move(result));
}

SharedValue concatenated(const SharedValue& a, const SharedValue& b, bool on_device) {
  if (!on_device || !a->device() || !b->device())
    return host_value(host_concatenated(*a->host(), *b->host()));
  if (a->dtype() != b->dtype() || a->rows() != b->rows())
    throw std::logic_error("chain: concatenating unlike tensors");
  const std::size_t element = dtype_size(a->dtype());
  const auto rows = static_cast<std::size_t>(a->rows());
  const auto a_width = static_cast<std::size_t>(row_elements(*a)) * element;
  const auto b_width = static_cast<std::size_t>(row_elements(*b)) * element;
  auto result = a->device()->make_output(rows * (a_width + b_width), 0, 1);
  ColumnCopy copy;
  copy.rows = rows;
  copy.pitch = a_width + b_width;
  copy.source_pitch = copy.width = a_width;
  result->copy_columns(*a->device(), copy);
  copy.source_pitch = copy.width = b_width;
  copy.offset = a_width;
  result->copy_columns(*b->device(), copy);
  return std::make_shared<const Value>(
      a->dtype(), std::vector<std::int64_t>{a->rows(), row_elements(*a) + row_elements(*b)},
      std::move(result));
}

SharedValue converted(const SharedValue& source, DType dtype, bool on_device) {
  if (!on_device || !source->device()) return host_value(host_converted(*source->host(), dtype));
  return std::make_shared<const Value>(dtype, source->shape(),
                                       source->device()->converted(source->dtype(), dtype));
}

// Calls the executor in the order of calls(spec), checking that order as it goes.
class Sequencer {
 public:
  Sequencer(const CaseSpec& spec, Executor& executor)
      : spec_(spec), executor_(executor), calls_(calls(spec)) {}

  ValueMap operator()(const std::string& name, const ValueMap& inputs) {
    if (next_ >= calls_.size() || calls_[next_].name != name) {
      throw std::logic_error("chain: call " + name + " out of the declared order");
    }
    const Call& call = calls_[next_++];
    return executor_.run(call, call_spec(spec_, call, ""), inputs);
  }

 private:
  const CaseSpec& spec_;
  Executor& executor_;
  std::vector<Call> calls_;
  std::size_t next_ = 0;
};

// What the backward of one layer reads from its forward (gate, up and activation: the dense MLP's).
struct LayerActivations {
  SharedValue attn_input, attn_norm, q, k, v, attn_out, mlp_input, mlp_norm, gate, up, activation;
};

// The dense MLP's backward: down, swiglu and gate/up; returns the gradient of mlp_norm's output.
SharedValue dense_mlp_backward(Sequencer& call, const std::string& b, const LayerActivations& a,
                               const SharedValue& gate_up_w, const SharedValue& down_w,
                               const SharedValue& dmlp_out, bool on_device) {
  SharedValue dactivation =
      call(b + "down", {{"x", a.activation}, {"w", down_w}, {"dy", dmlp_out}}).at("dx");
  ValueMap swiglu = call(b + "swiglu", {{"a", a.gate}, {"b", a.up}, {"dy", dactivation}});
  return call(b + "gate_up", {{"x", a.mlp_norm},
                              {"w", gate_up_w},
                              {"dy", concatenated(swiglu.at("da"), swiglu.at("db"), on_device)}})
      .at("dx");
}

}  // namespace

Value::Value(SharedTensor host)
    : dtype_(host->dtype()), shape_(host->shape()), host_(std::move(host)) {}

Value::Value(DType dtype, std::vector<std::int64_t> shape, std::shared_ptr<DeviceOutput> device)
    : dtype_(dtype), shape_(std::move(shape)), device_(std::move(device)) {
  std::size_t elements = 1;
  for (std::int64_t extent : shape_) elements *= static_cast<std::size_t>(extent);
  if (!device_ || device_->bytes() != elements * dtype_size(dtype_))
    throw std::logic_error("chain: a device value of " + to_string(dtype_) + shape_string(shape_) +
                           " holds " + std::to_string(device_ ? device_->bytes() : 0) + " bytes");
}

const SharedTensor& Value::host() const {
  if (!host_) {
    // Zeroed first: a device copy into pages never touched runs at a third of the speed.
    Tensor tensor(dtype_, shape_);
    device_->read(tensor.data(), 0, tensor.bytes());
    host_ = std::make_shared<const Tensor>(std::move(tensor));
  }
  return host_;
}

SharedValue host_value(SharedTensor tensor) {
  return std::make_shared<const Value>(std::move(tensor));
}

Shape shape_of(const CaseSpec& spec) {
  return {spec.dim("layers"),   spec.dim("H"),          spec.dim("heads"),
          spec.dim("kv_heads"), spec.dim("D"),          spec.dim("I"),
          spec.dim("V"),        spec.optional_dim("E"), spec.optional_dim("topk")};
}

std::int64_t layer_of(const std::string& name) {
  std::string rest = name.rfind("bwd.", 0) == 0 ? name.substr(4) : name;
  if (rest.size() < 3 || rest[0] != 'l') return -1;
  std::size_t dot = rest.find('.');
  if (dot == std::string::npos || dot < 2) return -1;
  for (std::size_t i = 1; i < dot; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return -1;
  }
  return std::stoll(rest.substr(1, dot - 1));
}

std::string site_of(std::string call_name) {
  if (call_name.rfind("bwd.", 0) == 0) call_name = call_name.substr(4);
  if (layer_of(call_name) >= 0) call_name = call_name.substr(call_name.find('.') + 1);
  return call_name;
}

std::string op_of_call(const std::string& call_name) {
  auto it = site_ops().find(site_of(call_name));
  return it == site_ops().end() ? std::string() : it->second;
}

std::vector<Call> calls(const CaseSpec& spec) {
  const Shape shape = shape_of(spec);
  const std::int64_t longest = spec.dim("L");
  std::vector<Call> result = {make_call("embed", Pass::forward, shape, longest)};
  for (std::int64_t l = 0; l < shape.layers; ++l) {
    for (const char* site : layer_sites(Pass::forward, shape.experts > 0))
      result.push_back(make_call(layer_prefix(l) + site, Pass::forward, shape, longest));
  }
  for (const char* name : {"final_norm", "lm_head", "logprob"})
    result.push_back(make_call(name, Pass::forward, shape, longest));
  if (spec.pass == Pass::forward) return result;
  for (const char* name : {"logprob", "lm_head", "final_norm"}) {
    result.push_back(make_call(std::string("bwd.") + name, Pass::backward, shape, longest));
  }
  for (std::int64_t l = shape.layers - 1; l >= 0; --l) {
    for (const char* site : layer_sites(Pass::backward, shape.experts > 0)) {
      const std::string name = "bwd." + layer_prefix(l) + site;
      const bool branch_add = std::string(site).find("_branch") != std::string::npos;
      result.push_back(
          make_call(name, branch_add ? Pass::forward : Pass::backward, shape, longest));
    }
  }
  result.push_back(make_call("bwd.embed", Pass::backward, shape, longest));
  return result;
}

CaseSpec call_spec(const CaseSpec& chain_spec, const Call& call, const std::string& impl) {
  CaseSpec spec = chain_spec;  // rows, seed and L: attention rebuilds the same sequences from them
  spec.op = call.op;
  spec.impl = impl;
  spec.pass = call.pass;
  spec.dims = call.dims;
  return spec;
}

void compose(const CaseSpec& spec, const ValueMap& inputs, Executor& executor) {
  const Shape s = shape_of(spec);
  const std::int64_t q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  Sequencer call(spec, executor);
  const bool device = executor.glue_on_device();
  auto in = [&](const std::string& name) {
    auto it = inputs.find(name);
    if (it == inputs.end()) throw std::logic_error("chain: no input " + name);
    return it->second;
  };
  const SharedValue positions = in("positions"), table = in("table");
  // The moe call of layer prefix `p` on `x` (and `dy`, backward): its weights are the call's.
  auto moe_inputs = [&](const std::string& p, const SharedValue& x,
                        const SharedValue& dy = nullptr) {
    ValueMap moe = {{"x", x}};
    for (const char* weight : {"router", "w_gate", "w_up", "w_down"})
      moe[weight] = in(p + "moe." + weight);
    if (dy) moe["dy"] = dy;
    return moe;
  };

  SharedValue stream = converted(call("embed", {{"ids", in("ids")}, {"table", table}}).at("out"),
                                 DType::fp32, device);
  std::vector<LayerActivations> saved(static_cast<std::size_t>(s.layers));
  for (std::int64_t l = 0; l < s.layers; ++l) {
    const std::string p = layer_prefix(l);
    LayerActivations& a = saved[static_cast<std::size_t>(l)];
    a.attn_input = converted(stream, spec.dtype, device);
    a.attn_norm =
        call(p + "attn_norm", {{"x", a.attn_input}, {"weight", in(p + "attn_norm.weight")}})
            .at("y");
    SharedValue qkv = call(p + "qkv", {{"x", a.attn_norm}, {"w", in(p + "qkv.w")}}).at("y");
    SharedValue rotated =
        call(p + "rope", {{"x", columns(qkv, 0, q_width + kv_width, {q_width + kv_width}, device)},
                          {"positions", positions}})
            .at("y");
    a.q = columns(rotated, 0, q_width, {s.heads, s.head_dim}, device);
    a.k = columns(rotated, q_width, kv_width, {s.kv_heads, s.head_dim}, device);
    a.v = columns(qkv, q_width + kv_width, kv_width, {s.kv_heads, s.head_dim}, device);
    SharedValue o = call(p + "attn", {{"q", a.q}, {"k", a.k}, {"v", a.v}}).at("o");
    a.attn_out = columns(o, 0, q_width, {q_width}, device);
    SharedValue projected =
        call(p + "o_proj", {{"x", a.attn_out}, {"w", in(p + "o_proj.w")}}).at("y");
    SharedValue residual = call(p + "attn_resid", {{"x", projected}, {"residual", stream}}).at("y");
    a.mlp_input = converted(residual, spec.dtype, device);
    a.mlp_norm =
        call(p + "mlp_norm", {{"x", a.mlp_input}, {"weight", in(p + "mlp_norm.weight")}}).at("y");
    SharedValue mlp_out;
    if (s.experts > 0) {
      mlp_out = call(p + "moe", moe_inputs(p, a.mlp_norm)).at("y");
    } else {
      SharedValue gate_up =
          call(p + "gate_up", {{"x", a.mlp_norm}, {"w", in(p + "gate_up.w")}}).at("y");
      a.gate = columns(gate_up, 0, s.intermediate, {s.intermediate}, device);
      a.up = columns(gate_up, s.intermediate, s.intermediate, {s.intermediate}, device);
      a.activation = call(p + "swiglu", {{"a", a.gate}, {"b", a.up}}).at("y");
      mlp_out = call(p + "down", {{"x", a.activation}, {"w", in(p + "down.w")}}).at("y");
    }
    stream = call(p + "mlp_resid", {{"x", mlp_out}, {"residual", residual}}).at("y");
  }
  SharedValue final_input = converted(stream, spec.dtype, device);
  SharedValue final_norm =
      call("final_norm", {{"x", final_input}, {"weight", in("final_norm.weight")}}).at("y");
  SharedValue logits = call("lm_head", {{"h", final_norm}, {"table", table}}).at("logits");
  call("logprob", {{"logits", logits}, {"target", in("target")}});
  if (spec.pass == Pass::forward) return;

  SharedValue dlogits =
      call("bwd.logprob",
           {{"logits", logits}, {"target", in("target")}, {"dlogprob", in("dlogprob")}})
          .at("dlogits");
  SharedValue dh =
      call("bwd.lm_head", {{"h", final_norm}, {"table", table}, {"dlogits", dlogits}}).at("dh");
  SharedValue gradient = converted(
      call("bwd.final_norm", {{"x", final_input}, {"weight", in("final_norm.weight")}, {"dy", dh}})
          .at("dx"),
      DType::fp32, device);
  for (std::int64_t l = s.layers - 1; l >= 0; --l) {
    const std::string p = layer_prefix(l), b = "bwd." + p;
    const LayerActivations& a = saved[static_cast<std::size_t>(l)];
    ValueMap mlp_resid = call(b + "mlp_resid", {{"dy", gradient}});
    SharedValue dmlp_norm =
        s.experts > 0 ? call(b + "moe", moe_inputs(p, a.mlp_norm, mlp_resid.at("dx"))).at("dx")
                      : dense_mlp_backward(call, b, a, in(p + "gate_up.w"), in(p + "down.w"),
                                           mlp_resid.at("dx"), device);
    SharedValue dmlp_input =
        call(b + "mlp_norm",
             {{"x", a.mlp_input}, {"weight", in(p + "mlp_norm.weight")}, {"dy", dmlp_norm}})
            .at("dx");
    SharedValue dresidual =
        call(b + "mlp_branch", {{"x", dmlp_input}, {"residual", mlp_resid.at("dresidual")}})
            .at("y");
    ValueMap attn_resid = call(b + "attn_resid", {{"dy", dresidual}});
    SharedValue dattn_out =
        call(b + "o_proj",
             {{"x", a.attn_out}, {"w", in(p + "o_proj.w")}, {"dy", attn_resid.at("dx")}})
            .at("dx");
    ValueMap attn =
        call(b + "attn", {{"q", a.q},
                          {"k", a.k},
                          {"v", a.v},
                          {"do", columns(dattn_out, 0, q_width, {s.heads, s.head_dim}, device)}});
    SharedValue drotated =
        call(b + "rope",
             {{"dy", concatenated(attn.at("dq"), attn.at("dk"), device)}, {"positions", positions}})
            .at("dx");
    SharedValue dattn_norm =
        call(b + "qkv", {{"x", a.attn_norm},
                         {"w", in(p + "qkv.w")},
                         {"dy", concatenated(drotated, attn.at("dv"), device)}})
            .at("dx");
    SharedValue dattn_input =
        call(b + "attn_norm",
             {{"x", a.attn_input}, {"weight", in(p + "attn_norm.weight")}, {"dy", dattn_norm}})
            .at("dx");
    gradient =
        call(b + "attn_branch", {{"x", dattn_input}, {"residual", attn_resid.at("dresidual")}})
            .at("y");
  }
  call("bwd.embed",
       {{"ids", in("ids")}, {"table", table}, {"dout", converted(gradient, spec.dtype, device)}});
}

}  // namespace bitcheck::chain
