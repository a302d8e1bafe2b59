// Tensor, Variable, Scope, Place, allocators and DDim.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "base/host_memory.h"
#include "framework/allocator.h"
#include "framework/scope.h"
#include "framework/tensor.h"

namespace loom {
namespace {

TEST(DDimTest, NumelAndCompatibility) {
  DDim d{2, 3, 4};
  EXPECT_EQ(d.numel(), 24);
  EXPECT_EQ(d.product(1, 3), 12);
  EXPECT_EQ(DDim({-1, 3}).numel(), -1);
  EXPECT_TRUE(DimsCompatible(DDim{-1, 3}, DDim{5, 3}));
  EXPECT_FALSE(DimsCompatible(DDim{-1, 3}, DDim{5, 4}));
  EXPECT_FALSE(DimsCompatible(DDim{3}, DDim{3, 1}));
  EXPECT_EQ(FlattenTo2D(d, 1), (DDim{2, 12}));
  EXPECT_EQ(d.ToString(), "[2, 3, 4]");
}

TEST(PlaceTest, Parse) {
  EXPECT_EQ(ParsePlace("cpu:3").value(), Place::CPU(3));
  EXPECT_EQ(ParsePlace("cuda:1").value(), Place::CUDA(1));
  EXPECT_EQ(ParsePlace("cpu").value(), Place::CPU(0));
  EXPECT_FALSE(ParsePlace("tpu:0").ok());
  EXPECT_FALSE(ParsePlace("cpu:x").ok());
  EXPECT_FALSE(ParsePlace("cpu:-1").ok());
}

TEST(TensorTest, AllocateShareAndSlice) {
  Tensor t(proto::FP32, DDim{4, 2});
  float* p = t.mutable_data<float>(Place::CPU());
  for (int i = 0; i < 8; ++i) p[i] = static_cast<float>(i);
  Tensor shared = t;
  EXPECT_EQ(shared.data<float>(), t.data<float>());
  Tensor rows = t.Slice(1, 3);
  EXPECT_EQ(rows.dims(), (DDim{2, 2}));
  EXPECT_EQ(rows.data<float>()[0], 2.0f);
  Tensor copy;
  TensorCopy(t, Place::CPU(), &copy);
  EXPECT_NE(copy.data<float>(), t.data<float>());
  EXPECT_EQ(copy.data<float>()[7], 7.0f);
  // Shrinking keeps the allocation; growing reallocates.
  t.Resize(DDim{2, 2});
  EXPECT_EQ(t.mutable_data<float>(Place::CPU()), p);
  t.Resize(DDim{100});
  EXPECT_NE(t.mutable_data<float>(Place::CPU()), nullptr);
}

TEST(TensorTest, ZeroSizeTensor) {
  Tensor t(proto::FP64, DDim{0, 5});
  EXPECT_NE(t.mutable_data<double>(Place::CPU()), nullptr);
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
}

TEST(TensorTest, CpuPlacesHaveIndependentAllocators) {
  Allocator* a0 = GetAllocator(Place::CPU(0));
  Allocator* a1 = GetAllocator(Place::CPU(1));
  ASSERT_NE(a0, a1);
  size_t before0 = a0->bytes_in_use(), before1 = a1->bytes_in_use();
  {
    Tensor t(proto::FP32, DDim{1000});
    t.mutable_data<float>(Place::CPU(1));
    EXPECT_EQ(a1->bytes_in_use(), before1 + 4000);
    EXPECT_EQ(a0->bytes_in_use(), before0);
    EXPECT_EQ(t.place(), Place::CPU(1));
  }
  EXPECT_EQ(a1->bytes_in_use(), before1);
  EXPECT_GE(a1->peak_bytes(), before1 + 4000);
}

// Large freed blocks are kept and handed to the next allocation of the same rounded size
// (training steps reallocate the same sizes); small ones go back to malloc. Accounting counts
// only live blocks either way.
TEST(TensorTest, LargeFreedBlocksAreReused) {
  Allocator* a = GetAllocator(Place::CPU(3));
  size_t before = a->bytes_in_use();
  const size_t big = (1 << 20) + 100;  // rounds up to the next 4 KiB
  void* p = a->Allocate(big);
  std::memset(p, 7, big);
  EXPECT_EQ(a->bytes_in_use(), before + big);
  a->Free(p, big);
  EXPECT_EQ(a->bytes_in_use(), before);
  void* q = a->Allocate(big + 50);  // same 4 KiB-rounded size
  EXPECT_EQ(q, p);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
  void* r = a->Allocate(big);  // the cached block is taken: a new one
  EXPECT_NE(r, q);
  EXPECT_EQ(a->bytes_in_use(), before + 2 * big + 50);
  a->Free(q, big + 50);
  a->Free(r, big);
  EXPECT_EQ(a->bytes_in_use(), before);
}

// The VmFlags of the mapping holding `p` in /proc/self/smaps ("" when not found).
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(' ') > line.find('-')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(TensorTest, BlocksOfTwoMiBAreHugePageMappings) {
  if (!HugeHostBlocks()) GTEST_SKIP() << "LOOM_HUGE_PAGES=0 in the environment";
  Allocator* a = GetAllocator(Place::CPU(5));
  const size_t big = (3 << 20) + 100;
  auto* p = static_cast<unsigned char*>(a->Allocate(big));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugeHostBlockBytes, 0u);
  std::memset(p, 7, big);
  EXPECT_EQ(p[big - 1], 7);
  // The kernel takes the advice where it has transparent huge pages at all.
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp) {
    EXPECT_NE(VmFlagsOf(p).find(" hg"), std::string::npos) << VmFlagsOf(p);
  }
  a->Free(p, big);
  void* q = a->Allocate(big);  // the cached block again, still a mapping of its own
  EXPECT_EQ(q, p);
  a->Free(q, big);
  // Under 2 MiB: malloc's memory, 64-byte aligned, never advised.
  void* small = a->Allocate((1 << 20) + 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 64, 0u);
  a->Free(small, (1 << 20) + 3);
}

