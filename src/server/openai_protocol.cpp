// Request parsing and response building for the OpenAI-compatible API. Every field a request
// may carry is listed here; an unknown one is ignored and reported (or, strict, a 400: a typo
// like "max_token" then cannot pass unnoticed), and wrong types and out-of-range values are a
// 400, each naming the field in `param`. Null counts as absent, as in the OpenAI and vLLM
// servers.
#include "server/openai_protocol.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>

#include "sampling/validate.h"

namespace pagoda::server {

void throw_invalid(std::string message, std::string param) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  throw RequestError(std::move(e));
}

ApiError not_found_error(std::string message) {
  ApiError e;
  e.status = 404;
  e.type = "NotFoundError";
  e.message = std::move(message);
  return e;
}

ApiError service_unavailable_error(std::string message) {
  ApiError e;
  e.status = 503;
  e.type = "ServiceUnavailableError";
  e.message = std::move(message);
  return e;
}

json error_json(const ApiError& error) {
  json inner = {{"message", error.message},
                {"type", error.type},
                {"param", error.param.empty() ? json(nullptr) : json(error.param)},
                {"code", error.code.empty() ? json(error.status) : json(error.code)}};
  return json{{"error", std::move(inner)}};
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& payload) {
  return "data: " + dump_json(payload) + "\n\n";
}

namespace {

// Nesting depth of a JSON text, counted without parsing (brackets inside strings ignored), so that
// a body of a million '[' is refused before a recursive structure is built from it.
int json_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > kMaxJsonDepth) return max_depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

// The policy of the request being parsed on this thread (null: strict). Set by the parse_*
// entry points for the nested readers they create; see UnknownFields.
thread_local UnknownFields* t_unknown = nullptr;

class UnknownFieldsScope {
 public:
  explicit UnknownFieldsScope(UnknownFields* unknown) : saved_(t_unknown) { t_unknown = unknown; }
  ~UnknownFieldsScope() { t_unknown = saved_; }
  UnknownFieldsScope(const UnknownFieldsScope&) = delete;
  UnknownFieldsScope& operator=(const UnknownFieldsScope&) = delete;

 private:
  UnknownFields* saved_;
};

// Reads the fields of one JSON object, remembering which were consumed so that the rest can be
// reported as unknown. `prefix` names nested objects in `param` ("stream_options.include_usage").
class FieldReader {
 public:
  FieldReader(const json& object, std::string prefix = {})
      : object_(object), prefix_(std::move(prefix)) {}

  const json* get(const std::string& key) {
    seen_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<int64_t> get_int(const std::string& key, int64_t min, int64_t max) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer())
      throw_invalid(fmt::format("'{}' must be an integer", name(key)), name(key));
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(max)) {
      throw_invalid(
          fmt::format("'{}' must be in [{}, {}], got {}", name(key), min, max, v->get<uint64_t>()),
          name(key));
    }
    const int64_t x = v->get<int64_t>();
    if (x < min || x > max) {
      throw_invalid(fmt::format("'{}' must be in [{}, {}], got {}", name(key), min, max, x),
                    name(key));
    }
    return x;
  }

  std::optional<float> get_float(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) throw_invalid(fmt::format("'{}' must be a number", name(key)), name(key));
    const double x = v->get<double>();
    if (!std::isfinite(x) || std::fabs(x) > 1e30) {
      throw_invalid(fmt::format("'{}' is out of range: {}", name(key), x), name(key));
    }
    return static_cast<float>(x);
  }

  std::optional<bool> get_bool(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean())
      throw_invalid(fmt::format("'{}' must be a boolean", name(key)), name(key));
    return v->get<bool>();
  }

  std::optional<std::string> get_string(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) throw_invalid(fmt::format("'{}' must be a string", name(key)), name(key));
    return v->get<std::string>();
  }

  // Marks fields we accept for compatibility but do not act on (e.g. "user").
  void ignore(std::initializer_list<const char*> keys) {
    for (const char* k : keys) seen_.insert(k);
  }

  void reject_unknown() const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (seen_.count(it.key())) continue;
      if (t_unknown != nullptr && !t_unknown->strict) {
        t_unknown->ignored.push_back(name(it.key()));
      } else {
        throw_invalid(fmt::format("Unknown field '{}'", name(it.key())), name(it.key()));
      }
    }
  }

  std::string name(const std::string& key) const {
    return prefix_.empty() ? key : prefix_ + "." + key;
  }

 private:
  const json& object_;
  std::string prefix_;
  std::set<std::string> seen_;
};

std::vector<int32_t> parse_token_ids(const json& v, const std::string& param) {
  if (!v.is_array()) throw_invalid(fmt::format("'{}' must be an array of token ids", param), param);
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number_integer())
      throw_invalid(fmt::format("'{}' must contain only integers", param), param);
    if (x.is_number_unsigned() ? x.get<uint64_t>() > INT32_MAX
                               : (x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)) {
      throw_invalid(fmt::format("'{}' contains an invalid token id: {}", param, x.dump()), param);
    }
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

