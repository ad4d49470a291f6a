// What the kernel files share (quantized_matmul.cpp, activation_rounding.cpp): the instruction sets as small
// vector traits (AVX-512: 16 lanes, AVX2: 8, plain C++: 1), which one runs (`set_isa`), fp16 scales read as
// fp32, and how a problem's output rows are cut into tiles and shared among torch's threads.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace lmlab_quant {

enum Isa : int64_t { PLAIN = 0, AVX2 = 1, AVX512 = 2 };

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
constexpr int64_t kBestIsa = AVX512;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int64_t kBestIsa = AVX2;
#else
constexpr int64_t kBestIsa = PLAIN;
#endif

inline std::atomic<int64_t> isa_in_use{kBestIsa};

inline float to_float(float v) { return v; }
inline float to_float(at::Half v) {
#if defined(__F16C__)
  return _cvtsh_ss(v.x);
#else
  return static_cast<float>(v);
#endif
}

// ---- the three instruction sets: a vector of W floats, and how int4 / int8 numbers become one ----

struct Plain {
  using V = float;
  static constexpr int W = 1;
  static V zero() { return 0.f; }
  static V set1(float v) { return v; }
  static V load(const float* p) { return *p; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V mul(V a, V b) { return a * b; }
  static V add(V a, V b) { return a + b; }
  static void store(float* p, V v) { *p = v; }
  static float sum(V v) { return v; }
  // 32 int4 numbers from 16 bytes, in order
  static void int4_chunk(const uint8_t* p, V* out) {
    for (int i = 0; i < 16; ++i) {
      out[i] = static_cast<float>(p[i] & 0x0F);
      out[i + 16] = static_cast<float>(p[i] >> 4);
    }
  }
  static V int8_chunk(const int8_t* p) { return static_cast<float>(*p); }
};

#if defined(__AVX2__) && defined(__FMA__)
struct Avx2 {
  using V = __m256;
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void int4_chunk(const uint8_t* p, V* out) {
    const __m256i low = _mm256_set1_epi32(0x0F);
    __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));      // bytes 0..7
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));  // bytes 8..15
    out[0] = _mm256_cvtepi32_ps(_mm256_and_si256(a, low));   // numbers 0..7
    out[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b, low));   // 8..15
    out[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4));    // 16..23
    out[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));    // 24..31
  }
  static V int8_chunk(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
};
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
struct Avx512 {
  using V = __m512;
  static constexpr int W = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  static void int4_chunk(const uint8_t* p, V* out) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    out[0] = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(0x0F)));  // numbers 0..15
    out[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));                      // 16..31
  }
  static V int8_chunk(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
};
#endif

// ---- helpers every instruction set shares ----

// Weight rows are read a few at a time, interleaved, which the hardware prefetcher follows poorly: each tile
// asks for the bytes of the tile this many tiles ahead (prefetching past the end of a matrix is harmless)
constexpr int64_t kAhead = 2;
// int8 rows (the LM head: 28 MB, from memory at every step) go faster fetched further ahead into L2, a line at a
// time: 1.5 -> 1.0 ms for SmolLM2's head within a decoding step. The same for int4 rows measured no gain.
constexpr int64_t kAheadInt8 = 8;

// The scales (or mins) of NR weight rows from row n on, `groups` a row, fetched ahead: NR rows' are one span of
// memory (SmolLM2's 4 rows of 18 fp16 scales: 144 bytes), each of its lines asked for once. A tile reads them at
// its start (the fp32 tiles) or its end (the integer tiles' mins), where a miss stalls it, and the hardware
// prefetcher follows them poorly beside the weights' bytes: asked for into L2 a tile kAhead tiles ahead, SmolLM2's
// int4 step (Q4_1, 8-bit activations) took 6.6-6.9 ms on one thread instead of 7.5-8.1, 4.1-4.5 on two instead of
// 4.8-5.1 (medians, 3 pairs of processes, interleaved; a matrix already in cache loses ~8%). `side` may be null.
template <typename S>
inline void prefetch_rows(const S* side, int64_t n, int64_t NR, int64_t groups) {
  if (side == nullptr) return;
  const char* begin = reinterpret_cast<const char*>(side + n * groups);
  const char* end = reinterpret_cast<const char*>(side + (n + NR) * groups);
  for (const char* line = begin; line < end; line += 64) __builtin_prefetch(line, 0, 2);
  __builtin_prefetch(end - 1, 0, 2);
}