TEST(HostMemoryTest, HugeBlocksAreZeroedAlignedAndReturned) {
  for (size_t bytes : {kHugeHostBlockBytes, kHugeHostBlockBytes + 1, size_t{9} << 20}) {
    auto* p = static_cast<unsigned char*>(AllocateHugeHostBlock(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugeHostBlockBytes, 0u) << bytes;
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i += 509) nonzero += p[i] != 0;
    EXPECT_EQ(nonzero + p[bytes - 1], 0u) << bytes;
    std::memset(p, 1, bytes);
    FreeHugeHostBlock(p, bytes);
  }
  EXPECT_EQ(AllocateHugeHostBlock(0), nullptr);
  EXPECT_EQ(AllocateHugeHostBlock(SIZE_MAX), nullptr);
}

TEST(HostMemoryTest, FreedHugeBlocksAreUnmapped) {
  // Checked in a child process, whose only thread is this one: in the test process another
  // thread may map the freed range again between the munmap and the read of smaps.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    for (size_t bytes : {kHugeHostBlockBytes, kHugeHostBlockBytes + 1, size_t{9} << 20}) {
      auto* p = static_cast<unsigned char*>(AllocateHugeHostBlock(bytes));
      if (p == nullptr) _exit(2);
      p[bytes - 1] = 1;
      if (VmFlagsOf(p).empty() || VmFlagsOf(p + bytes - 1).empty()) _exit(3);
      FreeHugeHostBlock(p, bytes);
      if (!VmFlagsOf(p).empty() || !VmFlagsOf(p + bytes - 1).empty()) _exit(4);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid) << std::strerror(errno);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "2: no memory for a block; 3: a block not mapped while held; 4: a block still mapped "
         "after FreeHugeHostBlock";
}

TEST(Float16Test, RoundTripsRepresentableValues) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 1000.5f, std::ldexp(1.0f, -24)}) {
    EXPECT_EQ(static_cast<float>(float16(f)), f) << f;
  }
  EXPECT_NEAR(static_cast<float>(float16(0.1f)), 0.1f, 1e-4);
}

TEST(ScopeTest, HierarchyAndLookup) {
  Scope root;
  Variable* a = root.Var("a");
  EXPECT_EQ(root.Var("a"), a);
  Scope& kid = root.NewScope();
  EXPECT_EQ(kid.FindVar("a"), a);
  EXPECT_EQ(kid.FindLocalVar("a"), nullptr);
  Variable* shadow = kid.Var("a");
  EXPECT_NE(shadow, a);
  EXPECT_EQ(kid.FindVar("a"), shadow);
  EXPECT_EQ(root.FindVar("missing"), nullptr);
  EXPECT_NE(kid.serial(), root.serial());
  EXPECT_TRUE(root.EraseLocalVar("a"));
  EXPECT_EQ(root.FindVar("a"), nullptr);
  root.DeleteScope(&kid);
}

TEST(VariableTest, HoldsOneType) {
  Variable v;
  EXPECT_FALSE(v.IsInitialized());
  v.GetMutable<Tensor>()->Resize(DDim{3});
  EXPECT_TRUE(v.IsType<Tensor>());
  EXPECT_FALSE(v.IsType<int>());
  EXPECT_EQ(v.Get<Tensor>().dims(), DDim{3});
}

TEST(ScopeTest, DeleteScopesDropsExactlyTheGivenKids) {
  Scope root;
  auto token = std::make_shared<int>(7);
  std::vector<Scope*> kids;
  for (int i = 0; i < 4; ++i) {
    kids.push_back(&root.NewScope());
    *kids.back()->Var("t")->GetMutable<std::shared_ptr<int>>() = token;
  }
  EXPECT_EQ(token.use_count(), 5);
  root.DeleteScopes({kids[0], kids[2]});
  EXPECT_EQ(token.use_count(), 3);  // kids 1 and 3 still hold it
  EXPECT_NE(kids[1]->FindLocalVar("t"), nullptr);
  root.DeleteScopes({});
  root.DeleteScopes({kids[1], kids[3]});
  EXPECT_EQ(token.use_count(), 1);
}

}  // namespace
}  // namespace loom
