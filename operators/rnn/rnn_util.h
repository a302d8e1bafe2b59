// Host-side stepping shared by the CPU kernels of the recurrent ops (gru.cc, lstm.cc): time
// step k of every sequence runs at once, so each step needs the sequences still running and
// the row each is at.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::ops::rnn {

// The row of sequence s at step k, in processing order (from the end with reverse).
inline int64_t RowAt(const std::vector<int64_t>& off, size_t s, int64_t k, bool reverse) {
  return reverse ? off[s + 1] - 1 - k : off[s] + k;
}

// The sequences of `off` still running at step k (longer than k), in index order.
inline std::vector<int64_t> ActiveAt(const std::vector<int64_t>& off, int64_t k) {
  std::vector<int64_t> active;
  for (size_t s = 0; s + 1 < off.size(); ++s)
    if (off[s + 1] - off[s] > k) active.push_back(static_cast<int64_t>(s));
  return active;
}

// The length of the longest sequence of `off`: the number of steps.
inline int64_t LongestOf(const std::vector<int64_t>& off) {
  int64_t n = 0;
  for (size_t s = 0; s + 1 < off.size(); ++s) n = std::max(n, off[s + 1] - off[s]);
  return n;
}

}  // namespace loom::ops::rnn
