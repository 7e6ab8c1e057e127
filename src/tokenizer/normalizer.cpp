// Normalizer implementations, matching HF tokenizers/src/normalizers/*.rs.
#include "tokenizer/normalizer.h"

#include <vector>

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace pagoda {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  UnicodeNormalizer(std::string_view file, int options) : file_(file), options_(options) {}
  void normalize(std::string& text) const override {
    if (text.empty()) return;
    // ASCII is invariant under every normalization form; skip the library call.
    bool ascii = true;
    for (const char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
    if (ascii) return;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &out,
                     static_cast<utf8proc_option_t>(options_ | UTF8PROC_STABLE));
    if (n < 0) fail("{}: unicode normalization failed: {}", file_, utf8proc_errmsg(n));
    text.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  std::string file_;
  int options_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
      const char32_t cp = next_code_point(text, pos);
      if (cp == 0x130) {  // Rust's full lowercase mapping: İ -> i + combining dot above
        out += "i\xCC\x87";
        continue;
      }
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    text = std::move(out);
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t p = begin;
        if (!is_white_space(next_code_point(text, p))) break;
        begin = p;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t p = start;
        if (!is_white_space(next_code_point(text, p))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text = prefix_ + text;
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, std::string_view file) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    fail("{}: normalizer: expected an object with a \"type\"", file);
  }
  const std::string type = spec["type"].get<std::string>();
  try {
    if (type == "NFC") return std::make_unique<UnicodeNormalizer>(file, UTF8PROC_COMPOSE);
    if (type == "NFD") return std::make_unique<UnicodeNormalizer>(file, UTF8PROC_DECOMPOSE);
    if (type == "NFKC") {
      return std::make_unique<UnicodeNormalizer>(file, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    }
    if (type == "NFKD") {
      return std::make_unique<UnicodeNormalizer>(file, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    }
    if (type == "Lowercase") return std::make_unique<Lowercase>();
    if (type == "Strip") {
      return std::make_unique<Strip>(spec.value("strip_left", true),
                                     spec.value("strip_right", true));
    }
    if (type == "Prepend") return std::make_unique<Prepend>(spec.at("prepend").get<std::string>());
    if (type == "Replace") {
      return std::make_unique<Replace>(Pattern::from_json(spec.at("pattern"), file),
                                       spec.at("content").get<std::string>());
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<Normalizer>> steps;
      for (const auto& child : spec.at("normalizers")) {
        if (auto n = make_normalizer(child, file)) steps.push_back(std::move(n));
      }
      return std::make_unique<SequenceNormalizer>(std::move(steps));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: normalizer {}: {}", file, type, e.what());
  }
  fail("{}: normalizer type '{}' is not supported", file, type);
}

}  // namespace pagoda
