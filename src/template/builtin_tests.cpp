// jinja2's builtin tests (jinja2/tests.py): `x is defined`, `x is string`, `x is divisibleby 3`...
#include <fmt/format.h>

#include "template/builtins.h"
#include "template/operations.h"

namespace pagoda::jinja {
namespace {

bool t_defined(const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_none(const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_boolean(const Value& v, CallArgs&) {
  return v.is_bool();
}
bool t_false(const Value& v, CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
bool t_true(const Value& v, CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool t_integer(const Value& v, CallArgs&) {
  return v.is_int();
}
bool t_float(const Value& v, CallArgs&) {
  return v.is_float();
}
bool t_number(const Value& v, CallArgs&) {
  return v.is_number();
}
bool t_string(const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_mapping(const Value& v, CallArgs&) {
  return v.is_dict();
}
bool t_iterable(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict() || v.is_iterator();
}
bool t_sequence(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict() ||
         (v.is_iterator() && v.iterator_ref().subscriptable);
}
bool t_callable(const Value& v, CallArgs&) {
  return v.is_callable();
}
bool t_escaped(const Value&, CallArgs&) {
  return false;
}

const Value& test_arg(const CallArgs& a, const char* name) {
  if (a.args.empty()) fail(fmt::format("test '{}' needs an argument", name));
  return a.args[0];
}

bool t_eq(const Value& v, CallArgs& a) {
  return v.equals(test_arg(a, "=="));
}
bool t_ne(const Value& v, CallArgs& a) {
  return !v.equals(test_arg(a, "!="));
}
bool t_lt(const Value& v, CallArgs& a) {
  return v.less_than(test_arg(a, "<"));
}
bool t_le(const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "<=");
  return v.less_than(o) || v.equals(o);
}
bool t_gt(const Value& v, CallArgs& a) {
  return test_arg(a, ">").less_than(v);
}
bool t_ge(const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, ">=");
  return o.less_than(v) || v.equals(o);
}
bool t_in(const Value& v, CallArgs& a) {
  return contains(test_arg(a, "in"), v);
}
bool t_sameas(const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_dict() || v.is_namespace()) return v.dict_ptr() == o.dict_ptr();
  if (v.is_sequence()) return &v.items() == &o.items();
  return v.equals(o);
}

int64_t int_arg(const Value& v, const char* test) {
  if (!v.is_int() && !v.is_bool()) {
    fail(fmt::format("test '{}' needs an integer, got {}", test, v.type_name()));
  }
  return v.to_int();
}

bool t_odd(const Value& v, CallArgs&) {
  return (int_arg(v, "odd") % 2 + 2) % 2 == 1;
}
bool t_even(const Value& v, CallArgs&) {
  return int_arg(v, "even") % 2 == 0;
}
bool t_divisibleby(const Value& v, CallArgs& a) {
  int64_t d = int_arg(test_arg(a, "divisibleby"), "divisibleby");
  if (d == 0) fail("integer division or modulo by zero");
  return int_arg(v, "divisibleby") % d == 0;
}
bool t_lower(const Value& v, CallArgs&) {
  CallArgs none;
  return get_method(Value(v.str()), "islower").callable_ref().fn(none).truthy();
}
bool t_upper(const Value& v, CallArgs&) {
  CallArgs none;
  return get_method(Value(v.str()), "isupper").callable_ref().fn(none).truthy();
}

}  // namespace

TestFn find_test(std::string_view name) {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"false", t_false},
      {"true", t_true},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"equalto", t_eq},
      {"eq", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"lower", t_lower},
      {"upper", t_upper},
  };
  auto it = kTests.find(name);
  return it == kTests.end() ? nullptr : it->second;
}

}  // namespace pagoda::jinja
