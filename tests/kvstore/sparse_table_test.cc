// SparseTable: rows created on first touch, the same per id whatever the sharding, every
// initializer, the row-wise optimizers equal to the dense ones, save/load and corrupt files.
#include "kvstore/sparse_table.h"

#include <gtest/gtest.h>
#include <cstring>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "framework/file_util.h"

namespace loom::kvstore {
namespace {

SparseTableSpec Spec(DataType dtype, int64_t height, DDim row_dims, RowInitializer init) {
  SparseTableSpec s;
  s.dtype = dtype;
  s.height = height;
  s.row_dims = row_dims;
  s.init = init;
  return s;
}

std::string TempPath(const std::string& name) {
  return JoinPath(::testing::TempDir(), name + std::to_string(::getpid()));
}

class SparseTableInit : public ::testing::TestWithParam<RowInitializer> {};

TEST_P(SparseTableInit, AnIdGetsTheSameRowWhateverTheShardingAndOrder) {
  const RowInitializer init = GetParam();
  const std::vector<int64_t> ids = {0, 1, 7, -5, 123456789012345LL, INT64_MAX, INT64_MIN, 42};
  const int64_t w = 6;
  // One table holding every id.
  auto one = SparseTable::Create(Spec(proto::FP64, -1, {2, 3}, init)).value();
  std::vector<double> want(ids.size() * w);
  ASSERT_TRUE(one->Lookup(ids.data(), ids.size(), want.data(), "test").ok());
  for (int servers : {2, 3, 5}) {
    std::vector<std::unique_ptr<SparseTable>> shards;
    for (int s = 0; s < servers; ++s)
      shards.push_back(SparseTable::Create(Spec(proto::FP64, -1, {2, 3}, init)).value());
    for (size_t k = ids.size(); k-- > 0;) {  // reverse order: creation order does not matter
      const int s = SparseTable::ShardOf(ids[k], servers);
      ASSERT_GE(s, 0);
      ASSERT_LT(s, servers);
      std::vector<double> got(w);
      ASSERT_TRUE(shards[s]->Lookup(&ids[k], 1, got.data(), "test").ok());
      for (int64_t j = 0; j < w; ++j) EXPECT_EQ(got[j], want[k * w + j]) << servers << " " << k;
    }
  }
  // A second lookup returns the same rows and creates nothing.
  std::vector<double> again(ids.size() * w);
  ASSERT_TRUE(one->Lookup(ids.data(), ids.size(), again.data(), "test").ok());
  EXPECT_EQ(again, want);
  EXPECT_EQ(one->Size(), static_cast<int64_t>(ids.size()));
}

TEST_P(SparseTableInit, ValuesFollowTheInitializersDistribution) {
  const RowInitializer init = GetParam();
  auto t = SparseTable::Create(Spec(proto::FP32, 100000, {50}, init)).value();
  std::vector<int64_t> ids(2000);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> v(ids.size() * 50);
  ASSERT_TRUE(t->Lookup(ids.data(), ids.size(), v.data(), "test").ok());
  double mean = 0, sq = 0, lo = 1e300, hi = -1e300;
  for (float x : v) {
    mean += x;
    sq += double(x) * x;
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
  }
  mean /= v.size();
  const double var = sq / v.size() - mean * mean;
  switch (init.kind) {
    case RowInitializer::Kind::kConstant:
      EXPECT_EQ(lo, static_cast<float>(init.a));
      EXPECT_EQ(hi, static_cast<float>(init.a));
      break;
    case RowInitializer::Kind::kUniform:
      EXPECT_GE(lo, init.a);
      EXPECT_LE(hi, init.b);
      EXPECT_NEAR(mean, (init.a + init.b) / 2, 0.01 * (init.b - init.a));
      EXPECT_NEAR(var, std::pow(init.b - init.a, 2) / 12, 0.02 * std::pow(init.b - init.a, 2) / 12);
      break;
    case RowInitializer::Kind::kGaussian:
      EXPECT_NEAR(mean, init.a, 0.01 * init.b);
      EXPECT_NEAR(std::sqrt(var), init.b, 0.01 * init.b);
      break;
  }
  // Rows differ from one another (not one row repeated) unless the initializer is constant.
  if (init.kind != RowInitializer::Kind::kConstant) EXPECT_NE(v[0], v[50]);
}

INSTANTIATE_TEST_SUITE_P(Initializers, SparseTableInit,
                         ::testing::Values(RowInitializer::Constant(0.25),
                                           RowInitializer::Uniform(-0.5, 1.5, 7),
                                           RowInitializer::Gaussian(2.0, 0.5, 11)));

TEST(SparseTable, TheSeedChangesTheRows) {
  auto a =
      SparseTable::Create(Spec(proto::FP64, -1, {4}, RowInitializer::Uniform(0, 1, 1))).value();
  auto b =
      SparseTable::Create(Spec(proto::FP64, -1, {4}, RowInitializer::Uniform(0, 1, 2))).value();
  const int64_t id = 3;
  double x[4], y[4];
  ASSERT_TRUE(a->Lookup(&id, 1, x, "a").ok());
  ASSERT_TRUE(b->Lookup(&id, 1, y, "b").ok());
  EXPECT_NE(x[0], y[0]);
}

TEST(SparseTable, ShardOfSpreadsConsecutiveIdsEvenly) {
  std::map<int, int> count;
  for (int64_t id = 0; id < 30000; ++id) ++count[SparseTable::ShardOf(id, 3)];
  ASSERT_EQ(count.size(), 3u);
  for (const auto& [s, c] : count) EXPECT_NEAR(c, 10000, 500) << s;
  EXPECT_EQ(SparseTable::ShardOf(12345, 1), 0);
  // Pinned values, computed from FORMATS.md's description by an independent implementation: the
  // sharding and the initial rows are a contract between processes and versions.
  EXPECT_EQ(SparseTable::ShardOf(0, 1000), 535);
  EXPECT_EQ(SparseTable::ShardOf(1, 1000), 465);
  EXPECT_EQ(SparseTable::ShardOf(-1, 7), 0);
  EXPECT_EQ(SparseTable::ShardOf(123456789, 3), 2);
  EXPECT_EQ(SparseTable::InitialValue(RowInitializer::Uniform(-0.5, 1.5, 7), 42, 0),
            1.1820028104928302);
}

// The row-wise optimizers compute the same bits as the dense ones on the rows they touch and
// leave the other rows alone (MXNet's lazy update).
TEST(SparseTable, RowUpdatesEqualTheDenseUpdaterOnTouchedRows) {
  for (const OptimizerSpec& opt : {OptimizerSpec{"sgd", {{"learning_rate", 0.1}}},
                                   OptimizerSpec{"sgd",
                                                 {{"learning_rate", 0.1},
                                                  {"momentum", 0.9},
                                                  {"wd", 0.01},
                                                  {"rescale_grad", 0.5},
                                                  {"clip_gradient", 0.3}}},
                                   OptimizerSpec{"elastic", {{"alpha", 0.25}}}}) {
    const int64_t height = 20, w = 3;
    auto table =
        SparseTable::Create(Spec(proto::FP64, height, {w}, RowInitializer::Gaussian(0, 1, 5)))
            .value();
    std::vector<int64_t> all(height);
    std::iota(all.begin(), all.end(), 0);
    Tensor dense(proto::FP64, DDim({height * w}));
    ASSERT_TRUE(
        table->Lookup(all.data(), height, dense.mutable_data<double>(Place::CPU()), "t").ok());
    const std::vector<double> before(dense.data<double>(), dense.data<double>() + height * w);
    auto row = MakeRowUpdater(opt).value();
    auto full = MakeUpdater(opt).value();
    const std::vector<int64_t> touched = {2, 5, 17};
    std::mt19937_64 rng(3);
    std::normal_distribution<double> g;
    for (int step = 0; step < 3; ++step) {
      std::vector<double> grads(touched.size() * w);
      for (double& x : grads) x = g(rng);
      ASSERT_TRUE(table->Apply(*row, touched.data(), touched.size(), grads.data(), 2, "t").ok());
      // The dense path on the touched rows only (a dense tensor of each row).
      for (size_t k = 0; k < touched.size(); ++k) {
        Tensor wr = dense.Slice(touched[k] * w, touched[k] * w + w);
        Tensor gr(proto::FP64, DDim({w}));
        std::copy(grads.begin() + k * w, grads.begin() + (k + 1) * w,
                  gr.mutable_data<double>(Place::CPU()));
        ASSERT_TRUE(full->Update("row" + std::to_string(touched[k]), gr, 2, &wr).ok());
      }
    }
    std::vector<double> got(height * w);
    ASSERT_TRUE(table->Lookup(all.data(), height, got.data(), "t").ok());
    for (int64_t id = 0; id < height; ++id) {
      const bool hit = std::count(touched.begin(), touched.end(), id) > 0;
      for (int64_t j = 0; j < w; ++j) {
        if (hit)
          EXPECT_EQ(got[id * w + j], dense.data<double>()[id * w + j]) << opt.name << " " << id;
        else
          EXPECT_EQ(got[id * w + j], before[id * w + j]) << opt.name << " " << id;
      }
    }
  }
}

TEST(SparseTable, AssignReplacesRowsAndClearForgetsThem) {
  auto t = SparseTable::Create(Spec(proto::FP32, 10, {2}, RowInitializer::Constant(1))).value();
  const int64_t ids[] = {4, 1};
  const float vals[] = {5, 6, 7, 8};
  ASSERT_TRUE(t->Assign(ids, 2, vals, "t").ok());
  float out[4];
  const int64_t q[] = {1, 3};
  ASSERT_TRUE(t->Lookup(q, 2, out, "t").ok());
  EXPECT_EQ(out[0], 7);
  EXPECT_EQ(out[1], 8);
  EXPECT_EQ(out[2], 1);
  EXPECT_EQ(t->Size(), 3);
  EXPECT_EQ(t->Ids(), (std::vector<int64_t>{1, 3, 4}));
  t->Clear();
  EXPECT_EQ(t->Size(), 0);
  ASSERT_TRUE(t->Lookup(q, 2, out, "t").ok());
  EXPECT_EQ(out[0], 1);
}

TEST(SparseTable, BadInputIsAnErrorNamingIt) {
  auto t = SparseTable::Create(Spec(proto::FP32, 10, {2}, RowInitializer::Constant(0))).value();
  const int64_t bad[] = {3, 10};
  float out[4];
  auto st = t->Lookup(bad, 2, out, "pull of key 7");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("pull of key 7: row id 10 (entry 1) is outside [0, 10)"),
            std::string::npos)
      << st.ToString();
  const int64_t twice[] = {3, 3};
  auto sgd = MakeRowUpdater({"sgd", {}}).value();
  EXPECT_NE(t->Apply(*sgd, twice, 2, out, 1, "t").message().find("appears twice"),
            std::string::npos);
  EXPECT_FALSE(SparseTable::Create(Spec(proto::INT32, 10, {2}, {})).ok());
  EXPECT_FALSE(SparseTable::Create(Spec(proto::FP32, 10, {0}, {})).ok());
  EXPECT_FALSE(SparseTable::Create(Spec(proto::FP32, -2, {2}, {})).ok());
  EXPECT_FALSE(
      SparseTable::Create(Spec(proto::FP32, 10, {2}, RowInitializer::Uniform(1, 0, 0))).ok());
  EXPECT_FALSE(
      SparseTable::Create(Spec(proto::FP32, 10, {2}, RowInitializer::Gaussian(0, -1, 0))).ok());
  EXPECT_FALSE(RowInitializer::FromName("xavier", 0, 1, 0).ok());
  EXPECT_FALSE(RowInitializer::FromName("uniform", 0, std::nan(""), 0).ok());
}

// Every method may be called from any thread: concurrent applies and lookups of the same rows
// lose no update.
TEST(SparseTable, ConcurrentAppliesAndLookupsLoseNothing) {
  auto t = SparseTable::Create(Spec(proto::FP64, -1, {4}, RowInitializer::Constant(0))).value();
  auto sgd = MakeRowUpdater({"sgd", {{"learning_rate", 1}}}).value();
  const int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k)
    threads.emplace_back([&, k] {
      const std::vector<int64_t> ids = {1, 2, 1000 + k};
      const std::vector<double> ones(ids.size() * 4, 1.0);
      std::vector<double> out(ids.size() * 4);
      for (int r = 0; r < kRounds; ++r) {
        ASSERT_TRUE(t->Apply(*sgd, ids.data(), ids.size(), ones.data(), 1, "t").ok());
        ASSERT_TRUE(t->Lookup(ids.data(), ids.size(), out.data(), "t").ok());
      }
    });
  for (auto& th : threads) th.join();
  const std::vector<int64_t> ids = {1, 2, 1000, 1003};
  std::vector<double> out(ids.size() * 4);
  ASSERT_TRUE(t->Lookup(ids.data(), ids.size(), out.data(), "t").ok());
  EXPECT_EQ(out[0], -kThreads * kRounds);
  EXPECT_EQ(out[4], -kThreads * kRounds);
  EXPECT_EQ(out[8], -kRounds);
  EXPECT_EQ(out[12], -kRounds);
  EXPECT_EQ(t->Size(), 2 + kThreads);
}

