// The graph layout's launch seam: an impl's launches run eagerly or captured into a CUDA graph and
// replayed, and the host-side query that tells the two apart; declared without CUDA headers.
#pragma once
#include <functional>

struct CUstream_st;

namespace bitcheck::cuda {

// Runs `launches`, which queue their work on the stream they are given. Not captured: eagerly, on
// the default stream. Captured: on a stream of its own under stream capture (relaxed mode, so a
// launch may allocate), the graph instantiated, replayed once and the stream synchronized, so the
// replay's results are in place when it returns. What the launches read must be on the device
// before (synchronous uploads), what they write is read after: nothing in between may synchronize
// or copy to the host.
void run_launches(bool captured, const std::function<void(CUstream_st*)>& launches);

// `launches` captured on `stream` (which must not be the legacy default stream) into a CUDA graph,
// replayed once and waited for. Throws CaptureUnsupported (core/error.h) when the capture fails or
// holds no work (the launches went to another stream), CudaError when the replay fails.
void capture_and_replay(CUstream_st* stream, const std::function<void(CUstream_st*)>& launches);

// Whether work queued on `stream` is being captured into a graph (cudaStreamIsCapturing): true
// only inside run_launches(true, ...).
bool is_capturing(CUstream_st* stream);

}  // namespace bitcheck::cuda
