// y = x W^T with W stored as int4 or int8 numbers and x, y in fp32: the products of a decoding step.
//
// int4: q (N, K/2) uint8, two numbers 0..15 a byte; in every run of 32 numbers, byte i holds number i in its
//       low nibble and number i + 16 in its high one (GGUF's Q4_0 / Q4_1 order, so those blocks copy
//       straight in). Each group of G numbers along K has a scale s and a min m: w = s q + m; without mins
//       (GGUF's Q4_0, 2 bytes a group less to read) m = -8 s, w = s (q - 8).
// int8: q (N, K) int8; each group of G numbers has a scale s: w = s q (G = K: one scale per row).
// Scales (and mins) are fp16 or fp32: a template parameter, so every format reads its own exactly.
//
// Activations stay in fp32: the sum over a group is split as s * sum(q x) + m * sum(x), the integer
// weights are turned into floats in registers (nibble masks, widening loads, int -> float conversion)
// and multiplied into x with fused multiply-adds. sum(x) over each group is computed once per call.
// Output rows are shared among torch's own threads (at::parallel_for); each thread takes a few weight
// rows at a time (prefetching the rows ahead) and multiplies them with up to 4 rows of x, so a weight
// row is read from memory once per call however many rows x has. One kernel body serves three
// instruction sets through small traits (AVX-512: 16 lanes, AVX2: 8, plain C++: 1); which one runs is
// chosen at run time among those this build was compiled for (`set_isa`), so the tests check all three
// on one machine. Past 4 rows an int4 product dequantizes 4 weight rows at a time into L1 and runs a small
// GEMM on them (`run_dequantized`); past 32 (int4) / 24 (int8) rows a thread (a long prompt) the ops
// dequantize the whole weight and call at::linear. `quantized_matmul` is the entry for other C++ files
// (decoder_step.cpp, the fused decoding step).
//
// Measured on SmolLM2-135M's matrices (AMD EPYC Zen 4 at 2.6 GHz, one thread, batch 1): int4 streams
// 13-16 G weights/s (compute-bound: each number costs a conversion and a fused multiply-add), int8 16-22
// in cache and 9-10 from memory (the 49152 x 576 LM head); fp32 weights stream at most 6 G/s from memory
// (24 GB/s on one core).

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <torch/library.h>

#include "kernel_vectors.h"
#include "quantized_matmul.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace lmlab_quant {

// ---- the problems ----

template <typename S>
struct Int4Problem {
  const float* x;     // (M, K)
  const float* xsum;  // (M, K / G): sum of x over each group
  const uint8_t* q;   // (N, K / 2)
  const S* scale;     // (N, K / G)
  const S* min;       // (N, K / G), or null: m = -8 s
  float* y;           // (M, N)
  int64_t M, N, K, G;
  static constexpr int kRowFloats = 2;  // fp32 copies a tile makes per weight row and group: scale and min
};

template <typename S>
struct Int8Problem {
  const float* x;    // (M, K)
  const int8_t* q;   // (N, K)
  const S* scale;    // (N, K / G)
  float* y;          // (M, N)
  int64_t M, N, K, G;
  static constexpr int kRowFloats = 1;
};

// y[m0 .. m0+R, n0 .. n0+NR) of an int4 problem; `buf` holds NR * groups * 2 floats
template <class T, typename S, int R, int NR>
struct Int4Tile {
static void run(const Int4Problem<S>& p, int64_t m0, int64_t n0, float* buf) {
  using V = typename T::V;
  constexpr int CH = 32 / T::W;  // vectors in a run of 32 numbers
  const int64_t groups = p.K / p.G, runs = p.G / 32;
  float* scale = buf;               // (NR, groups)
  float* min = buf + NR * groups;   // (NR, groups)
  prefetch_rows(p.scale, n0 + kAhead * NR, NR, groups);
  prefetch_rows(p.min, n0 + kAhead * NR, NR, groups);
  for (int j = 0; j < NR; ++j) {
    to_floats(p.scale + (n0 + j) * groups, scale + j * groups, groups);
    if (p.min)
      to_floats(p.min + (n0 + j) * groups, min + j * groups, groups);
    else
      for (int64_t g = 0; g < groups; ++g) min[j * groups + g] = kMinPerScale * scale[j * groups + g];
  }
  V acc[R][NR];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = T::zero();
  if (runs == 1)
    add_groups<1>(p, m0, n0, scale, acc);  // groups of 32: the loop over a group's runs unrolled away
  else
    add_groups<0>(p, m0, n0, scale, acc);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j)
      p.y[(m0 + r) * p.N + n0 + j] = T::sum(acc[r][j]) + dot<T>(min + j * groups, p.xsum + (m0 + r) * groups, groups);
}

