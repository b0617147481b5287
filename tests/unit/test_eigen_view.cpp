// The references' wide token reductions: product_tn gives aᵀ·b's bits in one block or many, and
// the same bits whatever the host thread count.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "common/eigen_view.h"

using namespace bitcheck;

namespace {

// Sets BITCHECK_HOST_THREADS while it lives.
class HostThreads {
 public:
  explicit HostThreads(const char* count) { setenv("BITCHECK_HOST_THREADS", count, 1); }
  ~HostThreads() { unsetenv("BITCHECK_HOST_THREADS"); }
  HostThreads(const HostThreads&) = delete;
  HostThreads& operator=(const HostThreads&) = delete;
};

MatrixF counter_matrix(Eigen::Index rows, Eigen::Index cols, int salt) {
  MatrixF m(rows, cols);
  for (Eigen::Index r = 0; r < rows; ++r)
    for (Eigen::Index c = 0; c < cols; ++c)
      m(r, c) = static_cast<float>((r * 7919 + c * 104729 + salt) % 2003) / 1001.0f - 1.0f;
  return m;
}

}  // namespace

TEST_CASE("product_tn: the one product's bits, in fixed blocks whatever the thread count",
          "[reference]") {
  for (Eigen::Index wide : {product_block - 1, 2 * product_block + 300}) {
    const MatrixF a = counter_matrix(48, wide, 1), b = counter_matrix(48, 24, 2);
    const MatrixF one = a.transpose() * b;
    for (const char* threads : {"1", "3"}) {
      HostThreads set(threads);
      const MatrixF blocked = product_tn(a, b);
      INFO("rows " << wide << ", threads " << threads);
      REQUIRE(blocked.rows() == one.rows());
      REQUIRE(blocked.cols() == one.cols());
      CHECK((blocked.array() == one.array()).all());
    }
  }
}