std::vector<Prompt> parse_prompt(const json* v) {
  if (v == nullptr) throw_invalid("'prompt' is required", "prompt");
  std::vector<Prompt> prompts;
  if (v->is_string()) {
    prompts.push_back({v->get<std::string>(), {}});
  } else if (v->is_array()) {
    if (v->empty()) throw_invalid("'prompt' must not be empty", "prompt");
    const json& first = v->front();
    // A token-id prompt is one prompt (bounded by the context length later); only a batch of
    // prompts counts against the per-request limit.
    if (!first.is_number_integer() && v->size() > static_cast<size_t>(kMaxPromptsPerRequest)) {
      throw_invalid(fmt::format("'prompt' holds {} prompts; at most {} are allowed", v->size(),
                                kMaxPromptsPerRequest),
                    "prompt");
    }
    if (first.is_number_integer()) {
      prompts.push_back({std::nullopt, parse_token_ids(*v, "prompt")});
    } else if (first.is_string()) {
      for (const json& s : *v) {
        if (!s.is_string()) throw_invalid("'prompt' must be a list of strings", "prompt");
        prompts.push_back({s.get<std::string>(), {}});
      }
    } else if (first.is_array()) {
      for (const json& ids : *v) {
        prompts.push_back({std::nullopt, parse_token_ids(ids, "prompt")});
        if (prompts.back().token_ids.empty())
          throw_invalid("'prompt' contains an empty token list", "prompt");
      }
    } else {
      throw_invalid("'prompt' must be a string, a list of strings, token ids or lists of token ids",
                    "prompt");
    }
  } else {
    throw_invalid("'prompt' must be a string, a list of strings, token ids or lists of token ids",
                  "prompt");
  }
  return prompts;
}

std::vector<std::string> parse_stop(const json* v) {
  std::vector<std::string> stop;
  if (v == nullptr) return stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 16) throw_invalid("'stop' may hold at most 16 strings", "stop");
    for (const json& s : *v) {
      if (!s.is_string()) throw_invalid("'stop' must be a string or a list of strings", "stop");
      stop.push_back(s.get<std::string>());
    }
  } else {
    throw_invalid("'stop' must be a string or a list of strings", "stop");
  }
  for (const std::string& s : stop) {
    if (s.empty()) throw_invalid("'stop' strings must not be empty", "stop");
  }
  return stop;
}

// vLLM's continuous_usage_stats puts the usage so far in every chunk, and only together with
// include_usage (serving_completion.py: include_continuous_usage).
void parse_stream_options(FieldReader& r, bool stream, bool* include_usage,
                          bool* continuous_usage) {
  const json* opts = r.get("stream_options");
  if (opts == nullptr) return;
  if (!opts->is_object()) throw_invalid("'stream_options' must be an object", "stream_options");
  if (!stream)
    throw_invalid("'stream_options' is only allowed when 'stream' is true", "stream_options");
  FieldReader o(*opts, "stream_options");
  *include_usage = o.get_bool("include_usage").value_or(false);
  const bool continuous = o.get_bool("continuous_usage_stats").value_or(false);
  *continuous_usage = *include_usage && continuous;
  o.reject_unknown();
}

// logprobs, top_logprobs or prompt_logprobs: at least 0, at most --max-logprobs (vLLM's
// message; -1 there means any number).
std::optional<int> get_num_logprobs(FieldReader& r, const std::string& key,
                                    const ProtocolOptions& protocol) {
  const auto v = r.get_int(key, 0, std::numeric_limits<int32_t>::max());
  if (v && protocol.max_logprobs >= 0 && *v > protocol.max_logprobs) {
    throw_invalid(fmt::format("Requested {} of {}, which is greater than max allowed: {} (the "
                              "server's --max-logprobs)",
                              key, *v, protocol.max_logprobs),
                  key);
  }
  return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
}

// OpenAI's logit_bias: {"token id": bias}, biases in [-100, 100]. Whether an id is inside the
// vocabulary is the engine's check (the protocol does not know the model).
std::map<int32_t, float> parse_logit_bias(const json& v) {
  if (!v.is_object()) {
    throw_invalid("'logit_bias' must be an object of token ids to biases", "logit_bias");
  }
  std::map<int32_t, float> bias;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    int32_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0) {
      throw_invalid(fmt::format("'logit_bias' keys must be token ids, got '{}'", key),
                    "logit_bias");
    }
    const json& value = it.value();
    if (!value.is_number()) {
      throw_invalid(fmt::format("'logit_bias' values must be numbers, got {} for token {}",
                                value.dump(), key),
                    "logit_bias");
    }
    const double x = value.get<double>();
    if (!(x >= -100.0 && x <= 100.0)) {
      throw_invalid(
          fmt::format("'logit_bias' values must be in [-100, 100], got {} for token {}", x, key),
          "logit_bias");
    }
    bias[id] = static_cast<float>(x);
  }
  return bias;
}

