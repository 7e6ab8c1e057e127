// The engine thread's reports into Prometheus histograms; see engine_metrics.h.
#include "server/engine_metrics.h"

namespace pagoda::server {

void EngineMetrics::on_loaded(const EngineBackend& backend) {
  metrics_ = std::make_unique<Metrics>(backend.model_name(), backend.max_model_len(),
                                       backend.cache_info());
}

void EngineMetrics::on_step(int64_t num_tokens) {
  if (metrics_) metrics_->record_step(num_tokens);
}

void EngineMetrics::on_inter_token_latency(double seconds, int64_t num_tokens) {
  if (metrics_) metrics_->record_inter_token_latency(seconds, num_tokens);
}

void EngineMetrics::on_finished(const FinishedRequest& request) {
  if (metrics_) metrics_->record_finished(request);
}

std::string EngineMetrics::render(const AsyncEngine& engine) const {
  if (engine.state() == AsyncEngine::State::kLoading || metrics_ == nullptr)
    return render_process_metrics(read_process_stats());
  return metrics_->render(engine.stats(), read_process_stats());
}

}  // namespace pagoda::server
