#include "template/chat_template_options.h"

#include <filesystem>
#include <fstream>
// GCC 12 warns that std::regex's internal std::function "may be used uninitialized" at -O2, a
// known false positive in libstdc++'s regex compiler (GCC bug 105562).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <sstream>

#include "util/error.h"

namespace pagoda {
namespace {

// Python's unicode_escape for the escapes a shell user types in a one-line template.
std::string decode_escapes(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char next = text[++i];
    switch (next) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      default:
        out += '\\';
        out += next;
        break;  // kept as written, as Python keeps them
    }
  }
  return out;
}

}  // namespace

ChatTemplateText read_chat_template_argument(const std::string& value) {
  std::error_code error;
  if (std::filesystem::is_regular_file(value, error)) {
    std::ifstream in(value, std::ios::binary);
    if (!in) fail("{}: cannot open chat template", value);
    std::stringstream text;
    text << in.rdbuf();
    return {text.str(), value};
  }
  if (value.find_first_of("{}\n") == std::string::npos) {
    fail(
        "--chat-template {}: no such file (a template given inline must contain '{{', '}}' or a "
        "newline)",
        value);
  }
  return {decode_escapes(value), "--chat-template (inline)"};
}

ContentFormat resolve_content_format(const std::string& name, const std::string& template_source) {
  if (name == "string") return ContentFormat::kString;
  if (name == "openai") return ContentFormat::kOpenAi;
  if (name != "auto") {
    fail("--chat-template-content-format must be auto, string or openai, got '{}'", name);
  }
  // A loop whose iterable is some variable's content: `for c in message['content']`,
  // `for part in m.content`, `for item in message["content"] | selectattr(...)`.
  static const std::regex kLoopOverContent(
      R"(for\s+[\w,\s]+\s+in\s+\w+\s*(\[\s*['"]content['"]\s*\]|\.content\b))");
  return std::regex_search(template_source, kLoopOverContent) ? ContentFormat::kOpenAi
                                                              : ContentFormat::kString;
}

const char* content_format_name(ContentFormat format) {
  return format == ContentFormat::kOpenAi ? "openai" : "string";
}

nlohmann::json format_message_contents(const nlohmann::json& messages, ContentFormat format) {
  if (!messages.is_array()) return messages;
  nlohmann::json out = messages;
  for (nlohmann::json& message : out) {
    if (!message.is_object()) continue;
    auto content = message.find("content");
    if (content == message.end()) continue;
    if (format == ContentFormat::kOpenAi && content->is_string()) {
      *content = nlohmann::json::array({{{"type", "text"}, {"text", *content}}});
    } else if (format == ContentFormat::kString && content->is_array()) {
      std::string text;
      bool first = true;
      for (const nlohmann::json& part : *content) {
        if (!part.is_object() || !part.contains("text") || !part["text"].is_string()) continue;
        if (!first) text += "\n";
        text += part["text"].get<std::string>();
        first = false;
      }
      *content = text;
    }
  }
  return out;
}

}  // namespace pagoda
