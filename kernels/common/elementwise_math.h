// Per-element formulas of the elementwise family (silu, gelu_tanh, gelu_erf, swiglu, residual_add,
// scale, cast), forward and backward, in fp32, shared by the CPU impls and the CUDA kernels.
// Plain C++ usable from host code and from .cu files (no CUDA headers, no host-library calls).
//
// Every multiply, add and divide goes through mul/add/sub/div below, which are __fmul_rn & co. on
// the device: the compiler may not contract them into FMAs, so one formula gives the same bits in
// every code path that calls it (vector body, scalar tail, any kernel). The host never contracts
// (-std=c++17 implies -ffp-contract=off). Transcendentals are the backend's own (sigmoid on the
// device is the special-function unit's, see sigmoid_of): a CPU impl and a CUDA impl may differ in
// the last bits, and each is checked against the FP32 reference, never against the other.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define BITCHECK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define BITCHECK_HOST_DEVICE inline
#endif

namespace bitcheck::elementwise {

enum class Op : int { silu, gelu_tanh, gelu_erf, swiglu, residual_add, scale, cast };

// How a path evaluates an element. `exact` is the one formula of the fixed-order impls; the others
// are what a control's scalar tail does instead of the vector body's formula.
enum class Variant : int {
  exact,
  tail_approx,  // tanh via the bf16 hardware approximation; gelu_erf through the tanh form
  downcast_intermediate,  // the key intermediate rounded to bf16 (a tail written with bf16
                          // temporaries)
  round_toward_zero,  // cast: the fp32 -> dtype rounding truncates instead of rounding to nearest
};

// Elements per vector group of the vectorized kernels (16 bytes of bf16/fp16; two 16-byte loads of
// fp32). The flattened buffer is processed in groups from its start.
constexpr std::int64_t vector_elements = 8;

// Where the vector body ends: the fixed-order kernel's body covers every whole group (the scalar
// tail is the last n % 8 elements). A control models the common kernel whose unguarded vector body
// covers whole block tiles (256 threads x 8 elements) and whose guarded scalar loop handles the
// partial last tile, up to 2047 elements: enough tail elements that a formula difference of a few
// fp32 ulps still changes some bf16/fp16 roundings (with n % 8 only a handful of elements are in
// the tail, and a 2^-16 difference almost never survives rounding to bf16). The CPU controls use
// the same split, so both backends see which elements fall in the tail.
constexpr std::int64_t control_body_tile = 256 * vector_elements;
BITCHECK_HOST_DEVICE std::int64_t body_end(Variant tail, std::int64_t count) {
  const std::int64_t granule = tail == Variant::exact ? vector_elements : control_body_tile;
  return count / granule * granule;
}

BITCHECK_HOST_DEVICE float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
BITCHECK_HOST_DEVICE float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
BITCHECK_HOST_DEVICE float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
BITCHECK_HOST_DEVICE float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

BITCHECK_HOST_DEVICE std::uint32_t bits_of(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}
BITCHECK_HOST_DEVICE float from_bits(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

// Round to the nearest bf16 (ties to even), kept in a float. NaN passes through.
BITCHECK_HOST_DEVICE float round_to_bf16(float value) {
  std::uint32_t bits = bits_of(value);
  if ((bits & 0x7F800000u) == 0x7F800000u) return value;
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return from_bits(bits & 0xFFFF0000u);
}

// tanh as a tail written with packed bf16 math evaluates it: the hardware tanh.approx.bf16
// (sm_90) on the argument rounded to bf16, result in bf16. Its error (about 2^-8 relative) shows in
// bf16 outputs too; the fp32 approximation tanh.approx.f32 does not: on an H200 it was accurate
// enough that silu's bf16 outputs never changed (a control that could not fail). On the host and in
// pre-sm_90 device code it is modelled as tanhf of the bf16-rounded argument rounded to bf16, a
// difference of the same size.
BITCHECK_HOST_DEVICE float tanh_approx(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned short in = static_cast<unsigned short>(bits_of(round_to_bf16(x)) >> 16);
  unsigned short out;
  asm("tanh.approx.bf16 %0, %1;" : "=h"(out) : "h"(in));
  return from_bits(static_cast<std::uint32_t>(out) << 16);
#else
  return round_to_bf16(tanhf(round_to_bf16(x)));
#endif
}

constexpr float sqrt_2_over_pi = 0.7978845608028654f;
constexpr float gelu_tanh_cubic = 0.044715f;
constexpr float inv_sqrt_2 = 0.7071067811865476f;
constexpr float inv_sqrt_2pi = 0.3989422804014327f;

BITCHECK_HOST_DEVICE float maybe_bf16(Variant variant, float value) {
  return variant == Variant::downcast_intermediate ? round_to_bf16(value) : value;
}

// 1 / (1 + exp(-x)). On the device: 1 / (1 + 2^(-x log2 e)) with the special-function unit's
// ex2.approx.ftz and rcp.approx.ftz, two instructions where expf and an IEEE division take about
// twenty, which made silu and swiglu compute-bound at bf16 bandwidth. Both are deterministic
// approximations of a few fp32 ulps: the fp32 silu/swiglu grid on an H200 stayed within 7.2e-7 of
// the FP32 reference (reports/gpu/silu-swiglu-report.json; the contract's fp32 rtol is 1e-5). The
// ends match expf's: x -> -inf gives 2^+inf = inf and 1 / inf = 0, a subnormal x gives 1/2.
// On the host: expf and a division.
BITCHECK_HOST_DEVICE float sigmoid_of(float x) {
#if defined(__CUDA_ARCH__)
  float power, reciprocal;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(power) : "f"(__fmul_rn(x, -1.4426950408889634f)));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(reciprocal) : "f"(__fadd_rn(1.0f, power)));
  return reciprocal;
#else
  return div(1.0f, add(1.0f, expf(-x)));
#endif
}