TEST(SparseTable, SaveLoadRoundTripsTheTouchedRows) {
  for (DataType dtype : {proto::FP32, proto::FP64}) {
    auto t =
        SparseTable::Create(Spec(dtype, -1, {2, 2}, RowInitializer::Uniform(-1, 1, 9))).value();
    const std::vector<int64_t> ids = {99, -3, 5, INT64_MAX};
    std::vector<double> buf(ids.size() * 4);
    ASSERT_TRUE(t->Lookup(ids.data(), ids.size(), buf.data(), "t").ok());
    auto sgd = MakeRowUpdater({"sgd", {{"learning_rate", 1}}}).value();
    ASSERT_TRUE(t->Apply(*sgd, ids.data(), 1, buf.data(), 1, "t").ok());
    const std::string path = TempPath("table");
    ASSERT_TRUE(t->Save(path).ok());
    auto back = SparseTable::Load(path);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ((*back)->Ids(), t->Ids());
    EXPECT_EQ((*back)->dtype(), dtype);
    EXPECT_EQ((*back)->spec().row_dims, DDim({2, 2}));
    EXPECT_EQ((*back)->spec().init.seed, 9u);
    std::vector<double> a(ids.size() * 4), b(ids.size() * 4);
    ASSERT_TRUE(t->Lookup(ids.data(), ids.size(), a.data(), "t").ok());
    ASSERT_TRUE((*back)->Lookup(ids.data(), ids.size(), b.data(), "t").ok());
    EXPECT_EQ(a, b);
    // A row never touched before the save gets its initial row after the load too.
    const int64_t fresh = 1234;
    ASSERT_TRUE(t->Lookup(&fresh, 1, a.data(), "t").ok());
    ASSERT_TRUE((*back)->Lookup(&fresh, 1, b.data(), "t").ok());
    EXPECT_EQ(a, b);
    std::remove(path.c_str());
  }
}

