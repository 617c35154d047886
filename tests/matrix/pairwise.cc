#include "tests/matrix/pairwise.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace ramferry::matrix {
namespace {

// Pairs as a flat table: (option i, value a, option j, value b), i < j.
class PairSet {
 public:
  explicit PairSet(const std::vector<size_t>& counts) : counts_(counts) {
    offset_.resize(counts.size() * counts.size());
    size_t n = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      for (size_t j = i + 1; j < counts.size(); ++j) {
        offset_[i * counts.size() + j] = n;
        n += counts[i] * counts[j];
      }
    }
    held_.assign(n, false);
    left_ = n;
  }
  size_t Index(size_t i, size_t a, size_t j, size_t b) const {
    if (i > j) {
      std::swap(i, j);
      std::swap(a, b);
    }
    return offset_[i * counts_.size() + j] + a * counts_[j] + b;
  }
  bool held(size_t i, size_t a, size_t j, size_t b) const {
    return held_[Index(i, a, j, b)];
  }
  // Marks every pair of `row` held; returns how many were new.
  size_t Hold(const std::vector<size_t>& row) {
    size_t added = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      for (size_t j = i + 1; j < row.size(); ++j) {
        const size_t k = Index(i, row[i], j, row[j]);
        if (!held_[k]) {
          held_[k] = true;
          ++added;
        }
      }
    }
    left_ -= added;
    return added;
  }
  void HoldPair(size_t i, size_t a, size_t j, size_t b) {
    const size_t k = Index(i, a, j, b);
    if (!held_[k]) {
      held_[k] = true;
      --left_;
    }
  }
  size_t New(const std::vector<size_t>& row) const {
    size_t n = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      for (size_t j = i + 1; j < row.size(); ++j) {
        n += held_[Index(i, row[i], j, row[j])] ? 0 : 1;
      }
    }
    return n;
  }
  size_t left() const { return left_; }
  // The first pair not held yet: (i, a, j, b).
  bool FirstMissing(size_t* i, size_t* a, size_t* j, size_t* b) const {
    for (size_t x = 0; x < counts_.size(); ++x) {
      for (size_t y = x + 1; y < counts_.size(); ++y) {
        for (size_t p = 0; p < counts_[x]; ++p) {
          for (size_t q = 0; q < counts_[y]; ++q) {
            if (!held(x, p, y, q)) {
              *i = x, *a = p, *j = y, *b = q;
              return true;
            }
          }
        }
      }
    }
    return false;
  }

 private:
  std::vector<size_t> counts_;
  std::vector<size_t> offset_;
  std::vector<bool> held_;
  size_t left_ = 0;
};

// Per row: greedy completions in shuffled orders, then (where every one
// of those was refused) completions of random values, which find the
// valid rows a greedy choice keeps missing (it takes the same refused
// pair every time when that pair is new).
constexpr int kOrders = 24;
constexpr int kRandomTries = 400;

}  // namespace

std::vector<Row> AllPairs(
    const std::vector<size_t>& counts,
    const std::function<bool(const std::vector<size_t>&)>& valid) {
  PairSet pairs(counts);
  std::mt19937 rng(20261204);
  std::vector<Row> rows;
  size_t i, a, j, b;
  while (pairs.FirstMissing(&i, &a, &j, &b)) {
    std::vector<size_t> best;
    size_t best_new = 0;
    std::vector<size_t> first_try;
    for (int attempt = 0; attempt < kOrders + kRandomTries; ++attempt) {
      if (attempt == kOrders && !best.empty()) break;
      const bool random = attempt >= kOrders;
      std::vector<size_t> row(counts.size(), 0);
      std::vector<bool> set(counts.size(), false);
      row[i] = a, row[j] = b;
      set[i] = set[j] = true;
      std::vector<size_t> order(counts.size());
      std::iota(order.begin(), order.end(), 0);
      if (attempt > 0) std::shuffle(order.begin(), order.end(), rng);
      for (size_t o : order) {
        if (set[o]) continue;
        if (random) {
          row[o] = std::uniform_int_distribution<size_t>(0, counts[o] - 1)(rng);
          set[o] = true;
          continue;
        }
        // The value completing the most uncovered pairs with those set;
        // ties go to a random one after the first attempt.
        size_t pick = 0, pick_new = 0;
        std::vector<size_t> values(counts[o]);
        std::iota(values.begin(), values.end(), 0);
        if (attempt > 0) std::shuffle(values.begin(), values.end(), rng);
        bool first = true;
        for (size_t v : values) {
          size_t n = 0;
          for (size_t k = 0; k < counts.size(); ++k) {
            if (set[k] && !pairs.held(o, v, k, row[k])) ++n;
          }
          if (first || n > pick_new) {
            pick = v;
            pick_new = n;
            first = false;
          }
        }
        row[o] = pick;
        set[o] = true;
      }
      if (first_try.empty()) first_try = row;
      if (!valid(row)) continue;
      const size_t n = pairs.New(row);
      if (best.empty() || n > best_new) {
        best = row;
        best_new = n;
      }
    }
    if (best.empty()) {
      // No valid row holds (i, a, j, b): a refused row stands for that
      // pair alone; its other pairs are still to be held by a valid row.
      pairs.HoldPair(i, a, j, b);
      rows.push_back({first_try, /*refused=*/true, i, j});
      continue;
    }
    pairs.Hold(best);
    rows.push_back({best});
  }
  return rows;
}

size_t MissingPairs(const std::vector<size_t>& counts,
                    const std::vector<Row>& rows) {
  PairSet pairs(counts);
  for (const Row& r : rows) {
    if (r.refused) {
      pairs.HoldPair(r.first, r.values[r.first], r.second, r.values[r.second]);
    } else {
      pairs.Hold(r.values);
    }
  }
  return pairs.left();
}

}  // namespace ramferry::matrix
