// y = x W^T for int4 / int8 weights with x first rounded to 8 bits in blocks, as llama.cpp rounds it
// (activation_rounding.py gives the formats and is the reference), and the products taken on integers.
//
// llama.cpp multiplies every quantized matrix by activations it rounded to 8-bit integers (q8_0, q8_1, q8_K),
// so that each run of 32 numbers is one integer dot product of unsigned weights and signed activations:
// `vpdpbusd` (AVX-512 VNNI) does 32 of them in one instruction, where quantized_matmul.cpp's fp32 path
// converts every weight to a float and spends a fused multiply-add on it. The sum over a group of G numbers
// (int4: w = s q + m; int8: w = s q) is then
//     s * sum over the group's runs of (d_run * sum(q x_int)) + m * xsum,
// with d_run the run's activation scale and xsum what the rounding says multiplies the min: q8_1's stored
// block sum fp16(d sum(x_int)), else d sum(x_int) (the sum of the rounded values). The integer sums are exact,
// so the result equals the modules' (rounded values through the fp32 kernels) up to the order of float
// additions.
//
// The integer path runs on 8-lane vectors (AVX2 registers): the AVX-512 build uses VNNI's `vpdpbusd`, the
// AVX2 one `vpmaddubsw` + `vpmaddwd` (pairs of products to int16, then to int32: |w| <= 128 and |x| <= 127
// keep the pairs within int16), so one build checks both (`set_isa`). Plain C++, group sizes that are not a
// multiple of 32 and prompts of more than 16 rows multiply the rounded values through the fp32 kernels instead,
// and a long prompt (past the op's row limit, as int4_linear's) through MKL on the dequantized weight, adding
// q8_1's min correction as activation_rounding.py does.
//
// Measured on SmolLM2-135M's matrices (AMD EPYC Zen 4, one thread, batch 1, fp32 activations -> integer):
// int4 gate_up (3072 x 576) 109 -> 65 us, down (576 x 1536) 48 -> 31 us, the int8 LM head (49152 x 576, read
// from memory) 1.9 -> 1.7 ms; benchmarks/decode_profile.py --activations int8 measures the whole step.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/linear.h>
#include <torch/library.h>

#include <cmath>
#include <type_traits>

#include "kernel_vectors.h"
#include "quantized_matmul.h"

