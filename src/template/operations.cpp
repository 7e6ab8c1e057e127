// Python/jinja2 operations on interpreter values (see operations.h).
#include "template/operations.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "template/text.h"

namespace pagoda::jinja {
namespace {

std::string undefined_attr_hint(const Value& obj, const std::string& name) {
  if (obj.is_none()) return fmt::format("'None' has no attribute '{}'", name);
  return fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name);
}

int64_t normalize_index(int64_t index, int64_t size) {
  return index < 0 ? index + size : index;
}

}  // namespace

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(text::num_code_points(v.as_string()));
    case Kind::kList:
    case Kind::kTuple:
      return static_cast<int64_t>(v.items().size());
    case Kind::kDict:
      return static_cast<int64_t>(v.dict_ref().size());
    case Kind::kIterator:
      if (v.iterator_ref().sized) return static_cast<int64_t>(v.items().size());
      [[fallthrough]];
    default:
      fail(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kIterator:
      return v.items();
    case Kind::kDict: {
      ValueList keys;
      for (const auto& entry : v.dict_ref().entries) keys.push_back(entry.first);
      return keys;
    }
    case Kind::kString: {
      ValueList chars;
      for (char32_t c : text::decode(v.as_string())) {
        std::string s;
        text::append_utf8(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default:
      fail(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (obj.is_namespace()) {
    const Value* v = obj.dict_ref().find(name);
    return v ? *v : Value::undefined(fmt::format("'Namespace' has no attribute '{}'", name));
  }
  if (obj.is_object()) {
    Value v = obj.object_ref().get_attr(name);
    if (v.is_undefined()) {
      return Value::undefined(
          fmt::format("'{} object' has no attribute '{}'", obj.object_ref().type_name(), name));
    }
    return v;
  }
  Value method = get_method(obj, name);
  if (!method.is_undefined()) return method;
  if (obj.is_dict()) {
    const Value* v = obj.dict_ref().find(name);
    if (v) return *v;
  }
  return Value::undefined(undefined_attr_hint(obj, name));
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (obj.is_dict()) {
    const Value* v = obj.dict_ref().find(key);
    if (v) return *v;
  } else if ((obj.is_sequence() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t size = length(obj);
    int64_t index = normalize_index(key.to_int(), size);
    if (index >= 0 && index < size) {
      if (obj.is_string()) return slice(obj, index, index + 1, std::nullopt);
      return obj.items()[static_cast<size_t>(index)];
    }
  } else if (obj.is_namespace() || obj.is_object()) {
    if (key.is_string()) return get_attr(obj, key.as_string());
  } else if (obj.is_iterator()) {
    if (!obj.iterator_ref().subscriptable) {
      fail(fmt::format("'{}' object is not subscriptable", obj.type_name()));
    }
    if (key.is_int() || key.is_bool()) {
      int64_t size = length(obj);
      int64_t index = normalize_index(key.to_int(), size);
      if (index < 0 || index >= size) fail("range object index out of range");
      return obj.items()[static_cast<size_t>(index)];
    }
  }
  if (key.is_string()) {
    Value method = obj.is_dict() || obj.is_string() || obj.is_sequence()
                       ? get_method(obj, key.as_string())
                       : Value::undefined();
    if (!method.is_undefined()) return method;
    return Value::undefined(undefined_attr_hint(obj, key.as_string()));
  }
  return Value::undefined(
      fmt::format("'{} object' has no attribute {}", obj.type_name(), key.repr()));
}

Value slice(const Value& obj, const std::optional<int64_t>& start_arg,
            const std::optional<int64_t>& stop_arg, const std::optional<int64_t>& step_arg) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (!obj.is_string() && !obj.is_sequence()) {
    fail(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  }
  int64_t step = step_arg.value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  int64_t size = length(obj);
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](const std::optional<int64_t>& arg, int64_t fallback) {
    if (!arg) return fallback;
    int64_t v = *arg;
    if (v < 0) {
      v += size;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= size) {
      v = step < 0 ? size - 1 : size;
    }
    return v;
  };
  int64_t start = adjust(start_arg, step < 0 ? size - 1 : 0);
  int64_t stop = adjust(stop_arg, step < 0 ? -1 : size);
  std::vector<int64_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
  if (obj.is_string()) {
    std::u32string cps = text::decode(obj.as_string());
    std::u32string out;
    for (int64_t i : picks) out.push_back(cps[static_cast<size_t>(i)]);
    return Value(text::encode(out));
  }
  ValueList out;
  for (int64_t i : picks) out.push_back(obj.items()[static_cast<size_t>(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value get_attribute_path(const Value& obj, const std::string& path) {
  Value current = obj;
  size_t begin = 0;
  while (true) {
    size_t dot = path.find('.', begin);
    std::string part =
        path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    current = numeric ? get_item(current, Value(static_cast<int64_t>(std::stoll(part))))
                      : get_item(current, Value(part));
    if (dot == std::string::npos) return current;
    begin = dot + 1;
  }
}

namespace {

void check_overflow(bool overflow) {
  if (overflow) fail("integer overflow: Pagoda's templates use 64-bit integers");
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) fail("integer division or modulo by zero");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  a.require_defined();
  b.require_defined();
  auto unsupported = [&]() -> Value {
    fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                     b.type_name()));
  };
  if (a.is_number() && b.is_number()) {
    bool floating = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.to_double() == 0.0) fail("division by zero");
      return Value(a.to_double() / b.to_double());
    }
    if (floating) {
      double x = a.to_double(), y = b.to_double();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (op == "**") return Value(std::pow(x, y));
      if (y == 0.0) fail("float division by zero");
      if (op == "//") return Value(std::floor(x / y));
      if (op == "%") {
        double r = std::fmod(x, y);
        if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
        return Value(r);
      }
      return unsupported();
    }
    int64_t x = a.to_int(), y = b.to_int(), r = 0;
    if (op == "+") {
      check_overflow(__builtin_add_overflow(x, y, &r));
      return Value(r);
    }
    if (op == "-") {
      check_overflow(__builtin_sub_overflow(x, y, &r));
      return Value(r);
    }
    if (op == "*") {
      check_overflow(__builtin_mul_overflow(x, y, &r));
      return Value(r);
    }
    if (op == "//") return Value(floor_div(x, y));
    if (op == "%") return Value(x - floor_div(x, y) * y);
    if (op == "**") {
      if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t result = 1;
      for (int64_t i = 0; i < y; ++i) {
        check_overflow(__builtin_mul_overflow(result, x, &result));
      }
      return Value(result);
    }
    return unsupported();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.kind() == b.kind() && a.is_sequence()) {
      ValueList out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string() || b.is_string()) {
      fail(fmt::format("can only concatenate str (not \"{}\") to str",
                       a.is_string() ? b.type_name() : a.type_name()));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) {
      return repeat(a, b.to_int());
    }
    if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) {
      return repeat(b, a.to_int());
    }
  }
  if (op == "%" && a.is_string()) {
    fail("printf-style string formatting ('%' on a string) is not supported");
  }
  return unsupported();
}

Value negate(const Value& v) {
  v.require_defined();
  if (v.is_float()) return Value(-v.as_float());
  if (v.is_int() || v.is_bool()) {
    int64_t r = 0;
    check_overflow(__builtin_sub_overflow(int64_t{0}, v.to_int(), &r));
    return Value(r);
  }
  fail(fmt::format("bad operand type for unary -: '{}'", v.type_name()));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!item.is_string()) {
        item.require_defined();
        fail(
            fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kIterator:
      for (const auto& x : container.items()) {
        if (x.equals(item)) return true;
      }
      return false;
    case Kind::kDict:
      return container.dict_ref().find(item) != nullptr;
    default:
      fail(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : text::decode(s)) {
    switch (c) {
      case U'"':
        out += "\\\"";
        break;
      case U'\\':
        out += "\\\\";
        break;
      case U'\n':
        out += "\\n";
        break;
      case U'\r':
        out += "\\r";
        break;
      case U'\t':
        out += "\\t";
        break;
      case U'\b':
        out += "\\b";
        break;
      case U'\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c > 0xFFFF) {
            uint32_t v = static_cast<uint32_t>(c) - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          }
        } else {
          text::append_utf8(out, c);
        }
    }
  }
  out += '"';
}

std::string json_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return format_python_float(v);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::kString:
      return k.as_string();
    case Kind::kBool:
      return k.as_bool() ? "true" : "false";
    case Kind::kNone:
      return "null";
    case Kind::kInt:
      return std::to_string(k.as_int());
    case Kind::kFloat:
      return json_float(k.as_float());
    default:
      fail(fmt::format("keys must be str, int, float, bool or None, not {}", k.type_name()));
  }
}

void json_dump(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  auto newline = [&](int level) {
    if (!o.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Kind::kFloat:
      out += json_float(v.as_float());
      return;
    case Kind::kString:
      json_string(out, v.as_string(), o.ensure_ascii);
      return;
    case Kind::kList:
    case Kind::kTuple: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const auto& item : v.items()) {
        if (!first) out += o.item_separator;
        first = false;
        newline(depth + 1);
        json_dump(out, item, o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (v.dict_ref().size() == 0) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, x] : v.dict_ref().entries) entries.emplace_back(json_key(k), &x);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      bool first = true;
      for (const auto& [k, x] : entries) {
        if (!first) out += o.item_separator;
        first = false;
        newline(depth + 1);
        json_string(out, k, o.ensure_ascii);
        out += o.key_separator;
        json_dump(out, *x, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      fail(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

}  // namespace

std::string json_dumps(const Value& v, const JsonOptions& options) {
  std::string out;
  json_dump(out, v, options, 0);
  return out;
}

}  // namespace pagoda::jinja