// vLLM's bad_words: a list of words, none empty.
std::vector<std::string> parse_bad_words(const json& v) {
  if (!v.is_array()) throw_invalid("'bad_words' must be a list of strings", "bad_words");
  std::vector<std::string> words;
  for (const json& w : v) {
    if (!w.is_string()) throw_invalid("'bad_words' must be a list of strings", "bad_words");
    words.push_back(w.get<std::string>());
    if (words.back().find_first_not_of(" \t\n\r\f\v") == std::string::npos) {
      throw_invalid("'bad_words' must not contain empty or whitespace-only words", "bad_words");
    }
  }
  return words;
}

// A JSON schema given as an object or as its text.
std::string schema_text(const json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() || v.is_boolean()) return v.dump();
  throw_invalid(fmt::format("'{}' must be a JSON schema (an object)", param), param);
}

std::vector<std::string> choice_list(const json& v, const std::string& param) {
  if (!v.is_array() || v.empty())
    throw_invalid(fmt::format("'{}' must be a non-empty array of strings", param), param);
  std::vector<std::string> choices;
  for (const json& c : v) {
    if (!c.is_string())
      throw_invalid(fmt::format("'{}' must be a non-empty array of strings", param), param);
    choices.push_back(c.get<std::string>());
  }
  return choices;
}

// Adds one constraint; a request may name only one, whichever field it comes from.
void set_structured(SamplingParams& p, const std::string& param,
                    const std::function<void(StructuredOutputsParams&)>& set) {
  StructuredOutputsParams so = p.structured_outputs.value_or(StructuredOutputsParams{});
  const int before = so.num_constraints();
  set(so);
  if (before != 0 || so.num_constraints() != 1) {
    throw_invalid(fmt::format("'{}': only one structured output constraint (json, regex, choice, "
                              "grammar, json_object) may be given",
                              param),
                  param);
  }
  p.structured_outputs = std::move(so);
}

// vLLM's structured_outputs object and its older guided_* fields.
void parse_structured_outputs(FieldReader& r, SamplingParams& p) {
  std::optional<bool> disable_any_whitespace;
  if (const json* so = r.get("structured_outputs")) {
    if (!so->is_object())
      throw_invalid("'structured_outputs' must be an object", "structured_outputs");
    FieldReader f(*so, "structured_outputs");
    if (const json* v = f.get("json")) {
      const std::string text = schema_text(*v, f.name("json"));
      set_structured(p, f.name("json"), [&](auto& s) { s.json = text; });
    }
    if (auto v = f.get_string("regex")) {
      set_structured(p, f.name("regex"), [&](auto& s) { s.regex = *v; });
    }
    if (const json* v = f.get("choice")) {
      auto choices = choice_list(*v, f.name("choice"));
      set_structured(p, f.name("choice"), [&](auto& s) { s.choice = choices; });
    }
    if (auto v = f.get_string("grammar")) {
      set_structured(p, f.name("grammar"), [&](auto& s) { s.grammar = *v; });
    }
    if (f.get_bool("json_object").value_or(false)) {
      set_structured(p, f.name("json_object"), [](auto& s) { s.json_object = true; });
    }
    disable_any_whitespace = f.get_bool("disable_any_whitespace");
    f.ignore(
        {"backend", "disable_fallback", "disable_additional_properties", "whitespace_pattern"});
    f.reject_unknown();
  }
  if (const json* v = r.get("guided_json")) {
    const std::string text = schema_text(*v, "guided_json");
    set_structured(p, "guided_json", [&](auto& s) { s.json = text; });
  }
  if (auto v = r.get_string("guided_regex")) {
    set_structured(p, "guided_regex", [&](auto& s) { s.regex = *v; });
  }
  if (const json* v = r.get("guided_choice")) {
    auto choices = choice_list(*v, "guided_choice");
    set_structured(p, "guided_choice", [&](auto& s) { s.choice = choices; });
  }
  if (auto v = r.get_string("guided_grammar")) {
    set_structured(p, "guided_grammar", [&](auto& s) { s.grammar = *v; });
  }
  // One grammar engine: the backend a client names changes nothing.
  r.ignore({"guided_decoding_backend", "guided_whitespace_pattern"});
  // JSON whitespace is bounded unless the client asks for vLLM's default, free whitespace, by
  // setting disable_any_whitespace to false explicitly.
  if (disable_any_whitespace && p.structured_outputs) {
    p.structured_outputs->any_whitespace = !*disable_any_whitespace;
  }
}