namespace lmlab_quant {
namespace {

constexpr int64_t kRun = 32;  // numbers in one integer dot product

// x (M, K) rounded: integers, each run's scale d, and each run's sum as the rounding gives it
struct RoundedRows {
  std::vector<int8_t> q;     // (M, K)
  std::vector<float> scale;  // (M, K / 32)
  std::vector<float> sum;    // (M, K / 32): q8_1's stored fp16(d sum(q)) with d unrounded; else d sum(q)
};

// q8_0 / q8_1: blocks of 32, d = fp16(amax / 127), q = round(x 127 / amax) (ties to even, as torch.round)
void round_q8_0(const float* x, int64_t n, bool stored_sum, int8_t* q, float* scale, float* sum) {
  for (int64_t b = 0; b < n / kRun; ++b) {
    const float* block = x + b * kRun;
    float amax = 0.f;
    for (int64_t i = 0; i < kRun; ++i) amax = std::max(amax, std::fabs(block[i]));
    const float inverse = amax != 0.f ? 127.f / amax : 0.f;
    int total = 0;
    for (int64_t i = 0; i < kRun; ++i) {
      const int v = static_cast<int>(std::nearbyint(block[i] * inverse));
      q[b * kRun + i] = static_cast<int8_t>(v);
      total += v;
    }
    const float unrounded = amax / 127.f;
    scale[b] = static_cast<float>(c10::Half(unrounded));
    sum[b] = stored_sum ? static_cast<float>(c10::Half(unrounded * static_cast<float>(total)))
                        : scale[b] * static_cast<float>(total);
  }
}

// q8_K: blocks of 256 with an fp32 scale whose sign is that of the block's largest magnitude (the first
// one on ties), q = min(127, round(x * -127 / max)), d = 1 / (-127 / max)
void round_q8_k(const float* x, int64_t n, int8_t* q, float* scale, float* sum) {
  constexpr int64_t kBlock = 256;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* block = x + b * kBlock;
    float amax = 0.f, max = 0.f;
    for (int64_t i = 0; i < kBlock; ++i)
      if (std::fabs(block[i]) > amax) amax = std::fabs(block[i]), max = block[i];
    const float inverse = max != 0.f ? -127.f / max : 0.f;
    const float d = inverse != 0.f ? 1.f / inverse : 0.f;
    for (int64_t run = 0; run < kBlock / kRun; ++run) {
      int total = 0;
      for (int64_t i = run * kRun; i < (run + 1) * kRun; ++i) {
        const int v = std::min(127, static_cast<int>(std::nearbyint(block[i] * inverse)));
        q[b * kBlock + i] = static_cast<int8_t>(v);
        total += v;
      }
      scale[b * kBlock / kRun + run] = d;
      sum[b * kBlock / kRun + run] = d * static_cast<float>(total);
    }
  }
}

RoundedRows round_rows(const float* x, int64_t M, int64_t K, Rounding rounding) {
  TORCH_CHECK(K % (rounding == Q8_K ? 256 : kRun) == 0, "a row of ", K, " numbers is not whole blocks of the ",
              "rounding's ", rounding == Q8_K ? 256 : kRun);
  RoundedRows out{std::vector<int8_t>(M * K), std::vector<float>(M * K / kRun), std::vector<float>(M * K / kRun)};
  for (int64_t m = 0; m < M; ++m) {
    int8_t* q = out.q.data() + m * K;
    float* scale = out.scale.data() + m * K / kRun;
    float* sum = out.sum.data() + m * K / kRun;
    if (rounding == Q8_K)
      round_q8_k(x + m * K, K, q, scale, sum);
    else
      round_q8_0(x + m * K, K, rounding == Q8_1, q, scale, sum);
  }
  return out;
}

// ---- the integer tiles ----

#if defined(__AVX2__) && defined(__FMA__)

// acc + the sums of 4 products u8 x s8 in each of 8 int32 lanes, for 32 bytes of each
struct Maddubs {  // AVX2: pairs to int16, then to int32
  static __m256i dot(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
};
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
struct Vnni {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
};
#else
using Vnni = Maddubs;
#endif

float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// sum over g < n of min[g] xsum[g]: a weight row's mins (fp16 or fp32) times what multiplies them
inline __m256 eight(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 eight(const at::Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
template <typename S>
float min_term(const S* min, const float* xsum, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= n; g += 8) acc = _mm256_fmadd_ps(eight(min + g), _mm256_loadu_ps(xsum + g), acc);
  float total = sum8(acc);
  for (; g < n; ++g) total += to_float(min[g]) * xsum[g];
  return total;
}

template <typename S>
struct IntegerProblem {
  const int8_t* x;      // (M, K) the activations' integers
  const float* xscale;  // (M, K / 32)
  const float* xsum;    // (M, K / G): what multiplies each group's min (int4)
  const uint8_t* q;     // (N, K / 2) int4 numbers, or (N, K) int8 ones
  const S* scale;       // (N, K / G)
  const S* min;         // (N, K / G) for int4 with mins; null for int8 and for int4 without (m = -8 s)
  float* y;             // (M, N)
  int64_t M, N, K, G;
  bool int4;
  static constexpr int kRowFloats = 0;  // the tiles read scales and mins where they lie
};

// How a run of 32 weights becomes the unsigned and signed operands of the integer dot product: int4's 16
// bytes (byte i holds numbers i and i + 16) unpacked to 0..15 against x; int8's 32 bytes as |w| against x
// with w's sign
struct Int4Runs {
  static constexpr int64_t kRunBytes = kRun / 2;
  static __m256i load(const uint8_t* bytes) {
    const __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);  // low nibbles, then high ones
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
    return _mm256_and_si256(_mm256_srlv_epi32(both, shift), _mm256_set1_epi8(0x0F));  // numbers 0..31 in order
  }
  static __m256i magnitude(__m256i w) { return w; }
  static __m256i signed_x(__m256i x, __m256i) { return x; }
  static void prefetch(const uint8_t* bytes, int64_t, int64_t tile_bytes) {
    __builtin_prefetch(bytes + kAhead * tile_bytes);
  }
};
struct Int8Runs {
  static constexpr int64_t kRunBytes = kRun;
  static __m256i load(const uint8_t* bytes) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes)); }
  static __m256i magnitude(__m256i w) { return _mm256_abs_epi8(w); }
  static __m256i signed_x(__m256i x, __m256i w) { return _mm256_sign_epi8(x, w); }
  static void prefetch(const uint8_t* bytes, int64_t run, int64_t tile_bytes) {  // once a line, into L2
    if (run % 2 == 0) __builtin_prefetch(bytes + kAheadInt8 * tile_bytes, 0, 2);
  }
};

