// `pagoda download REPO`: only the download of a model by name (docs/models.md), into the Hub's
// cache, printing the path to pass as --model: the snapshot directory, or the GGUF file in it.
//   pagoda download deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
//   pagoda download unsloth/Qwen3-0.6B-GGUF:Q4_K_M
//   pagoda download org/name --include '*.json'      (these files, not what a run needs)
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "hub/resolve_model.h"
#include "tools/pagoda/commands.h"

namespace pagoda::cli {
namespace {

struct DownloadFlags {
  std::string repo;
  hub::HubOptions options;
  bool tokenizer_only = false;
};

int run_download(const DownloadFlags& f) {
  // Logs (warnings of retries) on stderr; stdout is the path alone, for $(pagoda download ...).
  if (spdlog::get("pagoda") == nullptr)
    spdlog::set_default_logger(spdlog::stderr_color_mt("pagoda"));
  spdlog::set_level(spdlog::level::warn);
  hub::HubOptions options = f.options;
  if (f.tokenizer_only) options.purpose = hub::Purpose::kTokenizer;
  const hub::Snapshot snapshot =
      hub::download_snapshot(f.repo, options, hub::hub_settings_from_environment());
  fmt::print("{}\n", snapshot.path);
  return 0;
}

}  // namespace

Command register_download(CLI::App& app) {
  auto flags = std::make_shared<DownloadFlags>();
  CLI::App* sub = app.add_subcommand(
      "download",
      "Download a model from the Hugging Face Hub (or ModelScope) into the Hub's cache and print "
      "its path");
  sub->add_option("repo", flags->repo, "Repo id: org/name, or org/name:Q4_K_M for one GGUF file")
      ->required();
  sub->add_option("--revision", flags->options.revision,
                  "Branch, tag or commit (default: the default branch)");
  sub->add_option("--download-dir", flags->options.download_dir,
                  "Cache to download into (default: HF_HUB_CACHE, else $HF_HOME/hub)");
  sub->add_option("--gguf-file", flags->options.gguf_file, "This GGUF file of the repo");
  sub->add_option("--include", flags->options.include,
                  "Only the files matching these globs (e.g. '*.json'), instead of what a run "
                  "needs");
  sub->add_flag("--tokenizer-only", flags->tokenizer_only, "Only the tokenizer files");
  return [flags] { return run_download(*flags); };
}

}  // namespace pagoda::cli
