// word2vec's training loop in C++: skip-gram or CBOW with negative sampling, one example at a time, as the
// original C tool and gensim run it. Python (recipes/word2vec.py) hands over one chunk of subsampled text at a
// time; this loop draws each centre's dynamic window and the negatives, and updates the vectors in place with
// a learning rate falling linearly across the chunk.
//
// Per example: h is the input vector of the centre word (skip-gram: it predicts each neighbour in turn) or the
// mean of the neighbours' input vectors (CBOW: they predict the centre). For the true word (label 1) and k
// negatives (label 0, a draw equal to the true word skipped, as both references do), with g = lr (label - s(h.v)):
// v += g h for each output vector, and the input vector(s) of h get the sum of g v (CBOW: each context word the
// whole sum, as the original tool does).

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace lmlab_word2vec {

// The original tool's linear congruential generator: cheap, and plenty for windows and negatives.
struct Random {
  uint64_t state;
  uint64_t next() { return state = state * 25214903917ULL + 11; }
  // uniform in [0, n) for n < 2^32: the top 32 bits scaled to the range (no division)
  int64_t below(int64_t n) { return static_cast<int64_t>(((next() >> 32) * static_cast<uint64_t>(n)) >> 32); }
};

// s(x) = 1 / (1 + e^-x) read from a table on [-MAX_SCORE, MAX_SCORE], as the original tool does; beyond that
// range s is taken as 0 or 1, so an output word already scored right past it (|g| < 0.25% of the rate) is not
// updated at all: on a trained model, most negatives, and the larger part of the time saved.
constexpr float MAX_SCORE = 6.0f;
constexpr int SIGMOID_STEPS = 1000;

struct SigmoidTable {
  float value[SIGMOID_STEPS + 1];
  SigmoidTable() {
    for (int i = 0; i <= SIGMOID_STEPS; ++i)
      value[i] = 1.0f / (1.0f + std::exp(-(2.0f * i / SIGMOID_STEPS - 1.0f) * MAX_SCORE));
  }
  float operator()(float x) const {
    if (x >= MAX_SCORE) return 1.0f;
    if (x <= -MAX_SCORE) return 0.0f;
    return value[static_cast<int>((x + MAX_SCORE) * (SIGMOID_STEPS / (2.0f * MAX_SCORE)))];
  }
};
const SigmoidTable sigmoid;

inline float dot(const float* a, const float* b, int64_t dim) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t d = 0; d < dim; ++d) sum += a[d] * b[d];
  return sum;
}

inline void add_scaled(float* to, const float* from, float scale, int64_t dim) {
#pragma omp simd
  for (int64_t d = 0; d < dim; ++d) to[d] += scale * from[d];
}

// The output-side update for hidden vector h and the true word `target`: applies v += g h to every output
// vector drawn, adds sum g v to `step`, and returns -log s(h.v_true) - sum log s(-h.v_neg) when `measure`.
// A word drawn from the noise distribution: its cumulative weights `noise` (V,) rise to noise[V-1] < 2^32. The
// first w with noise[w] > r, by a binary search without branches (the compiler's conditional moves): random
// draws make every branch a coin toss, and mispredicting them cost more than the rest of a negative's update.
inline int64_t draw_noise(const int64_t* noise, int64_t vocab, Random& rng) {
  const int64_t r = rng.below(noise[vocab - 1]);
  const int64_t* base = noise;
  for (int64_t n = vocab; n > 1; n -= n / 2) base = base[n / 2] <= r ? base + n / 2 : base;
  return (base - noise) + (*base <= r);
}

inline double negative_sampling(const float* h, int64_t target, float* output, float* step, int64_t dim,
                                int64_t negatives, const int64_t* noise, int64_t vocab, float lr, Random& rng,
                                bool measure) {
  double loss = 0.0;
  for (int64_t n = 0; n <= negatives; ++n) {
    int64_t word = target;
    if (n > 0) {
      word = draw_noise(noise, vocab, rng);
      if (word == target) continue;
    }
    const float label = n == 0 ? 1.0f : 0.0f;
    float* v = output + word * dim;
    const float score = dot(h, v, dim);
    const float g = lr * (label - sigmoid(score));
    if (measure) loss += std::log1p(std::exp(n == 0 ? -score : score));  // softplus(-+score)
    if (g == 0.0f) continue;  // a score past MAX_SCORE on the right side: nothing to learn (gensim skips both sides)
    add_scaled(step, v, g, dim);
    add_scaled(v, h, g, dim);
  }
  return loss;
}

