// matmul/fixed-order: which output tiles each CTA of the persistent wgmma launch runs. Plain C++
// (host and device), so the schedule is unit-tested without a GPU.
#pragma once

#ifdef __CUDACC__
#define BITCHECK_HOST_DEVICE __host__ __device__
#else
#define BITCHECK_HOST_DEVICE
#endif

namespace bitcheck::cuda {

// Which tiles each CTA of a persistent launch runs: big tiles round robin (CTA b runs b, b+G, ...),
// then the tail tiles, first up to `tail_per_slot` on each CTA left with one big tile fewer than the
// others (they fill its idle slot), the rest round robin starting at those CTAs. A scheduling
// choice only: an element's chain does not depend on which CTA computes it or when.
struct TileSchedule {
  int big_tiles;
  int tail_tiles;
  int grid;
  int tail_per_slot;

  BITCHECK_HOST_DEVICE int big_count(int cta) const {
    return cta < big_tiles ? (big_tiles - 1 - cta) / grid + 1 : 0;
  }
  // CTAs with the most big tiles are 0 .. full_ctas-1.
  BITCHECK_HOST_DEVICE int full_ctas() const {
    if (big_tiles == 0) return 0;
    const int waves = (big_tiles + grid - 1) / grid;
    return big_tiles - (waves - 1) * grid;
  }
  // The j-th tail tile of `cta`, or -1 when it has no more.
  BITCHECK_HOST_DEVICE int tail_tile(int cta, int j) const {
    const int full = full_ctas();
    const int spare = grid - full;
    const int filling = spare == 0 ? 0 : (tail_tiles < spare * tail_per_slot ? tail_tiles : spare * tail_per_slot);
    if (cta >= full && spare > 0) {
      const int first = cta - full;
      const int filling_count = first < filling ? (filling - 1 - first) / spare + 1 : 0;
      if (j < filling_count) return first + j * spare;
      j -= filling_count;
    }
    const int offset = ((cta - full) % grid + grid) % grid;
    const int tile = filling + offset + j * grid;
    return tile < tail_tiles ? tile : -1;
  }
  BITCHECK_HOST_DEVICE int tail_count(int cta) const {
    int count = 0;
    while (tail_tile(cta, count) >= 0) ++count;
    return count;
  }
};

}  // namespace bitcheck::cuda
