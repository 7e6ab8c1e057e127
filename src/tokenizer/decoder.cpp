// Decoder implementations (see decoder.h).
#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace pagoda {

namespace {

// Maps each token's characters back to bytes; a token with any character outside the table
// (an added token such as "<｜User｜>") contributes its own UTF-8 bytes. The concatenation is
// repaired lossily, like String::from_utf8_lossy.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    std::string token_bytes;
    for (const std::string& token : tokens) {
      token_bytes.clear();
      bool mapped = true;
      size_t pos = 0;
      while (pos < token.size()) {
        const int b = byte_level_byte(next_code_point(token, pos));
        if (b < 0) {
          mapped = false;
          break;
        }
        token_bytes.push_back(static_cast<char>(b));
      }
      bytes += mapped ? token_bytes : token;
    }
    tokens.assign(1, sanitize_utf8(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  // Every replacement character becomes a space, except in the first token where (unless the
  // prepend scheme is "never") replacement characters are dropped; other spaces are kept.
  void decode_chain(std::vector<std::string>& tokens) const override {
    const Pattern marker = Pattern::literal(replacement_);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = marker.replace_all(tokens[i], i == 0 && strip_first_ ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// Runs of <0xXX> tokens become their bytes when those form valid UTF-8, else one U+FFFD each.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& token : tokens) {
      int byte = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
        byte = hex_byte(token[3], token[4]);
      }
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int hex_byte(char hi, char lo) {
    const int h = hex_digit(hi), l = hex_digit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
      size_t pos = 0;
      while (pos < token.size()) {
        const size_t at = pos;
        chars.emplace_back(at, next_code_point(token, pos));
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < start_ && i < chars.size() && chars[i].second == content_; ++i) {
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      if (stop_cut <= start_cut) {
        token.clear();
        continue;
      }
      const size_t begin = start_cut < chars.size() ? chars[start_cut].first : token.size();
      const size_t end = stop_cut < chars.size() ? chars[stop_cut].first : token.size();
      token = token.substr(begin, end - begin);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = pattern_.replace_all(token, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// BPEDecoder: the end-of-word suffix becomes a space, except on the last token.
class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const Pattern marker = Pattern::literal(suffix_);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = marker.replace_all(tokens[i], i + 1 == tokens.size() ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, std::string_view file) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    fail("{}: decoder: expected an object with a \"type\"", file);
  }
  const std::string type = spec["type"].get<std::string>();
  try {
    if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    if (type == "Metaspace") {
      bool strip_first = true;
      if (spec.contains("prepend_scheme")) {
        strip_first = spec["prepend_scheme"].get<std::string>() != "never";
      } else if (spec.contains("add_prefix_space")) {
        strip_first = spec["add_prefix_space"].get<bool>();
      }
      return std::make_unique<MetaspaceDecoder>(
          spec.value("replacement", std::string("\xE2\x96\x81")), strip_first);
    }
    if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse") return std::make_unique<FuseDecoder>();
    if (type == "Strip") {
      const auto content = spec.at("content").get<std::string>();
      size_t pos = 0;
      if (content.empty()) fail("{}: decoder Strip: empty content", file);
      const char32_t c = next_code_point(content, pos);
      return std::make_unique<StripDecoder>(c, spec.at("start").get<size_t>(),
                                            spec.at("stop").get<size_t>());
    }
    if (type == "Replace") {
      return std::make_unique<ReplaceDecoder>(Pattern::from_json(spec.at("pattern"), file),
                                              spec.at("content").get<std::string>());
    }
    if (type == "BPEDecoder") {
      return std::make_unique<BpeSuffixDecoder>(spec.value("suffix", std::string("</w>")));
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<Decoder>> steps;
      for (const auto& child : spec.at("decoders")) {
        if (auto d = make_decoder(child, file)) steps.push_back(std::move(d));
      }
      return std::make_unique<SequenceDecoder>(std::move(steps));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: decoder {}: {}", file, type, e.what());
  }
  fail("{}: decoder type '{}' is not supported", file, type);
}

}  // namespace pagoda