// 64-bit FNV-1a with version 1's offset basis (FORMATS.md).
uint64_t Fnv1aV1(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Adagrad per row: state += g^2; w -= 0.5 g / sqrt(state + 1e-6). One state slot.
class AdagradRows : public RowUpdater {
 public:
  int state_slots() const override { return 1; }
  void Update(const float* g, int, float* w, float* st, int64_t n) const override {
    Run(g, w, st, n);
  }
  void Update(const double* g, int, double* w, double* st, int64_t n) const override {
    Run(g, w, st, n);
  }

 private:
  template <typename T>
  static void Run(const T* g, T* w, T* st, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      st[i] += g[i] * g[i];
      w[i] -= T(0.5) * g[i] / std::sqrt(st[i] + T(1e-6));
    }
  }
};

TEST(SparseTable, SaveLoadKeepsOptimizerStateAndScalars) {
  auto t =
      SparseTable::Create(Spec(proto::FP64, -1, {3}, RowInitializer::Uniform(-1, 1, 4))).value();
  AdagradRows updater;
  const RowUpdater* adagrad = &updater;
  const std::vector<int64_t> ids = {7, 2, 40};
  std::vector<double> g = {1, -2, 3, 0.5, 0.25, -1, 2, 2, 2};
  ASSERT_TRUE(t->Apply(*adagrad, ids.data(), 3, g.data(), 1, "t").ok());
  t->SetScalar("beta1_pow", 0.729);
  const std::string path = TempPath("state");
  ASSERT_TRUE(t->Save(path).ok());
  auto back = SparseTable::Load(path).value();
  double pow = 0;
  ASSERT_TRUE(back->GetScalar("beta1_pow", &pow));
  EXPECT_EQ(pow, 0.729);
  EXPECT_FALSE(back->GetScalar("beta2_pow", &pow));
  // The same next update on both: the accumulators came back, so the rows stay equal.
  ASSERT_TRUE(t->Apply(*adagrad, ids.data(), 3, g.data(), 1, "t").ok());
  ASSERT_TRUE(back->Apply(*adagrad, ids.data(), 3, g.data(), 1, "t").ok());
  std::vector<double> a(9), b(9);
  ASSERT_TRUE(t->Lookup(ids.data(), 3, a.data(), "t").ok());
  ASSERT_TRUE(back->Lookup(ids.data(), 3, b.data(), "t").ok());
  EXPECT_EQ(a, b);
  // TakeRowsOf moves rows, state and scalars; the source is left empty.
  auto other =
      SparseTable::Create(Spec(proto::FP64, 100, {3}, RowInitializer::Uniform(-1, 1, 4))).value();
  ASSERT_TRUE(other->TakeRowsOf(back.get()).ok());
  EXPECT_EQ(back->Size(), 0);
  EXPECT_EQ(other->Ids(), t->Ids());
  ASSERT_TRUE(other->GetScalar("beta1_pow", &pow));
  ASSERT_TRUE(t->Apply(*adagrad, ids.data(), 3, g.data(), 1, "t").ok());
  ASSERT_TRUE(other->Apply(*adagrad, ids.data(), 3, g.data(), 1, "t").ok());
  ASSERT_TRUE(t->Lookup(ids.data(), 3, a.data(), "t").ok());
  ASSERT_TRUE(other->Lookup(ids.data(), 3, b.data(), "t").ok());
  EXPECT_EQ(a, b);
  auto narrow =
      SparseTable::Create(Spec(proto::FP64, -1, {2}, RowInitializer::Constant(0))).value();
  EXPECT_FALSE(narrow->TakeRowsOf(t.get()).ok());
  // A version 1 file (rows only, before state was saved) still loads, without state.
  std::string v2 = ReadFile(path).value();
  std::string v1 = v2.substr(0, v2.size() - 8);
  uint64_t stored = 0, standard = 14695981039346656037ull;  // version 2: the standard FNV-1a
  std::memcpy(&stored, v2.data() + v2.size() - 8, 8);
  for (unsigned char c : v1) standard = (standard ^ c) * 1099511628211ull;
  EXPECT_EQ(stored, standard);
  const uint32_t one = 1;
  std::memcpy(&v1[8], &one, 4);
  const size_t tail = 4 + 3 * 3 * 8 + 4 + (4 + 9 + 8);  // slots, state, scalar count, scalar
  v1 = v1.substr(0, v1.size() - tail);
  const uint64_t sum = Fnv1aV1(v1);
  v1.append(reinterpret_cast<const char*>(&sum), 8);
  ASSERT_TRUE(WriteFileAtomic(path, v1).ok());
  auto old = SparseTable::Load(path);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ((*old)->Size(), 3);
  EXPECT_FALSE((*old)->GetScalar("beta1_pow", &pow));
  std::remove(path.c_str());
}