// OpenAI's response_format: text, json_object, or json_schema {name, schema, strict}.
void parse_response_format(FieldReader& r, SamplingParams& p) {
  const json* format = r.get("response_format");
  if (format == nullptr) return;
  if (!format->is_object()) throw_invalid("'response_format' must be an object", "response_format");
  FieldReader f(*format, "response_format");
  const std::string type = f.get_string("type").value_or("");
  if (type == "text") {
  } else if (type == "json_object") {
    set_structured(p, "response_format", [](auto& s) { s.json_object = true; });
  } else if (type == "json_schema") {
    const json* spec = f.get("json_schema");
    if (spec == nullptr || !spec->is_object()) {
      throw_invalid("'response_format.json_schema' must be an object",
                    "response_format.json_schema");
    }
    FieldReader j(*spec, "response_format.json_schema");
    j.get_string("name");
    j.get_string("description");
    j.get_bool("strict");
    const json* schema = j.get("schema");
    // OpenAI makes schema optional; without one any JSON object will do.
    if (schema == nullptr) {
      set_structured(p, "response_format", [](auto& s) { s.json_object = true; });
    } else {
      const std::string text = schema_text(*schema, j.name("schema"));
      set_structured(p, "response_format", [&](auto& s) { s.json = text; });
    }
    j.reject_unknown();
  } else {
    throw_invalid("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"",
                  "response_format.type");
  }
  f.reject_unknown();
}

// The sampling fields both endpoints share, OpenAI names plus vLLM's extras.
void parse_sampling_fields(FieldReader& r, SamplingParams& p) {
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  if (auto n = r.get_int("n", 1, kMaxSamplesPerRequest)) p.n = static_cast<int>(*n);
  if (auto v = r.get_float("temperature")) p.temperature = *v;
  if (auto v = r.get_float("top_p")) p.top_p = *v;
  if (auto v = r.get_int("top_k", -1, kIntMax)) p.top_k = static_cast<int>(*v);
  if (auto v = r.get_float("min_p")) p.min_p = *v;
  if (auto v = r.get_float("presence_penalty")) p.presence_penalty = *v;
  if (auto v = r.get_float("frequency_penalty")) p.frequency_penalty = *v;
  if (auto v = r.get_float("repetition_penalty")) p.repetition_penalty = *v;
  if (auto v = r.get_int("seed", std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max())) {
    p.seed = static_cast<uint64_t>(*v);
  }
  if (const json* stop = r.get("stop")) p.stop = parse_stop(stop);
  if (const json* ids = r.get("stop_token_ids")) {
    p.stop_token_ids = parse_token_ids(*ids, "stop_token_ids");
  }
  if (auto v = r.get_int("min_tokens", 0, kIntMax)) p.min_tokens = static_cast<int>(*v);
  if (auto v = r.get_bool("ignore_eos")) p.ignore_eos = *v;
  if (auto v = r.get_bool("skip_special_tokens")) p.skip_special_tokens = *v;
  if (auto v = r.get_bool("include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  // best_of is accepted only where it changes nothing (vLLM dropped it in v1).
  if (auto best_of = r.get_int("best_of", 1, kMaxSamplesPerRequest); best_of && *best_of != p.n) {
    throw_invalid("'best_of' is not supported unless equal to 'n'", "best_of");
  }
  if (const json* bias = r.get("logit_bias")) p.logit_bias = parse_logit_bias(*bias);
  if (const json* ids = r.get("allowed_token_ids")) {
    p.allowed_token_ids = parse_token_ids(*ids, "allowed_token_ids");
    if (p.allowed_token_ids->empty()) {
      throw_invalid("'allowed_token_ids' must not be empty", "allowed_token_ids");
    }
  }
  if (const json* words = r.get("bad_words")) p.bad_words = parse_bad_words(*words);
  if (const json* beam = r.get("use_beam_search");
      beam && !(beam->is_boolean() && !beam->get<bool>())) {
    throw_invalid("'use_beam_search' is not supported", "use_beam_search");
  }
  parse_structured_outputs(r, p);
  if (const json* user = r.get("user"); user && !user->is_string())
    throw_invalid("'user' must be a string", "user");
  r.ignore({"spaces_between_special_tokens", "priority", "request_id"});
}

// One message's content: a string, or an array of parts [{type: "text", text}] kept as a list
// of exactly those two fields (how the template sees it is the engine's
// --chat-template-content-format).
json message_content(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw_invalid(fmt::format("'{}' must be a string or an array of content parts", param), param);
  json parts = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string where = fmt::format("{}[{}]", param, i);
    if (!part.is_object()) throw_invalid(fmt::format("'{}' must be an object", where), where);
    FieldReader pr(part, where);
    const auto type = pr.get_string("type");
    if (!type) throw_invalid(fmt::format("'{}.type' is required", where), where + ".type");
    if (*type != "text") {
      throw_invalid(fmt::format("content part type '{}' is not supported (text only)", *type),
                    where + ".type");
    }
    const auto t = pr.get_string("text");
    if (!t) throw_invalid(fmt::format("'{}.text' is required", where), where + ".text");
    pr.reject_unknown();
    parts.push_back({{"type", "text"}, {"text", *t}});
  }
  return parts;
}

json parse_messages(const json* v) {
  if (v == nullptr) throw_invalid("'messages' is required", "messages");
  if (!v->is_array() || v->empty())
    throw_invalid("'messages' must be a non-empty array", "messages");
  json out = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw_invalid(fmt::format("'{}' must be an object", where), where);
    FieldReader r(m, where);
    const auto role = r.get_string("role");
    static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant",
                                                 "tool"};
    if (!role || !kRoles.count(*role)) {
      throw_invalid(
          fmt::format("'{}.role' must be one of system, developer, user, assistant, tool", where),
          where + ".role");
    }
    json msg = {{"role", *role}};
    const json* content = r.get("content");
    if (content == nullptr) {
      if (*role != "assistant")
        throw_invalid(fmt::format("'{}.content' is required", where), where + ".content");
      msg["content"] = "";
    } else {
      msg["content"] = message_content(*content, where + ".content");
    }
    if (auto name = r.get_string("name")) msg["name"] = *name;
    // Current vLLM names it `reasoning`, older versions `reasoning_content`; templates read
    // reasoning_content.
    if (auto rc = r.get_string("reasoning_content")) msg["reasoning_content"] = *rc;
    if (auto rc = r.get_string("reasoning")) msg["reasoning_content"] = *rc;
    if (auto id = r.get_string("tool_call_id")) msg["tool_call_id"] = *id;
    if (const json* calls = r.get("tool_calls")) msg["tool_calls"] = *calls;
    r.reject_unknown();
    out.push_back(std::move(msg));
  }
  return out;
}

