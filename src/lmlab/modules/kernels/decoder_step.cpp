// One decoding step of a Llama-style decoder on quantized weights, in one call.
//
// A step of SmolLM2-135M in int4 spends about 5.5 ms in its 121 matrix-vector products and as long again
// running some 600 small torch ops around them from Python (norms, rotary positions, the cache update,
// attention, SwiGLU, residuals), each a dispatch and an allocation for a few hundred numbers. Here the whole
// stack runs in C++ on preallocated rows: the products through the same kernels as `int4_linear` /
// `int8_linear` (threaded the same way), the rest as plain loops over one row at a time, attention threaded
// over heads once the context is long enough to pay for it.
//
// The model it runs (checked on the Python side, generation/fused.py, which builds the arguments); the
// settings of today's Llama-like families are arguments, per layer where they vary, [in brackets]:
//   h = embedding rows (R, C) of the new tokens [times the embedding scale: Gemma], row r at position p_r,
//       stored at column c_r >= p_r of cache row s_r (c_r = p_r but in a left-padded batch, whose row
//       begins after c_r - p_r padding columns). Several rows may share a cache row: T new tokens of one
//       sequence at positions p .. p + T - 1 (speculative decoding's check of T - 1 drafts, a short prompt),
//       each attending to the columns up to its own, so they are causal among themselves and over the cache;
//       the weights are streamed once for all R rows (the kernels take several rows of x)
//   per layer:  a = rms_norm(h) [or h: OLMo 2] -> qkv = a Wqkv^T [+ bias: Qwen2] (B, (H + 2 Hkv) D): queries,
//               keys, values by head [queries and keys rms-normed, each head or all heads at once: Qwen3,
//               Gemma 3, OLMo 2]; rotate row r's queries and keys by position p_r (pairs i, i + D/2, as Llama)
//               [with the local layers' own table: Gemma 3]; its keys and values stored at column c_r in
//               row s_r of the layer's cache (rows, H_kv, max_len, D), every row's before any attends
//               o = softmax(scale q k^T [soft-capped: Gemma 2]) v over columns c_r - p_r .. c_r [the latest
//               `window` of them in a layer with a sliding window: Mistral, Phi-3, Gemma], query head h
//               reading kv head h / (H / Hkv)
//               h += o Wout^T [rms-normed: Gemma, OLMo 2];  g|u = rms_norm(h) [or h] Wgate_up^T;
//               h += (silu(g) [gelu_tanh(g): Gemma] u) Wdown^T [rms-normed]
//   logits = rms_norm(h) Whead^T (R, V) [soft-capped: Gemma 2]
// Any matrix may have a bias, and may round its input to 8-bit integers as llama.cpp does (a GGUF model loaded
// with --activations int8), the product then taken on integers (activation_rounding.cpp). The caller advances
// each cache row's length by its new tokens afterwards. Each number is computed as the torch ops compute it,
// up to the order of float additions: the same greedy tokens (tests/generation/test_fused.py).

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

// The tensors of one layer in the flat list the op takes, and how many a layer has. A matrix is four: its
// integers, scales, mins (undefined for int8) and bias (undefined without one); a norm that is not there
// (OLMo 2's pre-norms, any post-norm but Gemma's and OLMo 2's, q/k norms but Qwen3's, Gemma 3's, OLMo 2's)
// is undefined.
enum Slot : int64_t { NORM1, QKV, Q_NORM = QKV + 4, K_NORM, OUT, POST1 = OUT + 4, NORM2, UP, DOWN = UP + 4,
                      POST2 = DOWN + 4, PER_LAYER };
enum Activation : int64_t { SILU = 0, GELU_TANH = 1 };  // the gate's, in the gated feed-forward

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

