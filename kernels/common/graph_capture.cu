// Stream capture into a CUDA graph and its replay, for the graph layout (graph_capture.h).
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "cuda_check.cuh"
#include "graph_capture.h"
#include "runtime.h"

namespace bitcheck::cuda {
namespace {

struct GraphDestroy {
  void operator()(cudaGraph_t graph) const { BITCHECK_CUDA_CALL_NOEXCEPT(cudaGraphDestroy(graph)); }
};
struct GraphExecDestroy {
  void operator()(cudaGraphExec_t exec) const {
    BITCHECK_CUDA_CALL_NOEXCEPT(cudaGraphExecDestroy(exec));
  }
};
using Graph = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, GraphDestroy>;
using GraphExec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDestroy>;

// Ends the capture on `stream` and takes its graph; CaptureUnsupported when the capture was
// invalidated (a synchronizing or unsupported call in between).
Graph end_capture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream, &graph);
  Graph owned(graph);
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // not sticky: clear it for the calls that follow
    throw CaptureUnsupported(std::string("stream capture failed: ") + cudaGetErrorName(status) +
                             " (" + cudaGetErrorString(status) + ")");
  }
  return owned;
}

std::size_t node_count(cudaGraph_t graph) {
  std::size_t count = 0;
  BITCHECK_CUDA_CALL(cudaGraphGetNodes(graph, nullptr, &count));
  return count;
}

}  // namespace

void capture_and_replay(CUstream_st* stream, const std::function<void(CUstream_st*)>& launches) {
  // From the capture to the replay's end: no device synchronize, and no block the captured work
  // may use handed out again (runtime.h, DeviceBuffer).
  const CaptureGuard guard;
  BITCHECK_CUDA_CALL(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  try {
    launches(stream);
  } catch (...) {
    cudaGraph_t abandoned = nullptr;
    BITCHECK_CUDA_CALL_NOEXCEPT(cudaStreamEndCapture(stream, &abandoned));
    if (abandoned) BITCHECK_CUDA_CALL_NOEXCEPT(cudaGraphDestroy(abandoned));
    throw;
  }
  Graph graph = end_capture(stream);
  if (node_count(graph.get()) == 0) {
    throw CaptureUnsupported(
        "the capture holds no work: the launches went to another stream than the captured one");
  }
  cudaGraphExec_t exec = nullptr;
  BITCHECK_CUDA_CALL(cudaGraphInstantiate(&exec, graph.get(), 0));
  GraphExec owned_exec(exec);
  BITCHECK_CUDA_CALL(cudaGraphLaunch(exec, stream));
  BITCHECK_CUDA_CALL(cudaStreamSynchronize(stream));
}

void run_launches(bool captured, const std::function<void(CUstream_st*)>& launches) {
  if (!captured) {
    launches(nullptr);
    return;
  }
  // The capture stream does not wait for the default stream: earlier uploads and poison fills
  // must be complete before the replay reads and writes the same memory.
  BITCHECK_CUDA_CALL(cudaDeviceSynchronize());
  Stream stream;
  capture_and_replay(static_cast<cudaStream_t>(stream.get()), launches);
}

bool is_capturing(CUstream_st* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  BITCHECK_CUDA_CALL(cudaStreamIsCapturing(stream, &status));
  return status == cudaStreamCaptureStatusActive;
}

}  // namespace bitcheck::cuda
