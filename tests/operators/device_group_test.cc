// The rendezvous behind comm_init on CUDA places (transport nccl): ranks bring their devices,
// the last one creates the group's communicators, every rank gets its own; a missing rank is a
// timeout naming it. Exercised here with in-process communicators standing in for NCCL's.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "collective/world.h"
#include "executor/executor.h"
#include "operators/collective/comm.h"

namespace loom::ops {
namespace {

DeviceGroupFactory InProcessFactory(std::atomic<int>* calls, std::vector<int>* seen) {
  return [calls, seen](const std::vector<int>& devices) -> StatusOr<DeviceGroupComms> {
    ++*calls;
    *seen = devices;
    LOOM_ASSIGN_OR_RETURN(auto world,
                          collective::InProcessWorld::Create(static_cast<int>(devices.size())));
    std::shared_ptr<collective::InProcessWorld> owned(std::move(world));
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
      EXPECT_EQ(h->comm->rank(), r);
      int64_t v = r + 1;
      status[r] =
          h->comm->AllReduce(&v, &v, 1, collective::DataType::kInt64, collective::ReduceOp::kSum)
              .Wait();
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
  o.timeout_ms = 300;
  o.timeout_ms = 10000;
  // Two ranks on one device: both learn it at once (the waiting rank long before its timeout).
  Status first;
  auto t0 = std::chrono::steady_clock::now();
  std::thread waiting(
      [&] { first = JoinDeviceGroup("device-group-bad", 2, 0, 1, o, factory).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Status same_device = JoinDeviceGroup("device-group-bad", 2, 1, 1, o, factory).status();
  EXPECT_NE(same_device.message().find("ranks 0 and 1 both use device 1"), std::string::npos)
      << same_device.ToString();
  waiting.join();
  EXPECT_EQ(first.code(), StatusCode::kInvalidArgument) << first.ToString();
  EXPECT_NE(first.message().find("ranks 0 and 1 both use device 1"), std::string::npos);
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

  // A rank asking for another group size.
  o.timeout_ms = 300;
  Status waiting_status;
  std::thread waiting2(
      [&] { waiting_status = JoinDeviceGroup("device-group-size", 2, 0, 1, o, factory).status(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Status other_size = JoinDeviceGroup("device-group-size", 3, 2, 2, o, factory).status();
  EXPECT_NE(other_size.message().find("has 2 ranks, comm_init of rank 2 asks for 3"),
            std::string::npos)
      << other_size.ToString();
  waiting2.join();
  EXPECT_EQ(waiting_status.code(), StatusCode::kTimeout) << waiting_status.ToString();

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

TEST(DeviceGroup, CommInitRefusesTransportsThatDoNotFitThePlace) {
  for (const std::string transport : {"nccl", "cuda_p2p"}) {
    ProgramDesc p;
    BlockDesc* b = p.GlobalBlock();
    b->Var("comm").SetType(proto::VarType::COMMUNICATOR);
    b->AppendOp(
        "comm_init", {}, {{"Comm", {"comm"}}},
        {{"nranks", 1}, {"rank", 0}, {"group", std::string("g")}, {"transport", transport}});
    Executor exe(Place::CPU());
    Scope scope;
    Status st = exe.Run(p, &scope);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("transport '" + transport + "' cannot run on place cpu:0 (" +
                                transport + " needs CUDA places)"),
              std::string::npos)
        << st.ToString();
  }
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
}  // namespace loom::ops
