// DDim: the dimensions of a tensor. Up to kMaxRank dims stored inline (no heap), -1 = unknown.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace loom {

class DDim {
 public:
  static constexpr int kMaxRank = 9;

  DDim() = default;
  DDim(std::initializer_list<int64_t> dims);
  explicit DDim(const std::vector<int64_t>& dims);
  template <typename It>
  DDim(It begin, It end) {
    for (; begin != end; ++begin) push_back(static_cast<int64_t>(*begin));
  }

  int size() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + rank_; }
  void push_back(int64_t v);
  void resize(int rank, int64_t fill = 0);

  // Number of elements; -1 when any dim is unknown. numel and product throw
  // StatusError(InvalidArgument) when the product overflows int64 (base/status.h).
  int64_t numel() const;
  bool known() const;  // no -1
  // Product of dims [begin, end).
  int64_t product(int begin, int end) const;
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  std::string ToString() const;  // "[2, 3]"

  bool operator==(const DDim& o) const;
  bool operator!=(const DDim& o) const { return !(*this == o); }

 private:
  int64_t d_[kMaxRank] = {};
  int rank_ = 0;
};

// numel * elem_size in bytes; false when a dim is negative or the product overflows.
bool CheckedByteSize(const DDim& d, size_t elem_size, uint64_t* bytes);
// Two dims are compatible when they have the same rank and agree wherever both are known.
bool DimsCompatible(const DDim& a, const DDim& b);
// Flattens dims [0, num_col_dims) into rows and the rest into columns: [rows, cols].
DDim FlattenTo2D(const DDim& d, int num_col_dims);

}  // namespace loom