// y = w * (x / sqrt(mean(x^2) + eps)) for one row of C numbers (y may be x); y = x without a weight (no norm)
void rms_norm(const float* x, const at::Tensor& weight, double eps, int64_t C, float* y) {
  if (!weight.defined()) {
    std::copy(x, x + C, y);
    return;
  }
  const float* w = weight.data_ptr<float>();
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

// y (D) = softmax over s < S of the scores scale q . k_s (each cap tanh(score / cap) when cap > 0), times v_s;
// k, v: (S, D) rows of one cache head; scores: S floats
void attend_one(const float* q, const float* k, const float* v, int64_t S, int64_t D, float scale, float cap,
                float* scores, float* y) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < S; ++s) {
    scores[s] = dot(q, k + s * D, D) * scale;
    if (cap > 0.f) scores[s] = std::tanh(scores[s] / cap) * cap;
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

// out (n) = act(gate) * up: torch's silu, g / (1 + exp(-g)), or its tanh GELU,
// g / 2 (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))), as its vectorised CPU kernels write them
void gated(Activation act, const float* gate, const float* up, int64_t n, float* out) {
  const Vec one(1.f), half(0.5f), beta(static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5)), kappa(0.044715f);
  auto activate = [&](const Vec& g) {
    return act == SILU ? g / (one + g.neg().exp()) : half * g * (one + (beta * (g + kappa * (g * g * g))).tanh());
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) (activate(Vec::loadu(gate + i)) * Vec::loadu(up + i)).store(out + i);
  if (i < n) {  // the tail through a zero-padded vector
    float g[kLanes] = {}, u[kLanes] = {}, o[kLanes];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    (activate(Vec::loadu(g)) * Vec::loadu(u)).store(o);
    std::copy(o, o + (n - i), out + i);
  }
}

// y (M, N) = x (M, K) W^T + bias for the matrix whose four tensors start at `m` in `weights`, x rounded first as
// `rounding` says (activation_rounding.cpp)
void matmul(const std::vector<at::Tensor>& weights, int64_t m, int64_t group, int64_t rounding, const float* x,
            int64_t M, float* y) {
  const at::Tensor& q = weights[m];
  if (rounding == NO_ROUNDING)
    quantized_matmul(x, M, q, weights[m + 1], weights[m + 2], group, y);
  else
    rounded_matmul(x, M, q, weights[m + 1], weights[m + 2], group, static_cast<Rounding>(rounding), y);
  if (const at::Tensor& bias = weights[m + 3]; bias.defined()) {
    const float* b = bias.data_ptr<float>();
    const int64_t N = q.size(0);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = 0; n < N; ++n) y[r * N + n] += b[n];
  }
}

// `heads` heads of D numbers at x, rms-normed in place: each with a weight of D (per head), or all together
// with a weight of heads x D
void norm_heads(float* x, const at::Tensor& weight, double eps, int64_t heads, int64_t D) {
  if (!weight.defined()) return;
  if (weight.numel() == D)
    for (int64_t i = 0; i < heads; ++i) rms_norm(x + i * D, weight, eps, D, x + i * D);
  else
    rms_norm(x, weight, eps, heads * D, x);
}

}  // namespace

