// The in-process KVStores (local, device): exact merged sums, the optimizers as typed
// descriptions, and bad input; the device store's collectives run on threads (TSan covers them).
#include <gtest/gtest.h>

#include <cmath>

#include "kvstore/kvstore.h"

namespace loom::kvstore {
namespace {

Tensor Filled(float v, int64_t n) {
  Tensor t(proto::FP32, DDim({n}));
  float* p = t.mutable_data<float>(Place::CPU());
  for (int64_t i = 0; i < n; ++i) p[i] = v + static_cast<float>(i);
  return t;
}

class KVStoreTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KVStoreTest, PushReplacesWithTheMergedSumAndPullFillsEveryOutput) {
  auto kv = KVStore::Create(GetParam()).value();
  const int64_t n = 1 << 17;  // large enough for the collectives' pipelining
  ASSERT_TRUE(kv->Init(Key::Int(1), Filled(0, n)).ok());
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> values = {Filled(1 + step, n), Filled(2, n), Filled(3, n), Filled(4, n)};
    ASSERT_TRUE(kv->Push(Key::Int(1), values, 0).ok());
    std::vector<Tensor> outs = {Filled(0, n), Filled(0, n)};
    ASSERT_TRUE(kv->Pull(Key::Int(1), {&outs[0], &outs[1]}, 0).ok());
    for (const auto& o : outs)
      for (int64_t i = 0; i < n; i += 997)
        ASSERT_EQ(o.data<float>()[i], 10 + step + 4 * static_cast<float>(i)) << i;
  }
  std::vector<Tensor> values = {Filled(1, n), Filled(1, n), Filled(1, n), Filled(1, n)};
  std::vector<Tensor> outs = {Filled(0, n), Filled(0, n), Filled(0, n), Filled(0, n)};
  ASSERT_TRUE(kv->PushPull(Key::Int(1), values, {&outs[0], &outs[1], &outs[2], &outs[3]}, 0).ok());
  for (const auto& o : outs) EXPECT_EQ(o.data<float>()[5], 4 + 4 * 5.0f);
}

TEST_P(KVStoreTest, SgdRunsOnTheStore) {
  auto kv = KVStore::Create(GetParam()).value();
  ASSERT_TRUE(kv->SetOptimizer({"sgd", {{"learning_rate", 0.5}}}).ok());
  ASSERT_TRUE(kv->Init(Key::Str("w"), Filled(10, 8)).ok());
  ASSERT_TRUE(kv->Push(Key::Str("w"), {Filled(1, 8), Filled(1, 8)}, 0).ok());
  Tensor out = Filled(0, 8);
  ASSERT_TRUE(kv->Pull(Key::Str("w"), {&out}, 0).ok());
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(out.data<float>()[i], 10 + i - 0.5f * 2 * (1 + i));
}

TEST_P(KVStoreTest, BadInputIsAnErrorNamingIt) {
  auto kv = KVStore::Create(GetParam()).value();
  Tensor out = Filled(0, 4);
  auto st = kv->Pull(Key::Int(7), {&out}, 0);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  ASSERT_TRUE(kv->Init(Key::Int(7), Filled(0, 4)).ok());
  EXPECT_EQ(kv->Init(Key::Int(7), Filled(0, 4)).code(), StatusCode::kAlreadyExists);
  st = kv->Push(Key::Int(7), {Filled(0, 5)}, 0);
  EXPECT_NE(st.message().find("float32[5]"), std::string::npos) << st.ToString();
  st = kv->Push(Key::Str("seven"), {Filled(0, 4)}, 0);
  EXPECT_NE(st.message().find("int keys"), std::string::npos) << st.ToString();
  EXPECT_FALSE(kv->SetOptimizer({"adam", {}}).ok());
  EXPECT_FALSE(kv->SetOptimizer({"sgd", {{"momentum", 1.5}}}).ok());
  EXPECT_FALSE(kv->SetOptimizer({"sgd", {{"learning_rate", std::nan("")}}}).ok());
}

INSTANTIATE_TEST_SUITE_P(Types, KVStoreTest, ::testing::Values("local", "device"));

TEST(KVStoreCreate, DistributedTypesNeedALaunchedJob) {
  auto kv = KVStore::Create("dist_sync");
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.status().message().find("loom launch"), std::string::npos);
  EXPECT_FALSE(KVStore::Create("nonsense").ok());
}

}  // namespace
}  // namespace loom::kvstore
