// Loading tokenizer.json / tokenizer_config.json and running the encode/decode pipelines.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace pagoda {

namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: malformed JSON: {}", path.string(), e.what());
  }
}

// "bos_token" may be a string, an AddedToken object {"content": ...} or null.
std::string token_string(const nlohmann::json& config, const char* key, std::string_view file) {
  if (!config.contains(key) || config[key].is_null()) return {};
  const auto& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  fail("{}: '{}' must be a string or an object with \"content\"", file, key);
}

// transformers' tokenizer classes whose __init__ rebuilds the post-processor from
// add_bos_token / add_eos_token (LlamaTokenizerFast.update_post_processor and its kin).
bool rebuilds_post_processor(const std::string& tokenizer_class) {
  static const char* const kClasses[] = {"LlamaTokenizer",     "LlamaTokenizerFast",
                                         "CodeLlamaTokenizer", "CodeLlamaTokenizerFast",
                                         "GemmaTokenizer",     "GemmaTokenizerFast"};
  return std::any_of(std::begin(kClasses), std::end(kClasses),
                     [&](const char* name) { return tokenizer_class == name; });
}

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<AddedVocabulary> added;
  SpecialTokensTemplate special_template;

  std::string bos_token, eos_token;
  std::optional<TokenId> bos_id, eos_id;
  std::string chat_template;
  std::map<std::string, std::string> chat_templates;
  std::optional<int64_t> model_max_length;
  bool clean_up_tokenization_spaces = false;

  std::optional<TokenId> token_to_id(std::string_view token) const {
    if (auto id = added->find_by_content(token)) return id;
    return model->token_to_id(token);
  }

  // Runs added-token matching, normalization and pre-tokenization over `text` (valid UTF-8).
  // Calls on_token(id) for each matched added token and on_piece(text) for each model piece.
  template <typename OnToken, typename OnPiece>
  void split(std::string_view text, OnToken&& on_token, OnPiece&& on_piece) const {
    std::vector<TextSegment> raw_segments, normalized_segments;
    std::vector<PreToken> pieces;
    added->split(text, /*normalized_tokens=*/false, raw_segments);
    for (const TextSegment& raw : raw_segments) {
      if (raw.id >= 0) {
        on_token(raw.id);
        continue;
      }
      std::string segment(text.substr(raw.begin, raw.end - raw.begin));
      if (normalizer) normalizer->normalize(segment);
      if (segment.empty()) continue;
      normalized_segments.clear();
      added->split(segment, /*normalized_tokens=*/true, normalized_segments);
      for (const TextSegment& part : normalized_segments) {
        if (part.id >= 0) {
          on_token(part.id);
          continue;
        }
        pieces.clear();
        pieces.push_back(
            {segment.substr(part.begin, part.end - part.begin), raw.begin == 0 && part.begin == 0});
        if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
        for (const PreToken& piece : pieces) on_piece(piece.text);
      }
    }
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_directory(const std::filesystem::path& dir) {
  const auto config = dir / "tokenizer_config.json";
  return from_files(dir / "tokenizer.json",
                    std::filesystem::exists(config) ? config : std::filesystem::path());
}

Tokenizer Tokenizer::from_files(const std::filesystem::path& tokenizer_json_path,
                                const std::filesystem::path& config_path) {
  const nlohmann::json spec = read_json(tokenizer_json_path);
  if (config_path.empty()) return from_json(spec, nullptr, tokenizer_json_path.string());
  const nlohmann::json config = read_json(config_path);
  return from_json(spec, &config, tokenizer_json_path.string(), config_path.string());
}

Tokenizer Tokenizer::from_json(const nlohmann::json& spec, const nlohmann::json* config_json,
                               const std::string& origin, const std::string& config_origin) {
  const std::string& file = origin;
  if (!spec.is_object()) fail("{}: top level must be a JSON object", file);
  auto impl = std::make_unique<Impl>();

  // The model.
  if (!spec.contains("model") || !spec["model"].is_object()) fail("{}: missing key 'model'", file);
  const auto& model = spec["model"];
  const std::string model_type = model.value("type", std::string());
  if (model_type.empty() && !model.contains("merges")) {
    fail("{}: model has no \"type\" and is not a BPE model", file);
  }
  if (!model_type.empty() && model_type != "BPE") {
    fail("{}: model type '{}' is not supported (only BPE)", file, model_type);
  }
  impl->model = std::make_unique<BpeModel>(model, file);

  // Pipeline stages.
  auto get = [&](const char* key) -> const nlohmann::json& {
    static const nlohmann::json kNull;
    return spec.contains(key) ? spec[key] : kNull;
  };
  impl->normalizer = make_normalizer(get("normalizer"), file);
  impl->pre_tokenizer = make_pre_tokenizer(get("pre_tokenizer"), file);
  impl->decoder = make_decoder(get("decoder"), file);
  impl->special_template = parse_post_processor(get("post_processor"), file);

  // Added tokens.
  std::vector<AddedToken> added;
  if (spec.contains("added_tokens") && !spec["added_tokens"].is_null()) {
    if (!spec["added_tokens"].is_array()) fail("{}: 'added_tokens' must be an array", file);
    for (const auto& entry : spec["added_tokens"]) {
      try {
        AddedToken t;
        t.id = entry.at("id").get<TokenId>();
        t.content = entry.at("content").get<std::string>();
        t.special = entry.value("special", false);
        t.lstrip = entry.value("lstrip", false);
        t.rstrip = entry.value("rstrip", false);
        t.single_word = entry.value("single_word", false);
        t.normalized = entry.value("normalized", !t.special);
        added.push_back(std::move(t));
      } catch (const nlohmann::json::exception& e) {
        fail("{}: added_tokens entry {}: {}", file, entry.dump(), e.what());
      }
    }
  }
  impl->added = std::make_unique<AddedVocabulary>(std::move(added), impl->normalizer.get());

  // tokenizer_config.json: special-token strings, BOS/EOS policy, chat template, max length.
  if (config_json != nullptr) {
    const std::string cfile = config_origin.empty() ? origin : config_origin;
    const nlohmann::json& config = *config_json;
    if (!config.is_object()) fail("{}: top level must be a JSON object", cfile);
    impl->bos_token = token_string(config, "bos_token", cfile);
    impl->eos_token = token_string(config, "eos_token", cfile);
    if (!impl->bos_token.empty()) impl->bos_id = impl->token_to_id(impl->bos_token);
    if (!impl->eos_token.empty()) impl->eos_id = impl->token_to_id(impl->eos_token);

    const std::string tokenizer_class = config.value("tokenizer_class", std::string());
    if (rebuilds_post_processor(tokenizer_class)) {
      // transformers replaces tokenizer.json's post-processor with "[bos] $A [eos]" built from
      // add_bos_token (default true) and add_eos_token (default false).
      const bool add_bos = config.value("add_bos_token", true);
      const bool add_eos = config.value("add_eos_token", false);
      SpecialTokensTemplate t;
      if (add_bos) {
        if (!impl->bos_id)
          fail("{}: add_bos_token is true but bos_token is missing or unknown", cfile);
        t.prefix.push_back(*impl->bos_id);
      }
      if (add_eos) {
        if (!impl->eos_id)
          fail("{}: add_eos_token is true but eos_token is missing or unknown", cfile);
        t.suffix.push_back(*impl->eos_id);
      }
      impl->special_template = std::move(t);
    }

    if (config.contains("chat_template")) {
      const auto& ct = config["chat_template"];
      if (ct.is_string()) {
        impl->chat_template = ct.get<std::string>();
        impl->chat_templates["default"] = impl->chat_template;
      } else if (ct.is_array()) {
        for (const auto& named : ct) {
          if (!named.is_object() || !named.contains("name") || !named.contains("template")) {
            fail("{}: chat_template list entries need \"name\" and \"template\"", cfile);
          }
          impl->chat_templates[named["name"].get<std::string>()] =
              named["template"].get<std::string>();
        }
        auto it = impl->chat_templates.find("default");
        if (it != impl->chat_templates.end()) impl->chat_template = it->second;
      } else if (!ct.is_null()) {
        fail("{}: chat_template must be a string or a list of named templates", cfile);
      }
    }
    impl->clean_up_tokenization_spaces = config.value("clean_up_tokenization_spaces", false);
    if (config.contains("model_max_length") && config["model_max_length"].is_number()) {
      const double v = config["model_max_length"].get<double>();
      // transformers writes int(1e30) for "no limit".
      if (v > 0 && v < 1e18) impl->model_max_length = static_cast<int64_t>(v);
    }
  }
  return Tokenizer(std::move(impl));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = sanitize_utf8(text);
    text = repaired;
  }
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) {
    ids.insert(ids.end(), impl_->special_template.prefix.begin(),
               impl_->special_template.prefix.end());
  }
  impl_->split(
      text, [&](TokenId id) { ids.push_back(id); },
      [&](const std::string& piece) { impl_->model->tokenize(piece, ids); });
  if (add_special_tokens) {
    ids.insert(ids.end(), impl_->special_template.suffix.begin(),
               impl_->special_template.suffix.end());
  }
  return ids;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  const std::string valid = sanitize_utf8(text);
  std::vector<std::string> pieces;
  impl_->split(
      valid, [&](TokenId id) { pieces.push_back(impl_->added->find_by_id(id)->content); },
      [&](const std::string& piece) { pieces.push_back(piece); });
  return pieces;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const TokenId id : ids) {
    // As HF: the model's token for the id if it has one, else the added token; skipping is by
    // content (the two agree unless an added token reuses a model id for other text).
    std::string_view token = impl_->model->id_to_token(id);
    if (token.empty()) {
      const AddedToken* added = impl_->added->find_by_id(id);
      if (added == nullptr) continue;
      token = added->content;
    }
    if (skip_special_tokens && impl_->added->is_special_content(token)) continue;
    tokens.emplace_back(token);
  }
  if (impl_->decoder) {
    impl_->decoder->decode_chain(tokens);
    std::string text;
    for (const std::string& t : tokens) text += t;
    return text;
  }
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += ' ';
    text += tokens[i];
  }
  return text;
}

