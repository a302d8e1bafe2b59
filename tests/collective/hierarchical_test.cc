// The hierarchical allreduce with every level in process: two "processes" of three places each
// (an in-process world each), their places 0 joined by a third world standing for MPI.
#include <gtest/gtest.h>

#include <thread>

#include "collective/hierarchical.h"
#include "collective/world.h"

namespace loom::collective {
namespace {

TEST(Hierarchical, EveryPlaceGetsTheSumOverEveryPlaceOfEveryProcess) {
  const int procs = 2, places = 3;
  const size_t count = 100003;  // not a multiple of anything
  std::vector<std::unique_ptr<InProcessWorld>> local;
  for (int p = 0; p < procs; ++p) local.push_back(InProcessWorld::Create(places).value());
  auto global = InProcessWorld::Create(procs).value();
  std::vector<std::vector<double>> data(procs * places);
  for (int i = 0; i < procs * places; ++i) data[i].assign(count, i + 1.0);
  std::vector<Status> st(procs * places);
  std::vector<std::thread> threads;
  for (int p = 0; p < procs; ++p)
    for (int q = 0; q < places; ++q)
      threads.emplace_back([&, p, q] {
        const int i = p * places + q;
        st[i] = HierarchicalAllReduce(local[p]->comm(q), q == 0 ? &global->comm(p) : nullptr,
                                      data[i].data(), data[i].data(), count, DataType::kFloat64,
                                      ReduceOp::kSum);
      });
  for (auto& t : threads) t.join();
  for (int i = 0; i < procs * places; ++i) {
    ASSERT_TRUE(st[i].ok()) << st[i].ToString();
    EXPECT_EQ(data[i][0], 21.0);  // 1 + 2 + ... + 6
    EXPECT_EQ(data[i][count - 1], 21.0);
  }
}

TEST(Hierarchical, TheCrossProcessCommunicatorBelongsToLocalRankZeroOnly) {
  auto local = InProcessWorld::Create(1).value();
  double x = 1;
  Status st =
      HierarchicalAllReduce(local->comm(0), nullptr, &x, &x, 1, DataType::kFloat64, ReduceOp::kSum);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(HierarchicalAllReduce(local->comm(0), &local->comm(0), &x, &x, 1, DataType::kFloat64,
                                     ReduceOp::kAvg)
                   .ok());
}

}  // namespace
}  // namespace loom::collective