// sigmoid(x); the approximate tail uses 0.5 + 0.5 * tanh(x / 2), the usual fast-sigmoid rewrite on
// hardware tanh.
BITCHECK_HOST_DEVICE float sigmoid(Variant variant, float x) {
  if (variant == Variant::tail_approx) return add(0.5f, mul(0.5f, tanh_approx(mul(0.5f, x))));
  return maybe_bf16(variant, sigmoid_of(x));
}

BITCHECK_HOST_DEVICE float silu(Variant variant, float x) {
  return mul(x, sigmoid(variant, x));
}

// d silu / dx = s * (1 + x * (1 - s)), s = sigmoid(x).
BITCHECK_HOST_DEVICE float silu_derivative(Variant variant, float x) {
  float s = sigmoid(variant, x);
  return mul(s, add(1.0f, mul(x, sub(1.0f, s))));
}

// u = sqrt(2/pi) * (x + 0.044715 x^3); gelu_tanh(x) = 0.5 x (1 + tanh(u)).
BITCHECK_HOST_DEVICE float gelu_tanh_inner(float x) {
  return mul(sqrt_2_over_pi, add(x, mul(gelu_tanh_cubic, mul(x, mul(x, x)))));
}
BITCHECK_HOST_DEVICE float gelu_tanh_t(Variant variant, float x) {
  float u = gelu_tanh_inner(x);
  return maybe_bf16(variant, variant == Variant::tail_approx ? tanh_approx(u) : tanhf(u));
}
BITCHECK_HOST_DEVICE float gelu_tanh(Variant variant, float x) {
  return mul(mul(0.5f, x), add(1.0f, gelu_tanh_t(variant, x)));
}
// d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
BITCHECK_HOST_DEVICE float gelu_tanh_derivative(Variant variant, float x) {
  float t = gelu_tanh_t(variant, x);
  float du = mul(sqrt_2_over_pi, add(1.0f, mul(3.0f * gelu_tanh_cubic, mul(x, x))));
  return add(mul(0.5f, add(1.0f, t)), mul(mul(mul(0.5f, x), sub(1.0f, mul(t, t))), du));
}

// gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2)); the approximate tail evaluates the tanh form instead
// (an approximate='tanh' path taken only by the tail).
BITCHECK_HOST_DEVICE float gelu_erf(Variant variant, float x) {
  if (variant == Variant::tail_approx) return gelu_tanh(Variant::exact, x);
  return mul(mul(0.5f, x), add(1.0f, maybe_bf16(variant, erff(mul(x, inv_sqrt_2)))));
}
// d/dx = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi).
BITCHECK_HOST_DEVICE float gelu_erf_derivative(Variant variant, float x) {
  if (variant == Variant::tail_approx) return gelu_tanh_derivative(Variant::exact, x);
  float cdf = mul(0.5f, add(1.0f, maybe_bf16(variant, erff(mul(x, inv_sqrt_2)))));
  return add(cdf, mul(x, mul(expf(mul(-0.5f, mul(x, x))), inv_sqrt_2pi)));
}

// Inputs and outputs of one element, per op and pass, in the order of the op's tensor list
// (see kernels/elementwise/elementwise.cpp). `parameter` is the per-channel scale of the scale op.
//   silu/gelu_*   forward: x -> y                 backward: x, dy -> dx
//   swiglu        forward: a, b -> y              backward: a, b, dy -> da, db
//   residual_add  forward: x, residual -> y       backward: dy -> dx, dresidual
//   scale         forward: x -> y                 backward: x, dy -> dx   (dscale is a reduction)
//   cast          forward: x, x32 -> y32, y       backward: dy32, dy -> dx, dx32
BITCHECK_HOST_DEVICE void forward(Op op, Variant variant, const float* in, float parameter,
                                  float* out) {
  switch (op) {
    case Op::silu:
      out[0] = silu(variant, in[0]);
      return;
    case Op::gelu_tanh:
      out[0] = gelu_tanh(variant, in[0]);
      return;
    case Op::gelu_erf:
      out[0] = gelu_erf(variant, in[0]);
      return;
    case Op::swiglu:
      out[0] =
          mul(maybe_bf16(variant,
                         silu(variant == Variant::tail_approx ? variant : Variant::exact, in[0])),
              in[1]);
      return;
    case Op::residual_add:
      out[0] = maybe_bf16(variant, add(in[0], in[1]));
      return;
    case Op::scale:
      out[0] = mul(in[0], maybe_bf16(variant, parameter));
      return;
    case Op::cast:
      out[0] = in[0];
      out[1] = in[1];
      return;
  }
}

BITCHECK_HOST_DEVICE void backward(Op op, Variant variant, const float* in, float parameter,
                                   float* out) {
  switch (op) {
    case Op::silu:
      out[0] = mul(in[1], silu_derivative(variant, in[0]));
      return;
    case Op::gelu_tanh:
      out[0] = mul(in[1], gelu_tanh_derivative(variant, in[0]));
      return;
    case Op::gelu_erf:
      out[0] = mul(in[1], gelu_erf_derivative(variant, in[0]));
      return;
    case Op::swiglu: {
      // da = dy * b * silu'(a), db = dy * silu(a).
      Variant inner = variant == Variant::tail_approx ? variant : Variant::exact;
      out[0] = mul(mul(in[2], in[1]), maybe_bf16(variant, silu_derivative(inner, in[0])));
      out[1] = mul(in[2], maybe_bf16(variant, silu(inner, in[0])));
      return;
    }
    case Op::residual_add:
      out[0] = in[0];
      out[1] = maybe_bf16(variant, in[0]);
      return;
    case Op::scale:
      out[0] = mul(in[1], maybe_bf16(variant, parameter));
      return;
    case Op::cast:
      out[0] = in[0];
      out[1] = in[1];
      return;
  }
}

}  // namespace bitcheck::elementwise
