#include "base/cpu_affinity.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace loom {
namespace {

TEST(CpuAffinity, AllowedCpusAreTheProcessMaskInOrder) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(static_cast<int>(cpus.size()), CPU_COUNT(&set));
  for (int c : cpus) EXPECT_TRUE(CPU_ISSET(c, &set)) << c;
}

TEST(CpuAffinity, IndicesGoRoundRobinOverTheAllowedCpus) {
  const std::vector<int> cpus = AllowedCpus();
  const int n = static_cast<int>(cpus.size());
  for (int i = 0; i < 3 * n; ++i) EXPECT_EQ(CpuForIndex(i), cpus[i % n]) << i;
  EXPECT_EQ(CpuForIndex(-1), cpus[n - 1]);
}

TEST(CpuAffinity, APinnedThreadRunsOnlyOnItsCpu) {
  const std::vector<int> cpus = AllowedCpus();
  const int target = cpus.back();
  std::thread t([&] {
    ASSERT_TRUE(PinCurrentThreadToCpu(target).ok());
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);  // 0: the calling thread
    EXPECT_EQ(CPU_COUNT(&set), 1);
    EXPECT_TRUE(CPU_ISSET(target, &set));
    std::this_thread::yield();
    EXPECT_EQ(sched_getcpu(), target);
  });
  t.join();
  // The process's own mask is untouched.
  EXPECT_EQ(AllowedCpus(), cpus);
}

TEST(CpuAffinity, ImpossibleCpusAreErrorsNamingTheCpu) {
  Status negative = PinCurrentThreadToCpu(-1);
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.message().find("CPU -1"), std::string::npos) << negative.message();
  Status beyond = PinCurrentThreadToCpu(1 << 20);
  EXPECT_EQ(beyond.code(), StatusCode::kInvalidArgument);
  // A CPU outside the process's mask (where one exists below the limit): the kernel refuses,
  // and the thread keeps its mask.
  const std::vector<int> cpus = AllowedCpus();
  int outside = 0;
  while (std::find(cpus.begin(), cpus.end(), outside) != cpus.end()) ++outside;
  std::thread t([&] {
    Status s = PinCurrentThreadToCpu(outside);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("CPU " + std::to_string(outside)), std::string::npos) << s.message();
    EXPECT_EQ(AllowedCpus(), cpus);
  });
  t.join();
}

TEST(CpuAffinity, CurrentCpuIsWhereAPinnedThreadRuns) {
  const std::vector<int> cpus = AllowedCpus();
  for (int target : {cpus.front(), cpus.back()}) {
    std::thread t([&] {
      ASSERT_TRUE(PinCurrentThreadToCpu(target).ok());
      std::this_thread::yield();
      EXPECT_EQ(CurrentCpu(), target);
    });
    t.join();
  }
}

TEST(CpuAffinity, CrowdedMeansMoreThreadsOnOneCpuThanAnEvenSpread) {
  // 2 threads, 2 CPUs: together on one is crowded, one each is not.
  EXPECT_TRUE(CrowdedCpus({0, 2}, 2));
  EXPECT_FALSE(CrowdedCpus({1, 1}, 2));
  // 4 threads on 2 CPUs: 2 and 2 is the even spread, 3 and 1 or 4 on one crowd.
  EXPECT_FALSE(CrowdedCpus({2, 2}, 2));
  EXPECT_TRUE(CrowdedCpus({3, 1}, 2));
  EXPECT_TRUE(CrowdedCpus({0, 4}, 2));
  // 3 threads on 2 CPUs: 2 and 1 is as even as it gets.
  EXPECT_FALSE(CrowdedCpus({2, 1}, 2));
  // One CPU available: nothing to spread over; where CPUs are many, two on one still crowd.
  EXPECT_FALSE(CrowdedCpus({0, 0, 2}, 1));
  EXPECT_FALSE(CrowdedCpus({2}, 0));
  EXPECT_TRUE(CrowdedCpus({0, 1, 0, 2, 0, 0, 0, 1}, 8));
  // No threads counted (CPUs unknown): not crowded.
  EXPECT_FALSE(CrowdedCpus({}, 2));
  EXPECT_FALSE(CrowdedCpus({0, 0}, 2));
}

}  // namespace
}  // namespace loom
