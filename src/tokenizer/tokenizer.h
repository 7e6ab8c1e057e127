// pagoda::Tokenizer: loads a Hugging Face tokenizer.json (+ tokenizer_config.json) and encodes
// and decodes exactly as HF `tokenizers` / `transformers` do. The pipeline per text is
//   added tokens (raw) -> normalizer -> added tokens (normalized) -> pre-tokenizer -> BPE model
//   -> special-token template (BOS/EOS) when add_special_tokens.
//
// Invalid UTF-8 input: HF's Rust core only accepts valid strings, so we repair the input first the
// way Rust's String::from_utf8_lossy does: every maximal ill-formed subsequence becomes one U+FFFD,
// which is then tokenized like any other character. Decoding always returns valid UTF-8 (bytes that
// do not form characters become U+FFFD, as in HF). See docs/tokenizer.md.
//
// Thread-safety: a loaded Tokenizer is immutable apart from an internal, locked word cache, so
// encode/decode may be called from many threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pagoda {

using TokenId = int32_t;

class Tokenizer {
 public:
  // Loads `dir`/tokenizer.json and, if present, `dir`/tokenizer_config.json. Throws pagoda::Error
  // naming the file and the problem (missing, malformed JSON, unsupported component type, ...).
  static Tokenizer from_directory(const std::filesystem::path& dir);
  // Same, with explicit paths; an empty `config_path` means "no tokenizer_config.json".
  static Tokenizer from_files(const std::filesystem::path& tokenizer_json_path,
                              const std::filesystem::path& config_path);
  // From already-parsed tokenizer.json (and optional tokenizer_config.json) content, e.g. built
  // in memory from a GGUF file's metadata. `origin` (and `config_origin`, default `origin`)
  // name the source in errors.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const nlohmann::json* config,
                             const std::string& origin, const std::string& config_origin = "");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`. With `add_special_tokens`, BOS/EOS are added as the config says (the
  // post-processor template; for LlamaTokenizerFast-style configs add_bos_token/add_eos_token).
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = false) const;

  // Text of `ids`; unknown ids are skipped, special tokens too when `skip_special_tokens`.
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // The pieces the BPE model sees for `text` (after added-token matching, normalization and
  // pre-tokenization); added tokens appear as their content. For benchmarks and debugging.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  // One past the largest id of the vocab or the added tokens (the embedding rows needed).
  size_t vocab_size() const;
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // Empty optional for an id that is neither in the vocab nor an added token.
  std::optional<std::string> id_to_token(TokenId id) const;
  // True for added tokens marked "special" (what skip_special_tokens drops).
  bool is_special(TokenId id) const;

  const std::string& bos_token() const;  // empty when the config names none
  const std::string& eos_token() const;
  std::optional<TokenId> bos_id() const;
  std::optional<TokenId> eos_id() const;
  // The ids encode(text, true) puts before / after the text.
  std::span<const TokenId> prefix_special_ids() const;
  std::span<const TokenId> suffix_special_ids() const;

  // The chat template: tokenizer_config's "chat_template" string, or from the list-of-named
  // templates form the one named "default". Empty when there is none.
  const std::string& chat_template() const;
  // All named templates (the "default" one under "default").
  const std::map<std::string, std::string>& chat_templates() const;
  // tokenizer_config's model_max_length; empty when absent or the "no limit" sentinel (1e30).
  std::optional<int64_t> model_max_length() const;
  // tokenizer_config's clean_up_tokenization_spaces. decode() never applies it (HF tokenizers and
  // vLLM's streaming detokenizer do not); transformers' decode() does, via clean_up_tokenization().
  bool clean_up_tokenization_spaces() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// transformers' clean_up_tokenization: removes the space before . ? ! , and English contractions.
std::string clean_up_tokenization(std::string_view text);

}  // namespace pagoda
