// ChatTemplate (see chat_template.h): parse once, render per request, turn interpreter errors into
// one-line pagoda::Errors naming the template and line.
#include "template/chat_template.h"

#include <fmt/format.h>

#include "template/interpreter.h"
#include "template/parser.h"
#include "util/error.h"

namespace pagoda {

struct ChatTemplate::Program {
  jinja::Body body;
};

ChatTemplate::ChatTemplate(std::string source, std::string origin_name)
    : source_(std::move(source)), origin_name_(std::move(origin_name)) {
  auto program = std::make_shared<Program>();
  try {
    program->body = jinja::parse_template(source_);
    jinja::check_filters_and_tests(program->body);
  } catch (const jinja::TemplateError& e) {
    fail("{}:{}: {}", origin_name_, e.line(), e.what());
  }
  program_ = std::move(program);
}

namespace {

template <typename Json>
std::string render_impl(const jinja::Body& body, const std::string& origin, const Json& messages,
                        bool add_generation_prompt, const Json& extra_context) {
  if (!extra_context.is_null() && !extra_context.is_object()) {
    fail("{}: extra_context must be a JSON object", origin);
  }
  std::vector<std::pair<std::string, jinja::Value>> variables;
  try {
    variables.emplace_back("messages", jinja::Value::from_json(messages));
    variables.emplace_back("tools", jinja::Value());
    variables.emplace_back("documents", jinja::Value());
    variables.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
    if (extra_context.is_object()) {
      for (auto it = extra_context.begin(); it != extra_context.end(); ++it) {
        if (it.key() == "messages" || it.key() == "add_generation_prompt") {
          fail("{}: extra_context may not set '{}'", origin, it.key());
        }
        variables.emplace_back(it.key(), jinja::Value::from_json(it.value()));
      }
    }
  } catch (const jinja::TemplateError& e) {
    fail("{}: {}", origin, e.what());
  }
  // Later entries win, as Python keyword arguments would (tools given in extra_context).
  std::vector<std::pair<std::string, jinja::Value>> unique;
  for (auto& [k, v] : variables) {
    bool replaced = false;
    for (auto& [uk, uv] : unique) {
      if (uk == k) {
        uv = v;
        replaced = true;
      }
    }
    if (!replaced) unique.emplace_back(k, v);
  }
  try {
    return jinja::render(body, unique);
  } catch (const jinja::TemplateError& e) {
    fail("{}:{}: {}", origin, e.line(), e.what());
  }
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra_context) const {
  return render_impl(program_->body, origin_name_, messages, add_generation_prompt, extra_context);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_context) const {
  return render_impl(program_->body, origin_name_, messages, add_generation_prompt, extra_context);
}

ChatTemplate ChatTemplate::from_tokenizer_config(const nlohmann::ordered_json& config,
                                                 const std::string& origin,
                                                 const std::string& name) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) fail("{}: no 'chat_template' key", origin);
  if (it->is_string()) return ChatTemplate(it->get<std::string>(), origin);
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == name && entry.contains("template") &&
          entry["template"].is_string()) {
        return ChatTemplate(entry["template"].get<std::string>(), origin + ":" + name);
      }
    }
    fail("{}: 'chat_template' has no template named '{}'", origin, name);
  }
  fail("{}: 'chat_template' must be a string or a list of named templates", origin);
}

nlohmann::ordered_json special_tokens_context(const nlohmann::ordered_json& tokenizer_config) {
  static const char* const kKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                      "pad_token", "cls_token", "mask_token"};
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* key : kKeys) {
    auto it = tokenizer_config.find(key);
    if (it == tokenizer_config.end() || it->is_null()) continue;
    if (it->is_string()) {
      out[key] = *it;
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      out[key] = (*it)["content"];
    }
  }
  return out;
}

}  // namespace pagoda
