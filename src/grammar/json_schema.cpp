// JSON Schema -> grammar IR. Each object and array schema becomes its own rule (so recursion and
// sharing stay cheap); strings, numbers and literals are inlined into the rule that uses them, so
// a token such as `"name": "Jo` stays inside one rule and the mask cache can decide it alone.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grammar/grammar_error.h"
#include "grammar/number_range.h"
#include "grammar/regex_parser.h"

namespace pagoda::grammar {
namespace {

using Json = nlohmann::ordered_json;

// Keywords that describe and never constrain.
const std::set<std::string, std::less<>> kAnnotations = {
    "title",     "description",   "default",         "examples",         "example",    "$schema",
    "$id",       "$comment",      "$defs",           "definitions",      "deprecated", "readOnly",
    "writeOnly", "discriminator", "contentEncoding", "contentMediaType", "$anchor"};

const std::set<std::string, std::less<>> kSupported = {"type",
                                                       "properties",
                                                       "required",
                                                       "additionalProperties",
                                                       "enum",
                                                       "const",
                                                       "anyOf",
                                                       "oneOf",
                                                       "allOf",
                                                       "items",
                                                       "prefixItems",
                                                       "minItems",
                                                       "maxItems",
                                                       "minLength",
                                                       "maxLength",
                                                       "pattern",
                                                       "format",
                                                       "minimum",
                                                       "maximum",
                                                       "exclusiveMinimum",
                                                       "exclusiveMaximum",
                                                       "$ref",
                                                       "uniqueItems",
                                                       "multipleOf"};

// Formats as regexes over ASCII (inside a JSON string they need no escaping). Conservative: each
// accepts only values that ajv-formats' "full" mode accepts (real calendar dates, leap years
// included; times with a time zone).
const std::map<std::string, std::string, std::less<>>& format_patterns() {
  static const std::string date =
      R"((?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30))"
      R"(|02-(?:0[1-9]|1\d|2[0-8]))|(?:\d{2}(?:0[48]|[2468][048]|[13579][26])|)"
      R"((?:[02468][048]|[13579][26])00)-02-29))";
  static const std::string time =
      R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
  static const std::string label = R"([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
  static const std::string path_char = R"([A-Za-z0-9._~!$&'()*+,;=:@-])";
  static const std::map<std::string, std::string, std::less<>> formats = {
      {"date", date},
      {"time", time},
      {"date-time", date + "T" + time},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"email", R"([A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*@(?:)" + label + R"(\.)+)" + label},
      {"uri", R"([A-Za-z][A-Za-z0-9+.-]*://(?:)" + label + R"(\.)*)" + label +
                  R"((?::\d{1,5})?(?:/)" + path_char + R"(*)*(?:\?(?:)" + path_char +
                  R"(|[/?])*)?(?:#(?:)" + path_char + R"(|[/?])*)?)"},
  };
  return formats;
}

std::string pointer_escape(const std::string& key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string show_path(const std::string& path) {
  return path.empty() ? "/" : path;
}

class SchemaConverter {
 public:
  SchemaConverter(const Json& root, const JsonGrammarOptions& options)
      : root_(root), options_(options) {}

  Grammar convert_root() {
    const int root = grammar_.add_rule("root");
    grammar_.set_body(root, convert(root_, ""));
    grammar_.set_root(root);
    return std::move(grammar_);
  }

  Grammar any_json(bool object_only) {
    const int root = grammar_.add_rule("root");
    grammar_.set_body(root, rule_ref(object_only ? any_object_rule() : any_value_rule()));
    grammar_.set_root(root);
    return std::move(grammar_);
  }

 private:
  // --- Punctuation and whitespace -------------------------------------------------------------
  ExprPtr ws() const {
    if (!options_.any_whitespace) return epsilon();
    ByteSet space;
    for (const char c : {' ', '\t', '\n', '\r'}) space.insert(static_cast<uint8_t>(c));
    return star(bytes(space));
  }
  ExprPtr separator(char c) const {
    if (options_.any_whitespace) return sequence({ws(), literal(std::string(1, c)), ws()});
    return sequence({literal(std::string(1, c)), optional(literal(" "))});
  }
  ExprPtr item_sep() const { return separator(','); }
  ExprPtr key_sep() const { return separator(':'); }

  // --- Primitive values -------------------------------------------------------------------------
  static ExprPtr string_char() {
    return regex_char_class({{0, kMaxCodePoint}}, {.json_string = true});
  }
  static ExprPtr quoted(ExprPtr content) {
    return sequence({literal("\""), std::move(content), literal("\"")});
  }
  static ExprPtr any_string() { return quoted(star(string_char())); }
  static ExprPtr any_number() {
    const ExprPtr digit = bytes(ByteSet::range('0', '9'));
    const ExprPtr digits = repeat(digit, 1, Expr::kUnbounded);
    const ExprPtr int_part =
        choice({literal("0"), sequence({bytes(ByteSet::range('1', '9')), star(digit)})});
    ByteSet e;
    e.insert('e');
    e.insert('E');
    ByteSet sign;
    sign.insert('+');
    sign.insert('-');
    return sequence({optional(literal("-")), int_part, optional(sequence({literal("."), digits})),
                     optional(sequence({bytes(e), optional(bytes(sign)), digits}))});
  }
  static ExprPtr any_integer() { return integer_range(std::nullopt, std::nullopt); }

  int any_value_rule() {
    if (any_value_ >= 0) return any_value_;
    any_value_ = grammar_.add_rule("json_value");
    const int object = any_object_rule();
    const int array = grammar_.add_rule("json_array");
    const ExprPtr value = rule_ref(any_value_);
    grammar_.set_body(
        array, sequence({literal("["), ws(),
                         optional(sequence({value, star(sequence({item_sep(), value}))})), ws(),
                         literal("]")}));
    grammar_.set_body(any_value_,
                      choice({rule_ref(object), rule_ref(array), any_string(), any_number(),
                              literal("true"), literal("false"), literal("null")}));
    return any_value_;
  }

  int any_object_rule() {
    if (any_object_ >= 0) return any_object_;
    any_object_ = grammar_.add_rule("json_object");
    const ExprPtr member = sequence({any_string(), key_sep(), rule_ref(any_value_rule())});
    grammar_.set_body(any_object_,
                      sequence({literal("{"), ws(),
                                optional(sequence({member, star(sequence({item_sep(), member}))})),
                                ws(), literal("}")}));
    return any_object_;
  }

  // --- Schemas ----------------------------------------------------------------------------------
  [[noreturn]] static void fail_at(const std::string& path, const std::string& what) {
    grammar_fail("JSON schema at {}: {}", show_path(path), what);
  }

  ExprPtr convert(const Json& schema, const std::string& path) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return rule_ref(any_value_rule());
      fail_at(path, "the schema 'false' allows no value");
    }
    if (!schema.is_object()) fail_at(path, "a schema must be an object or a boolean");
    // {"not": {}} matches nothing: zod-to-json-schema writes it as a branch of anyOf.
    if (schema.size() == 1 && schema.contains("not") &&
        (schema["not"] == Json::object() || schema["not"] == true)) {
      return choice({});
    }
    for (const auto& [key, value] : schema.items()) {
      if (kAnnotations.count(key)) continue;
      if (!kSupported.count(key))
        fail_at(path + "/" + pointer_escape(key), "unsupported keyword '" + key + "'");
    }

    if (schema.contains("$ref")) {
      for (const auto& [key, value] : schema.items()) {
        if (key != "$ref" && !kAnnotations.count(key)) {
          fail_at(path + "/" + pointer_escape(key), "keywords beside $ref are not supported");
        }
      }
      return rule_ref(ref_rule(schema["$ref"], path + "/$ref"));
    }
    if (schema.contains("const")) return literal(schema["const"].dump());
    if (schema.contains("enum")) return convert_enum(schema, path);
    for (const char* keyword : {"anyOf", "oneOf"}) {
      if (!schema.contains(keyword)) continue;
      const Json& branches = schema[keyword];
      if (!branches.is_array() || branches.empty())
        fail_at(path + "/" + keyword, "must be a non-empty array");
      std::vector<ExprPtr> options;
      for (size_t i = 0; i < branches.size(); ++i) {
        options.push_back(convert(with_siblings(schema, keyword, branches[i]),
                                  path + "/" + keyword + "/" + std::to_string(i)));
      }
      return choice(std::move(options));
    }
    if (schema.contains("allOf")) return convert(merge_all_of(schema, path), path);

    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& type = schema["type"];
      if (type.is_string()) {
        types.push_back(type.get<std::string>());
      } else if (type.is_array()) {
        for (const auto& t : type) {
          if (!t.is_string()) fail_at(path + "/type", "type names must be strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        fail_at(path + "/type", "must be a string or an array of strings");
      }
    } else {
      types.push_back(infer_type(schema));
    }
    std::vector<ExprPtr> options;
    for (const auto& type : types) options.push_back(convert_typed(schema, type, path));
    return choice(std::move(options));
  }

  // A branch of anyOf/oneOf inherits the parent's other keywords (e.g. "type" beside "anyOf").
  static Json with_siblings(const Json& parent, const char* keyword, const Json& branch) {
    if (!branch.is_object()) return branch;
    bool has_siblings = false;
    for (const auto& [key, value] : parent.items()) {
      if (key != keyword && !kAnnotations.count(key)) has_siblings = true;
    }
    if (!has_siblings) return branch;
    Json merged = Json::object();
    merged["allOf"] = Json::array({branch, Json::object()});
    for (const auto& [key, value] : parent.items()) {
      if (key != keyword && !kAnnotations.count(key)) merged["allOf"][1][key] = value;
    }
    return merged;
  }

  static std::string infer_type(const Json& schema) {
    for (const char* k : {"properties", "required", "additionalProperties"}) {
      if (schema.contains(k)) return "object";
    }
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"}) {
      if (schema.contains(k)) return "array";
    }
    for (const char* k : {"minLength", "maxLength", "pattern", "format"}) {
      if (schema.contains(k)) return "string";
    }
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (schema.contains(k)) return "number";
    }
    return "any";
  }

  ExprPtr convert_typed(const Json& schema, const std::string& type, const std::string& path) {
    if (type == "any") return rule_ref(any_value_rule());
    if (type == "null") return literal("null");
    if (type == "boolean") return choice({literal("true"), literal("false")});
    if (type == "string") return convert_string(schema, path);
    if (type == "integer") return convert_integer(schema, path);
    if (type == "number") return convert_number(schema, path);
    if (type == "array") return convert_array(schema, path);
    if (type == "object") return convert_object(schema, path);
    fail_at(path + "/type", "unknown type '" + type + "'");
  }

  ExprPtr convert_enum(const Json& schema, const std::string& path) {
    const Json& values = schema["enum"];
    if (!values.is_array() || values.empty()) fail_at(path + "/enum", "must be a non-empty array");
    // Values that "type" beside the enum rules out are dropped.
    std::vector<ExprPtr> options;
    for (const auto& v : values) {
      if (!schema.contains("type") || matches_type(v, schema["type"]))
        options.push_back(literal(v.dump()));
    }
    if (options.empty()) fail_at(path + "/enum", "no value of the enum has the schema's type");
    return choice(std::move(options));
  }

  static bool matches_type(const Json& value, const Json& type) {
    if (type.is_array()) {
      for (const auto& t : type) {
        if (matches_type(value, t)) return true;
      }
      return false;
    }
    if (!type.is_string()) return true;
    const std::string name = type.get<std::string>();
    if (name == "null") return value.is_null();
    if (name == "boolean") return value.is_boolean();
    if (name == "string") return value.is_string();
    if (name == "object") return value.is_object();
    if (name == "array") return value.is_array();
    if (name == "number") return value.is_number();
    if (name == "integer") {
      return value.is_number_integer() ||
             (value.is_number_float() && std::floor(value.get<double>()) == value.get<double>());
    }
    return false;
  }

  // --- $ref -------------------------------------------------------------------------------------
  int ref_rule(const Json& ref, const std::string& path) {
    const std::string target = ref_target(ref, path);
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const Json& node = lookup(target, path);
    const int id = grammar_.add_rule("ref" + target.substr(1));
    refs_.emplace(target, id);  // before converting, so recursive references find it
    grammar_.set_body(id, convert(node, target.substr(1)));
    return id;
  }

  static std::string ref_target(const Json& ref, const std::string& path) {
    if (!ref.is_string()) fail_at(path, "$ref must be a string");
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#') {
      fail_at(path, "only references into this document ('#...') are supported");
    }
    return target;
  }

  // The schema a "#/a/b" pointer names.
  const Json& lookup(const std::string& target, const std::string& path) const {
    const Json* node = &root_;
    const std::string pointer = target.substr(1);
    size_t pos = 0;
    while (pos < pointer.size()) {
      if (pointer[pos] != '/') fail_at(path, "bad JSON pointer '" + target + "'");
      const size_t next = std::min(pointer.find('/', pos + 1), pointer.size());
      const std::string token = pointer.substr(pos + 1, next - pos - 1);
      std::string key;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() &&
            (token[i + 1] == '0' || token[i + 1] == '1')) {
          key += token[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += token[i];
        }
      }
      if (node->is_object() && node->contains(key)) {
        node = &(*node)[key];
      } else if (node->is_array() && !key.empty() && key.size() < 9 &&
                 key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(key) < node->size()) {
        node = &(*node)[std::stoul(key)];
      } else {
        fail_at(path, "$ref '" + target + "' points to nothing");
      }
      pos = next;
    }
    return *node;
  }

  const Json& resolve(const Json& schema, const std::string& path) const {
    const Json* node = &schema;
    for (int hops = 0; node->is_object() && node->contains("$ref"); ++hops) {
      if (hops > 32) fail_at(path, "$ref chain too long");
      node = &lookup(ref_target((*node)["$ref"], path + "/$ref"), path);
    }
    return *node;
  }

  // --- allOf ------------------------------------------------------------------------------------
  // allOf of object schemas (pydantic's inheritance, zod's .and()) merges into one object schema.
  // additionalProperties: false in any part (or beside allOf) admits only that part's own
  // properties — JSON Schema's rule, which surprises people — so the merged object keeps only
  // the properties every closed part lists, and a required one that falls out is an error.
  Json merge_all_of(const Json& schema, const std::string& path) {
    const Json& parts = schema["allOf"];
    if (!parts.is_array() || parts.empty()) fail_at(path + "/allOf", "must be a non-empty array");
    Json parent = Json::object();
    for (const auto& [key, value] : schema.items()) {
      if (key != "allOf" && !kAnnotations.count(key)) parent[key] = value;
    }
    if (parts.size() == 1 && parent.empty()) return parts[0];
    std::vector<std::pair<Json, std::string>> all{{parent, path}};
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string part_path = path + "/allOf/" + std::to_string(i);
      Json part = resolve(parts[i], part_path);
      if (part.is_object() && part.contains("allOf")) part = merge_all_of(part, part_path);
      all.emplace_back(std::move(part), part_path);
    }
    Json properties = Json::object();
    Json required = Json::array();
    std::vector<std::pair<std::set<std::string>, std::string>> closed;  // allowed keys, where
    for (const auto& [part, part_path] : all) {
      if (part.is_boolean() && part.get<bool>()) continue;
      if (!part.is_object()) fail_at(part_path, "allOf is supported for object schemas only");
      std::set<std::string> own;
      for (const auto& [key, value] : part.items()) {
        if (kAnnotations.count(key)) continue;
        const std::string key_path = part_path + "/" + pointer_escape(key);
        if (key == "properties") {
          if (!value.is_object()) fail_at(key_path, "must be an object");
          for (const auto& [name, sub] : value.items()) {
            own.insert(name);
            // A property in two parts must satisfy both; only "anything" ({} or true) merges.
            auto trivial = [](const Json& s) {
              return (s.is_boolean() && s.get<bool>()) || s == Json::object();
            };
            if (properties.contains(name) && !trivial(sub)) {
              if (!trivial(properties[name])) {
                fail_at(key_path + "/" + pointer_escape(name),
                        "property constrained in two parts of allOf");
              }
              properties[name] = sub;
            } else if (!properties.contains(name)) {
              properties[name] = sub;
            }
          }
        } else if (key == "required") {
          if (!value.is_array()) fail_at(key_path, "must be an array");
          for (const auto& name : value) required.push_back(name);
        } else if (key == "type") {
          if (value != "object") fail_at(key_path, "allOf is supported for object schemas only");
        } else if (key != "additionalProperties") {
          fail_at(key_path, "keyword '" + key + "' is not supported together with allOf");
        }
      }
      if (part.contains("additionalProperties")) {
        const Json& ap = part["additionalProperties"];
        if (!ap.is_boolean()) {
          fail_at(part_path + "/additionalProperties",
                  "only boolean additionalProperties can be merged in allOf");
        }
        if (!ap.get<bool>())
          closed.emplace_back(std::move(own), part_path + "/additionalProperties");
      }
    }
    for (const auto& [allowed, where] : closed) {
      for (const auto& name : required) {
        if (name.is_string() && !allowed.count(name.get<std::string>())) {
          fail_at(where,
                  "required property '" + name.get<std::string>() +
                      "' is excluded by this additionalProperties: false (JSON Schema applies it "
                      "to the properties beside it only), so nothing validates");
        }
      }
      Json kept = Json::object();
      for (const auto& [name, sub] : properties.items()) {
        if (allowed.count(name)) kept[name] = sub;
      }
      properties = std::move(kept);
    }
    Json merged = Json::object();
    merged["type"] = "object";
    merged["properties"] = properties;
    merged["required"] = required;
    if (!closed.empty()) merged["additionalProperties"] = false;
    return merged;
  }

  // --- Strings ----------------------------------------------------------------------------------
  static std::optional<int> count_keyword(const Json& schema, const char* key,
                                          const std::string& path) {
    if (!schema.contains(key)) return std::nullopt;
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail_at(path + "/" + key, "must be a non-negative integer");
    if (v.get<int64_t>() > 10000) fail_at(path + "/" + key, "values above 10000 are not supported");
    return static_cast<int>(v.get<int64_t>());
  }

  ExprPtr convert_string(const Json& schema, const std::string& path) {
    const auto min_length = count_keyword(schema, "minLength", path);
    const auto max_length = count_keyword(schema, "maxLength", path);
    const bool has_length = min_length || max_length;
    if (min_length && max_length && *min_length > *max_length) {
      fail_at(path + "/minLength", "minLength is greater than maxLength");
    }
    const RegexOptions in_string{.json_string = true};
    if (schema.contains("pattern")) {
      if (has_length || schema.contains("format")) {
        fail_at(path + "/pattern",
                "pattern together with minLength/maxLength/format is not supported");
      }
      if (!schema["pattern"].is_string()) fail_at(path + "/pattern", "must be a string");
      ParsedRegex regex;
      try {
        regex = parse_regex(schema["pattern"].get<std::string>(), in_string);
      } catch (const GrammarError& e) {
        fail_at(path + "/pattern", e.what());
      }
      // JSON Schema patterns search: unanchored ends allow anything around the match.
      std::vector<ExprPtr> content;
      if (!regex.anchored_start) content.push_back(star(string_char()));
      content.push_back(regex.expr);
      if (!regex.anchored_end) content.push_back(star(string_char()));
      return quoted(sequence(std::move(content)));
    }
    if (schema.contains("format")) {
      if (has_length)
        fail_at(path + "/format", "format together with minLength/maxLength is not supported");
      const Json& format = schema["format"];
      const auto& formats = format_patterns();
      auto it = format.is_string() ? formats.find(format.get<std::string>()) : formats.end();
      if (it == formats.end()) fail_at(path + "/format", "unsupported format " + format.dump());
      return quoted(parse_regex(it->second, in_string).expr);
    }
    return quoted(
        repeat(string_char(), min_length.value_or(0), max_length.value_or(Expr::kUnbounded)));
  }

  // --- Numbers ----------------------------------------------------------------------------------
  struct Bounds {
    std::optional<double> lo, hi;
    bool lo_exclusive = false, hi_exclusive = false;
  };
  static Bounds read_bounds(const Json& schema, const std::string& path) {
    Bounds b;
    auto number = [&](const char* key) {
      const Json& v = schema[key];
      if (!v.is_number()) fail_at(path + "/" + key, "must be a number");
      const double d = v.get<double>();
      if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(kMaxNumericBound)) {
        fail_at(path + "/" + key, "bound out of the supported range (|x| <= 1e18)");
      }
      return d;
    };
    if (schema.contains("minimum")) b.lo = number("minimum");
    if (schema.contains("maximum")) b.hi = number("maximum");
    if (schema.contains("exclusiveMinimum")) {
      const double v = number("exclusiveMinimum");
      if (!b.lo || v >= *b.lo) {
        b.lo = v;
        b.lo_exclusive = true;
      }
    }
    if (schema.contains("exclusiveMaximum")) {
      const double v = number("exclusiveMaximum");
      if (!b.hi || v <= *b.hi) {
        b.hi = v;
        b.hi_exclusive = true;
      }
    }
    return b;
  }

  ExprPtr convert_integer(const Json& schema, const std::string& path) {
    if (schema.contains("multipleOf") && schema["multipleOf"] != 1) {
      fail_at(path + "/multipleOf", "multipleOf is not supported");
    }
    const Bounds b = read_bounds(schema, path);
    std::optional<int64_t> lo;
    std::optional<int64_t> hi;
    if (b.lo) lo = static_cast<int64_t>(b.lo_exclusive ? std::floor(*b.lo) + 1 : std::ceil(*b.lo));
    if (b.hi) hi = static_cast<int64_t>(b.hi_exclusive ? std::ceil(*b.hi) - 1 : std::floor(*b.hi));
    if (lo && hi && *lo > *hi) fail_at(path, "no integer satisfies the bounds");
    return integer_range(lo, hi);
  }

  ExprPtr convert_number(const Json& schema, const std::string& path) {
    if (schema.contains("multipleOf")) fail_at(path + "/multipleOf", "multipleOf is not supported");
    const Bounds b = read_bounds(schema, path);
    if (!b.lo && !b.hi) return any_number();
    auto integral = [&](double v, const char* which) {
      if (std::floor(v) != v)
        fail_at(path + "/" + which, "non-integer bounds on numbers are not supported");
      return static_cast<int64_t>(v);
    };
    std::optional<NumberBound> lo;
    std::optional<NumberBound> hi;
    if (b.lo)
      lo = NumberBound{integral(*b.lo, b.lo_exclusive ? "exclusiveMinimum" : "minimum"),
                       b.lo_exclusive};
    if (b.hi)
      hi = NumberBound{integral(*b.hi, b.hi_exclusive ? "exclusiveMaximum" : "maximum"),
                       b.hi_exclusive};
    if (lo && hi &&
        (lo->value > hi->value || (lo->value == hi->value && (lo->exclusive || hi->exclusive)))) {
      fail_at(path, "no number satisfies the bounds");
    }
    return number_range(lo, hi);
  }

  // --- Arrays -----------------------------------------------------------------------------------
  ExprPtr convert_array(const Json& schema, const std::string& path) {
    for (const char* k : {"uniqueItems"}) {
      if (schema.contains(k) && schema[k] != false)
        fail_at(path + "/" + k, "uniqueItems is not supported");
    }
    const int rule = grammar_.add_rule("array" + path);
    std::vector<ExprPtr> prefix;
    if (schema.contains("prefixItems")) {
      const Json& items = schema["prefixItems"];
      if (!items.is_array()) fail_at(path + "/prefixItems", "must be an array");
      for (size_t i = 0; i < items.size(); ++i) {
        prefix.push_back(convert(items[i], path + "/prefixItems/" + std::to_string(i)));
      }
    }
    ExprPtr item;  // null: no items after the prefix
    if (schema.contains("items")) {
      const Json& items = schema["items"];
      if (items.is_array())
        fail_at(path + "/items",
                "items as an array (draft 7 tuples) is not supported; use prefixItems");
      if (!(items.is_boolean() && !items.get<bool>())) item = convert(items, path + "/items");
    } else if (prefix.empty() || !options_.strict) {
      item = rule_ref(any_value_rule());
    }
    const int k = static_cast<int>(prefix.size());
    const int min_items = count_keyword(schema, "minItems", path).value_or(0);
    int max_items = count_keyword(schema, "maxItems", path).value_or(Expr::kUnbounded);
    if (!item) max_items = max_items == Expr::kUnbounded ? k : std::min(max_items, k);
    if (max_items != Expr::kUnbounded && min_items > max_items) {
      fail_at(path + "/minItems",
              "no array length satisfies minItems/maxItems (and the items allowed)");
    }
    auto element = [&](int i) { return i < k ? prefix[i] : item; };
    // tail(i): what follows element i-1 — elements i, i+1, ... each after a separator.
    std::function<ExprPtr(int)> tail = [&](int i) -> ExprPtr {
      if (max_items != Expr::kUnbounded && i >= max_items) return epsilon();
      if (i >= k) {
        const int lo = std::max(min_items - i, 0);
        const int hi = max_items == Expr::kUnbounded ? Expr::kUnbounded : max_items - i;
        return repeat(sequence({item_sep(), item}), lo, hi);
      }
      ExprPtr rest = sequence({item_sep(), element(i), tail(i + 1)});
      return i >= min_items ? optional(rest) : rest;
    };
    ExprPtr content = epsilon();
    if (max_items == Expr::kUnbounded || max_items > 0) {
      content = sequence({element(0), tail(1)});
      if (min_items == 0) content = optional(content);
    }
    grammar_.set_body(rule, sequence({literal("["), ws(), content, ws(), literal("]")}));
    return rule_ref(rule);
  }

  // --- Objects ----------------------------------------------------------------------------------
  // A JSON string whose content is not one of `names` (extra keys must not collide with declared
  // properties, whose values have their own schemas). Built on the trie of the names.
  ExprPtr key_not_in(const std::vector<std::string>& names) {
    struct Node {
      std::map<char32_t, int> children;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const auto& name : names) {
      int at = 0;
      size_t i = 0;
      while (i < name.size()) {
        const auto b = static_cast<unsigned char>(name[i]);
        const size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
        char32_t cp = len == 1 ? b : b & (0x7F >> len);
        for (size_t k = 1; k < len && i + k < name.size(); ++k)
          cp = (cp << 6) | (name[i + k] & 0x3F);
        i += len;
        auto [it, inserted] = trie[at].children.emplace(cp, static_cast<int>(trie.size()));
        if (inserted) trie.emplace_back();
        at = it->second;
      }
      trie[at].terminal = true;
    }
    const RegexOptions in_string{.json_string = true};
    std::function<ExprPtr(int)> build = [&](int at) -> ExprPtr {
      std::vector<ExprPtr> options;
      if (!trie[at].terminal) options.push_back(epsilon());
      std::vector<CodePointRange> taken;
      for (const auto& [cp, child] : trie[at].children) {
        taken.push_back({cp, cp});
        options.push_back(sequence({regex_char_class({{cp, cp}}, in_string), build(child)}));
      }
      options.push_back(
          sequence({regex_char_class(complement(taken), in_string), star(string_char())}));
      return choice(std::move(options));
    };
    return quoted(build(0));
  }

  ExprPtr convert_object(const Json& schema, const std::string& path) {
    const int rule = grammar_.add_rule("object" + path);
    std::vector<std::string> names;
    std::vector<ExprPtr> members;
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) fail_at(path + "/required", "must be an array");
      for (const auto& r : schema["required"]) {
        if (!r.is_string()) fail_at(path + "/required", "must list strings");
        required.insert(r.get<std::string>());
      }
    }
    if (schema.contains("properties")) {
      if (!schema["properties"].is_object()) fail_at(path + "/properties", "must be an object");
      for (const auto& [name, sub] : schema["properties"].items()) {
        names.push_back(name);
        const ExprPtr value = convert(sub, path + "/properties/" + pointer_escape(name));
        members.push_back(sequence({literal(Json(name).dump()), key_sep(), value}));
      }
    }
    for (const auto& name : required) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
        members.push_back(
            sequence({literal(Json(name).dump()), key_sep(), rule_ref(any_value_rule())}));
      }
    }
    ExprPtr extra;  // one additional member, when allowed
    if (schema.contains("additionalProperties")) {
      const Json& ap = schema["additionalProperties"];
      if (!(ap.is_boolean() && !ap.get<bool>())) {
        extra =
            sequence({key_not_in(names), key_sep(), convert(ap, path + "/additionalProperties")});
      }
    } else if (!options_.strict) {
      extra = sequence({key_not_in(names), key_sep(), rule_ref(any_value_rule())});
    }

    const int n = static_cast<int>(names.size());
    std::vector<bool> is_required(n);
    for (int i = 0; i < n; ++i) is_required[i] = required.count(names[i]) > 0;
    // With many optional members before the first required one, the choices in first(i) below
    // would copy after(i) many times; making each after(i) a rule keeps the size linear.
    int leading_optional = 0;
    while (leading_optional < n && !is_required[leading_optional]) ++leading_optional;
    const bool use_rules = leading_optional > 6;
    auto wrap = [&](int i, ExprPtr body) {
      if (!use_rules || i == 0) return body;
      return rule_ref(grammar_.add_rule("object" + path + "/after" + std::to_string(i), body));
    };
    // after(i): members i.. when one was already written (each behind a comma).
    std::vector<ExprPtr> after(n + 1);
    after[n] = wrap(n, extra ? star(sequence({item_sep(), extra})) : epsilon());
    for (int i = n - 1; i >= 0; --i) {
      const ExprPtr item = sequence({item_sep(), members[i]});
      after[i] = wrap(i, sequence({is_required[i] ? item : optional(item), after[i + 1]}));
    }
    // first(i): members i.. when none was written yet.
    ExprPtr first = extra ? optional(sequence({extra, after[n]})) : epsilon();
    for (int i = n - 1; i >= 0; --i) {
      const ExprPtr with_i = sequence({members[i], after[i + 1]});
      first = is_required[i] ? with_i : choice({with_i, first});
    }
    grammar_.set_body(rule, sequence({literal("{"), ws(), first, ws(), literal("}")}));
    return rule_ref(rule);
  }

  const Json& root_;
  JsonGrammarOptions options_;
  Grammar grammar_;
  std::map<std::string, int> refs_;
  int any_value_ = -1;
  int any_object_ = -1;
};

}  // namespace

Grammar json_schema_grammar(const nlohmann::ordered_json& schema,
                            const JsonGrammarOptions& options) {
  return SchemaConverter(schema, options).convert_root();
}

Grammar json_schema_grammar(std::string_view schema_text, const JsonGrammarOptions& options) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_text);
  } catch (const nlohmann::json::exception& e) {
    grammar_fail("JSON schema is not valid JSON: {}", e.what());
  }
  return json_schema_grammar(schema, options);
}

Grammar any_json_grammar(const JsonGrammarOptions& options, bool object_only) {
  static const nlohmann::ordered_json kEmpty = nlohmann::ordered_json::object();
  return SchemaConverter(kEmpty, options).any_json(object_only);
}

}  // namespace pagoda::grammar