size_t Tokenizer::vocab_size() const {
  size_t n = impl_->model->id_limit();
  for (const AddedToken& t : impl_->added->tokens()) n = std::max(n, static_cast<size_t>(t.id) + 1);
  return n;
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  return impl_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (const AddedToken* added = impl_->added->find_by_id(id)) return added->content;
  const std::string_view token = impl_->model->id_to_token(id);
  if (token.empty()) return std::nullopt;
  return std::string(token);
}

bool Tokenizer::is_special(TokenId id) const {
  const AddedToken* added = impl_->added->find_by_id(id);
  return added != nullptr && added->special;
}

const std::string& Tokenizer::bos_token() const {
  return impl_->bos_token;
}
const std::string& Tokenizer::eos_token() const {
  return impl_->eos_token;
}
std::optional<TokenId> Tokenizer::bos_id() const {
  return impl_->bos_id;
}
std::optional<TokenId> Tokenizer::eos_id() const {
  return impl_->eos_id;
}
std::span<const TokenId> Tokenizer::prefix_special_ids() const {
  return impl_->special_template.prefix;
}
std::span<const TokenId> Tokenizer::suffix_special_ids() const {
  return impl_->special_template.suffix;
}
const std::string& Tokenizer::chat_template() const {
  return impl_->chat_template;
}
const std::map<std::string, std::string>& Tokenizer::chat_templates() const {
  return impl_->chat_templates;
}
std::optional<int64_t> Tokenizer::model_max_length() const {
  return impl_->model_max_length;
}
bool Tokenizer::clean_up_tokenization_spaces() const {
  return impl_->clean_up_tokenization_spaces;
}

std::string clean_up_tokenization(std::string_view text) {
  // Same replacements, in the same order, as transformers' PreTrainedTokenizerBase.
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string out(text);
  for (const auto& [from, to] : kRules) {
    std::string next;
    next.reserve(out.size());
    size_t pos = 0;
    for (size_t hit; (hit = out.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
      next.append(out, pos, hit - pos);
      next.append(to);
    }
    next.append(out, pos, std::string::npos);
    out = std::move(next);
  }
  return out;
}

}  // namespace pagoda
