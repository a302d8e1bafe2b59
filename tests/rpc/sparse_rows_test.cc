// The row-sparse wire format (rpc/sparse_rows.h): SPARSE_INIT / SPARSE_PUSH / SPARSE_GET frames
// round-trip through Encode and Decode, and every malformed one (counts, sizes, dtypes, ids out
// of range) is refused before a row is read.
#include "rpc/sparse_rows.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace loom::rpc {
namespace {

Header SparseHeader(Header::Kind kind, int64_t n, int64_t width, int64_t height) {
  Header h;
  h.set_kind(kind);
  h.set_name("i:3");
  h.set_height(height);
  h.add_dims(n);
  if (kind != Header::SPARSE_GET) {
    h.set_dtype(6);
    h.add_dims(width);
    h.set_nbytes(n * width * 8);
  }
  if (kind == Header::SPARSE_INIT) h.set_text("constant");
  return h;
}

StatusOr<Message> RoundTrip(const Header& h, const std::vector<int64_t>& ids,
                            const std::vector<double>& rows, bool with_rows = true) {
  auto keep = std::make_shared<const std::vector<int64_t>>(ids);
  std::vector<Payload> payloads = {RowIdsPayload(keep)};
  if (with_rows) payloads.push_back({rows.data(), rows.size() * sizeof(double), nullptr});
  auto frames = Encode(h, payloads);
  return Decode(&frames);
}

TEST(SparseRowsWire, PushAndGetRoundTrip) {
  const std::vector<int64_t> ids = {0, 7, 9};
  const std::vector<double> rows = {1, 2, 3, 4, 5, 6};
  for (auto kind : {Header::SPARSE_PUSH, Header::SPARSE_INIT}) {
    auto m = RoundTrip(SparseHeader(kind, 3, 2, 10), ids, rows);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(ReadRowIds(m->payloads[0].data(), m->payloads[0].size()), ids);
    EXPECT_EQ(m->payloads[1].size(), rows.size() * 8);
  }
  auto get = RoundTrip(SparseHeader(Header::SPARSE_GET, 3, 0, 10), ids, {}, false);
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  // Empty pushes are valid (a worker with no rows for a server still takes part in the round).
  EXPECT_TRUE(RoundTrip(SparseHeader(Header::SPARSE_PUSH, 0, 2, 10), {}, {}).ok());
}

TEST(SparseRowsWire, MalformedMessagesAreRefused) {
  const std::vector<double> rows = {1, 2, 3, 4};
  auto refused = [&](const Header& h, const std::vector<int64_t>& ids, const std::vector<double>& r,
                     bool with_rows, const std::string& why) {
    auto m = RoundTrip(h, ids, r, with_rows);
    ASSERT_FALSE(m.ok()) << why;
    EXPECT_NE(m.status().message().find(why), std::string::npos) << m.status().ToString();
  };
  refused(SparseHeader(Header::SPARSE_PUSH, 2, 2, 10), {1, 10}, rows, true,
          "row id 10 (entry 1) is outside [0, 10)");
  refused(SparseHeader(Header::SPARSE_PUSH, 2, 2, 10), {-1, 3}, rows, true, "row id -1");
  refused(SparseHeader(Header::SPARSE_GET, 1, 0, 5), {5}, {}, false, "outside [0, 5)");
  refused(SparseHeader(Header::SPARSE_PUSH, 2, 2, 10), {1, 2}, rows, false, "two payloads");
  refused(SparseHeader(Header::SPARSE_PUSH, 3, 2, 10), {1, 2}, rows, true, "ids frame");
  refused(SparseHeader(Header::SPARSE_PUSH, 2, 2, 10), {1, 2}, {1, 2, 3}, true, "rows frame");
  refused(SparseHeader(Header::SPARSE_PUSH, 2, 2, 0), {1, 2}, rows, true, "height 0");
  Header h = SparseHeader(Header::SPARSE_PUSH, 2, 2, 10);
  h.set_dtype(3);
  refused(h, {1, 2}, rows, true, "float32 or float64");
  h = SparseHeader(Header::SPARSE_PUSH, 2, 2, 10);
  h.set_dims(1, 0);
  refused(h, {1, 2}, rows, true, "not positive");
  h = SparseHeader(Header::SPARSE_INIT, 2, 2, 10);
  h.clear_text();
  refused(h, {1, 2}, rows, true, "initializer");
  h = SparseHeader(Header::SPARSE_PUSH, 2, 2, 10);
  h.clear_name();
  refused(h, {1, 2}, rows, true, "name");
  h = SparseHeader(Header::SPARSE_GET, 2, 0, 10);
  h.add_dims(2);
  refused(h, {1, 2}, {}, false, "dims are [n]");
}

TEST(SparseRowsWire, ARepliesRowsMustBeTheOnesAsked) {
  Header h;
  h.set_kind(Header::REPLY);
  auto* r = h.add_tensors();
  r->set_name("rows");
  r->set_dtype(kInt64Dtype);
  r->add_dims(2);
  r->set_nbytes(16);
  auto* v = h.add_tensors();
  v->set_name("value");
  v->set_dtype(5);
  v->add_dims(2);
  v->add_dims(3);
  v->set_nbytes(24);
  auto ids = std::make_shared<const std::vector<int64_t>>(std::vector<int64_t>{4, 8});
  const std::vector<float> rows(6, 1.0f);
  auto frames = Encode(h, {RowIdsPayload(ids), {rows.data(), 24, nullptr}});
  auto m = Decode(&frames);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(CheckSparseReply(m->header, m->payloads, {4, 8}, 5, 3).ok());
  EXPECT_FALSE(CheckSparseReply(m->header, m->payloads, {4, 9}, 5, 3).ok());
  EXPECT_FALSE(CheckSparseReply(m->header, m->payloads, {4, 8}, 6, 3).ok());
  EXPECT_FALSE(CheckSparseReply(m->header, m->payloads, {4, 8}, 5, 2).ok());
}

}  // namespace
}  // namespace loom::rpc
