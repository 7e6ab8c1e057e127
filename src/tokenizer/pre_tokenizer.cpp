// Pre-tokenizer implementations, matching HF tokenizers/src/pre_tokenizers/*.rs and the
// SplitDelimiterBehavior logic of tokenizers/src/tokenizer/normalizer.rs.
#include "tokenizer/pre_tokenizer.h"

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace pagoda {

namespace {

// The regex GPT-2 (and HF's ByteLevel with use_regex) splits on.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Runs `cut(piece, ranges)` on every piece and replaces the pieces with the resulting slices.
template <typename Cut>
void split_each(std::vector<PreToken>& pieces, Cut&& cut) {
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 2);
  std::vector<ByteRange> ranges;
  for (PreToken& piece : pieces) {
    ranges.clear();
    cut(piece, ranges);
    for (const auto& [begin, end] : ranges) {
      if (end <= begin) continue;
      if (begin == 0 && end == piece.text.size()) {
        out.push_back(std::move(piece));
        break;
      }
      out.push_back({piece.text.substr(begin, end - begin), piece.at_origin && begin == 0});
    }
  }
  pieces = std::move(out);
}

bool is_numeric(char32_t cp) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

// Every character matching `pred` is one match (HF's `impl Pattern for Fn(char) -> bool`).
template <typename Pred>
void char_matches(std::string_view text, Pred&& pred, std::vector<ByteRange>& out) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t begin = pos;
    if (pred(next_code_point(text, pos))) out.emplace_back(begin, pos);
  }
}

