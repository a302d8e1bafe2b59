// Class samplers of the sampled losses (nce, sample_logits), as Fluid defines them over the
// class range [0, range]:
//   uniform:     every class with probability 1 / (range + 1);
//   log_uniform: floor(exp(u * log(range + 1))) - 1 for u ~ U[0, 1), taken modulo range, with
//                Probability(c) = log((c + 2) / (c + 1)) / log(range + 1) (Zipf-like: frequent
//                words have small ids);
//   custom:      class c with the given probability probs[c] (inverse CDF over their sums).
// A sampler owns its random engine: one seeded with a non-zero seed gives the same sequence on
// every run, so a program's forward pass is a pure function of its inputs and the seed. Host
// code only; one sampler per kernel call (not thread-safe).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace loom::ops {

class ClassSampler {
 public:
  enum Kind { kUniform = 0, kLogUniform = 1, kCustom = 2 };

  // range: the largest class id; probs: the distribution of kCustom (range + 1 values).
  ClassSampler(Kind kind, int64_t range, int seed, std::vector<double> probs = {})
      : kind_(kind),
        range_(range),
        log_range_(std::log(static_cast<double>(range) + 1.0)),
        probs_(std::move(probs)),
        rng_(seed != 0 ? static_cast<uint64_t>(seed) : std::random_device{}()) {
    if (kind_ == kCustom) {
      double sum = 0;
      for (double p : probs_) cdf_.push_back(sum += p);
    }
  }

  int64_t Sample() {
    double u = unit_(rng_);
    switch (kind_) {
      case kUniform: return std::min<int64_t>(static_cast<int64_t>(u * (range_ + 1)), range_);
      case kLogUniform: {
        int64_t v = static_cast<int64_t>(std::exp(u * log_range_)) - 1;
        return range_ > 0 ? v % range_ : 0;
      }
      case kCustom: {
        double target = u * cdf_.back();
        auto it = std::upper_bound(cdf_.begin(), cdf_.end(), target);
        return std::min<int64_t>(it - cdf_.begin(), range_);
      }
    }
    return 0;
  }

  double Probability(int64_t c) const {
    switch (kind_) {
      case kUniform: return 1.0 / (static_cast<double>(range_) + 1.0);
      case kLogUniform: return std::log((c + 2.0) / (c + 1.0)) / log_range_;
      case kCustom: return probs_[c];
    }
    return 0;
  }

 private:
  Kind kind_;
  int64_t range_;
  double log_range_;
  std::vector<double> probs_, cdf_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
};

}  // namespace loom::ops
