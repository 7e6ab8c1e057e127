// make_proposer: the one place that maps a speculative method to its proposer.
#include "engine/proposer.h"

#include "engine/mtp_proposer.h"
#include "engine/ngram_proposer.h"
#include "util/error.h"

namespace pagoda {

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config, Model& model,
                                        KvCache& cache) {
  if (!config.enabled()) return nullptr;
  if (config.method == "ngram") return std::make_unique<NgramProposer>(config);
  if (config.method == "mtp") return std::make_unique<MtpProposer>(config, model, cache);
  fail("--speculative-config: no proposer for method \"{}\"", config.method);
}

}  // namespace pagoda
