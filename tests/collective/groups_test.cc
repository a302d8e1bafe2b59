// How a group's ranks meet (collective/groups.h). Device groups (NCCL's transport): ranks bring
// their devices, the last one creates the group's communicators, every rank gets its own; a
// missing rank is a timeout naming it. Exercised with in-process communicators standing in for
// NCCL's.
#include "collective/groups.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "collective/world.h"

namespace loom::collective {
namespace {

DeviceGroupFactory InProcessFactory(std::atomic<int>* calls, std::vector<int>* seen) {
  return [calls, seen](const std::vector<int>& devices) -> StatusOr<DeviceGroupComms> {
    ++*calls;
    *seen = devices;
    LOOM_ASSIGN_OR_RETURN(auto world, InProcessWorld::Create(static_cast<int>(devices.size())));
    std::shared_ptr<InProcessWorld> owned(std::move(world));
    DeviceGroupComms g;
    for (int r = 0; r < owned->size(); ++r) g.comms.push_back(&owned->comm(r));
    g.owner = owned;
    return g;
  };
}

TEST(DeviceGroup, RanksMeetAndTheLastCreatesTheCommunicators) {
  std::atomic<int> calls{0};
  std::vector<int> seen;
  auto factory = InProcessFactory(&calls, &seen);
  const std::vector<int> devices = {5, 3, 7};
  std::vector<int64_t> sums(3, 0);
  std::vector<Status> status(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      GroupOptions o;
      o.timeout_ms = 10000;
      auto h = JoinDeviceGroup("device-group-meet", 3, r, devices[r], o, factory);
      status[r] = h.status();
      if (!h.ok()) return;
      EXPECT_EQ((*h)->rank(), r);
      int64_t v = r + 1;
      status[r] = (*h)->AllReduce(&v, &v, 1, DataType::kInt64, ReduceOp::kSum).Wait();
      sums[r] = v;
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(status[r].ok()) << status[r].ToString();
    EXPECT_EQ(sums[r], 6) << "rank " << r;
  }
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(seen, devices);  // in rank order
}

TEST(DeviceGroup, AMissingRankIsATimeoutNamingIt) {
  std::atomic<int> calls{0};
  std::vector<int> seen;
  auto factory = InProcessFactory(&calls, &seen);
  std::vector<Status> status(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      GroupOptions o;
      o.timeout_ms = 200;
      status[r] = JoinDeviceGroup("device-group-missing", 3, r, r, o, factory).status();
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(calls.load(), 0);
  bool one_named_it = false;
  for (const Status& st : status) {
    EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.ToString();
    one_named_it |= st.message().find("rank(s) 2 of 3 did not call comm_init") != std::string::npos;
  }
  EXPECT_TRUE(one_named_it) << status[0].ToString() << " / " << status[1].ToString();
  // The name is free again: a complete group under it works.
  std::vector<std::thread> again;
  std::vector<Status> st2(2);
  for (int r = 0; r < 2; ++r)
    again.emplace_back([&, r] {
      GroupOptions o;
      st2[r] = JoinDeviceGroup("device-group-missing", 2, r, r, o, factory).status();
    });
  for (auto& t : again) t.join();
  EXPECT_TRUE(st2[0].ok() && st2[1].ok()) << st2[0].ToString() << " / " << st2[1].ToString();
}

TEST(DeviceGroup, SharedDevicesMismatchedSizesAndFactoryErrorsAreReported) {
  std::atomic<int> calls{0};
  std::vector<int> seen;
  auto factory = InProcessFactory(&calls, &seen);
  GroupOptions o;
  o.timeout_ms = 10000;
  // Two ranks on one device, in either order of arrival: both learn it at once (the one that
  // waits long before its timeout).
  std::vector<Status> same(2);
  auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back(
          [&, r] { same[r] = JoinDeviceGroup("device-group-bad", 2, r, 1, o, factory).status(); });
    for (auto& t : ranks) t.join();
  }
  for (const Status& st : same) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_TRUE(st.message().find("ranks 0 and 1 both use device 1") != std::string::npos ||
                st.message().find("ranks 1 and 0 both use device 1") != std::string::npos)
        << st.ToString();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(calls.load(), 0);

  // Unless the group allows shared devices (virtual devices on one GPU).
  std::vector<Status> shared_status(2);
  {
    GroupOptions shared = o;
    shared.shared_devices = true;
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        shared_status[r] =
            JoinDeviceGroup("device-group-shared", 2, r, 4, shared, factory).status();
      });
    for (auto& t : ranks) t.join();
  }
  for (const Status& s : shared_status) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(seen, (std::vector<int>{4, 4}));

  // A rank asking for another group size, in either order of arrival: the first one's group
  // stands (and times out waiting), the second learns the sizes differ.
  o.timeout_ms = 300;
  Status of_two, of_three;
  {
    std::thread two(
        [&] { of_two = JoinDeviceGroup("device-group-size", 2, 0, 1, o, factory).status(); });
    std::thread three(
        [&] { of_three = JoinDeviceGroup("device-group-size", 3, 2, 2, o, factory).status(); });
    two.join();
    three.join();
  }
  const bool two_first =
      of_three.message().find("has 2 ranks, comm_init of rank 2 asks for 3") != std::string::npos;
  const bool three_first =
      of_two.message().find("has 3 ranks, comm_init of rank 0 asks for 2") != std::string::npos;
  EXPECT_TRUE(two_first != three_first) << of_two.ToString() << " / " << of_three.ToString();
  EXPECT_EQ((two_first ? of_two : of_three).code(), StatusCode::kTimeout)
      << of_two.ToString() << " / " << of_three.ToString();

  DeviceGroupFactory failing = [](const std::vector<int>&) -> StatusOr<DeviceGroupComms> {
    return FailedPrecondition("no such device");
  };
  std::vector<Status> st(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      st[r] = JoinDeviceGroup("device-group-failing", 2, r, r, GroupOptions{}, failing).status();
    });
  for (auto& t : ranks) t.join();
  for (const Status& s : st) EXPECT_NE(s.message().find("no such device"), std::string::npos);
}

TEST(DeviceGroup, CudaP2PGroupWithoutAGpuFailsCleanly) {
  // Without a GPU (or without CUDA in the build) joining fails with a status, never a crash.
  Status st = JoinCudaP2PGroup("cuda-p2p-none", 1, 0, 0, GroupOptions{}).status();
  if (st.ok()) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_TRUE(st.code() == StatusCode::kFailedPrecondition ||
              st.code() == StatusCode::kUnimplemented)
      << st.ToString();
}

}  // namespace
}  // namespace loom::collective