// input, output (V, D) float32, updated in place; ids, sentence (N,) int64: the chunk's words and the number
// of the sentence each is in; noise (V,) int64: the noise distribution's cumulative weights. The rate falls linearly from lr_start at the
// chunk's first word to lr_end after its last. Returns (2,) float64: the summed loss of every 16th example and
// how many examples that is.
at::Tensor train_chunk(at::Tensor input, at::Tensor output, const at::Tensor& ids, const at::Tensor& sentence,
                       const at::Tensor& noise, int64_t window, int64_t negatives, bool cbow, double lr_start,
                       double lr_end, int64_t seed) {
  TORCH_CHECK(input.dim() == 2 && input.sizes() == output.sizes() && input.scalar_type() == at::kFloat &&
                  output.scalar_type() == at::kFloat && input.is_contiguous() && output.is_contiguous(),
              "input and output: (V, D) contiguous float32 of one shape");
  TORCH_CHECK(ids.dim() == 1 && ids.sizes() == sentence.sizes() && ids.scalar_type() == at::kLong &&
                  sentence.scalar_type() == at::kLong && ids.is_contiguous() && sentence.is_contiguous(),
              "ids and sentence: (N,) contiguous int64");
  TORCH_CHECK(noise.dim() == 1 && noise.numel() == input.size(0) && noise.scalar_type() == at::kLong &&
                  noise.is_contiguous(), "noise: (V,) contiguous int64");
  TORCH_CHECK(window >= 1 && negatives >= 0, "window >= 1, negatives >= 0");
  const int64_t vocab = input.size(0), dim = input.size(1), n = ids.numel();
  const int64_t* id = ids.data_ptr<int64_t>();
  const int64_t* sent = sentence.data_ptr<int64_t>();
  const int64_t* table = noise.data_ptr<int64_t>();
  for (int64_t w = 0; w < vocab; ++w)
    TORCH_CHECK(table[w] >= (w ? table[w - 1] : 0), "noise: cumulative weights, never falling");
  TORCH_CHECK(table[vocab - 1] > 0 && table[vocab - 1] < (int64_t{1} << 32), "noise: a total in (0, 2^32)");
  for (int64_t i = 0; i < n; ++i) TORCH_CHECK(id[i] >= 0 && id[i] < vocab, "word id outside the vocabulary");
  float* in = input.data_ptr<float>();
  float* out = output.data_ptr<float>();
  Random rng{static_cast<uint64_t>(seed)};
  std::vector<float> hidden(dim), step(dim);
  double loss = 0.0;
  int64_t examples = 0, measured = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float lr = static_cast<float>(lr_start + (lr_end - lr_start) * static_cast<double>(i) / n);
    const int64_t reach = 1 + rng.below(window);  // this centre's window b, uniform in 1..window
    const int64_t lo = std::max<int64_t>(0, i - reach), hi = std::min<int64_t>(n - 1, i + reach);
    if (cbow) {
      std::fill(hidden.begin(), hidden.end(), 0.0f);
      int64_t used = 0;
      for (int64_t c = lo; c <= hi; ++c)
        if (c != i && sent[c] == sent[i]) {
          add_scaled(hidden.data(), in + id[c] * dim, 1.0f, dim);
          ++used;
        }
      if (used == 0) continue;
      for (int64_t d = 0; d < dim; ++d) hidden[d] /= static_cast<float>(used);
      std::fill(step.begin(), step.end(), 0.0f);
      const bool measure = examples++ % 16 == 0;
      loss += negative_sampling(hidden.data(), id[i], out, step.data(), dim, negatives, table, vocab, lr, rng,
                                measure);
      measured += measure;
      for (int64_t c = lo; c <= hi; ++c)
        if (c != i && sent[c] == sent[i]) add_scaled(in + id[c] * dim, step.data(), 1.0f, dim);
    } else {
      float* h = in + id[i] * dim;
      for (int64_t c = lo; c <= hi; ++c) {
        if (c == i || sent[c] != sent[i]) continue;
        std::fill(step.begin(), step.end(), 0.0f);
        const bool measure = examples++ % 16 == 0;
        loss += negative_sampling(h, id[c], out, step.data(), dim, negatives, table, vocab, lr, rng, measure);
        measured += measure;
        add_scaled(h, step.data(), 1.0f, dim);
      }
    }
  }
  at::Tensor result = at::zeros({2}, input.options().dtype(at::kDouble));
  result.data_ptr<double>()[0] = loss;
  result.data_ptr<double>()[1] = static_cast<double>(measured);
  return result;
}

TORCH_LIBRARY(lmlab_word2vec, m) {
  m.def("train_chunk(Tensor(a!) input, Tensor(b!) output, Tensor ids, Tensor sentence, Tensor noise, int window, "
        "int negatives, bool cbow, float lr_start, float lr_end, int seed) -> Tensor");
}

TORCH_LIBRARY_IMPL(lmlab_word2vec, CPU, m) { m.impl("train_chunk", &train_chunk); }

}  // namespace lmlab_word2vec
