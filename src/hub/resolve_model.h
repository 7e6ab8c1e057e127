// The one entry point the rest of Pagoda calls: a `--model` (or `--tokenizer`) argument in,
// a local path out. A path that exists, "demo" and anything not of the form `org/name[:TAG]`
// come back unchanged; a repository reference is looked up on the Hub (or ModelScope), the
// files the run needs are fetched into the cache, and the snapshot directory (or the GGUF file
// in it) is returned. With HF_HUB_OFFLINE=1, or when the endpoint cannot be reached, the cache
// alone answers.
#pragma once

#include <string>
#include <vector>

#include "hub/file_selection.h"
#include "hub/hub_settings.h"

namespace pagoda::hub {

struct HubOptions {
  std::string revision;      // branch, tag or commit; "" for the default branch
  std::string download_dir;  // the cache to use instead of the settings' (vLLM's --download-dir)
  std::string gguf_file;     // --gguf-file: this GGUF file of the repo
  std::vector<std::string> include;  // `pagoda download --include`: these globs only
  Purpose purpose = Purpose::kModel;
};

struct Snapshot {
  std::string repo_id;
  std::string commit;
  std::string dir;                 // the snapshot directory
  std::string path;                // what to open: `dir`, or the GGUF file in it
  std::vector<std::string> files;  // repo-relative, present in `dir`
};

std::string resolve_model(const std::string& reference, const HubOptions& options,
                          const HubSettings& settings);
std::string resolve_model(const std::string& reference, const HubOptions& options = {});

// A repository reference made present in the cache (what `pagoda download` does). Throws
// pagoda::Error when `reference` is not of the form `org/name[:TAG]`.
Snapshot download_snapshot(const std::string& reference, const HubOptions& options,
                           const HubSettings& settings);

}  // namespace pagoda::hub
