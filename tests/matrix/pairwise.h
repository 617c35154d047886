// Rows of option values that together hold every pair of values of every
// two options at least once (pairwise, or all-pairs, testing): a handful
// of sessions instead of the product of every option's values.
//
// The generator is greedy and deterministic. It takes the first pair no
// row holds yet, fixes it, and gives every other option the value that
// completes the most uncovered pairs, trying the options in a few
// shuffled orders; a row `valid` refuses is thrown away. A pair that no
// valid row can hold (the library refuses it with any other values) gets
// a row of its own, marked refused: the test checks that the library
// says so up front.
//
// Invariant: every pair of values of two different options is held by a
// valid row, or is the pair a refused row was made for.
#ifndef RAMFERRY_TESTS_MATRIX_PAIRWISE_H_
#define RAMFERRY_TESTS_MATRIX_PAIRWISE_H_

#include <cstddef>
#include <functional>
#include <vector>

namespace ramferry::matrix {

struct Row {
  std::vector<size_t> values;  // values[i]: option i's value index
  // Made for a pair no valid row can hold: options `first` and `second`
  // at their values here.
  bool refused = false;
  size_t first = 0, second = 0;
};

// `counts[i]`: how many values option i has (each at least 1).
std::vector<Row> AllPairs(
    const std::vector<size_t>& counts,
    const std::function<bool(const std::vector<size_t>&)>& valid);

// How many pairs of values of two options no valid row of `rows` holds
// and no refused row names (`refused_pairs` counts those).
size_t MissingPairs(const std::vector<size_t>& counts,
                    const std::vector<Row>& rows);

}  // namespace ramferry::matrix

#endif  // RAMFERRY_TESTS_MATRIX_PAIRWISE_H_
