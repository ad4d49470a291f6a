// What quantized_matmul.cpp offers the other C++ files of the library (decoder_step.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace lmlab_quant {

// y (M, N) = x (M, K) W^T for one quantized weight through the matrix-vector kernels, threaded: int4 when
// `min` is defined (q (N, K / 2) uint8, scales and mins (N, K / G)), else int8 (q (N, K) int8, scales (N, K / G)).
// x and y are contiguous fp32; the tensors are checked by the caller (as int4_linear / int8_linear check them).
void quantized_matmul(const float* x, int64_t M, const at::Tensor& q, const at::Tensor& scale, const at::Tensor& min,
                      int64_t G, float* y);

}  // namespace lmlab_quant
