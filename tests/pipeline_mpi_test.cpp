// The pipeline runtime under mpirun, one rank per device: every schedule x strategy x overlap with
// real compute matches the whole model (the test models whose cluster has as many devices as
// there are ranks: 6 for the chain and the interleaved model, 8 for the skip model).
#include <gtest/gtest.h>

#include "meshcast/runtime/mpi/mpi_executor.h"
#include "mpi_test_main.h"
#include "pipeline_models.h"

namespace meshcast::pipeline {
namespace {

int& ranks = testing::mpi_ranks;  // set by the shared main (mpi_test_main.cpp)

std::unique_ptr<Executor> mpi_executor() {
  return make_mpi_executor();
}

// Interleaved-1F1B with two chunks per stage (6 ranks).
TEST(PipelineMpi, InterleavedChunksMatchTheWholeModelForEveryStrategy) {
  const PipelineModel model = model_from_json(test_models::interleaved_model());
  if (model.cluster.devices() != ranks) {
    GTEST_SKIP() << "the interleaved model has " << model.cluster.devices() << " devices, not "
                 << ranks;
  }
  test_models::check_every_method(model, mpi_executor, false, test_models::kInterleavedChunks);
}

TEST(PipelineMpi, RealGradientsMatchTheWholeModelForEveryMethod) {
  int played = 0;
  for (const auto& doc : {test_models::chain_model(), test_models::skip_model()}) {
    const PipelineModel model = model_from_json(doc);
    if (model.cluster.devices() != ranks) continue;
    test_models::check_every_method(model, mpi_executor, false);
    ++played;
  }
  EXPECT_EQ(played, 1) << "run with 6 or 8 ranks, not " << ranks;
}

}  // namespace
}  // namespace meshcast::pipeline
