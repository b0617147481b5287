// Forwards to common/cuda_check.cuh for the cuBLASLt tuner's files in kernels/matmul, which include it as
// "../cuda_check.cuh"; goes when they move to their own folder.
#pragma once
#include "common/cuda_check.cuh"
