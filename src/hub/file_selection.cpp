// What a run needs of a repository; see file_selection.h.
#include "hub/file_selection.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "util/ascii.h"
#include "util/error.h"

namespace pagoda::hub {
namespace {

// Small files beside the weights that the config, tokenizer and generation settings come from
// (the ones transformers' AutoConfig / AutoTokenizer / GenerationConfig read).
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
};
constexpr const char* kModelFiles[] = {"config.json", "generation_config.json"};
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kDefaultQuant = "Q4_K_M";  // llama.cpp's choice when no tag is given

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_split_gguf(const std::string& path) {
  static const std::regex split(R"(-\d{5}-of-\d{5}\.gguf$)");
  return std::regex_search(path, split);
}

// GGUF model files: not the vision projectors (mmproj-*) that share a GGUF repo.
std::vector<std::string> gguf_files(const std::vector<std::string>& files) {
  std::vector<std::string> out;
  for (const std::string& f : files) {
    if (ends_with(ascii_lower(f), ".gguf") && ascii_lower(basename(f)).rfind("mmproj", 0) != 0)
      out.push_back(f);
  }
  return out;
}

// `tag` in the file's path as a whole word: "Q4_K" is not "Q4_K_M" ('_' continues a tag).
bool has_tag(const std::string& path, const std::string& tag) {
  const std::string p = ascii_lower(path);
  const std::string t = ascii_lower(tag);
  for (size_t at = p.find(t); at != std::string::npos; at = p.find(t, at + 1)) {
    const char before = at == 0 ? '/' : p[at - 1];
    const char after = at + t.size() < p.size() ? p[at + t.size()] : '.';
    const bool starts = before == '-' || before == '.' || before == '/' || before == '_';
    const bool ends = after == '-' || after == '.' || after == '/';
    if (starts && ends) return true;
  }
  return false;
}

std::string pick_gguf(const std::vector<std::string>& files, const std::string& tag,
                      const std::string& repo_id) {
  const std::vector<std::string> ggufs = gguf_files(files);
  std::vector<std::string> matches;
  for (const std::string& f : ggufs) {
    if (has_tag(f, tag)) matches.push_back(f);
  }
  if (matches.empty()) {
    fail("repository {} has no GGUF file for the tag {}; it has: {}", repo_id, tag,
         ggufs.empty() ? std::string("no GGUF files") : fmt::format("{}", fmt::join(ggufs, ", ")));
  }
  std::vector<std::string> whole;
  for (const std::string& f : matches) {
    if (!is_split_gguf(f)) whole.push_back(f);
  }
  if (whole.empty()) {
    fail(
        "{} of {} is split into several GGUF files ({}); Pagoda reads one file: merge them "
        "with llama.cpp's `llama-gguf-split --merge` and pass the result as --model",
        tag, repo_id, matches.front());
  }
  if (whole.size() > 1) {
    fail("the tag {} matches several GGUF files of {} ({}): name one with --gguf-file", tag,
         repo_id, fmt::join(whole, ", "));
  }
  return whole.front();
}

void add_if_present(const std::set<std::string>& present, const char* name,
                    std::vector<std::string>& out) {
  if (present.count(name) != 0) out.emplace_back(name);
}

}  // namespace

std::string index_file(const std::vector<std::string>& files) {
  return std::find(files.begin(), files.end(), kIndexFile) != files.end() ? kIndexFile : "";
}

Selection select_files(const std::vector<std::string>& repo_files, const SelectionRequest& request,
                       const std::string& repo_id) {
  Selection s;
  if (!request.include.empty()) {
    for (const std::string& f : repo_files) {
      for (const std::string& glob : request.include) {
        if (::fnmatch(glob.c_str(), f.c_str(), 0) == 0) {
          s.files.push_back(f);
          break;
        }
      }
    }
    if (s.files.empty()) {
      fail("no file of {} matches {}", repo_id, fmt::join(request.include, " or "));
    }
    return s;
  }
  const std::set<std::string> present(repo_files.begin(), repo_files.end());
  for (const char* name : kTokenizerFiles) add_if_present(present, name, s.files);
  // A GGUF file holds the config and the tokenizer too: it is all the run (or a tokenizer)
  // needs.
  const auto only_gguf = [&](const std::string& path) {
    s.files = {path};
    s.gguf_file = path;
    return s;
  };
  if (!request.gguf_file.empty()) {
    if (present.count(request.gguf_file) == 0) {
      fail("repository {} has no file {}; its GGUF files: {}", repo_id, request.gguf_file,
           fmt::join(gguf_files(repo_files), ", "));
    }
    return only_gguf(request.gguf_file);
  }
  if (!request.quant_tag.empty())
    return only_gguf(pick_gguf(repo_files, request.quant_tag, repo_id));

  if (request.purpose == Purpose::kTokenizer) {
    if (present.count("tokenizer.json") == 0) {
      fail("repository {} has no tokenizer.json (Pagoda reads the fast-tokenizer format)", repo_id);
    }
    return s;
  }

  std::vector<std::string> weights;
  for (const std::string& f : repo_files) {
    if (f.find('/') == std::string::npos && ends_with(f, ".safetensors")) weights.push_back(f);
  }
  if (weights.empty() || present.count("config.json") == 0) {
    const std::vector<std::string> ggufs = gguf_files(repo_files);
    if (ggufs.size() == 1) return only_gguf(ggufs.front());
    if (!ggufs.empty()) return only_gguf(pick_gguf(repo_files, kDefaultQuant, repo_id));
    fail(
        "repository {} has no config.json with *.safetensors weights and no GGUF file: Pagoda "
        "reads those formats",
        repo_id);
  }
  for (const char* name : kModelFiles) add_if_present(present, name, s.files);
  if (present.count(kIndexFile) != 0) {
    s.files.emplace_back(kIndexFile);  // its shards follow once it is read
    return s;
  }
  // Without an index, the top-level files are one checkpoint; a Mistral-style
  // consolidated.safetensors beside HF-named files is the same weights again.
  std::vector<std::string> hf_named;
  for (const std::string& w : weights) {
    if (basename(w).rfind("consolidated", 0) != 0) hf_named.push_back(w);
  }
  const std::vector<std::string>& chosen = hf_named.empty() ? weights : hf_named;
  s.files.insert(s.files.end(), chosen.begin(), chosen.end());
  return s;
}

std::vector<std::string> shards_of_index(const std::string& index_file_on_disk,
                                         const std::string& index_repo_path) {
  std::ifstream in(index_file_on_disk);
  if (!in) fail("{}: cannot open", index_file_on_disk);
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", index_file_on_disk, e.what());
  }
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object())
    fail("{}: no \"weight_map\" object", index_file_on_disk);
  const size_t slash = index_repo_path.rfind('/');
  const std::string prefix = slash == std::string::npos ? "" : index_repo_path.substr(0, slash + 1);
  std::set<std::string> shards;
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string())
      fail("{}: weight_map[\"{}\"] is not a file name", index_file_on_disk, tensor);
    shards.insert(prefix + file.get<std::string>());
  }
  return {shards.begin(), shards.end()};
}

}  // namespace pagoda::hub
