#include "framework/ddim.h"

#include "base/status.h"

namespace loom {

DDim::DDim(std::initializer_list<int64_t> dims) {
  for (int64_t v : dims) push_back(v);
}

DDim::DDim(const std::vector<int64_t>& dims) {
  for (int64_t v : dims) push_back(v);
}

void DDim::push_back(int64_t v) {
  LOOM_CHECK(rank_ < kMaxRank, "rank above ", kMaxRank);
  d_[rank_++] = v;
}

void DDim::resize(int rank, int64_t fill) {
  LOOM_CHECK(rank >= 0 && rank <= kMaxRank, "rank ", rank);
  for (int i = rank_; i < rank; ++i) d_[i] = fill;
  rank_ = rank;
}

int64_t DDim::numel() const { return product(0, rank_); }

bool DDim::known() const {
  for (int i = 0; i < rank_; ++i)
    if (d_[i] < 0) return false;
  return true;
}

int64_t DDim::product(int begin, int end) const {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) {
    if (d_[i] < 0) return -1;
  }
  for (int i = begin; i < end; ++i) {
    if (__builtin_mul_overflow(n, d_[i], &n))
      throw StatusError(InvalidArgument("dims ", ToString(), " hold more than 2^63 elements"));
  }
  return n;
}

std::string DDim::ToString() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(d_[i]);
  }
  return s + "]";
}

bool DDim::operator==(const DDim& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (d_[i] != o.d_[i]) return false;
  return true;
}

bool CheckedByteSize(const DDim& d, size_t elem_size, uint64_t* bytes) {
  uint64_t n = elem_size;
  for (int64_t v : d) {
    if (v < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(v), &n)) return false;
  }
  if (n > static_cast<uint64_t>(INT64_MAX)) return false;
  *bytes = n;
  return true;
}

bool DimsCompatible(const DDim& a, const DDim& b) {
  if (a.size() != b.size()) return false;
  for (int i = 0; i < a.size(); ++i)
    if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i]) return false;
  return true;
}

DDim FlattenTo2D(const DDim& d, int num_col_dims) {
  return DDim{d.product(0, num_col_dims), d.product(num_col_dims, d.size())};
}

}  // namespace loom
