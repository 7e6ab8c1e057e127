#include "model/pipeline_parallel.h"

#include "util/error.h"

namespace pagoda {

LayerRange pipeline_stage_layers(int64_t num_layers, int num_stages, int stage) {
  if (num_stages < 1 || stage < 0 || stage >= num_stages)
    fail("pipeline parallelism: stage {} of {} does not exist", stage, num_stages);
  if (num_layers < num_stages) {
    fail(
        "pipeline parallelism: {} layers do not fill {} stages; use a pipeline-parallel size of "
        "at most {}",
        num_layers, num_stages, num_layers);
  }
  const int64_t base = num_layers / num_stages;
  const int64_t extra = num_layers % num_stages;
  // Stage s gets one extra layer when it is among the `extra` stages right before the last.
  auto count = [&](int64_t s) {
    return base + (s >= num_stages - 1 - extra && s < num_stages - 1 ? 1 : 0);
  };
  LayerRange range;
  for (int64_t s = 0; s < stage; ++s) range.begin += count(s);
  range.end = range.begin + count(stage);
  return range;
}

}  // namespace pagoda
