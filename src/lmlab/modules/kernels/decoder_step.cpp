// One decoding step of a Llama-style decoder on quantized weights, in one call.
//
// A step of SmolLM2-135M in int4 spends about 5.5 ms in its 121 matrix-vector products and as long again
// running some 600 small torch ops around them from Python (norms, rotary positions, the cache update,
// attention, SwiGLU, residuals), each a dispatch and an allocation for a few hundred numbers. Here the whole
// stack runs in C++ on preallocated rows: the products through the same kernels as `int4_linear` /
// `int8_linear` (threaded the same way), the rest as plain loops over one row at a time, attention threaded
// over heads once the context is long enough to pay for it.
//
// The model it runs (checked on the Python side, generation/fused.py, which builds the arguments):
//   h = embedding rows (B, C) of the new tokens, row b at position p_b, stored at column c_b >= p_b of its
//       cache row (c_b = p_b but in a left-padded batch, whose row b begins after c_b - p_b padding columns)
//   per layer:  a = rms_norm(h) -> qkv = a Wqkv^T (B, (H + 2 Hkv) D): queries, keys, values by head
//               rotate row b's queries and keys by position p_b (pairs i, i + D/2, as Llama); its keys and
//               values stored at column c_b in row b of the layer's cache (rows >= B, H_kv, max_len, D)
//               o = softmax(scale q k^T) v over columns c_b - p_b .. c_b, query head h reading kv head
//               h / (H / Hkv)
//               h += o Wout^T;  g|u = rms_norm(h) Wgate_up^T;  h += (silu(g) u) Wdown^T
//   logits = rms_norm(h) Whead^T (B, V)
// The caller advances each row's length by one afterwards. Each number is computed as the torch ops
// compute it, up to the order of float additions: the same greedy tokens (tests/generation/test_fused.py).

// torch's vector types (at::vec::Vectorized, with SLEEF's exp) at the widest width this build targets, as
// inductor's generated code includes them: the exponentials of softmax and SiLU are most of this file's work
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define CPU_CAPABILITY_AVX512
#elif defined(__AVX2__) && defined(__FMA__)
#define CPU_CAPABILITY_AVX2
#endif

#include <ATen/Parallel.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "quantized_matmul.h"

namespace lmlab_quant {
namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t kLanes = Vec::size();

// The tensors of one layer in the flat list the op takes, and how many a layer has
enum Slot : int64_t { NORM1, QKV_Q, QKV_S, QKV_M, OUT_Q, OUT_S, OUT_M, NORM2, UP_Q, UP_S, UP_M, DOWN_Q, DOWN_S,
                      DOWN_M, PER_LAYER };

// Above this many multiply-adds (heads x positions x head_dim) a step's attention is shared among threads:
// SmolLM2 at batch 1 with 121 positions (70k), 30 layers' attention took 0.69-0.84 ms on one thread and
// 0.40-0.59 on two (timed inside the step); below ~16k the handing over costs more than it saves.
constexpr int64_t kThreadedAttention = 1 << 14;

float dot(const float* a, const float* b, int64_t n) {
  Vec acc(0.f);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), acc);
  float total = acc.reduce_add();
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

// y += p x for n numbers
void add_scaled(float* y, const float* x, float p, int64_t n) {
  const Vec scale(p);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) at::vec::fmadd(Vec::loadu(x + i), scale, Vec::loadu(y + i)).store(y + i);
  for (; i < n; ++i) y[i] += p * x[i];
}

// y = w * (x / sqrt(mean(x^2) + eps)) for one row of C numbers
void rms_norm(const float* x, const float* w, double eps, int64_t C, float* y) {
  const float r = 1.f / std::sqrt(dot(x, x, C) / static_cast<float>(C) + static_cast<float>(eps));
  for (int64_t k = 0; k < C; ++k) y[k] = w[k] * (x[k] * r);
}

// x (D) rotated in place by one position's angles: cos, sin (D) rows of RotaryEmbedding's tables
void rotate(float* x, const float* cos, const float* sin, int64_t D) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

