// Python/jinja2 operations on interpreter values shared by the evaluator and the builtins:
// iteration, attribute and item access (jinja2's sandboxed getattr/getitem), slicing, arithmetic,
// membership and json.dumps. Errors are TemplateErrors worded like CPython's.
#pragma once

#include <optional>
#include <string>

#include "template/value.h"

namespace pagoda::jinja {

// The items a for loop (or list()) sees: list/tuple items, dict keys, string characters.
ValueList iterate(const Value& v);
// jinja2 environment.getattr: Python attribute (method) first, then the item; else Undefined.
Value get_attr(const Value& obj, const std::string& name);
// jinja2 environment.getitem: the item first, then the attribute for string keys; else Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; null optionals mean "omitted".
Value slice(const Value& obj, const std::optional<int64_t>& start,
            const std::optional<int64_t>& stop, const std::optional<int64_t>& step);
// Dotted attribute path as used by filters' `attribute=` ("a.b", "0").
Value get_attribute_path(const Value& obj, const std::string& path);

// op is one of + - * / // % **.
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value negate(const Value& v);
// Python `item in container`.
bool contains(const Value& container, const Value& item);
// Python len().
int64_t length(const Value& v);

struct JsonOptions {
  std::optional<std::string> indent;  // None: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python json.dumps.
std::string json_dumps(const Value& v, const JsonOptions& options);

// Methods of builtin types (str.split, dict.items, ...); Undefined if there is none.
Value get_method(const Value& obj, const std::string& name);

}  // namespace pagoda::jinja
