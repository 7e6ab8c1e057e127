// The engine thread's reports into Prometheus histograms; see engine_metrics.h.
#include "server/engine_metrics.h"

namespace pagoda::server {

void EngineMetrics::on_loaded(const EngineBackend& backend) {
  owned_ = std::make_unique<Metrics>(backend.model_name(), backend.max_model_len(),
                                     backend.cache_info());
  metrics_.store(owned_.get(), std::memory_order_release);
}

// The engine thread's own calls read owned_ (it set it); only render() needs the atomic.
void EngineMetrics::on_step(int64_t num_tokens) {
  if (owned_) owned_->record_step(num_tokens);
}

void EngineMetrics::on_inter_token_latency(double seconds, int64_t num_tokens) {
  if (owned_) owned_->record_inter_token_latency(seconds, num_tokens);
}

void EngineMetrics::on_finished(const FinishedRequest& request) {
  if (owned_) owned_->record_finished(request);
}

std::string EngineMetrics::render(const AsyncEngine& engine) const {
  Metrics* metrics = metrics_.load(std::memory_order_acquire);
  if (metrics == nullptr) return render_process_metrics(read_process_stats());
  return metrics->render(engine.stats(), read_process_stats());
}

}  // namespace pagoda::server
