// What quantized_matmul.cpp and activation_rounding.cpp offer the other C++ files of the library (decoder_step.cpp,
// and each other).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lmlab_quant {

// y (M, N) = x (M, K) W^T for one quantized weight through the matrix-vector kernels, threaded: int4 when q is
// uint8 (q (N, K / 2), scales and mins (N, K / G); mins undefined: m = -8 s, GGUF's Q4_0), else int8 (q (N, K)
// int8, scales (N, K / G), no mins).
// x and y are contiguous fp32; the tensors are checked by the caller (as int4_linear / int8_linear check them).
void quantized_matmul(const float* x, int64_t M, const at::Tensor& q, const at::Tensor& scale, const at::Tensor& min,
                      int64_t G, float* y);

// How x is rounded before the product: not at all, or as llama.cpp rounds it (activation_rounding.py's kinds)
enum Rounding : int64_t { NO_ROUNDING = 0, Q8_0 = 1, Q8_1 = 2, Q8_K = 3 };

// The same product with x rounded first (`rounding` not NO_ROUNDING), on integers where the CPU allows:
// activation_rounding.cpp. K must be a multiple of the rounding's block (32, or 256 for Q8_K).
void rounded_matmul(const float* x, int64_t M, const at::Tensor& q, const at::Tensor& scale, const at::Tensor& min,
                    int64_t G, Rounding rounding, float* y);

// Above this many rows of x, dequantize + at::linear (MKL's GEMM) beats the kernels, by format and threads.
// Measured on SmolLM2-135M (AMD EPYC Zen 4): int8 on 1 thread wins up to 24-32 rows (its numbers unpack
// cheaply); on 2 threads the kernels run twice as fast while dequantize + GEMM at these sizes barely gains
// (int8, 48 rows: 1.2 against 3.2 ms). int4 past 4 rows dequantizes 4 weight rows at a time into L1 and runs
// a small GEMM on them (`run_dequantized`): a whole int4 prefill of 24 / 64 / 200 / 512 tokens takes 113 /
// 328 / 949 / 2455 ms that way against 121 / 225 / 625 / 1810 through MKL on 1 thread, and 73 / 201 / 589 /
// 1502 against 79 / 208 / 476 / 1094 on 2. So the limits grow with the threads, up to 4 (more not measured).
inline constexpr int64_t kMaxRowsInt4 = 32, kMaxRowsInt8 = 24, kMaxThreadsMeasured = 4;

int64_t max_kernel_rows(int64_t per_thread);  // rows of x past which the ops dequantize and call at::linear

// The ops' own checks and pieces
void check_groups(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale, int64_t K, int64_t G,
                  int64_t multiple);
void check_mins(const at::Tensor& min, const at::Tensor& scale);  // none, or like the scales
inline constexpr float kMinPerScale = -8.f;  // an int4 weight without mins has m = -8 s (GGUF's Q4_0)
template <typename S>
const S* or_null(const at::Tensor& t) {  // an optional tensor's numbers (mins), null when it is not there
  return t.defined() ? t.data_ptr<S>() : nullptr;
}
std::vector<int64_t> out_shape(const at::Tensor& x, int64_t N);  // x (..., K) -> (..., N)
at::Tensor int4_dequantize(const at::Tensor& q_in, const at::Tensor& scale_in, const at::Tensor& min_in,
                           int64_t G);  // min_in undefined: m = -8 s
at::Tensor int8_dequantize(const at::Tensor& q_in, const at::Tensor& scale_in, int64_t G);

}  // namespace lmlab_quant
