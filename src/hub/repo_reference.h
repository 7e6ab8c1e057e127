// What a `--model` argument names when it is not a local path: a Hub repository, `org/name`,
// optionally with a GGUF quantization tag as llama.cpp's `-hf org/name:Q4_K_M` takes it.
#pragma once

#include <optional>
#include <string>

namespace pagoda::hub {

struct RepoReference {
  std::string repo_id;    // "org/name"
  std::string quant_tag;  // "Q4_K_M", or "" when none was given
};

// `text` read as `org/name` or `org/name:TAG`; nullopt when it is not of that form (a path such
// as /models/x, ./x, x.gguf, or a single name). Names take letters, digits, '-', '_' and '.',
// as the Hub allows, and may not start or end with '.' or '-' or hold "..".
std::optional<RepoReference> parse_repo_reference(const std::string& text);

// The revision to fetch: `revision`, or the source's default branch when it is empty.
std::string default_revision(const std::string& revision, bool modelscope);

// A full commit id (40 hex digits): a revision that needs no ref to be resolved.
bool is_commit_hash(const std::string& revision);

}  // namespace pagoda::hub
