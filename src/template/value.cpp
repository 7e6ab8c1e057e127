// Python semantics for interpreter values: str/repr, truthiness, ==, <, JSON conversion.
#include "template/value.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "template/text.h"

namespace pagoda::jinja {

Value Object::get_attr(const std::string& name) {
  return Value::undefined();
}

Value Value::undefined(std::string hint) {
  Value v;
  v.kind_ = Kind::kUndefined;
  v.data_ = std::move(hint);
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict() {
  return dict(std::make_shared<ValueDict>());
}

Value Value::dict(std::shared_ptr<ValueDict> d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.data_ = std::move(d);
  return v;
}

Value Value::namespace_object() {
  Value v = dict();
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.data_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::object(std::shared_ptr<Object> obj) {
  Value v;
  v.kind_ = Kind::kObject;
  v.data_ = std::move(obj);
  return v;
}

Value Value::generator(ValueList items) {
  Value v;
  v.kind_ = Kind::kIterator;
  auto data = std::make_shared<IteratorData>();
  data->items = std::move(items);
  data->type_name = "generator";
  v.data_ = std::move(data);
  return v;
}

Value Value::view(ValueList items, std::string type_name, std::string repr, bool subscriptable) {
  Value v;
  v.kind_ = Kind::kIterator;
  auto data = std::make_shared<IteratorData>();
  data->items = std::move(items);
  data->type_name = std::move(type_name);
  data->repr = std::move(repr);
  data->sized = true;
  data->subscriptable = subscriptable;
  v.data_ = std::move(data);
  return v;
}

const ValueList& Value::items() const {
  if (kind_ == Kind::kIterator) return iterator_ref().items;
  return *std::get<std::shared_ptr<ValueList>>(data_);
}

double Value::to_double() const {
  if (is_float()) return as_float();
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return static_cast<double>(as_int());
}

int64_t Value::to_int() const {
  return is_bool() ? (as_bool() ? 1 : 0) : as_int();
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
    case Kind::kTuple:
      return !items().empty();
    case Kind::kDict:
      return dict_ref().size() != 0;
    case Kind::kIterator:
      return !iterator_ref().sized || !iterator_ref().items.empty();
    default:
      return true;
  }
}

std::string format_python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then CPython's repr layout: scientific when the decimal point
  // position is <= -4 or > 16.
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, result.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  int exponent = std::stoi(sci.substr(e_pos + 1));
  int decimal_point = exponent + 1;
  std::string out = negative ? "-" : "";
  int num_digits = static_cast<int>(digits.size());
  if (decimal_point <= -4 || decimal_point > 16) {
    out += digits[0];
    if (num_digits > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decimal_point <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decimal_point), '0');
    out += digits;
  } else if (decimal_point >= num_digits) {
    out += digits;
    out.append(static_cast<size_t>(decimal_point - num_digits), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decimal_point));
    out += '.';
    out += digits.substr(static_cast<size_t>(decimal_point));
  }
  return out;
}

std::string python_string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : text::decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == U'\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    } else if (c < 0x7F || text::is_printable(c)) {
      text::append_utf8(out, c);
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    }
  }
  out += quote;
  return out;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(as_int());
    case Kind::kFloat:
      return format_python_float(as_float());
    case Kind::kString:
      return python_string_repr(as_string());
    case Kind::kList:
    case Kind::kTuple: {
      bool tuple = is_tuple();
      std::string out = tuple ? "(" : "[";
      const auto& xs = items();
      for (size_t i = 0; i < xs.size(); ++i) {
        if (i) out += ", ";
        out += xs[i].repr();
      }
      if (tuple && xs.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_ref().entries) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
      }
      return out + "}";
    }
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : dict_ref().entries) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
      }
      return out + "}>";
    }
    case Kind::kCallable:
      return "<function " + callable_ref().name + ">";
    case Kind::kObject:
      return "<" + object_ref().type_name() + " object>";
    case Kind::kIterator:
      if (iterator_ref().repr.empty()) {
        // CPython prints "<generator object ... at 0x7f...>", an address we cannot reproduce.
        throw TemplateError("printing a " + iterator_ref().type_name +
                            " object is not supported (convert it with |list)");
      }
      return iterator_ref().repr;
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
    case Kind::kObject:
      return object_ref().type_name();
    case Kind::kIterator:
      return iterator_ref().type_name;
  }
  return "object";
}

