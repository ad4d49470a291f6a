// The n-gram scorer of `token_log_probs` in C++: ln P(token | up to n-1 tokens before it) for a batch of rows,
// with an open-addressing hash of each order's n-grams instead of binary searches, the way kenlm's probing model
// answers queries. A slot holds an n-gram's key, its index and its log-probability and backoff, so a lookup
// touches one cache line; the n-1 lookups of a position do not depend on each other, so their lines are
// prefetched together before any is read.
//
// The arithmetic is that of the numpy scorer (models/ngram/scoring.py), step for step, so both give the same
// bits: the log-probability of the longest n-gram found (float32 widened to double), then the backoff weight of
// every longer context, added in order of context length.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

namespace lmlab_ngram {

constexpr int64_t EMPTY = -1;  // keys are context * V + word >= 0

// One n-gram in the hash: its key, its index in its order, ln P* and ln bo (0 at the highest order). As a
// tensor, a row of 3 int64: the two floats share the last one.
struct Slot {
  int64_t key;
  int64_t index;
  float log_prob;
  float log_backoff;
};
static_assert(sizeof(Slot) == 3 * sizeof(int64_t), "a slot is 3 int64");

// A key's home slot among `capacity`: a mixing of its bits (splitmix64's finalizer), scaled to the range.
inline int64_t home_slot(int64_t key, int64_t capacity) {
  uint64_t x = static_cast<uint64_t>(key);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<int64_t>((static_cast<unsigned __int128>(x) * static_cast<uint64_t>(capacity)) >> 64);
}

// keys (n,) distinct int64 >= 0, log_probs (n,) float32, log_backoffs (n,) float32 or empty (0 for all) ->
// (capacity, 3) int64 slots, key EMPTY where none; linear probing at a load of 2/3.
at::Tensor hash_index(const at::Tensor& keys, const at::Tensor& log_probs, const at::Tensor& log_backoffs) {
  TORCH_CHECK(keys.dim() == 1 && keys.scalar_type() == at::kLong && keys.is_contiguous(), "keys: 1-D int64");
  const int64_t n = keys.numel(), capacity = n + n / 2 + 1;
  TORCH_CHECK(log_probs.numel() == n && log_probs.scalar_type() == at::kFloat && log_probs.is_contiguous(),
              "log_probs: one float32 per key");
  TORCH_CHECK(log_backoffs.numel() == 0 || (log_backoffs.numel() == n && log_backoffs.scalar_type() == at::kFloat &&
                                            log_backoffs.is_contiguous()), "log_backoffs: none, or one float32 per key");
  at::Tensor table = at::full({capacity, 3}, EMPTY, keys.options());
  const int64_t* key = keys.data_ptr<int64_t>();
  const float* prob = log_probs.data_ptr<float>();
  const float* backoff = log_backoffs.numel() ? log_backoffs.data_ptr<float>() : nullptr;
  Slot* slots = reinterpret_cast<Slot*>(table.data_ptr<int64_t>());
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(key[i] >= 0, "n-gram keys are >= 0");
    int64_t s = home_slot(key[i], capacity);
    while (slots[s].key != EMPTY) {
      TORCH_CHECK(slots[s].key != key[i], "n-gram keys must be distinct");
      s = s + 1 == capacity ? 0 : s + 1;
    }
    slots[s] = Slot{key[i], i, prob[i], backoff ? backoff[i] : 0.0f};
  }
  return table;
}

inline const Slot* find(const Slot* slots, int64_t capacity, int64_t key) {
  for (int64_t s = home_slot(key, capacity);; s = s + 1 == capacity ? 0 : s + 1) {
    if (slots[s].key == key) return slots + s;
    if (slots[s].key == EMPTY) return nullptr;
  }
}

// ids (B, T) int64 in [0, V); hashes[k-2] = hash_index of order k for k = 2..n; unigram_log_probs and
// unigram_log_backoffs (V,) float32 (the backoffs empty when n = 1) -> (B, T) float64.
at::Tensor token_log_probs(const at::Tensor& ids, at::TensorList hashes, const at::Tensor& unigram_log_probs,
                           const at::Tensor& unigram_log_backoffs, int64_t vocab_size) {
  TORCH_CHECK(ids.dim() == 2 && ids.scalar_type() == at::kLong && ids.is_contiguous(), "ids: (B, T) int64");
  const int64_t order = static_cast<int64_t>(hashes.size()) + 1;
  TORCH_CHECK(unigram_log_probs.numel() == vocab_size && (order == 1 || unigram_log_backoffs.numel() == vocab_size),
              "one unigram log-probability (and backoff, below the highest order) per id");
  const int64_t rows = ids.size(0), steps = ids.size(1);
  std::vector<const Slot*> table(order + 1, nullptr);
  std::vector<int64_t> capacity(order + 1, 0);
  for (int64_t k = 2; k <= order; ++k) {
    table[k] = reinterpret_cast<const Slot*>(hashes[k - 2].data_ptr<int64_t>());
    capacity[k] = hashes[k - 2].size(0);
  }
  const float* unigram_prob = unigram_log_probs.data_ptr<float>();
  const float* unigram_backoff = order > 1 ? unigram_log_backoffs.data_ptr<float>() : nullptr;
  at::Tensor out = at::empty({rows, steps}, ids.options().dtype(at::kDouble));
  const int64_t* id = ids.data_ptr<int64_t>();
  double* result = out.data_ptr<double>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    // before[k], now[k]: index in order k of the k-gram ending at the previous and this position (-1: none);
    // backoff[k]: ln bo of before[k]'s k-gram; home[k]: the home slot of this position's k-gram
    std::vector<int64_t> before(order + 1), now(order + 1), home(order + 1);
    std::vector<float> backoff(order + 1), next_backoff(order + 1);
    for (int64_t b = begin; b < end; ++b) {
      std::fill(before.begin(), before.end(), -1);
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t word = id[b * steps + t];
        for (int64_t k = 2; k <= order; ++k)
          if (before[k - 1] >= 0) {
            home[k] = home_slot(before[k - 1] * vocab_size + word, capacity[k]);
            __builtin_prefetch(table[k] + home[k]);
          }
        now[1] = word;
        double log_prob = unigram_prob[word];
        if (order > 1) next_backoff[1] = unigram_backoff[word];
        int64_t matched = 1;
        for (int64_t k = 2; k <= order; ++k) {
          const Slot* found = before[k - 1] >= 0 ? find(table[k], capacity[k], before[k - 1] * vocab_size + word)
                                                 : nullptr;
          now[k] = found ? found->index : -1;
          if (found) {
            log_prob = found->log_prob;
            next_backoff[k] = found->log_backoff;
            matched = k;
          }
        }
        for (int64_t j = 1; j < order; ++j)  // bo(h) of every context h longer than the match
          if (before[j] >= 0 && matched <= j) log_prob += static_cast<double>(backoff[j]);
        result[b * steps + t] = log_prob;
        std::swap(before, now);
        std::swap(backoff, next_backoff);
      }
    }
  });
  return out;
}

TORCH_LIBRARY(lmlab_ngram, m) {
  m.def("hash_index(Tensor keys, Tensor log_probs, Tensor log_backoffs) -> Tensor");
  m.def("token_log_probs(Tensor ids, Tensor[] hashes, Tensor unigram_log_probs, Tensor unigram_log_backoffs, "
        "int vocab_size) -> Tensor");
}

TORCH_LIBRARY_IMPL(lmlab_ngram, CPU, m) {
  m.impl("hash_index", &hash_index);
  m.impl("token_log_probs", &token_log_probs);
}

}  // namespace lmlab_ngram
