#include "engine/structured_outputs.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <string_view>

#include "grammar/grammar_error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace pagoda {
namespace {

// The GPT-2 table's character for a space (U+0120). Every byte-level BPE vocabulary holds all
// 256 byte characters as tokens, so its presence tells the two token spellings apart.
constexpr std::string_view kByteLevelSpace = "\xC4\xA0";
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Bytes of a byte-level token; nullopt when some character is not in GPT-2's table.
std::optional<std::string> byte_level_bytes(std::string_view token) {
  std::string bytes;
  if (!is_valid_utf8(token)) return std::nullopt;
  size_t pos = 0;
  while (pos < token.size()) {
    const int byte = byte_level_byte(next_code_point(token, pos));
    if (byte < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(byte));
  }
  return bytes;
}

std::string sentencepiece_bytes(std::string_view token) {
  unsigned byte = 0;
  if (token.size() == 6 && token.starts_with("<0x") && token.ends_with(">") &&
      std::sscanf(std::string(token).c_str(), "<0x%2X>", &byte) == 1) {
    return std::string(1, static_cast<char>(byte));
  }
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    if (token.substr(i).starts_with(kMetaspace)) {
      bytes.push_back(' ');
      i += kMetaspace.size();
    } else {
      bytes.push_back(token[i++]);
    }
  }
  return bytes;
}

}  // namespace

std::vector<std::string> vocabulary_token_bytes(const Tokenizer& tokenizer, size_t vocab_size) {
  const bool byte_level = tokenizer.token_to_id(kByteLevelSpace).has_value();
  std::vector<std::string> bytes(vocab_size);
  for (size_t id = 0; id < vocab_size; ++id) {
    const auto token_id = static_cast<TokenId>(id);
    if (tokenizer.is_special(token_id)) continue;
    const std::optional<std::string> token = tokenizer.id_to_token(token_id);
    if (!token) continue;
    if (byte_level) {
      // Added tokens that are not special are spelled as plain text, not through the table.
      bytes[id] = byte_level_bytes(*token).value_or(*token);
    } else {
      bytes[id] = sentencepiece_bytes(*token);
    }
  }
  return bytes;
}

StructuredOutputCompiler::StructuredOutputCompiler(const Tokenizer& tokenizer, int32_t vocab_size,
                                                   std::vector<int32_t> stop_token_ids)
    : tokenizer_(tokenizer), vocab_size_(vocab_size), stop_token_ids_(std::move(stop_token_ids)) {}

grammar::GrammarCompiler& StructuredOutputCompiler::compiler() {
  std::call_once(built_, [this] {
    auto vocabulary = std::make_shared<const grammar::Vocabulary>(
        vocabulary_token_bytes(tokenizer_, static_cast<size_t>(vocab_size_)), stop_token_ids_);
    compiler_ = std::make_unique<grammar::GrammarCompiler>(std::move(vocabulary));
  });
  return *compiler_;
}

std::shared_ptr<const grammar::CompiledGrammar> StructuredOutputCompiler::compile(
    const StructuredOutputsParams& params) {
  const int n = params.num_constraints();
  if (n != 1) {
    fail(
        "structured_outputs must set exactly one of json, regex, choice, grammar and "
        "json_object, got {}",
        n);
  }
  if (params.choice && params.choice->empty()) fail("structured_outputs.choice must not be empty");
  grammar::JsonGrammarOptions json_options;
  json_options.any_whitespace = params.any_whitespace;
  grammar::GrammarCompiler& c = compiler();
  // The error names the field first, then the place inside it (a JSON pointer, an offset).
  const char* field = params.json          ? "json"
                      : params.json_object ? "json_object"
                      : params.regex       ? "regex"
                      : params.choice      ? "choice"
                                           : "grammar";
  try {
    if (params.json) return c.json_schema(*params.json, json_options);
    if (params.json_object) return c.json_object(json_options);
    if (params.regex) return c.regex(*params.regex);
    if (params.choice) return c.choice(*params.choice);
    return c.ebnf(*params.grammar);
  } catch (const grammar::GrammarError& e) {
    throw grammar::GrammarError(fmt::format("structured_outputs.{}: {}", field, e.what()));
  }
}