// n scales (or mins) of one weight row as fp32, so the group loop broadcasts each from memory in one load
inline void to_floats(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
inline void to_floats(const at::Half* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

template <class T>
float dot(const float* a, const float* b, int64_t n) {
  typename T::V acc = T::zero();
  int64_t i = 0;
  for (; i + T::W <= n; i += T::W) acc = T::fma(T::load(a + i), T::load(b + i), acc);
  float total = T::sum(acc);
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

// One tile of R rows of x (1..4) by NR weight rows.
template <class T, template <class, typename, int, int> class Tile, typename S, template <typename> class Problem,
          int NR>
void tile(const Problem<S>& p, int64_t m, int64_t n, int64_t r, float* buf) {
  switch (r) {
    case 1: Tile<T, S, 1, NR>::run(p, m, n, buf); break;
    case 2: Tile<T, S, 2, NR>::run(p, m, n, buf); break;
    case 3: Tile<T, S, 3, NR>::run(p, m, n, buf); break;
    default: Tile<T, S, 4, NR>::run(p, m, n, buf); break;
  }
}

// Output rows [n_begin, n_end) for every row of x: a few weight rows at a time (4 when x has 1-2 rows, 2 when
// it has more, so the accumulators fit in registers; single rows at the end), each multiplied with every row
// of x, 4 at a time, while it is in cache.
template <class T, template <class, typename, int, int> class Tile, typename S, template <typename> class Problem>
void rows(const Problem<S>& p, int64_t n_begin, int64_t n_end) {
  const bool few = p.M <= 2;
  const int64_t wide = few ? 4 : 2;
  std::vector<float> buf(4 * (p.K / p.G) * Problem<S>::kRowFloats);  // the tiles' fp32 scales (and mins)
  int64_t n = n_begin;
  for (; n + wide <= n_end; n += wide)
    for (int64_t m = 0; m < p.M; m += 4) {
      const int64_t r = std::min<int64_t>(4, p.M - m);
      if (few)
        tile<T, Tile, S, Problem, 4>(p, m, n, r, buf.data());
      else
        tile<T, Tile, S, Problem, 2>(p, m, n, r, buf.data());
    }
  for (; n < n_end; ++n)
    for (int64_t m = 0; m < p.M; m += 4) tile<T, Tile, S, Problem, 1>(p, m, n, std::min<int64_t>(4, p.M - m), buf.data());
}

// body(isa, begin, end) for row ranges of [0, N) shared among torch's threads, with the instruction set in
// use (an Avx512{}, Avx2{} or Plain{} value, whose type the body takes its vector traits from). A grain of 16
// rows: a task's work (16 rows x K numbers) outweighs handing it to a thread.
template <class F>
void for_rows(int64_t N, F&& body) {
  const int64_t isa = isa_in_use.load();
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if (isa == AVX512) return body(Avx512{}, begin, end);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    if (isa >= AVX2) return body(Avx2{}, begin, end);
#endif
    body(Plain{}, begin, end);
  });
}

// Every output row of a problem through its tiles.
template <template <class, typename, int, int> class Tile, typename S, template <typename> class Problem>
void run(const Problem<S>& p) {
  for_rows(p.N, [&](auto isa, int64_t begin, int64_t end) { rows<decltype(isa), Tile, S, Problem>(p, begin, end); });
}

}  // namespace lmlab_quant