// acc[r][j] += scale[j][g] * sum over group g of q x, for every group; RUNS: runs of 32 per group (0: p.G / 32)
template <int RUNS>
static void add_groups(const Int4Problem<S>& p, int64_t m0, int64_t n0, const float* scale,
                       typename T::V (&acc)[R][NR]) {
  using V = typename T::V;
  constexpr int CH = 32 / T::W;
  const int64_t groups = p.K / p.G, runs = RUNS ? RUNS : p.G / 32;
  for (int64_t g = 0; g < groups; ++g) {
    V part[R][NR];  // sum of q x over the group
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NR; ++j) part[r][j] = T::zero();
    for (int64_t c = 0; c < runs; ++c) {
      const int64_t k = g * p.G + c * 32;
      V xv[R][CH];
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < CH; ++i) xv[r][i] = T::load(p.x + (m0 + r) * p.K + k + i * T::W);
      for (int j = 0; j < NR; ++j) {
        const uint8_t* bytes = p.q + (n0 + j) * (p.K / 2) + k / 2;
        __builtin_prefetch(bytes + kAhead * NR * (p.K / 2));  // the same bytes of the tile kAhead tiles on
        V w[CH];
        T::int4_chunk(bytes, w);
        for (int r = 0; r < R; ++r)
          for (int i = 0; i < CH; ++i) part[r][j] = T::fma(w[i], xv[r][i], part[r][j]);
      }
    }
    for (int j = 0; j < NR; ++j) {
      const V s = T::set1(scale[j * groups + g]);
      for (int r = 0; r < R; ++r) acc[r][j] = T::fma(part[r][j], s, acc[r][j]);
    }
  }
}
};

// y[m0 .. m0+R, n0 .. n0+NR) of an int8 problem; `buf` holds NR * groups floats
template <class T, typename S, int R, int NR>
struct Int8Tile {
static void run(const Int8Problem<S>& p, int64_t m0, int64_t n0, float* buf) {
  using V = typename T::V;
  const int64_t groups = p.K / p.G, whole = p.G / T::W * T::W;  // numbers of a group the vectors take
  float* scale = buf;  // (NR, groups)
  prefetch_rows(p.scale, n0 + kAheadInt8 * NR, NR, groups);
  for (int j = 0; j < NR; ++j) to_floats(p.scale + (n0 + j) * groups, scale + j * groups, groups);
  V acc[R][NR];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = T::zero();
  if (whole == p.G && p.G == 2 * T::W)  // Q8_0's groups of 32 (AVX-512): the loop over a group unrolled away
    add_groups<2>(p, m0, n0, scale, acc);
  else if (whole == p.G && p.G == T::W)
    add_groups<1>(p, m0, n0, scale, acc);
  else
    add_groups<0>(p, m0, n0, scale, acc);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) {
      float total = T::sum(acc[r][j]);
      for (int64_t g = 0; whole < p.G && g < groups; ++g) {  // a group size not a multiple of W: its last numbers
        float tail = 0.f;
        for (int64_t k = g * p.G + whole; k < (g + 1) * p.G; ++k)
          tail += static_cast<float>(p.q[(n0 + j) * p.K + k]) * p.x[(m0 + r) * p.K + k];
        total += scale[j * groups + g] * tail;
      }
      p.y[(m0 + r) * p.N + n0 + j] = total;
    }
}

// acc[r][j] += scale[j][g] * sum over group g of q x (its first `whole` numbers); VECS: vectors per group (0: any)
template <int VECS>
static void add_groups(const Int8Problem<S>& p, int64_t m0, int64_t n0, const float* scale,
                       typename T::V (&acc)[R][NR]) {
  using V = typename T::V;
  const int64_t groups = p.K / p.G, whole = VECS ? VECS * T::W : p.G / T::W * T::W;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t k0 = g * p.G;
    V part[R][NR];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NR; ++j) part[r][j] = T::zero();
