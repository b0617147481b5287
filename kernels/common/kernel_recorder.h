// The CUDA backend's source of kernel records (core/provenance.h): CUPTI's activity records of
// every kernel the process launches, behind a CUDA-free header.
#pragma once
#include <memory>

#include "core/provenance.h"

namespace bitcheck {
// kernel_recorder_cuda.cpp (CUDA build): CUPTI opened at run time, so a machine without it runs
// with provenance off and the recorder's off_reason says why.
std::unique_ptr<KernelRecorder> make_cupti_kernel_recorder();
}  // namespace bitcheck