class Split final : public PreTokenizer {
 public:
  Split(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<ByteRange> matches;
    split_each(pieces, [&](const PreToken& piece, std::vector<ByteRange>& out) {
      matches.clear();
      pattern_.find_all(piece.text, matches);
      split_with_behavior(piece.text.size(), matches, behavior_, invert_, out);
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class Digits final : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<ByteRange> matches;
    split_each(pieces, [&](const PreToken& piece, std::vector<ByteRange>& out) {
      matches.clear();
      char_matches(piece.text, is_numeric, matches);
      split_with_behavior(piece.text.size(), matches,
                          individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                          false, out);
    });
  }

 private:
  bool individual_;
};

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(kGpt2Pattern) : nullptr) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_) {
      for (PreToken& piece : pieces) {
        if (!piece.text.empty() && piece.text[0] != ' ') piece.text = " " + piece.text;
      }
    }
    if (regex_) {
      std::vector<ByteRange> matches;
      split_each(pieces, [&](const PreToken& piece, std::vector<ByteRange>& out) {
        matches.clear();
        regex_->find_all(piece.text, matches);
        split_with_behavior(piece.text.size(), matches, SplitBehavior::kIsolated, false, out);
      });
    }
    for (PreToken& piece : pieces) piece.text = byte_level_encode(piece.text);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split)
      : scheme_(scheme), split_(split) {
    append_utf8(replacement_, replacement);
  }
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    const Pattern space = Pattern::literal(" ");
    for (PreToken& piece : pieces) {
      piece.text = space.replace_all(piece.text, replacement_);
      const bool starts = piece.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways ||
                      (scheme_ == PrependScheme::kFirst && piece.at_origin))) {
        piece.text = replacement_ + piece.text;
      }
    }
    if (!split_) return;
    std::vector<ByteRange> matches;
    const Pattern marker = Pattern::literal(replacement_);
    split_each(pieces, [&](const PreToken& piece, std::vector<ByteRange>& out) {
      matches.clear();
      marker.find_all(piece.text, matches);
      split_with_behavior(piece.text.size(), matches, SplitBehavior::kMergedWithNext, false, out);
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

// Whitespace: keeps runs of \w and runs of [^\w\s]; WhitespaceSplit: drops whitespace.
class WhitespacePre final : public PreTokenizer {
 public:
  explicit WhitespacePre(bool split_only) : regex_(split_only ? R"(\S+)" : R"(\w+|[^\w\s]+)") {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<ByteRange> matches;
    split_each(pieces, [&](const PreToken& piece, std::vector<ByteRange>& out) {
      matches.clear();
      regex_.find_all(piece.text, matches);
      split_with_behavior(piece.text.size(), matches, SplitBehavior::kRemoved, true, out);
    });
  }

 private:
  Regex regex_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

SplitBehavior parse_behavior(const std::string& name, std::string_view file) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  fail("{}: pre_tokenizer Split: unknown behavior '{}'", file, name);
}

char32_t single_char(const std::string& text, std::string_view file, std::string_view key) {
  size_t pos = 0;
  if (text.empty()) fail("{}: {} must be one character", file, key);
  const char32_t cp = next_code_point(text, pos);
  if (pos != text.size()) fail("{}: {} must be one character, got '{}'", file, key, text);
  return cp;
}

}  // namespace

void split_with_behavior(size_t text_size, const std::vector<ByteRange>& matches,
                         SplitBehavior behavior, bool invert, std::vector<ByteRange>& out) {
  // 1. Cover the text with alternating (range, is_match) spans, as Pattern::find_matches does.
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (prev != begin) spans.push_back({prev, begin, invert});
    spans.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev != text_size) spans.push_back({prev, text_size, invert});

  // 2. Merge or drop spans according to the behavior.
  const size_t first_out = out.size();
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) out.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && out.size() > first_out) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && out.size() > first_out) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext: {
      // Walk backwards: a match joins the span after it.
      std::vector<ByteRange> reversed;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !reversed.empty()) {
          reversed.back().first = it->begin;
        } else {
          reversed.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      out.insert(out.end(), reversed.rbegin(), reversed.rend());
      break;
    }
  }
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec,
                                                 std::string_view file) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    fail("{}: pre_tokenizer: expected an object with a \"type\"", file);
  }
  const std::string type = spec["type"].get<std::string>();
  try {
    if (type == "Split") {
      return std::make_unique<Split>(Pattern::from_json(spec.at("pattern"), file),
                                     parse_behavior(spec.at("behavior").get<std::string>(), file),
                                     spec.value("invert", false));
    }
    if (type == "Digits") return std::make_unique<Digits>(spec.value("individual_digits", false));
    if (type == "ByteLevel") {
      return std::make_unique<ByteLevelPre>(spec.value("add_prefix_space", true),
                                            spec.value("use_regex", true));
    }
    if (type == "Metaspace") {
      const char32_t replacement =
          single_char(spec.value("replacement", std::string("\xE2\x96\x81")), file,
                      "pre_tokenizer Metaspace replacement");
      PrependScheme scheme = PrependScheme::kAlways;
      if (spec.contains("prepend_scheme")) {
        const std::string s = spec["prepend_scheme"].get<std::string>();
        if (s == "always") {
          scheme = PrependScheme::kAlways;
        } else if (s == "first") {
          scheme = PrependScheme::kFirst;
        } else if (s == "never") {
          scheme = PrependScheme::kNever;
        } else {
          fail("{}: pre_tokenizer Metaspace: unknown prepend_scheme '{}'", file, s);
        }
      } else if (spec.contains("add_prefix_space")) {  // the pre-0.19 spelling
        scheme =
            spec["add_prefix_space"].get<bool>() ? PrependScheme::kAlways : PrependScheme::kNever;
      }
      return std::make_unique<Metaspace>(replacement, scheme, spec.value("split", true));
    }
    if (type == "Whitespace") return std::make_unique<WhitespacePre>(false);
    if (type == "WhitespaceSplit") return std::make_unique<WhitespacePre>(true);
    if (type == "Sequence") {
      std::vector<std::unique_ptr<PreTokenizer>> steps;
      for (const auto& child : spec.at("pretokenizers")) {
        if (auto p = make_pre_tokenizer(child, file)) steps.push_back(std::move(p));
      }
      return std::make_unique<SequencePre>(std::move(steps));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: pre_tokenizer {}: {}", file, type, e.what());
  }
  fail("{}: pre_tokenizer type '{}' is not supported", file, type);
}

}  // namespace pagoda
