// The server's observer of the streaming client: once the engine has loaded it holds the
// Prometheus Metrics (model name, max_model_len, cache info are known only then), records what
// the engine thread reports into its histograms, and renders /metrics in every engine state.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "pagoda/async_engine.h"
#include "server/metrics.h"

namespace pagoda::server {

class EngineMetrics final : public AsyncEngineObserver {
 public:
  // Engine thread.
  void on_loaded(const EngineBackend& backend) override;
  void on_step(int64_t num_tokens) override;
  void on_inter_token_latency(double seconds, int64_t num_tokens) override;
  void on_finished(const FinishedRequest& request) override;

  // Any thread: everything once `engine` loaded (also after it died, with its last stats); only
  // the process_* series while loading or after a failed load.
  std::string render(const AsyncEngine& engine) const;

 private:
  // Set once, on the engine thread, when the engine has loaded; published through the atomic
  // (not the engine's state, which begin_drain may move on while the model still loads).
  std::unique_ptr<Metrics> owned_;
  std::atomic<Metrics*> metrics_{nullptr};
};

}  // namespace pagoda::server
