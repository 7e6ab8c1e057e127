// `pagoda make-draft`: derive a draft model from a target (a copy, its first layers, noise on
// its matrices) for measuring speculative decoding at chosen acceptance rates
// (demo/draft_derivation.h, bench/spec_decode_acceptance.sh).
#include <memory>

#include <fmt/format.h>

#include "demo/draft_derivation.h"
#include "tools/pagoda/commands.h"

namespace pagoda::cli {

Command register_make_draft(CLI::App& app) {
  auto o = std::make_shared<DraftDerivation>();
  CLI::App* sub = app.add_subcommand(
      "make-draft",
      "Derive a draft model from a target: a copy, its first layers, noise on its matrices "
      "(speculative decoding benchmarks)");
  sub->add_option("--from", o->from, "The target model's directory (float safetensors)")
      ->required();
  sub->add_option("--out", o->out, "Output directory")->required();
  sub->add_option("--num-layers", o->num_layers, "Decoder layers kept, the first ones (0: all)")
      ->capture_default_str();
  sub->add_option("--noise", o->noise,
                  "Each matrix w becomes w + noise * rms(w) * N(0, 1) (0: exact copy)")
      ->capture_default_str();
  sub->add_flag("--randomize", o->randomize,
                "Each matrix becomes rms(w) * N(0, 1): an unrelated model of the same shape");
  sub->add_option("--seed", o->seed)->capture_default_str();
  return [o] {
    derive_draft_model(*o);
    fmt::print("wrote {}\n", o->out);
    return 0;
  };
}

}  // namespace pagoda::cli
