// `pagoda tokenize` and `pagoda detokenize`: run a model's tokenizer from the command line. The
// model is a directory (only tokenizer.json + tokenizer_config.json are read), a GGUF file (its
// tokenizer.* metadata; no tensor is repacked) or 'demo', as for every other command.
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "hub/resolve_model.h"
#include "loader/gguf.h"
#include "model/gguf_model.h"
#include "demo/model_generator.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tools/pagoda/commands.h"
#include "util/error.h"

namespace pagoda::cli {

namespace {

struct TokenizeOptions {
  std::string model_dir;
  std::string text;
  std::string file;
  bool add_special_tokens = false;
};

struct DetokenizeOptions {
  std::string model_dir;
  std::vector<int64_t> ids;
  bool skip_special_tokens = false;
};

// The tokenizer of a --model argument, read without loading any weights.
Tokenizer open_tokenizer(const std::string& model_arg) {
  if (model_arg == "demo" && !std::filesystem::exists(model_arg))
    return Tokenizer::from_directory(ensure_demo_model());
  // org/name: only its tokenizer files are fetched (docs/models.md); a retry's warning goes to
  // stderr, as stdout is the ids.
  if (spdlog::get("pagoda") == nullptr)
    spdlog::set_default_logger(spdlog::stderr_color_mt("pagoda"));
  hub::HubOptions options;
  options.purpose = hub::Purpose::kTokenizer;
  const std::string model = hub::resolve_model(model_arg, options);
  if (is_gguf_path(model)) {
    const GgufFile file(model);
    return tokenizer_from_gguf(read_gguf_vocab(file));  // copies what it keeps of the map
  }
  return Tokenizer::from_directory(model);
}

std::string read_input_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

Command register_tokenize(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text, space separated");
  sub->add_option("--model", opts->model_dir,
                  "Model directory with tokenizer.json, a .gguf file, or 'demo'")
      ->required();
  sub->add_flag("--add-special-tokens", opts->add_special_tokens,
                "Add BOS/EOS as the tokenizer config says");
  auto* text = sub->add_option("text", opts->text, "Text to tokenize");
  auto* file = sub->add_option("--file", opts->file, "Read the text from this file");
  text->excludes(file);
  file->excludes(text);
  return [opts, text, file] {
    if (text->count() == 0 && file->count() == 0) fail("tokenize: give a TEXT or --file FILE");
    const Tokenizer tokenizer = open_tokenizer(opts->model_dir);
    const std::string input = file->count() ? read_input_file(opts->file) : opts->text;
    const std::vector<TokenId> ids = tokenizer.encode(input, opts->add_special_tokens);
    fmt::print("{}\n", fmt::join(ids, " "));
    return 0;
  };
}

Command register_detokenize(CLI::App& app) {
  auto opts = std::make_shared<DetokenizeOptions>();
  CLI::App* sub = app.add_subcommand("detokenize", "Print the text of token ids");
  sub->add_option("--model", opts->model_dir,
                  "Model directory with tokenizer.json, a .gguf file, or 'demo'")
      ->required();
  sub->add_flag("--skip-special-tokens", opts->skip_special_tokens, "Leave out special tokens");
  sub->add_option("ids", opts->ids, "Token ids")->required();
  return [opts] {
    const Tokenizer tokenizer = open_tokenizer(opts->model_dir);
    std::vector<TokenId> ids;
    ids.reserve(opts->ids.size());
    for (const int64_t id : opts->ids) {
      if (id < 0 || id >= static_cast<int64_t>(tokenizer.vocab_size())) {
        fail("detokenize: id {} is outside the vocabulary (size {})", id, tokenizer.vocab_size());
      }
      ids.push_back(static_cast<TokenId>(id));
    }
    fmt::print("{}\n", tokenizer.decode(ids, opts->skip_special_tokens));
    return 0;
  };
}

}  // namespace pagoda::cli