// y[m0 .. m0+R, n0 .. n0+NR) of a problem whose weights are W's runs
template <class W>
struct IntegerTile {
  template <class Dot, typename S, int R, int NR>
  struct Of {
    static void run(const IntegerProblem<S>& p, int64_t m0, int64_t n0, float*) {
      prefetch_rows(p.scale, n0 + kAhead * NR, NR, p.K / p.G);
      prefetch_rows(p.min, n0 + kAhead * NR, NR, p.K / p.G);
      __m256 acc[R][NR];
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_setzero_ps();
      if (p.G == kRun)
        add_groups<1>(p, m0, n0, acc);  // groups of 32: the loop over a group's runs unrolled away
      else
        add_groups<0>(p, m0, n0, acc);
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < NR; ++j)
          p.y[(m0 + r) * p.N + n0 + j] = sum8(acc[r][j]) + min_part(p, m0 + r, n0 + j);
    }

    // sum over groups of m xsum for output (m, n): int4's mins (m = -8 s without them: the same numbers, each
    // product and sum scaled by a power of two), nothing for int8
    static float min_part(const IntegerProblem<S>& p, int64_t m, int64_t n) {
      const int64_t groups = p.K / p.G;
      if (p.min) return min_term(p.min + n * groups, p.xsum + m * groups, groups);
      return p.int4 ? kMinPerScale * min_term(p.scale + n * groups, p.xsum + m * groups, groups) : 0.f;
    }

    // acc[r][j] += scale[j][g] * sum over group g's runs of d_run sum(q x); RUNS: runs per group (0: p.G / 32)
    template <int RUNS>
    static void add_groups(const IntegerProblem<S>& p, int64_t m0, int64_t n0, __m256 (&acc)[R][NR]) {
      const int64_t groups = p.K / p.G, runs = RUNS ? RUNS : p.G / kRun, K = p.K;
      const int64_t row_bytes = p.K / kRun * W::kRunBytes;
      const int8_t* x = p.x + m0 * K;
      const float* xscale = p.xscale + m0 * (K / kRun);
      const uint8_t* q = p.q + n0 * row_bytes;
      const S* scale = p.scale + n0 * groups;
      const __m256i zero = _mm256_setzero_si256();
      for (int64_t g = 0; g < groups; ++g) {
        __m256 part[R][NR];  // sum over the group's runs of d_run sum(q x)
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < NR; ++j) part[r][j] = _mm256_setzero_ps();
        for (int64_t c = 0; c < runs; ++c) {
          const int64_t run = g * runs + c;
          __m256i xv[R];
          __m256 d[R];
          for (int r = 0; r < R; ++r) {
            xv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * K + run * kRun));
            d[r] = _mm256_set1_ps(xscale[r * (K / kRun) + run]);
          }
          for (int j = 0; j < NR; ++j) {
            const uint8_t* bytes = q + j * row_bytes + run * W::kRunBytes;
            W::prefetch(bytes, run, NR * row_bytes);
            const __m256i w = W::load(bytes), u = W::magnitude(w);
            for (int r = 0; r < R; ++r)
              part[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::dot(zero, u, W::signed_x(xv[r], w))), d[r],
                                           part[r][j]);
          }
        }
        for (int j = 0; j < NR; ++j) {
          const __m256 s = _mm256_set1_ps(to_float(scale[j * groups + g]));
          for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(part[r][j], s, acc[r][j]);
        }
      }
    }
  };
};

