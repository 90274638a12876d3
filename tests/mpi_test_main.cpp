#include "mpi_test_main.h"

#include <gtest/gtest.h>

#include "meshcast/runtime/mpi/mpi_executor.h"

namespace meshcast::testing {

Executor* mpi_world = nullptr;
int mpi_ranks = 0;

}  // namespace meshcast::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto executor = meshcast::make_mpi_executor();
  meshcast::testing::mpi_world = executor.get();
  meshcast::testing::mpi_ranks = static_cast<int>(executor->sum_over_processes(1));
  if (!executor->is_leader()) {  // one report, from rank 0
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  meshcast::testing::mpi_world = nullptr;
  executor.reset();
  return failed;
}