void Value::fail_undefined() const {
  const std::string& hint = undefined_hint();
  throw TemplateError(hint.empty() ? "value is undefined" : hint);
}

void Value::require_defined() const {
  if (is_undefined()) fail_undefined();
}

bool Value::equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return to_double() == other.to_double();
    return to_int() == other.to_int();
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return as_string() == other.as_string();
    case Kind::kList:
    case Kind::kTuple: {
      const auto& a = items();
      const auto& b = other.items();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const auto& a = dict_ref();
      const auto& b = other.dict_ref();
      if (a.size() != b.size()) return false;
      for (const auto& [k, v] : a.entries) {
        const Value* w = b.find(k);
        if (!w || !v.equals(*w)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return dict_ptr() == other.dict_ptr();
    case Kind::kCallable:
      return &callable_ref() == &other.callable_ref();
    case Kind::kObject:
      return &object_ref() == &other.object_ref();
    case Kind::kIterator:
      return &iterator_ref() == &other.iterator_ref();
    default:
      return false;
  }
}

bool Value::less_than(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return to_double() < other.to_double();
    return to_int() < other.to_int();
  }
  if (is_string() && other.is_string()) return as_string() < other.as_string();
  if (kind_ == other.kind_ && is_sequence()) {
    const auto& a = items();
    const auto& b = other.items();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!a[i].equals(b[i])) return a[i].less_than(b[i]);
    }
    return a.size() < b.size();
  }
  throw TemplateError(fmt::format("'<' not supported between instances of '{}' and '{}'",
                                  type_name(), other.type_name()));
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind_) {
    case Kind::kNone:
      return nullptr;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int();
    case Kind::kFloat:
      return as_float();
    case Kind::kString:
      return as_string();
    case Kind::kList:
    case Kind::kTuple: {
      auto out = nlohmann::ordered_json::array();
      for (const auto& item : items()) out.push_back(item.to_json());
      return out;
    }
    case Kind::kDict: {
      auto out = nlohmann::ordered_json::object();
      for (const auto& [k, v] : dict_ref().entries) out[k.str()] = v.to_json();
      return out;
    }
    default:
      throw TemplateError(fmt::format("Object of type {} is not JSON serializable", type_name()));
  }
}

const Value* ValueDict::find(const Value& key) const {
  for (const auto& entry : entries) {
    if (entry.first.equals(key)) return &entry.second;
  }
  return nullptr;
}

const Value* ValueDict::find(const std::string& key) const {
  for (const auto& entry : entries) {
    if (entry.first.is_string() && entry.first.as_string() == key) return &entry.second;
  }
  return nullptr;
}

void ValueDict::set(const Value& key, Value value) {
  for (auto& entry : entries) {
    if (entry.first.equals(key)) {
      entry.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

const Value* CallArgs::get(size_t position, const std::string& keyword) const {
  if (position < args.size()) return &args[position];
  for (const auto& [name, value] : kwargs) {
    if (name == keyword) return &value;
  }
  return nullptr;
}

Value CallArgs::get_or(size_t position, const std::string& keyword, Value fallback) const {
  const Value* v = get(position, keyword);
  return v ? *v : fallback;
}

void CallArgs::check(const std::string& function, size_t max_positional,
                     std::initializer_list<const char*> keywords) const {
  if (args.size() > max_positional) {
    throw TemplateError(fmt::format("{}() takes at most {} positional arguments ({} given)",
                                    function, max_positional, args.size()));
  }
  for (const auto& [name, value] : kwargs) {
    bool known = false;
    for (const char* k : keywords) known = known || name == k;
    if (!known) {
      throw TemplateError(
          fmt::format("{}() got an unexpected keyword argument '{}'", function, name));
    }
  }
}

}  // namespace pagoda::jinja
