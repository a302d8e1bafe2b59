// gtest main for the MPI collective tests: every rank runs every test; MPI is initialized before
// and finalized after. Only rank 0 prints the progress of passing tests.
#include <gtest/gtest.h>

#include <cstdio>

#include "collective/transport/mpi.h"

namespace {

// On ranks other than 0: print failed assertions only, tagged with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace loom::collective;
  loom::Status init = MpiInit(&argc, &argv);
  if (!init.ok()) {
    std::fprintf(stderr, "collective_mpi_test: %s\n", init.ToString().c_str());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (MpiWorldRank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(MpiWorldRank()));
  }
  const int result = RUN_ALL_TESTS();
  if (MpiWorldRank() == 0)
    std::printf("ranks: %d, MPI thread level: %s\n", MpiWorldSize(), MpiThreadLevel());
  (void)MpiFinalize();
  return result;
}
