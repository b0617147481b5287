// One typed kernel launch per storage dtype: by_dtype calls launch(T{}) with the element type of a
// DeviceDType, so a launcher writes its launch once for bf16, fp16 and fp32.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/device_dtype.h"

namespace bitcheck::cuda {

template <typename Launch>
void by_dtype(DeviceDType dtype, Launch launch) {
  switch (dtype) {
    case DeviceDType::bf16:
      return launch(__nv_bfloat16{});
    case DeviceDType::fp16:
      return launch(__half{});
    case DeviceDType::fp32:
      return launch(float{});
  }
}

}  // namespace bitcheck::cuda
