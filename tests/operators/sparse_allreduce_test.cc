// sparse_allreduce over in-process ranks (threads): every rank ends with the same merged rows,
// equal to the sum (or average, or weighted sum) of every rank's rows, whether the exchange goes
// as rows or dense; mismatched tables are an error on every rank.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <thread>

#include "collective/groups.h"
#include "framework/comm_var.h"
#include "framework/operator.h"
#include "framework/scope.h"

namespace loom {
namespace {

struct RankInput {
  std::vector<int64_t> rows;
  std::vector<double> values;  // rows.size() * width
  int64_t height = 0;
};

constexpr int kWidth = 3;

// Runs sparse_allreduce on n threads; returns each rank's result or error.
std::vector<StatusOr<SelectedRows>> RunRanks(const std::vector<RankInput>& in,
                                             const std::string& reduce_type, float threshold,
                                             const std::vector<double>& weights = {}) {
  const int n = static_cast<int>(in.size());
  static int group_serial = 0;
  const std::string group = "sparse_test_" + std::to_string(group_serial++);
  std::vector<StatusOr<SelectedRows>> out(n, Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto t = collective::FindTransport("inprocess");
      collective::GroupOptions o;
      o.timeout_ms = 20000;
      auto comm = collective::JoinGroup(**t, group, n, r, 0, o);
      if (!comm.ok()) {
        out[r] = comm.status();
        return;
      }
      Scope scope;
      scope.Var("comm")->GetMutable<CommHandle>()->comm = *comm;
      SelectedRows* g = scope.Var("g")->GetMutable<SelectedRows>();
      g->rows = in[r].rows;
      g->height = in[r].height;
      g->value = Tensor(proto::FP64, DDim{static_cast<int64_t>(in[r].rows.size()), kWidth});
      double* v = g->value.mutable_data<double>(Place::CPU());
      std::copy(in[r].values.begin(), in[r].values.end(), v);
      proto::OpDesc desc;
      OpDesc op(&desc);
      op.SetType("sparse_allreduce");
      op.SetInput("X", {"g"});
      op.SetInput("Comm", {"comm"});
      op.SetOutput("Out", {"g"});
      op.SetAttr("reduce_type", reduce_type);
      op.SetAttr("dense_threshold", threshold);
      if (!weights.empty()) {
        Tensor* w = scope.Var("w")->GetMutable<Tensor>();
        w->Resize({1});
        w->mutable_data<double>(Place::CPU())[0] = weights[r];
        op.SetInput("Weight", {"w"});
      }
      auto prepared = Operator::Create(op, 0, 0);
      if (!prepared.ok()) {
        out[r] = prepared.status();
        return;
      }
      DeviceContext dev(Place::CPU());
      Status st = (*prepared)->Run(&scope, dev);
      if (!st.ok()) {
        out[r] = st;
        return;
      }
      out[r] = scope.FindVar("g")->Get<SelectedRows>();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// The expected merged rows: id -> summed (weighted) row.
std::map<int64_t, std::vector<double>> Expected(const std::vector<RankInput>& in,
                                                const std::vector<double>& weights, double post) {
  std::map<int64_t, std::vector<double>> want;
  for (size_t r = 0; r < in.size(); ++r)
    for (size_t k = 0; k < in[r].rows.size(); ++k) {
      auto& row = want[in[r].rows[k]];
      row.resize(kWidth, 0.0);
      for (int j = 0; j < kWidth; ++j)
        row[j] += in[r].values[k * kWidth + j] * (weights.empty() ? 1.0 : weights[r]);
    }
  for (auto& [id, row] : want)
    for (double& x : row) x *= post;
  return want;
}

void ExpectRows(const SelectedRows& got, const std::map<int64_t, std::vector<double>>& want) {
  ASSERT_EQ(got.rows.size(), want.size());
  const double* v = got.value.data<double>();
  size_t k = 0;
  for (const auto& [id, row] : want) {
    EXPECT_EQ(got.rows[k], id);
    for (int j = 0; j < kWidth; ++j) EXPECT_NEAR(v[k * kWidth + j], row[j], 1e-12) << id;
    ++k;
  }
}

std::vector<RankInput> RandomInputs(int n, int64_t height, int max_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<RankInput> in(n);
  for (auto& r : in) {
    r.height = height;
    int count = static_cast<int>(rng() % (max_rows + 1));  // may be 0: a rank with no rows
    for (int k = 0; k < count; ++k) {
      r.rows.push_back(static_cast<int64_t>(rng() % height));
      for (int j = 0; j < kWidth; ++j)
        r.values.push_back(std::uniform_real_distribution<double>(-1, 1)(rng));
    }
  }
  return in;
}

TEST(SparseAllReduce, RowsAndDensePathsGiveTheMergedSumOnEveryRank) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    const int n = 2 + static_cast<int>(seed % 3);
    auto in = RandomInputs(n, 40, 8, seed);
    auto want = Expected(in, {}, 1.0);
    // 1e9: always rows; 1e-9: always dense; -1: the cost model.
    for (float threshold : {1e9f, 1e-9f, -1.0f}) {
      auto got = RunRanks(in, "sum", threshold);
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(got[r].ok()) << got[r].status().message();
        ExpectRows(*got[r], want);
        EXPECT_EQ(got[r]->height, 40);
        EXPECT_EQ(got[r]->rows, got[0]->rows);
      }
    }
  }
}

TEST(SparseAllReduce, AverageAndSampleWeights) {
  auto in = RandomInputs(3, 10, 6, 99);
  in[0].rows.push_back(4);  // rank 0 surely has a row
  in[0].values.insert(in[0].values.end(), {1, 2, 3});
  auto avg = RunRanks(in, "avg", 1e9f);
  for (auto& g : avg) {
    ASSERT_TRUE(g.ok()) << g.status().message();
    ExpectRows(*g, Expected(in, {}, 1.0 / 3));
  }
  std::vector<double> w = {0.5, 0.25, 0.25};
  auto weighted = RunRanks(in, "sum", 1e-9f, w);
  for (auto& g : weighted) {
    ASSERT_TRUE(g.ok()) << g.status().message();
    ExpectRows(*g, Expected(in, w, 1.0));
  }
}

TEST(SparseAllReduce, RanksWithDifferentTablesFailOnEveryRank) {
  auto in = RandomInputs(2, 10, 4, 5);
  in[1].height = 11;
  auto got = RunRanks(in, "sum", -1.0f);
  for (auto& g : got) {
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("different tables"), std::string::npos)
        << g.status().message();
  }
}

}  // namespace
}  // namespace loom