// OpenAI's function tools: [{type: "function", function: {name, description?, parameters?,
// strict?}}], returned as sent for the chat template.
json parse_tools(const json& tools) {
  if (!tools.is_array()) throw_invalid("'tools' must be an array", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = fmt::format("tools[{}]", i);
    if (!tools[i].is_object()) throw_invalid(fmt::format("'{}' must be an object", where), where);
    FieldReader t(tools[i], where);
    if (t.get_string("type") != "function")
      throw_invalid(fmt::format("'{}.type' must be \"function\"", where), where + ".type");
    const json* function = t.get("function");
    if (function == nullptr || !function->is_object()) {
      throw_invalid(fmt::format("'{}.function' must be an object", where), where + ".function");
    }
    FieldReader f(*function, where + ".function");
    const auto name = f.get_string("name");
    if (!name || name->empty())
      throw_invalid(fmt::format("'{}' is required", f.name("name")), f.name("name"));
    f.get_string("description");
    if (const json* parameters = f.get("parameters"); parameters && !parameters->is_object()) {
      throw_invalid(fmt::format("'{}' must be a JSON schema object", f.name("parameters")),
                    f.name("parameters"));
    }
    f.get_bool("strict");
    f.reject_unknown();
    t.reject_unknown();
  }
  return tools;
}

// tool_choice: "none" | "auto" | "required" | {type: "function", function: {name}}, with vLLM's
// rules: the default is auto when tools were sent, and auto needs --enable-auto-tool-choice.
ToolChoice parse_tool_choice(const json* v, const json& tools, const ProtocolOptions& protocol) {
  ToolChoice choice;
  const bool has_tools = tools.is_array() && !tools.empty();
  if (v == nullptr) {
    choice.kind = has_tools ? ToolChoice::Kind::kAuto : ToolChoice::Kind::kNone;
  } else if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "none") {
      choice.kind = ToolChoice::Kind::kNone;
    } else if (s == "auto") {
      choice.kind = ToolChoice::Kind::kAuto;
    } else if (s == "required") {
      choice.kind = ToolChoice::Kind::kRequired;
    } else {
      throw_invalid(
          "'tool_choice' must be \"none\", \"auto\", \"required\" or "
          "{\"type\": \"function\", \"function\": {\"name\": ...}}",
          "tool_choice");
    }
  } else if (v->is_object()) {
    FieldReader c(*v, "tool_choice");
    if (c.get_string("type") != "function")
      throw_invalid("'tool_choice.type' must be \"function\"", "tool_choice.type");
    const json* function = c.get("function");
    if (function == nullptr || !function->is_object())
      throw_invalid("'tool_choice.function' must be an object", "tool_choice.function");
    FieldReader f(*function, "tool_choice.function");
    choice.kind = ToolChoice::Kind::kNamed;
    choice.name = f.get_string("name").value_or("");
    f.reject_unknown();
    c.reject_unknown();
    bool known = false;
    if (has_tools) {
      for (const json& tool : tools) known |= tool["function"]["name"] == choice.name;
    }
    if (!known) {
      throw_invalid(fmt::format("'tool_choice.function.name' is '{}', which is not the name of a "
                                "function in 'tools'",
                                choice.name),
                    "tool_choice.function.name");
    }
  } else {
    throw_invalid("'tool_choice' must be a string or an object", "tool_choice");
  }
  if (choice.kind != ToolChoice::Kind::kNone && !has_tools) {
    throw_invalid("'tool_choice' other than \"none\" requires 'tools'", "tool_choice");
  }
  if (choice.kind == ToolChoice::Kind::kAuto &&
      (!protocol.enable_auto_tool_choice || protocol.tool_call_parser.empty())) {
    throw_invalid(
        "\"auto\" tool choice requires the server to run with --enable-auto-tool-choice and "
        "--tool-call-parser",
        "tool_choice");
  }
  return choice;
}

}  // namespace

