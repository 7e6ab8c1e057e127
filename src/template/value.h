// The value model of the Jinja interpreter: Python-like values (None, bool, int, float, str,
// list, tuple, dict) plus jinja2's Undefined and the interpreter's own objects (namespace,
// callables, loop objects). Printing, truthiness, equality and ordering follow CPython, because
// chat templates are specified by what Python's jinja2 renders.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::jinja {

// A render-time error; the interpreter adds the template line before it leaves the engine.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message, int line = 0)
      : std::runtime_error(message), line_(line) {}
  int line() const { return line_; }
  void set_line(int line) { line_ = line; }

 private:
  int line_;
};

// The filters', tests' and methods' way out of a render.
[[noreturn]] inline void fail(const std::string& message) {
  throw TemplateError(message);
}

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kTuple,
  kDict,
  kNamespace,
  kCallable,
  kObject,
  // Lazy Python iterables jinja2 hands out: generators (map, select, ...), dict views, range.
  kIterator,
};

class Value;
struct ValueDict;
struct IteratorData;
struct CallArgs;
using ValueList = std::vector<Value>;
using NativeFn = std::function<Value(CallArgs&)>;

struct Callable {
  std::string name;
  NativeFn fn;
};

// Interpreter objects with attributes (loop, cycler, joiner).
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  // Returns Undefined when the attribute does not exist.
  virtual Value get_attr(const std::string& name);
};

class Value {
 public:
  Value() : kind_(Kind::kNone) {}
  Value(std::nullptr_t) : kind_(Kind::kNone) {}
  Value(bool b) : kind_(Kind::kBool), data_(b) {}
  Value(int i) : kind_(Kind::kInt), data_(int64_t{i}) {}
  Value(int64_t i) : kind_(Kind::kInt), data_(i) {}
  Value(double f) : kind_(Kind::kFloat), data_(f) {}
  Value(std::string s) : kind_(Kind::kString), data_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::kString), data_(std::string(s)) {}

  static Value undefined(std::string hint = {});
  static Value list(ValueList items = {});
  static Value tuple(ValueList items);
  static Value dict();
  static Value dict(std::shared_ptr<ValueDict> d);
  static Value namespace_object();
  static Value callable(std::string name, NativeFn fn);
  static Value object(std::shared_ptr<Object> obj);
  // A generator: no len(), not subscriptable, always truthy, cannot be printed or serialized.
  static Value generator(ValueList items);
  // A sized view with a fixed repr, e.g. dict_items([...]) or range(0, 3).
  static Value view(ValueList items, std::string type_name, std::string repr, bool subscriptable);
  template <typename Json>
  static Value from_json(const Json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers.Number: bool counts as an int.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_iterator() const { return kind_ == Kind::kIterator; }
  const IteratorData& iterator_ref() const {
    return *std::get<std::shared_ptr<IteratorData>>(data_);
  }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // Numeric value of an int, bool or float.
  double to_double() const;
  // Integer value of an int or bool.
  int64_t to_int() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  // The hint an Undefined carries for its error message ("'x' is undefined").
  const std::string& undefined_hint() const { return std::get<std::string>(data_); }
  // Items of a list, tuple or iterator.
  const ValueList& items() const;
  const ValueDict& dict_ref() const { return *std::get<std::shared_ptr<ValueDict>>(data_); }
  ValueDict& mutable_dict() const { return *std::get<std::shared_ptr<ValueDict>>(data_); }
  const std::shared_ptr<ValueDict>& dict_ptr() const {
    return std::get<std::shared_ptr<ValueDict>>(data_);
  }
  const Callable& callable_ref() const { return *std::get<std::shared_ptr<Callable>>(data_); }
  Object& object_ref() const { return *std::get<std::shared_ptr<Object>>(data_); }

  // Python truthiness (Undefined is falsy).
  bool truthy() const;
  // Python str(): what {{ value }} prints (Undefined prints nothing).
  std::string str() const;
  // Python repr(), used inside containers.
  std::string repr() const;
  // Python's type name, for error messages ("dict object").
  std::string type_name() const;
  // Raises jinja2's UndefinedError if this is Undefined.
  void require_defined() const;
  [[noreturn]] void fail_undefined() const;

  // Python ==; Undefined equals only Undefined.
  bool equals(const Value& other) const;
  // Python <; throws TemplateError for unorderable types.
  bool less_than(const Value& other) const;

  nlohmann::ordered_json to_json() const;

 private:
  Kind kind_;
  std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<ValueList>,
               std::shared_ptr<ValueDict>, std::shared_ptr<Callable>, std::shared_ptr<Object>,
               std::shared_ptr<IteratorData>>
      data_;
};

struct IteratorData {
  ValueList items;
  std::string type_name;  // "generator", "dict_items", "range", ...
  std::string repr;       // empty for generators
  bool sized = false;
  bool subscriptable = false;
};

// Insertion-ordered mapping (Python dict); keys compare with Python equality.
struct ValueDict {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
  size_t size() const { return entries.size(); }
};

struct CallArgs {
  ValueList args;
  std::vector<std::pair<std::string, Value>> kwargs;

  // Argument by position or keyword (Python call binding for builtins); nullptr when absent.
  const Value* get(size_t position, const std::string& keyword) const;
  Value get_or(size_t position, const std::string& keyword, Value fallback) const;
  // Rejects more than `max_positional` positional arguments or unknown keywords.
  void check(const std::string& function, size_t max_positional,
             std::initializer_list<const char*> keywords) const;
};

// Python float repr (shortest round-trip, "1.0", "1e+16").
std::string format_python_float(double value);
// Python repr of a str.
std::string python_string_repr(const std::string& s);

template <typename Json>
Value Value::from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value();
    case Json::value_t::boolean:
      return Value(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value(j.template get<double>());
    case Json::value_t::string:
      return Value(j.template get<std::string>());
    case Json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Value d = Value::dict();
      auto& entries = d.mutable_dict().entries;
      entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        entries.emplace_back(Value(it.key()), from_json(it.value()));
      }
      return d;
    }
    default:
      throw TemplateError("unsupported JSON value type (binary or discarded)");
  }
}

}  // namespace pagoda::jinja