// Every output row of a problem through integer tiles: VNNI's instruction in the AVX-512 build, AVX2's pair
// in the AVX2 one (the caller runs the values through the fp32 kernels on plain C++)
template <class W, typename S>
void run_integer(const IntegerProblem<S>& p) {
  for_rows(p.N, [&](auto isa, int64_t begin, int64_t end) {
    using T = decltype(isa);
    if constexpr (!std::is_same_v<T, Plain>)
      rows<std::conditional_t<std::is_same_v<T, Avx2>, Maddubs, Vnni>, IntegerTile<W>::template Of, S,
           IntegerProblem>(p, begin, end);
  });
}

// y (M, N) on the integer tiles
void integer_matmul(const RoundedRows& x, int64_t M, const at::Tensor& q, const at::Tensor& scale,
                    const at::Tensor& min, int64_t G, float* y) {
  const bool int4 = q.scalar_type() == at::kByte;
  const int64_t N = q.size(0), K = int4 ? q.size(1) * 2 : q.size(1), groups = K / G;
  std::vector<float> xsum(int4 ? M * groups : 0, 0.f);  // (M, groups): the runs' sums
  for (int64_t i = 0; int4 && i < M * K / kRun; ++i) xsum[i / (G / kRun)] += x.sum[i];
  const auto* bytes = static_cast<const uint8_t*>(q.data_ptr());
  AT_DISPATCH_SWITCH(scale.scalar_type(), "rounded_linear",
    AT_DISPATCH_CASE(at::kFloat, [&] {
      const IntegerProblem<float> p{x.q.data(), x.scale.data(), xsum.data(), bytes, scale.data_ptr<float>(),
                                    or_null<float>(min), y, M, N, K, G, int4};
      int4 ? run_integer<Int4Runs>(p) : run_integer<Int8Runs>(p);
    })
    AT_DISPATCH_CASE(at::kHalf, [&] {
      const IntegerProblem<at::Half> p{x.q.data(), x.scale.data(), xsum.data(), bytes, scale.data_ptr<at::Half>(),
                                       or_null<at::Half>(min), y, M, N, K, G, int4};
      int4 ? run_integer<Int4Runs>(p) : run_integer<Int8Runs>(p);
    }));
}

#endif

// ---- the values through the fp32 kernels ----

// x's rounded values d q, (M, K) fp32
at::Tensor rounded_values(const RoundedRows& x, int64_t M, int64_t K) {
  at::Tensor values = at::empty({M, K}, at::kFloat);
  float* out = values.data_ptr<float>();
  for (int64_t i = 0; i < M * K; ++i) out[i] = x.scale[i / kRun] * static_cast<float>(x.q[i]);
  return values;
}

// y (M, N) += (stored block sums - sums of the values) mins^T: q8_1's product multiplies each int4 block's
// min by the sum it stored, where the fp32 kernels multiplied it by the values' sum (activation_rounding.py's
// q8_1_min_correction)
void add_min_correction(const RoundedRows& x, const at::Tensor& values, const at::Tensor& scale, const at::Tensor& min,
                        int64_t G, at::Tensor& y) {
  const int64_t M = values.size(0), K = values.size(1);
  TORCH_CHECK(G == kRun, "q8_1 activations go with int4 groups of 32, not ", G);
  at::Tensor gap = at::empty({M, K / kRun}, at::kFloat);
  const float* v = values.data_ptr<float>();
  float* out = gap.data_ptr<float>();
  for (int64_t b = 0; b < M * K / kRun; ++b) {
    float total = 0.f;
    for (int64_t i = 0; i < kRun; ++i) total += v[b * kRun + i];
    out[b] = x.sum[b] - total;
  }
  y.addmm_(gap, (min.defined() ? min.to(at::kFloat) : scale.to(at::kFloat).mul(kMinPerScale)).t());
}

// Whether the integer tiles serve: up to 16 rows of x (a decoding step, a speculative check, a short prompt).
// They would be faster for more (SmolLM2's 3072 x 576 int4 matrix on 2 threads: 728 / 1523 us at 32 / 64 rows
// against 1176 / 1895 through MKL on the dequantized weight), but a prompt's rows stay on the rounded values
// through the fp32 kernels, whose sums llama.cpp's greedy tokens on lmlab's Q4_K export were checked against:
// summing in the integer tiles' order moves some activation of a 23-token prompt across an 8-bit rounding
// boundary, and the tokens part at a near-tie (top two logits 0.004 apart) 7 steps on
// (tests/models/test_gguf_q4_k.py)
constexpr int64_t kIntegerRows = 16;