// y (D) = softmax over s < S of scale q . k_s, times v_s; k, v: (S, D) rows of one cache head; scores: S floats
void attend_one(const float* q, const float* k, const float* v, int64_t S, int64_t D, float scale, float* scores,
                float* y) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < S; ++s) {
    scores[s] = scale * dot(q, k + s * D, D);
    top = std::max(top, scores[s]);
  }
  const Vec shift(top);
  Vec sums(0.f);
  int64_t s = 0;
  for (; s + kLanes <= S; s += kLanes) {  // exp as torch's CPU attention takes it (exp_u20)
    const Vec e = (Vec::loadu(scores + s) - shift).exp_u20();
    e.store(scores + s);
    sums = sums + e;
  }
  float total = sums.reduce_add();
  for (; s < S; ++s) total += scores[s] = std::exp(scores[s] - top);
  std::fill(y, y + D, 0.f);
  for (s = 0; s < S; ++s) add_scaled(y, v + s * D, scores[s] / total, D);
}

// out (n) = silu(gate) * up, with torch's silu: g / (1 + exp(-g))
void silu_times(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Vec g = Vec::loadu(gate + i);
    (g / (Vec(1.f) + g.neg().exp()) * Vec::loadu(up + i)).store(out + i);
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

}  // namespace

// x (B, C): the new tokens' embeddings. weights: PER_LAYER tensors a layer (Slot's order; mins undefined for
// int8 matrices), then the final norm's weight and the head's q, scales, mins. groups: the group size of each
// layer's qkv, out, gate_up and down, then the head's. k_cache / v_cache: a (rows >= B, Hkv, max_len, D) tensor
// a layer. positions, columns: each row's position and cache column (B). cos, sin: (max_len, D). Returns the
// logits (B, V).
at::Tensor decoder_step(const at::Tensor& x_in, const c10::List<std::optional<at::Tensor>>& weight_list,
                        at::IntArrayRef groups, at::TensorList k_cache, at::TensorList v_cache,
                        at::IntArrayRef positions, at::IntArrayRef columns,
                        const at::Tensor& cos, const at::Tensor& sin, int64_t H, int64_t Hkv, double eps,
                        double scale) {
  const int64_t L = static_cast<int64_t>(k_cache.size());
  TORCH_CHECK(L > 0 && static_cast<int64_t>(v_cache.size()) == L &&
              static_cast<int64_t>(weight_list.size()) == L * PER_LAYER + 4 &&
              static_cast<int64_t>(groups.size()) == L * 4 + 1, "decoder_step: arguments for ", L, " layers expected");
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, "decoder_step: x must be (B, C) float32");
  const at::Tensor x0 = x_in.contiguous();
  const int64_t B = x0.size(0), C = x0.size(1), D = k_cache[0].size(3), max_len = k_cache[0].size(2);
  const int64_t slots = k_cache[0].size(0);
  TORCH_CHECK(static_cast<int64_t>(positions.size()) == B && static_cast<int64_t>(columns.size()) == B,
              "decoder_step: ", B, " positions and columns expected");
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(positions[b] >= 0 && positions[b] <= columns[b] && columns[b] < max_len && positions[b] < cos.size(0),
                "decoder_step: position ", positions[b], " at column ", columns[b], " is past the cache (", max_len,
                ") or the rotary tables (", cos.size(0), ")");
  for (int64_t l = 0; l < L; ++l)
    TORCH_CHECK(k_cache[l].is_contiguous() && v_cache[l].is_contiguous() && k_cache[l].scalar_type() == at::kFloat &&
                slots >= B && k_cache[l].sizes() == at::IntArrayRef({slots, Hkv, max_len, D}) &&
                v_cache[l].sizes() == k_cache[l].sizes(), "decoder_step: layer ", l, "'s cache must be (>= ", B,
                ", ", Hkv, ", ", max_len, ", ", D, ") contiguous float32");
  std::vector<at::Tensor> weights;  // undefined for an int8 matrix's mins
  weights.reserve(weight_list.size());
  for (const std::optional<at::Tensor> t : weight_list) weights.push_back(t.has_value() ? *t : at::Tensor());
  auto w = [&](int64_t l, int64_t slot) -> const at::Tensor& { return weights[l * PER_LAYER + slot]; };
  const int64_t width = (H + 2 * Hkv) * D, d_ff = w(0, DOWN_Q).scalar_type() == at::kByte ? w(0, DOWN_Q).size(1) * 2
                                                                                             : w(0, DOWN_Q).size(1);
  const int64_t group = H / Hkv, longest = *std::max_element(positions.begin(), positions.end()) + 1;

  std::vector<float> h(x0.data_ptr<float>(), x0.data_ptr<float>() + B * C);  // (B, C) the residual stream
  std::vector<float> a(B * std::max(C, d_ff)), qkv(B * width), o(B * H * D), up(B * 2 * d_ff), y(B * C);
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t b = 0; b < B; ++b) rms_norm(&h[b * C], w(l, NORM1).data_ptr<float>(), eps, C, &a[b * C]);
    quantized_matmul(a.data(), B, w(l, QKV_Q), w(l, QKV_S), w(l, QKV_M), groups[l * 4], qkv.data());
    float* kc = k_cache[l].data_ptr<float>();
    float* vc = v_cache[l].data_ptr<float>();
    for (int64_t b = 0; b < B; ++b) {
      float* row = &qkv[b * width];
      const float* cos_row = cos.data_ptr<float>() + positions[b] * D;
      const float* sin_row = sin.data_ptr<float>() + positions[b] * D;
      for (int64_t head = 0; head < H + Hkv; ++head) rotate(row + head * D, cos_row, sin_row, D);
      for (int64_t kv = 0; kv < Hkv; ++kv) {
        const int64_t at = ((b * Hkv + kv) * max_len + columns[b]) * D;
        std::copy(row + (H + kv) * D, row + (H + kv + 1) * D, kc + at);
        std::copy(row + (H + Hkv + kv) * D, row + (H + Hkv + kv + 1) * D, vc + at);
      }
    }
    auto heads = [&](int64_t begin, int64_t end) {
      std::vector<float> scores(longest);
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / H, head = i % H, kv = head / group;
        const int64_t base = ((b * Hkv + kv) * max_len + columns[b] - positions[b]) * D;  // the row's first column
        attend_one(&qkv[b * width + head * D], kc + base, vc + base, positions[b] + 1, D, static_cast<float>(scale),
                   scores.data(), &o[(b * H + head) * D]);
      }
    };
    if (B * H * longest * D < kThreadedAttention)
      heads(0, B * H);
    else
      at::parallel_for(0, B * H, 1, heads);
    quantized_matmul(o.data(), B, w(l, OUT_Q), w(l, OUT_S), w(l, OUT_M), groups[l * 4 + 1], y.data());
    for (int64_t i = 0; i < B * C; ++i) h[i] += y[i];
    for (int64_t b = 0; b < B; ++b) rms_norm(&h[b * C], w(l, NORM2).data_ptr<float>(), eps, C, &a[b * C]);
    quantized_matmul(a.data(), B, w(l, UP_Q), w(l, UP_S), w(l, UP_M), groups[l * 4 + 2], up.data());
    for (int64_t b = 0; b < B; ++b) silu_times(&up[b * 2 * d_ff], &up[b * 2 * d_ff + d_ff], d_ff, &a[b * d_ff]);
    quantized_matmul(a.data(), B, w(l, DOWN_Q), w(l, DOWN_S), w(l, DOWN_M), groups[l * 4 + 3], y.data());
    for (int64_t i = 0; i < B * C; ++i) h[i] += y[i];
  }
  const int64_t last = L * PER_LAYER;
  for (int64_t b = 0; b < B; ++b) rms_norm(&h[b * C], weights[last].data_ptr<float>(), eps, C, &a[b * C]);
  const at::Tensor& head_q = weights[last + 1];
  at::Tensor logits = at::empty({B, head_q.size(0)}, x0.options());
  quantized_matmul(a.data(), B, head_q, weights[last + 2], weights[last + 3], groups[L * 4],
                   logits.data_ptr<float>());
  return logits;
}

TORCH_LIBRARY_FRAGMENT(lmlab_quant, m) {
  m.def("decoder_step(Tensor x, Tensor?[] weights, int[] groups, Tensor[] k_cache, Tensor[] v_cache, int[] positions, "
        "int[] columns, Tensor cos, Tensor sin, int n_heads, int n_kv_heads, float eps, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(lmlab_quant, CPU, m) { m.impl("decoder_step", &decoder_step); }

}  // namespace lmlab_quant