TEST(SparseTable, CorruptFilesAreErrorsNamingTheFile) {
  auto t = SparseTable::Create(Spec(proto::FP32, 100, {3}, RowInitializer::Constant(2))).value();
  const int64_t ids[] = {1, 50};
  float out[6];
  ASSERT_TRUE(t->Lookup(ids, 2, out, "t").ok());
  const std::string path = TempPath("corrupt");
  ASSERT_TRUE(t->Save(path).ok());
  const std::string good = ReadFile(path).value();
  auto expect_corrupt = [&](const std::string& bytes, const std::string& what) {
    ASSERT_TRUE(WriteFileAtomic(path, bytes).ok());
    auto st = SparseTable::Load(path).status();
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << what << ": " << st.ToString();
    EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
  };
  expect_corrupt(good.substr(0, good.size() - 5), "truncated");
  expect_corrupt("", "empty");
  expect_corrupt("LOOMTNSR" + good.substr(8), "wrong magic");
  std::string flipped = good;
  flipped[good.size() / 2] ^= 1;
  expect_corrupt(flipped, "a flipped bit");
  for (size_t cut = 0; cut < good.size(); cut += 7) expect_corrupt(good.substr(0, cut), "cut");
  EXPECT_EQ(SparseTable::Load(path + ".missing").status().code(), StatusCode::kIOError);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom::kvstore