bool integer_path(int64_t M, int64_t G) {
#if defined(__AVX2__) && defined(__FMA__)
  return isa_in_use.load() >= AVX2 && G % kRun == 0 && M <= kIntegerRows;
#else
  return false;
#endif
}

}  // namespace

void rounded_matmul(const float* x, int64_t M, const at::Tensor& q, const at::Tensor& scale, const at::Tensor& min,
                    int64_t G, Rounding rounding, float* y) {
  const bool int4 = q.scalar_type() == at::kByte;
  const int64_t N = q.size(0), K = int4 ? q.size(1) * 2 : q.size(1);
  const RoundedRows rounded = round_rows(x, M, K, rounding);
#if defined(__AVX2__) && defined(__FMA__)
  if (integer_path(M, G)) return integer_matmul(rounded, M, q, scale, min, G, y);
#endif
  const at::Tensor values = rounded_values(rounded, M, K);
  quantized_matmul(values.data_ptr<float>(), M, q, scale, min, G, y);
  if (rounding == Q8_1 && int4) {
    at::Tensor out = at::from_blob(y, {M, N}, at::kFloat);
    add_min_correction(rounded, values, scale, min, G, out);
  }
}

// x (..., K) -> (..., N) with x rounded by `rounding` (1 q8_0, 2 q8_1, 3 q8_K), for int4 weights (mins, or none)
// or int8; many rows (a prompt) multiply the rounded values by the dequantized weight in MKL
at::Tensor rounded_linear(const at::Tensor& x_in, const at::Tensor& q, const at::Tensor& scale,
                          const std::optional<at::Tensor>& min_in, int64_t G, int64_t rounding) {
  const at::Tensor min = min_in.value_or(at::Tensor());
  const bool int4 = q.scalar_type() == at::kByte;
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == (int4 ? at::kByte : at::kChar),
              "weights must be (out, in / 2) uint8 for int4 or (out, in) int8");
  TORCH_CHECK(rounding == Q8_0 || rounding == Q8_1 || rounding == Q8_K, "unknown rounding ", rounding);
  const int64_t N = q.size(0), K = int4 ? q.size(1) * 2 : q.size(1);
  TORCH_CHECK(x_in.dim() >= 1 && x_in.size(-1) == K, "x must be (..., ", K, "), got ", x_in.sizes());
  const at::Tensor x = x_in.reshape({-1, K}).contiguous();
  check_groups(x, q, scale, K, G, int4 ? kRun : 1);
  if (int4)
    check_mins(min, scale);
  else
    TORCH_CHECK(!min.defined(), "int8 weights have no mins");
  const int64_t M = x.size(0);
  at::Tensor y;
  if (M > max_kernel_rows(int4 ? kMaxRowsInt4 : kMaxRowsInt8)) {
    const RoundedRows rounded = round_rows(x.data_ptr<float>(), M, K, static_cast<Rounding>(rounding));
    const at::Tensor values = rounded_values(rounded, M, K);
    y = at::linear(values, int4 ? int4_dequantize(q, scale, min, G) : int8_dequantize(q, scale, G));
    if (rounding == Q8_1 && int4) add_min_correction(rounded, values, scale, min, G, y);
  } else {
    y = at::empty({M, N}, x.options());
    rounded_matmul(x.data_ptr<float>(), M, q, scale, min, G, static_cast<Rounding>(rounding), y.data_ptr<float>());
  }
  return y.view(out_shape(x_in, N));
}

TORCH_LIBRARY_FRAGMENT(lmlab_quant, m) {
  m.def("rounded_linear(Tensor x, Tensor q, Tensor scales, Tensor? mins, int group_size, int rounding) -> Tensor");
}

TORCH_LIBRARY_IMPL(lmlab_quant, CPU, m) { m.impl("rounded_linear", &rounded_linear); }

}  // namespace lmlab_quant
