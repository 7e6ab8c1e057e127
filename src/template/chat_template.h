// ChatTemplate: a model's Jinja chat template, parsed once and rendered per request the way
// Hugging Face transformers' apply_chat_template renders it (jinja2 ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now, tojson with
// ensure_ascii=False). See docs/chat_templates.md.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda {

class ChatTemplate {
 public:
  // Parses `source`. A syntax error, or a filter/test name jinja2 would reject at compile time,
  // throws pagoda::Error "ORIGIN:LINE: message".
  ChatTemplate(std::string source, std::string origin_name);

  // Renders with variables messages, add_generation_prompt, tools (None unless given), documents
  // (None) and every key of extra_context (bos_token, eos_token, tools, enable_thinking, ...).
  // Render errors, including the template's raise_exception(), throw pagoda::Error
  // "ORIGIN:LINE: message".
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& extra_context) const;
  // Same, keeping the key order of the JSON objects as a client sent them (Python dicts are
  // ordered, and `tojson` of a tool schema shows that order).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra_context) const;

  const std::string& source() const { return source_; }
  const std::string& origin_name() const { return origin_name_; }

  // The chat template in a parsed tokenizer_config.json: a string, or HF's list of
  // {"name", "template"} entries (the one named `name`). Throws pagoda::Error naming `origin`
  // when absent.
  static ChatTemplate from_tokenizer_config(const nlohmann::ordered_json& config,
                                            const std::string& origin,
                                            const std::string& name = "default");

 private:
  struct Program;
  std::string source_;
  std::string origin_name_;
  std::shared_ptr<const Program> program_;
};

// The special-token variables HF passes to a template (bos_token, eos_token, unk_token,
// pad_token, ...) taken from a tokenizer_config.json, where each may be a string or an AddedToken
// object with "content".
nlohmann::ordered_json special_tokens_context(const nlohmann::ordered_json& tokenizer_config);

}  // namespace pagoda
