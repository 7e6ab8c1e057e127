// make_proposer: the one place that maps a speculative method to its proposer.
#include "engine/proposer.h"

#include "engine/draft_model_proposer.h"
#include "engine/mtp_proposer.h"
#include "engine/ngram_proposer.h"
#include "util/error.h"

namespace pagoda {

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config, Model& model,
                                        KvCache& cache, Model* draft_model, KvCache* draft_cache) {
  if (!config.enabled()) return nullptr;
  if (config.method == "ngram") return std::make_unique<NgramProposer>(config);
  if (config.method == "mtp") return std::make_unique<MtpProposer>(config, model, cache);
  if (config.method == "draft_model") {
    if (draft_model == nullptr || draft_cache == nullptr) {
      fail("--speculative-config: method draft_model without a draft model and its cache");
    }
    return std::make_unique<DraftModelProposer>(*draft_model, *draft_cache,
                                                config.num_speculative_tokens);
  }
  fail("--speculative-config: no proposer for method \"{}\"", config.method);
}

}  // namespace pagoda
