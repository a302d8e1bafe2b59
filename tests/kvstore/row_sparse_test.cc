// Row-sparse keys on the in-process stores (local, device): MXNet's semantics for init, push
// (merge, lazy update, replace without an optimizer) and row_sparse_pull, and bad input.
#include <gtest/gtest.h>

#include "kvstore/kvstore.h"

namespace loom::kvstore {
namespace {

SelectedRows Rows(std::vector<int64_t> ids, int64_t height, int64_t w, double base,
                  DataType dtype = proto::FP64) {
  SelectedRows s;
  s.rows = std::move(ids);
  s.height = height;
  s.value = Tensor(dtype, DDim({static_cast<int64_t>(s.rows.size()), w}));
  s.value.mutable_data(Place::CPU(), dtype);
  for (int64_t i = 0; i < s.value.numel(); ++i) {
    if (dtype == proto::FP64)
      s.value.data<double>()[i] = base + static_cast<double>(i);
    else
      s.value.data<float>()[i] = static_cast<float>(base + static_cast<double>(i));
  }
  return s;
}

double At(const SelectedRows& s, size_t row, int64_t j) {
  return s.value.data<double>()[static_cast<int64_t>(row) * s.RowWidth() + j];
}

class RowSparseStore : public ::testing::TestWithParam<std::string> {};

TEST_P(RowSparseStore, InitPushAndPullFollowMXNet) {
  auto kv = KVStore::Create(GetParam()).value();
  const Key k = Key::Int(5);
  ASSERT_TRUE(kv->InitRowSparse(k, Rows({1, 4}, 10, 2, 100)).ok());
  SelectedRows out;
  // Unsorted, repeated ids: the unique ascending rows; rows never given are zero.
  ASSERT_TRUE(kv->RowSparsePull(k, {{4, 0, 4, 1}}, {&out}, 0).ok());
  EXPECT_EQ(out.rows, (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(out.height, 10);
  EXPECT_EQ(out.value.dims(), DDim({3, 2}));
  EXPECT_EQ(At(out, 0, 0), 0);
  EXPECT_EQ(At(out, 1, 1), 101);
  EXPECT_EQ(At(out, 2, 0), 102);
  // No optimizer: the merged push (rows summed over the list) becomes the whole value.
  ASSERT_TRUE(kv->PushRowSparse(k, {Rows({2, 4}, 10, 2, 1), Rows({4}, 10, 2, 10)}, 0).ok());
  SelectedRows a, b;
  ASSERT_TRUE(kv->RowSparsePull(k, {{1, 2, 4}, {4}}, {&a, &b}, 0).ok());
  EXPECT_EQ(At(a, 0, 0), 0);       // row 1 was not pushed: back to zero
  EXPECT_EQ(At(a, 1, 1), 2);       // row 2: 1 + 1
  EXPECT_EQ(At(a, 2, 0), 3 + 10);  // row 4: (1 + 2) + 10
  EXPECT_EQ(b.rows, (std::vector<int64_t>{4}));
  EXPECT_EQ(At(b, 0, 1), 4 + 11);
}

TEST_P(RowSparseStore, SgdUpdatesOnlyThePushedRowsAsTheDensePathDoes) {
  auto kv = KVStore::Create(GetParam()).value();
  const OptimizerSpec sgd{"sgd", {{"learning_rate", 0.1}, {"momentum", 0.5}, {"wd", 0.01}}};
  ASSERT_TRUE(kv->SetOptimizer(sgd).ok());
  const int64_t h = 6, w = 3;
  ASSERT_TRUE(kv->InitRowSparse(Key::Int(1), Rows({0, 1, 2, 3, 4, 5}, h, w, 1)).ok());
  auto dense = MakeUpdater(sgd).value();
  SelectedRows init = Rows({0, 1, 2, 3, 4, 5}, h, w, 1);
  Tensor want;
  ASSERT_TRUE(SelectedRowsToDense(init, &want).ok());
  for (int step = 0; step < 3; ++step) {
    std::vector<SelectedRows> grads = {Rows({1, 3}, h, w, step), Rows({3}, h, w, 2)};
    ASSERT_TRUE(kv->PushRowSparse(Key::Int(1), grads, 0).ok());
    SelectedRows merged =
        MergeRowSparse(Key::Int(1), {proto::FP64, h, DDim({w}), {}}, grads).value();
    for (size_t i = 0; i < merged.rows.size(); ++i) {
      Tensor row = want.Slice(merged.rows[i], merged.rows[i] + 1);
      Tensor g = merged.value.Slice(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1);
      ASSERT_TRUE(dense->Update("r" + std::to_string(merged.rows[i]), g, 2, &row).ok());
    }
  }
  SelectedRows out;
  ASSERT_TRUE(kv->RowSparsePull(Key::Int(1), {{0, 1, 2, 3, 4, 5}}, {&out}, 0).ok());
  for (int64_t i = 0; i < h * w; ++i)
    EXPECT_EQ(out.value.data<double>()[i], want.data<double>()[i]) << i;
  EXPECT_EQ(out.value.data<double>()[0], init.value.data<double>()[0]);  // row 0 untouched
}

TEST_P(RowSparseStore, ASparseTableStartsFromItsInitializerAndMayBeHuge) {
  auto kv = KVStore::Create(GetParam()).value();
  SparseTableSpec spec;
  spec.dtype = proto::FP32;
  spec.height = INT64_MAX;
  spec.row_dims = DDim({4});
  spec.init = RowInitializer::Uniform(-1, 1, 3);
  ASSERT_TRUE(kv->InitSparseTable(Key::Str("emb"), spec).ok());
  SelectedRows out;
  ASSERT_TRUE(kv->RowSparsePull(Key::Str("emb"), {{INT64_MAX - 1, 7}}, {&out}, 0).ok());
  EXPECT_EQ(out.rows, (std::vector<int64_t>{7, INT64_MAX - 1}));
  EXPECT_EQ(out.value.data<float>()[0],
            static_cast<float>(SparseTable::InitialValue(spec.init, 7, 0)));
}

TEST_P(RowSparseStore, BadInputIsAnErrorNamingIt) {
  auto kv = KVStore::Create(GetParam()).value();
  ASSERT_TRUE(kv->InitRowSparse(Key::Int(2), Rows({1}, 10, 2, 0)).ok());
  Tensor dense(proto::FP64, DDim({10, 2}));
  dense.mutable_data<double>(Place::CPU());
  ASSERT_TRUE(kv->Init(Key::Int(3), dense).ok());
  SelectedRows out;
  auto st = kv->RowSparsePull(Key::Int(2), {{10}}, {&out}, 0);
  EXPECT_NE(st.message().find("row id 10 is outside [0, 10)"), std::string::npos) << st.ToString();
  st = kv->PushRowSparse(Key::Int(2), {Rows({1}, 10, 3, 0)}, 0);
  EXPECT_NE(st.message().find("the key holds float64 [10, 2]"), std::string::npos) << st.ToString();
  st = kv->PushRowSparse(Key::Int(2), {Rows({1}, 10, 2, 0, proto::FP32)}, 0);
  EXPECT_NE(st.message().find("float32"), std::string::npos) << st.ToString();
  st = kv->PushRowSparse(Key::Int(2), {Rows({-1}, 10, 2, 0)}, 0);
  EXPECT_NE(st.message().find("row id -1"), std::string::npos) << st.ToString();
  st = kv->PushRowSparse(Key::Int(3), {Rows({1}, 10, 2, 0)}, 0);
  EXPECT_NE(st.message().find("the key is dense"), std::string::npos) << st.ToString();
  st = kv->Push(Key::Int(2), {dense}, 0);
  EXPECT_NE(st.message().find("row_sparse"), std::string::npos) << st.ToString();
  EXPECT_EQ(kv->InitRowSparse(Key::Int(3), Rows({1}, 10, 2, 0)).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(kv->Init(Key::Int(2), dense).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(kv->RowSparsePull(Key::Int(9), {{1}}, {&out}, 0).code(), StatusCode::kNotFound);
  SelectedRows o2;
  EXPECT_FALSE(kv->RowSparsePull(Key::Int(2), {{1}, {1}, {1}}, {&out, &o2}, 0).ok());
  EXPECT_FALSE(kv->InitRowSparse(Key::Int(4), Rows({1}, 0, 2, 0)).ok());
}

INSTANTIATE_TEST_SUITE_P(Types, RowSparseStore, ::testing::Values("local", "device"));

}  // namespace
}  // namespace loom::kvstore