GrammarLogitsProcessor::GrammarLogitsProcessor(
    std::shared_ptr<const grammar::CompiledGrammar> grammar, GrammarRequestOptions options)
    : matcher_(std::move(grammar)), options_(std::move(options)) {
  bitmask_.resize(matcher_.grammar().vocabulary().mask_words());
  reasoning_ = !options_.reasoning_end_token_ids.empty();
  stop_logits_.resize(options_.stop_token_ids.size());
}

bool GrammarLogitsProcessor::is_request_stop(int32_t token_id) const {
  return std::find(options_.stop_token_ids.begin(), options_.stop_token_ids.end(), token_id) !=
         options_.stop_token_ids.end();
}

void GrammarLogitsProcessor::apply(float* logits, int64_t vocab_size) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (!active()) {
    for (const int32_t id : options_.masked_eos_token_ids) {
      if (id < vocab_size) logits[id] = kNegInf;
    }
    return;
  }
  // The request's own stop ids keep their logits where the grammar may end.
  const bool can_end = matcher_.can_terminate() && !matcher_.is_terminated();
  for (size_t i = 0; i < options_.stop_token_ids.size(); ++i) {
    const int32_t id = options_.stop_token_ids[i];
    stop_logits_[i] = id < vocab_size ? logits[id] : kNegInf;
  }
  matcher_.fill_next_token_bitmask(bitmask_);
  const std::span<const uint32_t> mask(bitmask_);
  const auto covered =
      std::min<int64_t>(vocab_size, static_cast<int64_t>(matcher_.grammar().vocabulary().size()));
  for (int64_t id = 0; id < covered; ++id) {
    if (!grammar::test_bit(mask, static_cast<int32_t>(id))) logits[id] = kNegInf;
  }
  for (int64_t id = covered; id < vocab_size; ++id) logits[id] = kNegInf;
  if (!can_end) return;
  for (size_t i = 0; i < options_.stop_token_ids.size(); ++i) {
    const int32_t id = options_.stop_token_ids[i];
    if (id < vocab_size) logits[id] = stop_logits_[i];
  }
}

void GrammarLogitsProcessor::accept(int32_t token_id) {
  if (reasoning_) {
    matcher_steps_.push_back(false);
    reasoning_tokens_.push_back(token_id);
    const std::vector<int32_t>& end = options_.reasoning_end_token_ids;
    reasoning_ = !(reasoning_tokens_.size() >= end.size() &&
                   std::equal(end.rbegin(), end.rend(), reasoning_tokens_.rbegin()));
    return;
  }
  // A request stop id the grammar may end at ends it; elsewhere it is an ordinary token.
  if (is_request_stop(token_id) && matcher_.accept_stop()) {
    matcher_steps_.push_back(true);
    return;
  }
  matcher_steps_.push_back(matcher_.accept_token(token_id));
}

bool GrammarLogitsProcessor::rollback(int num_tokens) {
  if (num_tokens < 0 || static_cast<size_t>(num_tokens) > matcher_steps_.size()) return false;
  int num_matcher_steps = 0;
  for (int i = 0; i < num_tokens; ++i) {
    if (matcher_steps_[matcher_steps_.size() - 1 - static_cast<size_t>(i)]) ++num_matcher_steps;
  }
  if (!matcher_.rollback(num_matcher_steps)) return false;
  matcher_steps_.resize(matcher_steps_.size() - static_cast<size_t>(num_tokens));
  // The reasoning took the first steps; taking back any of them reopens it (its end was last).
  if (matcher_steps_.size() < reasoning_tokens_.size()) {
    reasoning_tokens_.resize(matcher_steps_.size());
    reasoning_ = true;
  }
  return true;
}

}  // namespace pagoda