json parse_json_body(std::string_view body) {
  if (body.empty()) throw_invalid("The request body is empty; expected a JSON object");
  if (json_depth(body) > kMaxJsonDepth) {
    throw_invalid(fmt::format("The request body is nested deeper than {} levels", kMaxJsonDepth));
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // nlohmann's message names the byte offset and the cause (syntax, invalid UTF-8, overflow).
    throw_invalid(fmt::format("Invalid JSON body: {}", e.what()));
  }
  if (!j.is_object()) throw_invalid("The request body must be a JSON object");
  return j;
}

CompletionRequest parse_completion_request(const json& body, const SamplingParams& defaults,
                                           UnknownFields* unknown,
                                           const ProtocolOptions& protocol) {
  const UnknownFieldsScope scope(unknown);
  CompletionRequest req;
  req.params = defaults;
  req.params.n = 1;
  req.params.stop.clear();
  req.params.logprobs.reset();
  req.params.prompt_logprobs.reset();
  req.params.structured_outputs.reset();
  FieldReader r(body);
  req.model = r.get_string("model").value_or("");
  req.prompts = parse_prompt(r.get("prompt"));
  if (auto v = r.get_int("max_tokens", 0, std::numeric_limits<int32_t>::max()))
    req.max_tokens = static_cast<int>(*v);
  req.echo = r.get_bool("echo").value_or(false);
  req.stream = r.get_bool("stream").value_or(false);
  parse_stream_options(r, req.stream, &req.include_usage, &req.continuous_usage);
  if (auto v = get_num_logprobs(r, "logprobs", protocol)) req.params.logprobs = *v;
  // vLLM's extra: top-N logprobs of every prompt token, returned in each choice's
  // `prompt_logprobs`. Like vLLM, not with stream (the chunks have no such field).
  if (auto v = get_num_logprobs(r, "prompt_logprobs", protocol)) {
    if (req.stream && *v > 0) {
      throw_invalid("'prompt_logprobs' are not available when 'stream' is true", "prompt_logprobs");
    }
    req.params.prompt_logprobs = *v;
  }
  // echo with logprobs puts the prompt tokens' logprobs first, so the engine must compute them
  // (vLLM's to_sampling_params does the same).
  if (req.echo && req.params.logprobs && !req.params.prompt_logprobs)
    req.params.prompt_logprobs = req.params.logprobs;
  if (const json* suffix = r.get("suffix")) {
    if (!suffix->is_string()) throw_invalid("'suffix' must be a string", "suffix");
    if (!suffix->get<std::string>().empty()) throw_invalid("'suffix' is not supported", "suffix");
  }
  parse_response_format(r, req.params);
  req.add_special_tokens = r.get_bool("add_special_tokens").value_or(true);
  parse_sampling_fields(r, req.params);
  r.reject_unknown();
  return req;
}

