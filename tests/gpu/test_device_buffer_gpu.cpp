// The device buffer cache (common/runtime.h): a dead buffer's block is handed out again, but only
// after every stream's work that could still write it is done; exported (IPC) buffers are never
// cached blocks.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "common/runtime.h"
#include "moe/moe_kernels.h"

using namespace bitcheck;

TEST_CASE("device buffer cache: a freed block of the same size class comes back",
          "[gpu][device-buffer]") {
  cuda::release_cached_device_memory();
  void* first = nullptr;
  {
    cuda::DeviceBuffer buffer(1 << 20);
    first = buffer.get();
  }
  cuda::DeviceBuffer again((1 << 20) - 100);  // the same 1 MiB class
  CHECK(again.get() == first);
  CHECK(again.bytes() == (1 << 20) - 100);
}

TEST_CASE("device buffer cache: no block is reused while another stream may still write it",
          "[gpu][device-buffer]") {
  // A transpose of 64 MiB on a non-blocking stream writes buffer `late`; the buffer dies at once
  // and a buffer of the same size is allocated and filled from the host on the legacy stream
  // (which does not wait for non-blocking streams). Were the block handed out before the device
  // is synchronized, the transpose's writes would land in the new buffer's contents.
  const std::int64_t rows = 4096, cols = 4096;  // fp32: 64 MiB
  const std::size_t bytes = static_cast<std::size_t>(rows * cols) * sizeof(float);
  std::vector<float> source(static_cast<std::size_t>(rows * cols), 1.0f);
  std::vector<float> pattern(source.size());
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<float>(i % 977) + 2.0f;
  cuda::release_cached_device_memory();
  for (int round = 0; round < 8; ++round) {
    cuda::DeviceBuffer in(bytes);
    in.upload(source.data(), bytes);
    cuda::Stream stream;
    {
      cuda::DeviceBuffer late(bytes);
      for (int repeat = 0; repeat < 8; ++repeat)
        cuda::moe_transpose(cuda::DeviceDType::fp32, in.get(), 1, rows, cols, late.get(),
                            static_cast<CUstream_st*>(stream.get()));
    }
    cuda::DeviceBuffer fresh(bytes);
    fresh.upload(pattern.data(), bytes);
    cuda::synchronize();
    std::vector<float> back(pattern.size());
    fresh.download(back.data(), bytes);
    INFO("round " << round);
    REQUIRE(back == pattern);
  }
}

TEST_CASE("device buffer cache: an exported buffer is an allocation of its own",
          "[gpu][device-buffer]") {
  cuda::release_cached_device_memory();
  void* cached = nullptr;
  {
    cuda::DeviceBuffer buffer(1 << 20);
    cached = buffer.get();
  }
  // The cached block is ready for a 1 MiB buffer; an exported one must not take it.
  cuda::DeviceBuffer exported(1 << 20, cuda::DeviceBuffer::exported);
  CHECK(exported.get() != cached);
  CHECK(!cuda::ipc_memory_handle(exported.get()).empty());
}
