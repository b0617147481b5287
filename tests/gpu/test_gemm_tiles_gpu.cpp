// matmul/fixed-order's claim that the tile shape changes no bit: on the wgmma path every tile shape
// the kernel has, in both orientations (X as the wgmma A operand, and W as A with Y held
// transposed), forced on the same inputs, gives outputs bitwise identical to the automatic choice,
// at several M including ones that are not a multiple of any tile's rows.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "common/runtime.h"
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
