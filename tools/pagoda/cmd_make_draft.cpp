// `pagoda make-draft`: derive a draft model from a target (a copy, its first layers, noise on
// its matrices) for measuring speculative decoding at chosen acceptance rates
// (demo/draft_derivation.h, bench/spec_decode_acceptance.sh).
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "demo/draft_derivation.h"
#include "demo/mtp_predicting_model.h"
#include "tools/pagoda/commands.h"
#include "util/error.h"

namespace pagoda::cli {

Command register_make_draft(CLI::App& app) {
  auto o = std::make_shared<DraftDerivation>();
  CLI::App* sub = app.add_subcommand(
      "make-draft",
      "Derive a draft model from a target: a copy, its first layers, noise on its matrices "
      "(speculative decoding benchmarks)");
  sub->add_option("--from", o->from, "The target model's directory (float safetensors)")
      ->required();
  sub->add_option("--out", o->out, "Output directory (required but with --mtp-acceptance)");
  sub->add_option("--num-layers", o->num_layers, "Decoder layers kept, the first ones (0: all)")
      ->capture_default_str();
  sub->add_option("--noise", o->noise,
                  "Each matrix w becomes w + noise * rms(w) * N(0, 1) (0: exact copy)")
      ->capture_default_str();
  sub->add_flag("--randomize", o->randomize,
                "Each matrix becomes rms(w) * N(0, 1): an unrelated model of the same shape");
  sub->add_option("--seed", o->seed)->capture_default_str();
  auto mtp_acceptance = std::make_shared<std::optional<double>>();
  sub->add_option("--mtp-acceptance", *mtp_acceptance,
                  "Rewrite --from in place (a generated DeepSeek model with an MTP layer) so that "
                  "method mtp accepts about this fraction of drafts (0..1)")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes("--num-layers", "--noise", "--randomize");
  return [o, mtp_acceptance] {
    if (mtp_acceptance->has_value()) {
      // The MTP layer is the draft and it lives in the target's own files.
      if (!o->out.empty()) fail("--mtp-acceptance rewrites --from in place; leave out --out");
      make_mtp_layer_predict_the_model(o->from, **mtp_acceptance, o->seed);
      fmt::print("rewrote {}: method mtp accepts ~{} of drafts\n", o->from, **mtp_acceptance);
      return 0;
    }
    if (o->out.empty()) fail("make-draft: --out is required");
    derive_draft_model(*o);
    fmt::print("wrote {}\n", o->out);
    return 0;
  };
}

}  // namespace pagoda::cli