#pragma GCC unroll 4
    for (int64_t k = k0; k < k0 + whole; k += T::W) {
      V xv[R];
      for (int r = 0; r < R; ++r) xv[r] = T::load(p.x + (m0 + r) * p.K + k);
      for (int j = 0; j < NR; ++j) {
        const int8_t* bytes = p.q + (n0 + j) * p.K + k;
        if (k % 64 == 0) __builtin_prefetch(bytes + kAheadInt8 * NR * p.K, 0, 2);  // once a line, into L2
        const V w = T::int8_chunk(bytes);
        for (int r = 0; r < R; ++r) part[r][j] = T::fma(w, xv[r], part[r][j]);
      }
    }
    for (int j = 0; j < NR; ++j) {
      const V s = T::set1(scale[j * groups + g]);
      for (int r = 0; r < R; ++r) acc[r][j] = T::fma(part[r][j], s, acc[r][j]);
    }
  }
}
};

// ---- the operators ----

void check_groups(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale, int64_t K, int64_t G,
                  int64_t multiple) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.size(1) == K,
              "x must be (rows, ", K, ") float32, got ", x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(G > 0 && G % multiple == 0 && K % G == 0, "group size ", G, " must be a multiple of ", multiple,
              " that divides ", K);
  TORCH_CHECK(scale.dim() == 2 && scale.size(0) == q.size(0) && scale.size(1) == K / G,
              "scales must be (", q.size(0), ", ", K / G, "), got ", scale.sizes());
  TORCH_CHECK(scale.scalar_type() == at::kHalf || scale.scalar_type() == at::kFloat,
              "scales must be float16 or float32, got ", scale.scalar_type());
  TORCH_CHECK(q.is_contiguous() && scale.is_contiguous(), "weights and scales must be contiguous");
}

void check_mins(const at::Tensor& min, const at::Tensor& scale) {
  TORCH_CHECK(!min.defined() || (min.sizes() == scale.sizes() && min.scalar_type() == scale.scalar_type() &&
                                 min.is_contiguous()), "mins must be like the scales");
}

int64_t max_kernel_rows(int64_t per_thread) {
  return per_thread * std::min<int64_t>(at::get_num_threads(), kMaxThreadsMeasured);
}

// Above this many rows of x, an int4 product dequantizes each few weight rows once into a small fp32 block and
// multiplies every row of x with it (`run_dequantized`), instead of unpacking the numbers again for every 4
// rows of x: SmolLM2-135M's whole int4 step with 16 rows (a busy server's batch), 62 -> 52 ms on 2 threads.
// (int8 numbers unpack so cheaply that the same for them measured slower: 21 -> 34 ms at 8 rows.)
constexpr int64_t kUnpackOnceRows = 4;

template <typename S>
void run_dequantized(const Int4Problem<S>& p);


void quantized_matmul(const float* x, int64_t M, const at::Tensor& q, const at::Tensor& scale, const at::Tensor& min,
                      int64_t G, float* y) {
  const int64_t N = q.size(0);
  const bool int4 = q.scalar_type() == at::kByte;
  if (int4 && M > kUnpackOnceRows) {  // int4, many rows
    const int64_t K = q.size(1) * 2;
    AT_DISPATCH_SWITCH(scale.scalar_type(), "int4_linear",
      AT_DISPATCH_CASE(at::kFloat, [&] {
        run_dequantized(Int4Problem<float>{x, nullptr, q.data_ptr<uint8_t>(), scale.data_ptr<float>(),
                                           or_null<float>(min), y, M, N, K, G});
      })
      AT_DISPATCH_CASE(at::kHalf, [&] {
        run_dequantized(Int4Problem<at::Half>{x, nullptr, q.data_ptr<uint8_t>(), scale.data_ptr<at::Half>(),
                                              or_null<at::Half>(min), y, M, N, K, G});
      }));
    return;
  }
  if (int4) {  // int4, a few rows
    const int64_t K = q.size(1) * 2;
    std::vector<float> xsum(M * (K / G));  // (M, K / G); a loop here costs less than calling a torch op
    for (int64_t i = 0; i < M * (K / G); ++i) {
      float total = 0.f;
      for (int64_t k = 0; k < G; ++k) total += x[i * G + k];
      xsum[i] = total;
    }
    AT_DISPATCH_SWITCH(scale.scalar_type(), "int4_linear",
      AT_DISPATCH_CASE(at::kFloat, [&] {
        run<Int4Tile>(Int4Problem<float>{x, xsum.data(), q.data_ptr<uint8_t>(), scale.data_ptr<float>(),
                                         or_null<float>(min), y, M, N, K, G});
      })
      AT_DISPATCH_CASE(at::kHalf, [&] {
        run<Int4Tile>(Int4Problem<at::Half>{x, xsum.data(), q.data_ptr<uint8_t>(), scale.data_ptr<at::Half>(),
                                            or_null<at::Half>(min), y, M, N, K, G});
      }));
    return;
  }
  const int64_t K = q.size(1);
  AT_DISPATCH_SWITCH(scale.scalar_type(), "int8_linear",
    AT_DISPATCH_CASE(at::kFloat, [&] {
      run<Int8Tile>(Int8Problem<float>{x, q.data_ptr<int8_t>(), scale.data_ptr<float>(), y, M, N, K, G});
    })
    AT_DISPATCH_CASE(at::kHalf, [&] {
      run<Int8Tile>(Int8Problem<at::Half>{x, q.data_ptr<int8_t>(), scale.data_ptr<at::Half>(), y, M, N, K, G});
    }));
}

