// comm_init on places its transport cannot serve (the group rendezvous itself:
// tests/collective/groups_test.cc).
#include <gtest/gtest.h>

#include "executor/executor.h"
#include "framework/program_desc.h"

namespace loom::ops {
namespace {

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

}  // namespace
}  // namespace loom::ops