ChatRequest parse_chat_request(const json& body, const SamplingParams& defaults,
                               UnknownFields* unknown, const ProtocolOptions& protocol) {
  const UnknownFieldsScope scope(unknown);
  ChatRequest req;
  req.params = defaults;
  req.params.n = 1;
  req.params.stop.clear();
  req.params.logprobs.reset();
  req.params.prompt_logprobs.reset();
  req.params.structured_outputs.reset();
  FieldReader r(body);
  req.model = r.get_string("model").value_or("");
  req.messages = parse_messages(r.get("messages"));
  const auto max_tokens = r.get_int("max_tokens", 0, std::numeric_limits<int32_t>::max());
  const auto max_completion_tokens =
      r.get_int("max_completion_tokens", 0, std::numeric_limits<int32_t>::max());
  if (max_completion_tokens) {
    req.max_tokens = static_cast<int>(*max_completion_tokens);
  } else if (max_tokens) {
    req.max_tokens = static_cast<int>(*max_tokens);
  }
  req.stream = r.get_bool("stream").value_or(false);
  parse_stream_options(r, req.stream, &req.include_usage, &req.continuous_usage);
  req.logprobs = r.get_bool("logprobs").value_or(false);
  if (auto top = get_num_logprobs(r, "top_logprobs", protocol)) {
    if (!req.logprobs)
      throw_invalid("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    req.params.logprobs = *top;
  } else if (req.logprobs) {
    req.params.logprobs = 0;
  }
  req.add_generation_prompt = r.get_bool("add_generation_prompt").value_or(true);
  req.add_special_tokens = r.get_bool("add_special_tokens").value_or(false);
  if (const json* kwargs = r.get("chat_template_kwargs")) {
    if (!kwargs->is_object())
      throw_invalid("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    req.chat_template_kwargs = *kwargs;
  }
  parse_response_format(r, req.params);
  if (const json* tools = r.get("tools")) req.tools = parse_tools(*tools);
  req.tool_choice = parse_tool_choice(r.get("tool_choice"), req.tools, protocol);
  req.parallel_tool_calls = r.get_bool("parallel_tool_calls").value_or(true);
  r.ignore({"store", "metadata", "service_tier"});
  parse_sampling_fields(r, req.params);
  r.reject_unknown();
  if (req.tool_choice.forced()) {
    // The output is JSON that names the call (vLLM's way), whatever format the model knows.
    const std::string schema =
        forced_tool_schema(req.tools, req.tool_choice, req.parallel_tool_calls);
    set_structured(req.params, "tool_choice", [&](auto& s) { s.json = schema; });
  } else if (req.tool_choice.kind == ToolChoice::Kind::kAuto) {
    // The model's call markers are special tokens (DeepSeek's); the parser must see them.
    req.params.skip_special_tokens = false;
  }
  return req;
}

std::string chat_response_role(const ChatRequest& request, const ProtocolOptions& protocol) {
  if (request.add_generation_prompt || request.messages.empty()) return protocol.response_role;
  return request.messages.back().value("role", protocol.response_role);
}

int resolve_max_tokens(std::optional<int> requested, int default_max_tokens, int num_prompt_tokens,
                       int max_model_len) {
  if (num_prompt_tokens >= max_model_len) {
    throw_invalid(
        fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                    "tokens, {} over the limit (at least one token must be left to generate). "
                    "Please reduce the length of the prompt.",
                    max_model_len, num_prompt_tokens, num_prompt_tokens - max_model_len + 1),
        requested ? "max_tokens" : "prompt");
  }
  const int room = max_model_len - num_prompt_tokens;
  if (!requested) return default_max_tokens > 0 ? std::min(default_max_tokens, room) : room;
  if (*requested < 1)
    throw_invalid(fmt::format("'max_tokens' must be at least 1, got {}", *requested), "max_tokens");
  const int64_t total = static_cast<int64_t>(num_prompt_tokens) + *requested;
  if (total > max_model_len) {
    throw_invalid(
        fmt::format(
            "This model's maximum context length is {} tokens. However, you requested {} tokens "
            "({} in the prompt, {} for the completion), {} over the limit. Please reduce the "
            "length of the prompt or max_tokens.",
            max_model_len, total, num_prompt_tokens, *requested, total - max_model_len),
        "max_tokens");
  }
  return *requested;
}

void check_sampling_params(const SamplingParams& params) {
  // The parsers bound logprobs by --max-logprobs already (the engine checks them again).
  if (auto message = validate(params, std::numeric_limits<int>::max())) {
    // validate() names the field first ("top_p must be in (0, 1], got 1.5").
    const size_t space = message->find(' ');
    throw_invalid(*message, message->substr(0, space));
  }
}

TokenizeRequest parse_tokenize_request(const json& body, UnknownFields* unknown) {
  const UnknownFieldsScope scope(unknown);
  TokenizeRequest req;
  FieldReader r(body);
  req.model = r.get_string("model").value_or("");
  req.prompt = r.get_string("prompt");
  if (const json* messages = r.get("messages")) req.messages = parse_messages(messages);
  if (const json* tools = r.get("tools")) req.tools = parse_tools(*tools);
  if (req.prompt.has_value() == !req.messages.is_null()) {
    throw_invalid("Exactly one of 'prompt' and 'messages' is required", "prompt");
  }
  if (!req.tools.is_null() && req.messages.is_null())
    throw_invalid("'tools' are rendered by the chat template, so they need 'messages'", "tools");
  req.add_generation_prompt = r.get_bool("add_generation_prompt").value_or(true);
  // vLLM's default: BOS for a plain prompt, none for messages (the template adds it).
  req.add_special_tokens = r.get_bool("add_special_tokens").value_or(req.prompt.has_value());
  req.return_token_strs = r.get_bool("return_token_strs").value_or(false);
  r.reject_unknown();
  return req;
}

json tokenize_response(const TokenizeRequest& request, const std::vector<int32_t>& tokens,
                       int max_model_len, const std::function<std::string(int32_t)>& token_text) {
  json out = {{"count", tokens.size()}, {"max_model_len", max_model_len}, {"tokens", tokens}};
  if (request.return_token_strs) {
    json strs = json::array();
    for (int32_t id : tokens) strs.push_back(token_text(id));
    out["token_strs"] = std::move(strs);
  }
  return out;
}

std::vector<int32_t> parse_detokenize_request(const json& body, std::string* model,
                                              UnknownFields* unknown) {
  const UnknownFieldsScope scope(unknown);
  FieldReader r(body);
  *model = r.get_string("model").value_or("");
  const json* tokens = r.get("tokens");
  if (tokens == nullptr) throw_invalid("'tokens' is required", "tokens");
  std::vector<int32_t> ids = parse_token_ids(*tokens, "tokens");
  r.reject_unknown();
  return ids;
}

json usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

namespace {
// OpenAI and vLLM send -9999 where the logprob is -inf (JSON has no infinity).
double clamp_logprob(float logprob) {
  return std::max(static_cast<double>(logprob), -9999.0);
}
}  // namespace

std::string logprob_token(const TokenLogprobInfo& token, bool tokens_as_ids) {
  return tokens_as_ids ? fmt::format("token_id:{}", token.token_id) : token.token;
}

CompletionLogprobs::CompletionLogprobs(int num_top, size_t text_offset, bool tokens_as_ids)
    : num_top_(num_top),
      text_offset_(text_offset),
      tokens_as_ids_(tokens_as_ids),
      tokens_(json::array()),
      token_logprobs_(json::array()),
      top_logprobs_(json::array()),
      text_offsets_(json::array()) {}

void CompletionLogprobs::add(const GeneratedTokenLogprobs& lp) {
  tokens_.push_back(logprob_token(lp.chosen, tokens_as_ids_));
  token_logprobs_.push_back(clamp_logprob(lp.chosen.logprob));
  // vLLM keys its per-position dict by token id, the token itself first, then the most likely
  // ones, and keeps the first num_top + 1 entries; the response keys them by text.
  json entry = json::object();
  std::vector<int32_t> ids = {lp.chosen.token_id};
  entry[logprob_token(lp.chosen, tokens_as_ids_)] = clamp_logprob(lp.chosen.logprob);
  for (const TokenLogprobInfo& t : lp.top) {
    if (static_cast<int>(ids.size()) > num_top_) break;
    if (std::find(ids.begin(), ids.end(), t.token_id) != ids.end()) continue;
    ids.push_back(t.token_id);
    entry[logprob_token(t, tokens_as_ids_)] = clamp_logprob(t.logprob);
  }
  top_logprobs_.push_back(std::move(entry));
  text_offsets_.push_back(text_offset_);
  text_offset_ += lp.chosen.token.size();
}

void CompletionLogprobs::add_unscored(const std::string& text, int32_t token_id) {
  tokens_.push_back(tokens_as_ids_ ? fmt::format("token_id:{}", token_id) : text);
  token_logprobs_.push_back(nullptr);
  top_logprobs_.push_back(nullptr);
  text_offsets_.push_back(text_offset_);
  text_offset_ += text.size();
}

json CompletionLogprobs::to_json() const {
  return {{"tokens", tokens_},
          {"token_logprobs", token_logprobs_},
          {"top_logprobs", top_logprobs_},
          {"text_offset", text_offsets_}};
}

json completion_logprobs_json(const std::vector<GeneratedTokenLogprobs>& logprobs, size_t begin,
                              size_t end, size_t text_offset, int num_top, bool tokens_as_ids) {
  CompletionLogprobs out(num_top, text_offset, tokens_as_ids);
  end = std::min(end, logprobs.size());
  for (size_t i = begin; i < end; ++i) out.add(logprobs[i]);
  return out.to_json();
}

json prompt_logprobs_json(const std::vector<std::optional<GeneratedTokenLogprobs>>& logprobs) {
  json out = json::array();
  for (const std::optional<GeneratedTokenLogprobs>& lp : logprobs) {
    if (!lp) {
      out.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    auto put = [&entry](const TokenLogprobInfo& t) {
      const std::string key = std::to_string(t.token_id);
      if (entry.contains(key)) return;
      entry[key] = {
          {"logprob", clamp_logprob(t.logprob)}, {"rank", t.rank}, {"decoded_token", t.token}};
    };
    put(lp->chosen);
    for (const TokenLogprobInfo& t : lp->top) put(t);
    out.push_back(std::move(entry));
  }
  return out;
}

namespace {
json token_bytes(const std::string& token) {
  json bytes = json::array();
  for (unsigned char c : token) bytes.push_back(static_cast<int>(c));
  return bytes;
}
}  // namespace

json chat_logprobs_json(const std::vector<GeneratedTokenLogprobs>& logprobs, size_t begin,
                        size_t end, bool tokens_as_ids) {
  json content = json::array();
  end = std::min(end, logprobs.size());
  for (size_t i = begin; i < end; ++i) {
    const GeneratedTokenLogprobs& lp = logprobs[i];
    json top = json::array();
    for (const TokenLogprobInfo& t : lp.top) {
      const std::string token = logprob_token(t, tokens_as_ids);
      top.push_back({{"token", token}, {"logprob", t.logprob}, {"bytes", token_bytes(token)}});
    }
    const std::string token = logprob_token(lp.chosen, tokens_as_ids);
    content.push_back({{"token", token},
                       {"logprob", lp.chosen.logprob},
                       {"bytes", token_bytes(token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

std::string random_request_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:016x}{:016x}", prefix, rng(), rng());
}

int64_t unix_time_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace pagoda::server