// x (..., K) -> (..., N): the shape of y for x
std::vector<int64_t> out_shape(const at::Tensor& x, int64_t N) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  return shape;
}

at::Tensor int4_linear(const at::Tensor& x_in, const at::Tensor& q, const at::Tensor& scale,
                       const std::optional<at::Tensor>& min_in, int64_t G) {
  const at::Tensor min = min_in.value_or(at::Tensor());
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == at::kByte, "int4 weights must be (out, in / 2) uint8");
  const int64_t N = q.size(0), K = q.size(1) * 2;
  TORCH_CHECK(x_in.dim() >= 1 && x_in.size(-1) == K, "x must be (..., ", K, "), got ", x_in.sizes());
  const at::Tensor x = x_in.reshape({-1, K}).contiguous();
  const int64_t M = x.size(0);
  check_groups(x, q, scale, K, G, 32);
  check_mins(min, scale);
  if (M > max_kernel_rows(kMaxRowsInt4)) return at::linear(x_in, int4_dequantize(q, scale, min, G));
  at::Tensor y = at::empty({M, N}, x.options());
  quantized_matmul(x.data_ptr<float>(), M, q, scale, min, G, y.data_ptr<float>());
  return y.view(out_shape(x_in, N));
}

at::Tensor int8_linear(const at::Tensor& x_in, const at::Tensor& q, const at::Tensor& scale, int64_t G) {
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == at::kChar, "int8 weights must be (out, in) int8");
  const int64_t N = q.size(0), K = q.size(1);
  TORCH_CHECK(x_in.dim() >= 1 && x_in.size(-1) == K, "x must be (..., ", K, "), got ", x_in.sizes());
  const at::Tensor x = x_in.reshape({-1, K}).contiguous();
  const int64_t M = x.size(0);
  check_groups(x, q, scale, K, G, 1);
  if (M > max_kernel_rows(kMaxRowsInt8)) return at::linear(x_in, int8_dequantize(q, scale, G));
  at::Tensor y = at::empty({M, N}, x.options());
  quantized_matmul(x.data_ptr<float>(), M, q, scale, at::Tensor(), G, y.data_ptr<float>());
  return y.view(out_shape(x_in, N));
}

// The weights as fp32 (N, K): w = s q (+ m), each product and sum rounded as torch rounds them (no fused
// multiply-add), for a prompt's many rows (a matrix product in MKL beats any matrix-vector kernel there) and
// for embedding rows.
template <class T, typename S>
void dequantize_int4_rows(const uint8_t* q, const S* scale, const S* min, float* w, int64_t K, int64_t G,
                          int64_t n_begin, int64_t n_end) {
  using V = typename T::V;
  constexpr int CH = 32 / T::W;
  const int64_t groups = K / G;
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t g = 0; g < groups; ++g) {
      const float scale_g = to_float(scale[n * groups + g]);
      const V s = T::set1(scale_g), m = T::set1(min ? to_float(min[n * groups + g]) : kMinPerScale * scale_g);
      for (int64_t k = g * G; k < (g + 1) * G; k += 32) {
        V v[CH];
        T::int4_chunk(q + n * (K / 2) + k / 2, v);
        for (int i = 0; i < CH; ++i) T::store(w + n * K + k + i * T::W, T::add(T::mul(v[i], s), m));
      }
    }
}

