// matmul/fixed-order's claim that the tile shape changes no bit: on the wgmma path every tile shape
// the kernel has, in both orientations (X as the wgmma A operand, and W as A with Y held
// transposed), forced on the same inputs, gives outputs bitwise identical to the automatic choice,
// at several M including ones that are not a multiple of any tile's rows. Its fp32-output form (the
// TP impls' chunk products) keeps the same accumulators.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/runtime.h"
#include "core/dtype.h"
#include "matmul/fixed_order_gemm.h"

using namespace bitcheck;

namespace {

struct GemmShape {
  std::int64_t n, k;
};

// Y of x [M, K] and w [N, K], downloaded as bytes. The output is poisoned with 0xFF first, so an
// element a launch fails to write cannot match by accident.
template <typename Launch>
std::vector<unsigned char> gemm_bytes(std::int64_t m, std::int64_t n, Launch launch) {
  const std::size_t bytes = static_cast<std::size_t>(m * n) * 2;  // bf16 and fp16
  cuda::DeviceBuffer y(bytes);
  y.fill_bytes(0xFF);
  launch(y.get());
  cuda::synchronize();
  std::vector<unsigned char> host(bytes);
  y.download(host.data(), bytes);
  return host;
}

}  // namespace

TEST_CASE("fixed-order GEMM: every tile shape in both orientations gives the same bits",
          "[gpu][matmul]") {
  REQUIRE(cuda::query_device().available);
  using cuda::GemmDType;
  if (std::string(cuda::fixed_order_gemm_path(GemmDType::bf16)) == "portable-fma") {
    WARN("no wgmma path on this GPU (not sm_90): there are no tile shapes to compare");
    return;
  }
  const std::vector<cuda::detail::GemmTile> tiles = cuda::detail::fixed_order_gemm_tiles();
  bool x_as_a = false, w_as_a = false;
  for (const auto& tile : tiles) (tile.w_as_a ? w_as_a : x_as_a) = true;
  REQUIRE(x_as_a);
  REQUIRE(w_as_a);

  const std::vector<std::int64_t> rows = {1, 7, 64, 65, 129, 200, 300};
  const std::vector<GemmShape> shapes = {{264, 72}, {520, 1000}, {1024, 4096}};
  for (GemmDType dtype : {GemmDType::bf16, GemmDType::fp16}) {
    for (const GemmShape& shape : shapes) {
      for (std::int64_t m : rows) {
        cuda::DeviceBuffer x(static_cast<std::size_t>(m * shape.k) * 2);
        cuda::DeviceBuffer w(static_cast<std::size_t>(shape.n * shape.k) * 2);
        x.fill_uniform(dtype, 1000 + static_cast<std::uint64_t>(m));
        w.fill_uniform(dtype, 7);
        const std::vector<unsigned char> automatic = gemm_bytes(m, shape.n, [&](void* y) {
          cuda::fixed_order_gemm(dtype, x.get(), w.get(), y, m, shape.n, shape.k, nullptr);
        });
        for (const auto& tile : tiles) {
          const std::vector<unsigned char> forced = gemm_bytes(m, shape.n, [&](void* y) {
            cuda::detail::fixed_order_gemm_tile(dtype, tile, x.get(), w.get(), y, m, shape.n,
                                                shape.k, nullptr);
          });
          INFO((dtype == GemmDType::bf16 ? "bf16" : "fp16")
               << " M=" << m << " N=" << shape.n << " K=" << shape.k << " tile " << tile.name());
          CHECK(forced == automatic);
        }
      }
    }
  }
}