// x (R, C): the new tokens' embeddings. weights: PER_LAYER tensors a layer (Slot's order, undefined where a
// layer has no such tensor), then the final norm's weight and the head's four. groups: the group size of each
// layer's qkv, out, gate_up and down, then the head's; roundings: how each of them rounds its input (Rounding's
// codes: 0 not at all, 1-3 as llama.cpp's q8_0, q8_1, q8_K). windows: each layer's sliding window (0: none).
// k_cache / v_cache: a (rows, Hkv, max_len, D) tensor a layer. positions, columns, slots: each row of x's
// position, cache column and cache row (R). cos, sin: (max_len, D), the global layers' rotary tables;
// local_cos, local_sin those of the layers with a window. A cap or a scale of 0 is none. Returns the logits
// (R, V).
at::Tensor decoder_step(const at::Tensor& x_in, const c10::List<std::optional<at::Tensor>>& weight_list,
                        at::IntArrayRef groups, at::IntArrayRef roundings, at::IntArrayRef windows,
                        at::TensorList k_cache, at::TensorList v_cache, at::IntArrayRef positions,
                        at::IntArrayRef columns, at::IntArrayRef slots, const at::Tensor& cos, const at::Tensor& sin,
                        const at::Tensor& local_cos, const at::Tensor& local_sin, int64_t H, int64_t Hkv,
                        double eps, double scale, double embedding_scale, double attention_cap, double logit_cap,
                        int64_t activation) {
  const int64_t L = static_cast<int64_t>(k_cache.size());
  TORCH_CHECK(L > 0 && static_cast<int64_t>(v_cache.size()) == L &&
              static_cast<int64_t>(weight_list.size()) == L * PER_LAYER + 5 &&
              static_cast<int64_t>(groups.size()) == L * 4 + 1 && static_cast<int64_t>(roundings.size()) == L * 4 + 1 &&
              static_cast<int64_t>(windows.size()) == L,
              "decoder_step: arguments for ", L, " layers expected");
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, "decoder_step: x must be (R, C) float32");
  TORCH_CHECK(activation == SILU || activation == GELU_TANH, "decoder_step: unknown activation ", activation);
  const at::Tensor x0 = x_in.contiguous();
  const int64_t R = x0.size(0), C = x0.size(1), D = k_cache[0].size(3), max_len = k_cache[0].size(2);
  const int64_t cache_rows = k_cache[0].size(0);
  TORCH_CHECK(static_cast<int64_t>(positions.size()) == R && static_cast<int64_t>(columns.size()) == R &&
              static_cast<int64_t>(slots.size()) == R, "decoder_step: ", R, " positions, columns and slots expected");
  const int64_t tables = std::min(cos.size(0), local_cos.size(0));
  for (int64_t r = 0; r < R; ++r) {
    TORCH_CHECK(slots[r] >= 0 && slots[r] < cache_rows, "decoder_step: cache row ", slots[r], " of ", cache_rows);
    TORCH_CHECK(positions[r] >= 0 && columns[r] >= 0 && columns[r] < max_len && positions[r] < tables,
                "decoder_step: position ", positions[r], " at column ", columns[r], " is past the cache (", max_len,
                ") or the rotary tables (", tables, ")");
    for (int64_t l = 0; l < L; ++l)  // a cache that dropped old keys (`KVCache.keep_last`) holds every window
      TORCH_CHECK(columns[r] >= positions[r] || (windows[l] && columns[r] >= windows[l] - 1),
                  "decoder_step: position ", positions[r], " at column ", columns[r], " needs keys layer ", l,
                  " no longer has");
  }
  for (int64_t l = 0; l < L; ++l)
    TORCH_CHECK(k_cache[l].is_contiguous() && v_cache[l].is_contiguous() && k_cache[l].scalar_type() == at::kFloat &&
                k_cache[l].sizes() == at::IntArrayRef({cache_rows, Hkv, max_len, D}) &&
                v_cache[l].sizes() == k_cache[l].sizes(), "decoder_step: layer ", l, "'s cache must be (",
                cache_rows, ", ", Hkv, ", ", max_len, ", ", D, ") contiguous float32");
  std::vector<at::Tensor> weights;  // undefined where a layer has no such tensor
  weights.reserve(weight_list.size());
  for (const std::optional<at::Tensor> t : weight_list) weights.push_back(t.has_value() ? *t : at::Tensor());
  auto w = [&](int64_t l, int64_t slot) -> const at::Tensor& { return weights[l * PER_LAYER + slot]; };
  const at::Tensor& down = w(0, DOWN);
  const int64_t width = (H + 2 * Hkv) * D, d_ff = down.scalar_type() == at::kByte ? down.size(1) * 2 : down.size(1);
  const int64_t group = H / Hkv, longest = *std::max_element(positions.begin(), positions.end()) + 1;
  const Activation act = static_cast<Activation>(activation);
  const float cap = static_cast<float>(attention_cap);

  std::vector<float> h(x0.data_ptr<float>(), x0.data_ptr<float>() + R * C);  // (R, C) the residual stream
  if (embedding_scale != 1.0)
    for (float& value : h) value *= static_cast<float>(embedding_scale);
  std::vector<float> a(R * std::max(C, d_ff)), qkv(R * width), o(R * H * D), up(R * 2 * d_ff), y(R * C);
  std::vector<int64_t> first(R);  // each row's first column attended to in this layer
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t r = 0; r < R; ++r) rms_norm(&h[r * C], w(l, NORM1), eps, C, &a[r * C]);
    matmul(weights, l * PER_LAYER + QKV, groups[l * 4], roundings[l * 4], a.data(), R, qkv.data());
    float* kc = k_cache[l].data_ptr<float>();
    float* vc = v_cache[l].data_ptr<float>();
    const float* cos_table = (windows[l] ? local_cos : cos).data_ptr<float>();
    const float* sin_table = (windows[l] ? local_sin : sin).data_ptr<float>();
    for (int64_t r = 0; r < R; ++r) {
      float* row = &qkv[r * width];
      norm_heads(row, w(l, Q_NORM), eps, H, D);
      norm_heads(row + H * D, w(l, K_NORM), eps, Hkv, D);
      for (int64_t head = 0; head < H + Hkv; ++head)
        rotate(row + head * D, cos_table + positions[r] * D, sin_table + positions[r] * D, D);
      for (int64_t kv = 0; kv < Hkv; ++kv) {
        const int64_t at = ((slots[r] * Hkv + kv) * max_len + columns[r]) * D;
        std::copy(row + (H + kv) * D, row + (H + kv + 1) * D, kc + at);
        std::copy(row + (H + Hkv + kv) * D, row + (H + Hkv + kv + 1) * D, vc + at);
      }
      first[r] = columns[r] - positions[r];  // the row's first real column, or the window's first
      if (windows[l]) first[r] = std::max(first[r], columns[r] - windows[l] + 1);
    }
    auto heads = [&](int64_t begin, int64_t end) {
      std::vector<float> scores(longest);
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = i / H, head = i % H, kv = head / group;
        const int64_t base = ((slots[r] * Hkv + kv) * max_len + first[r]) * D;
        attend_one(&qkv[r * width + head * D], kc + base, vc + base, columns[r] - first[r] + 1, D,
                   static_cast<float>(scale), cap, scores.data(), &o[(r * H + head) * D]);
      }
    };
    if (R * H * longest * D < kThreadedAttention)
      heads(0, R * H);
    else
      at::parallel_for(0, R * H, 1, heads);
    matmul(weights, l * PER_LAYER + OUT, groups[l * 4 + 1], roundings[l * 4 + 1], o.data(), R, y.data());
    for (int64_t r = 0; r < R; ++r) {
      if (w(l, POST1).defined()) rms_norm(&y[r * C], w(l, POST1), eps, C, &y[r * C]);
      for (int64_t k = 0; k < C; ++k) h[r * C + k] += y[r * C + k];
      rms_norm(&h[r * C], w(l, NORM2), eps, C, &a[r * C]);
    }
    matmul(weights, l * PER_LAYER + UP, groups[l * 4 + 2], roundings[l * 4 + 2], a.data(), R, up.data());
    for (int64_t r = 0; r < R; ++r) gated(act, &up[r * 2 * d_ff], &up[r * 2 * d_ff + d_ff], d_ff, &a[r * d_ff]);
    matmul(weights, l * PER_LAYER + DOWN, groups[l * 4 + 3], roundings[l * 4 + 3], a.data(), R, y.data());
    for (int64_t r = 0; r < R; ++r) {
      if (w(l, POST2).defined()) rms_norm(&y[r * C], w(l, POST2), eps, C, &y[r * C]);
      for (int64_t k = 0; k < C; ++k) h[r * C + k] += y[r * C + k];
    }
  }
  const int64_t last = L * PER_LAYER;
  for (int64_t r = 0; r < R; ++r) rms_norm(&h[r * C], weights[last], eps, C, &a[r * C]);
  at::Tensor logits = at::empty({R, weights[last + 1].size(0)}, x0.options());
  float* out = logits.data_ptr<float>();
  matmul(weights, last + 1, groups[L * 4], roundings[L * 4], a.data(), R, out);
  if (logit_cap > 0) {
    const float cap_logits = static_cast<float>(logit_cap);
    for (int64_t i = 0; i < logits.numel(); ++i) out[i] = std::tanh(out[i] / cap_logits) * cap_logits;
  }
  return logits;
}

TORCH_LIBRARY_FRAGMENT(lmlab_quant, m) {
  m.def("decoder_step(Tensor x, Tensor?[] weights, int[] groups, int[] roundings, int[] windows, Tensor[] k_cache, "
        "Tensor[] v_cache, int[] positions, int[] columns, int[] slots, Tensor cos, Tensor sin, Tensor local_cos, Tensor local_sin, "
        "int n_heads, int n_kv_heads, float eps, float scale, float embedding_scale, float attention_cap, "
        "float logit_cap, int activation) -> Tensor");
}

TORCH_LIBRARY_IMPL(lmlab_quant, CPU, m) { m.impl("decoder_step", &decoder_step); }

}  // namespace lmlab_quant