template <class T, typename S>
void dequantize_int8_rows(const int8_t* q, const S* scale, float* w, int64_t K, int64_t G, int64_t n_begin,
                          int64_t n_end) {
  using V = typename T::V;
  const int64_t groups = K / G, whole = G / T::W * T::W;
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int64_t g = 0; g < groups; ++g) {
      const float s = to_float(scale[n * groups + g]);
      const int64_t k0 = n * K + g * G;
      for (int64_t k = 0; k < whole; k += T::W) T::store(w + k0 + k, T::mul(T::int8_chunk(q + k0 + k), T::set1(s)));
      for (int64_t k = whole; k < G; ++k) w[k0 + k] = s * static_cast<float>(q[k0 + k]);
    }
}

// y[m0 .. m0+R, n0 .. n0+NR) = x rows times NR fp32 weight rows w (NR, K), K a multiple of 32
template <class T, int R, int NR>
void fp32_tile(const float* x, const float* w, float* y, int64_t K, int64_t N, int64_t m0, int64_t n0) {
  using V = typename T::V;
  V acc[R][NR];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = T::zero();
  for (int64_t k = 0; k < K; k += T::W) {
    V xv[R];
    for (int r = 0; r < R; ++r) xv[r] = T::load(x + (m0 + r) * K + k);
    for (int j = 0; j < NR; ++j) {
      const V wv = T::load(w + j * K + k);
      for (int r = 0; r < R; ++r) acc[r][j] = T::fma(xv[r], wv, acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NR; ++j) y[(m0 + r) * N + n0 + j] = T::sum(acc[r][j]);
}

template <class T, int NR>
void fp32_tiles(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N, int64_t n0) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) fp32_tile<T, 4, NR>(x, w, y, K, N, m, n0);
  for (; m < M; ++m) fp32_tile<T, 1, NR>(x, w, y, K, N, m, n0);
}

// Output rows [n_begin, n_end) of an int4 problem with many rows of x: 4 weight rows at a time dequantized (as
// int4_dequantize makes them) into a block that stays in L1, then multiplied with every row of x
template <class T, typename S>
void dequantized_rows(const Int4Problem<S>& p, int64_t n_begin, int64_t n_end) {
  constexpr int64_t NR = 4;
  const int64_t groups = p.K / p.G;
  std::vector<float> w(NR * p.K);
  for (int64_t n = n_begin; n < n_end; n += NR) {
    const int64_t nr = std::min(NR, n_end - n);
    dequantize_int4_rows<T, S>(p.q + n * (p.K / 2), p.scale + n * groups, p.min ? p.min + n * groups : nullptr,
                               w.data(), p.K, p.G,
                               0, nr);
    if (nr == NR)
      fp32_tiles<T, NR>(p.x, w.data(), p.y, p.M, p.K, p.N, n);
    else
      for (int64_t j = 0; j < nr; ++j) fp32_tiles<T, 1>(p.x, w.data() + j * p.K, p.y, p.M, p.K, p.N, n + j);
  }
}

template <typename S>
void run_dequantized(const Int4Problem<S>& p) {
  for_rows(p.N, [&](auto isa, int64_t begin, int64_t end) { dequantized_rows<decltype(isa), S>(p, begin, end); });
}


at::Tensor int4_dequantize(const at::Tensor& q_in, const at::Tensor& scale_in, const at::Tensor& min_in, int64_t G) {
  TORCH_CHECK(q_in.dim() == 2 && q_in.scalar_type() == at::kByte, "int4 weights must be (out, in / 2) uint8");
  const int64_t N = q_in.size(0), K = q_in.size(1) * 2;
  TORCH_CHECK(G > 0 && G % 32 == 0 && K % G == 0 && scale_in.dim() == 2 && scale_in.size(0) == N &&
              scale_in.size(1) == K / G && (scale_in.scalar_type() == at::kHalf || scale_in.scalar_type() == at::kFloat) &&
              (!min_in.defined() || (scale_in.sizes() == min_in.sizes() && min_in.scalar_type() == scale_in.scalar_type())),
              "int4 scales and mins do not fit the weights");
  const at::Tensor q = q_in.contiguous(), scale = scale_in.contiguous();
  const at::Tensor min = min_in.defined() ? min_in.contiguous() : min_in;
  at::Tensor w = at::empty({N, K}, scale.options().dtype(at::kFloat));
  AT_DISPATCH_SWITCH(scale.scalar_type(), "int4_dequantize",
    AT_DISPATCH_CASE(at::kFloat, [&] {
      for_rows(N, [&](auto isa, int64_t b, int64_t e) {
        dequantize_int4_rows<decltype(isa), float>(q.data_ptr<uint8_t>(), scale.data_ptr<float>(),
                                                   or_null<float>(min), w.data_ptr<float>(), K, G, b, e);
      });
    })
    AT_DISPATCH_CASE(at::kHalf, [&] {
      for_rows(N, [&](auto isa, int64_t b, int64_t e) {
        dequantize_int4_rows<decltype(isa), at::Half>(q.data_ptr<uint8_t>(), scale.data_ptr<at::Half>(),
                                                      or_null<at::Half>(min), w.data_ptr<float>(), K, G, b, e);
      });
    }));
  return w;
}