TEST_CASE(
    "fixed-order GEMM with fp32 output: its accumulators round to the 16-bit kernel's bits, each "
    "row's whatever M, read in place from a block of columns of a wider matrix, several blocks "
    "in one call as each alone",
    "[gpu][matmul]") {
  REQUIRE(cuda::query_device().available);
  using cuda::GemmDType;
  constexpr std::int64_t max_rows = 300, n = 264, blocks = 3;
  for (GemmDType dtype : {GemmDType::bf16, GemmDType::fp16}) {
    for (std::int64_t k : {72, 512}) {  // the block's last K block is partial at 72
      const std::int64_t wide = blocks * k;
      cuda::DeviceBuffer x(static_cast<std::size_t>(max_rows * wide) * 2);
      cuda::DeviceBuffer w(static_cast<std::size_t>(n * wide) * 2);
      x.fill_uniform(dtype, 11 + static_cast<std::uint64_t>(k));
      w.fill_uniform(dtype, 13 + static_cast<std::uint64_t>(k));
      // The middle block of columns, compacted on the host, for the 16-bit kernel.
      std::vector<std::uint16_t> x_host(static_cast<std::size_t>(max_rows * wide)),
          w_host(static_cast<std::size_t>(n * wide));
      x.download(x_host.data(), x_host.size() * 2);
      w.download(w_host.data(), w_host.size() * 2);
      auto block_of = [&](const std::vector<std::uint16_t>& matrix, std::int64_t rows) {
        std::vector<std::uint16_t> block(static_cast<std::size_t>(rows * k));
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < k; ++c)
            block[static_cast<std::size_t>(r * k + c)] =
                matrix[static_cast<std::size_t>(r * wide + k + c)];
        return block;
      };
      const std::vector<std::uint16_t> x_block = block_of(x_host, max_rows),
                                       w_block = block_of(w_host, n);
      cuda::DeviceBuffer x_compact(x_block.size() * 2), w_compact(w_block.size() * 2);
      x_compact.upload(x_block.data(), x_block.size() * 2);
      w_compact.upload(w_block.data(), w_block.size() * 2);
      const std::vector<unsigned char> rounded_bytes = gemm_bytes(max_rows, n, [&](void* y) {
        cuda::fixed_order_gemm(dtype, x_compact.get(), w_compact.get(), y, max_rows, n, k, nullptr);
      });
      std::vector<std::uint16_t> rounded(static_cast<std::size_t>(max_rows * n));
      std::memcpy(rounded.data(), rounded_bytes.data(), rounded_bytes.size());

      // The products of `chunks` blocks from block `first` on, one call.
      auto fp32_out = [&](std::int64_t m, int first = 1, int chunks = 1) {
        cuda::DeviceBuffer y(static_cast<std::size_t>(m * n * chunks) * 4);
        y.fill_bytes(0xFF);
        const auto* x_block_start = static_cast<const std::uint16_t*>(x.get()) + first * k;
        const auto* w_block_start = static_cast<const std::uint16_t*>(w.get()) + first * k;
        cuda::fixed_order_gemm_fp32_out(dtype, x_block_start, wide, w_block_start, wide,
                                        y.as<float>(), m, n, k, nullptr, chunks);
        cuda::synchronize();
        std::vector<float> host(static_cast<std::size_t>(m * n * chunks));
        y.download(host.data(), host.size() * 4);
        return host;
      };
      const std::vector<float> all = fp32_out(max_rows);
      INFO((dtype == GemmDType::bf16 ? "bf16" : "fp16") << " K=" << k);
      std::int64_t unrounded_mismatches = 0;
      for (std::size_t i = 0; i < all.size(); ++i) {
        const std::uint16_t bits =
            dtype == GemmDType::bf16 ? float_to_bf16_bits(all[i]) : float_to_fp16_bits(all[i]);
        unrounded_mismatches += bits != rounded[i];
      }
      CHECK(unrounded_mismatches == 0);
      for (std::int64_t m : {1, 7, 65, 129}) {
        const std::vector<float> some = fp32_out(m);
        INFO("M=" << m);
        CHECK(std::memcmp(some.data(), all.data(), some.size() * 4) == 0);
      }
      // The three blocks' products in one call (one launch at K = 512; a launch each at K = 72,
      // whose last K block is partial): each with the bits of its own call.
      for (std::int64_t m : {std::int64_t{1}, std::int64_t{65}, max_rows}) {
        const std::vector<float> batched = fp32_out(m, 0, static_cast<int>(blocks));
        for (int c = 0; c < blocks; ++c) {
          const std::vector<float> alone = fp32_out(m, c);
          INFO("M=" << m << " block " << c);
          CHECK(std::memcmp(batched.data() + static_cast<std::size_t>(c * m * n), alone.data(),
                            alone.size() * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE(
    "fixed-order GEMM's subtree kernel: its chunks' fp32 products summed in the fixed tree, "
    "stored across parts, with the bits of the products stored and summed apart",
    "[gpu][matmul]") {
  REQUIRE(cuda::query_device().available);
  using cuda::GemmDType;
  if (std::string(cuda::fixed_order_gemm_path(GemmDType::bf16)) == "portable-fma") {
    WARN("no wgmma path on this GPU (not sm_90): the subtree kernel is not taken");
    return;
  }
  constexpr std::int64_t k = 128, max_leaves = 4, wide = k * max_leaves;
  struct Shape {
    std::int64_t m, n;
  };
  // 1 to 300 rows take the 64 x 128 tile on 132 SMs, 2048 x 1024 the 128 x 128 one.
  const std::vector<Shape> shapes = {{1, 264}, {65, 264}, {300, 264}, {2048, 1024}};
  for (GemmDType dtype : {GemmDType::bf16, GemmDType::fp16}) {
    for (const Shape& shape : shapes) {
      const std::int64_t m = shape.m, n = shape.n, count = m * n;
      cuda::DeviceBuffer x(static_cast<std::size_t>(m * wide) * 2);
      cuda::DeviceBuffer w(static_cast<std::size_t>(n * wide) * 2);
      x.fill_uniform(dtype, 21 + static_cast<std::uint64_t>(m));
      w.fill_uniform(dtype, 23 + static_cast<std::uint64_t>(n));
      for (int leaves : {1, 2, 4}) {
        INFO((dtype == GemmDType::bf16 ? "bf16" : "fp16")
             << " M=" << m << " N=" << n << " leaves " << leaves);
        // The products stored apart (one launch) and summed here in the fixed tree.
        cuda::DeviceBuffer products(static_cast<std::size_t>(count * leaves) * 4);
        cuda::fixed_order_gemm_fp32_out(dtype, x.get(), wide, w.get(), wide, products.as<float>(),
                                        m, n, k, nullptr, leaves);
        cuda::synchronize();
        std::vector<float> leaf(static_cast<std::size_t>(count * leaves));
        products.download(leaf.data(), leaf.size() * 4);
        std::vector<float> expected(static_cast<std::size_t>(count));
        for (std::size_t e = 0; e < expected.size(); ++e) {
          const auto p = [&](int c) { return leaf[static_cast<std::size_t>(c * count) + e]; };
          expected[e] = leaves == 1   ? p(0)
                        : leaves == 2 ? p(0) + p(1)
                                      : (p(0) + p(1)) + (p(2) + p(3));
        }
        // The subtree kernel into one part, and into three where the sum is large enough (parts
        // of at least 256 elements, ending mid-row).
        for (int part_count : {1, 3}) {
          std::int64_t part_elements = (count + part_count - 1) / part_count;
          part_elements = std::max<std::int64_t>(256, (part_elements + 3) / 4 * 4);
          if (part_count > 1 && part_elements * (part_count - 1) >= count) continue;
          std::vector<cuda::DeviceBuffer> buffers;
          std::vector<float*> parts;
          for (int p = 0; p < part_count; ++p) {
            buffers.emplace_back(static_cast<std::size_t>(part_elements) * 4);
            buffers.back().fill_bytes(0xFF);
            parts.push_back(buffers.back().as<float>());
          }
          REQUIRE(cuda::fixed_order_gemm_fp32_subtree(dtype, x.get(), wide, w.get(), wide, m, n, k,
                                                      leaves, parts, part_elements, nullptr));
          cuda::synchronize();
          std::vector<float> got(static_cast<std::size_t>(part_elements * part_count));
          for (int p = 0; p < part_count; ++p)
            buffers[static_cast<std::size_t>(p)].download(
                got.data() + static_cast<std::size_t>(p * part_elements),
                static_cast<std::size_t>(part_elements) * 4);
          INFO(part_count << " parts of " << part_elements);
          CHECK(std::memcmp(got.data(), expected.data(), expected.size() * 4) == 0);
        }
      }
      // K blocks that would reach into the next product: not taken (the caller sums the leaves).
      const std::int64_t whole = (std::max<std::int64_t>(count, 256) + 3) / 4 * 4;
      cuda::DeviceBuffer sink(static_cast<std::size_t>(whole) * 4);
      CHECK_FALSE(cuda::fixed_order_gemm_fp32_subtree(dtype, x.get(), wide, w.get(), wide, m, n, 72,
                                                      4, {sink.as<float>()}, whole, nullptr));
    }
  }
}
