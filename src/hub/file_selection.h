// Which files of a repository a run needs, so that a 30 GB model with three weight formats is
// fetched once, in one format: the config, the tokenizer and generation config, and either the
// safetensors weights (the shards its index names, or the top-level *.safetensors of one
// format) or one GGUF file, picked by name or by quantization tag as llama.cpp's
// `-hf org/name:Q4_K_M` picks it.
#pragma once

#include <string>
#include <vector>

namespace pagoda::hub {

enum class Purpose { kModel, kTokenizer };

struct SelectionRequest {
  Purpose purpose = Purpose::kModel;
  std::string quant_tag;  // from `org/name:TAG`
  std::string gguf_file;  // --gguf-file: a path in the repo
  // `pagoda download --include`: exactly the files one of these globs matches ('*' crosses
  // '/'), instead of what a run needs.
  std::vector<std::string> include;
};

struct Selection {
  // Files to fetch; model.safetensors.index.json among them means its shards are needed too
  // (shards_of_index, once it is here).
  std::vector<std::string> files;
  std::string gguf_file;  // the GGUF file the run opens, or "" for a safetensors model
};

// `repo_files`: every file the repository has. `repo_id` names it in errors. Throws
// pagoda::Error when nothing fits (no weights Pagoda reads, no GGUF file with the tag).
Selection select_files(const std::vector<std::string>& repo_files, const SelectionRequest& request,
                       const std::string& repo_id);

// The shards an index file names (its weight_map's values), repo-relative beside the index.
std::vector<std::string> shards_of_index(const std::string& index_file_on_disk,
                                         const std::string& index_repo_path);

// The name of a safetensors index among `files`, or "".
std::string index_file(const std::vector<std::string>& files);

}  // namespace pagoda::hub
