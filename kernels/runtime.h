// Forwards to common/runtime.h for the cuBLASLt tuner's files in kernels/matmul, which include it as
// "../runtime.h"; goes when they move to their own folder.
#pragma once
#include "common/runtime.h"
