#include "model/model_source.h"

#include "model/gguf_model.h"
#include "util/error.h"

namespace pagoda {
namespace {

ModelSource from_gguf(const std::string& path, const std::string& tokenizer_dir, FileMemory memory,
                      Progress* progress) {
  GgufModel g = open_gguf_model(path, memory, progress);
  const bool own_tokenizer = tokenizer_dir.empty();
  ModelSource s{path,
                std::move(g.config),
                std::move(g.generation),
                std::move(g.tensors),
                own_tokenizer ? std::move(g.tokenizer) : Tokenizer::from_directory(tokenizer_dir),
                {},
                {}};
  s.chat_template = own_tokenizer ? g.chat_template : s.tokenizer.chat_template();
  s.chat_template_origin = own_tokenizer ? path + " (tokenizer.chat_template)"
                                         : tokenizer_dir + "/tokenizer_config.json";
  return s;
}

}  // namespace

ModelSource open_model_source(const std::string& path, const std::string& tokenizer_dir,
                              FileMemory memory, Progress* progress, const crypto::ModelKey* key,
                              Fp8Weights fp8) {
  if (is_gguf_path(path)) {
    if (key != nullptr) fail("{}: a model key was given, but GGUF files are not encrypted", path);
    return from_gguf(path, tokenizer_dir, memory, progress);
  }
  const std::string tok_dir = tokenizer_dir.empty() ? path : tokenizer_dir;
  ModelSource s{path,
                ModelConfig::from_dir(path),
                GenerationConfig::from_dir(path),
                TensorStore::open(path, memory, progress, key, fp8),
                Tokenizer::from_directory(tok_dir),
                {},
                {}};
  s.chat_template = s.tokenizer.chat_template();
  s.chat_template_origin = tok_dir + "/tokenizer_config.json";
  return s;
}

}  // namespace pagoda