at::Tensor int4_dequantize_op(const at::Tensor& q, const at::Tensor& scale, const std::optional<at::Tensor>& min,
                              int64_t G) {
  return int4_dequantize(q, scale, min.value_or(at::Tensor()), G);
}

at::Tensor int8_dequantize(const at::Tensor& q_in, const at::Tensor& scale_in, int64_t G) {
  TORCH_CHECK(q_in.dim() == 2 && q_in.scalar_type() == at::kChar, "int8 weights must be (out, in) int8");
  const int64_t N = q_in.size(0), K = q_in.size(1);
  TORCH_CHECK(G > 0 && K % G == 0 && scale_in.dim() == 2 && scale_in.size(0) == N && scale_in.size(1) == K / G &&
              (scale_in.scalar_type() == at::kHalf || scale_in.scalar_type() == at::kFloat),
              "int8 scales do not fit the weights");
  const at::Tensor q = q_in.contiguous(), scale = scale_in.contiguous();
  at::Tensor w = at::empty({N, K}, scale.options().dtype(at::kFloat));
  AT_DISPATCH_SWITCH(scale.scalar_type(), "int8_dequantize",
    AT_DISPATCH_CASE(at::kFloat, [&] {
      for_rows(N, [&](auto isa, int64_t b, int64_t e) {
        dequantize_int8_rows<decltype(isa), float>(q.data_ptr<int8_t>(), scale.data_ptr<float>(),
                                                   w.data_ptr<float>(), K, G, b, e);
      });
    })
    AT_DISPATCH_CASE(at::kHalf, [&] {
      for_rows(N, [&](auto isa, int64_t b, int64_t e) {
        dequantize_int8_rows<decltype(isa), at::Half>(q.data_ptr<int8_t>(), scale.data_ptr<at::Half>(),
                                                      w.data_ptr<float>(), K, G, b, e);
      });
    }));
  return w;
}

// Use instruction set `isa` (0 plain C++, 1 AVX2, 2 AVX-512) or the best this build has below it;
// returns the one now in use. For tests and measurements: every call after it runs that path.
int64_t set_isa(int64_t isa) {
  int64_t use = std::min(std::max<int64_t>(isa, PLAIN), kBestIsa);
#if !(defined(__AVX2__) && defined(__FMA__))
  use = PLAIN;
#endif
  isa_in_use.store(use);
  return use;
}

TORCH_LIBRARY(lmlab_quant, m) {
  // x (..., in) -> (..., out); a few rows through the kernels, more through dequantize + at::linear
  m.def("int4_linear(Tensor x, Tensor q, Tensor scales, Tensor? mins, int group_size) -> Tensor");
  m.def("int8_linear(Tensor x, Tensor q, Tensor scales, int group_size) -> Tensor");
  m.def("int4_dequantize(Tensor q, Tensor scales, Tensor? mins, int group_size) -> Tensor");
  m.def("int8_dequantize(Tensor q, Tensor scales, int group_size) -> Tensor");
  m.def("set_isa(int isa) -> int", &set_isa);
}

TORCH_LIBRARY_IMPL(lmlab_quant, CPU, m) {
  m.impl("int4_linear", &int4_linear);
  m.impl("int8_linear", &int8_linear);
  m.impl("int4_dequantize", &int4_dequantize_op);
  m.impl("int8_dequantize", &int8_dequantize);
}

}  // namespace lmlab_quant
