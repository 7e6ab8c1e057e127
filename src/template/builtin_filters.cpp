// jinja2's builtin filters (jinja2/filters.py) as chat templates use them, and Hugging Face's
// tojson (json.dumps with ensure_ascii=False, no HTML escaping).
#include "template/builtins.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "template/operations.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

std::string soft_str(const Value& v) {
  return v.str();
}

Value arg_or(const CallArgs& a, size_t pos, const char* key, Value fallback) {
  return a.get_or(pos, key, std::move(fallback));
}

// Key used by sort/unique/dictsort: strings lowercased unless case sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(text::lower(v.as_string()));
  return v;
}

Value attribute_or_self(const Value& v, const Value& attribute) {
  if (attribute.is_none() || attribute.is_undefined()) return v;
  if (attribute.is_int()) return get_item(v, attribute);
  return get_attribute_path(v, attribute.str());
}

Value f_length(const Value& v, CallArgs& a) {
  a.check("length", 0, {});
  return Value(length(v));
}

Value f_trim(const Value& v, CallArgs& a) {
  a.check("trim", 1, {"chars"});
  CallArgs strip_args;
  if (const Value* chars = a.get(0, "chars")) strip_args.args.push_back(*chars);
  return get_method(Value(soft_str(v)), "strip").callable_ref().fn(strip_args);
}

Value f_upper(const Value& v, CallArgs& a) {
  a.check("upper", 0, {});
  return Value(text::upper(soft_str(v)));
}

Value f_lower(const Value& v, CallArgs& a) {
  a.check("lower", 0, {});
  return Value(text::lower(soft_str(v)));
}

Value f_capitalize(const Value& v, CallArgs& a) {
  a.check("capitalize", 0, {});
  return Value(text::capitalize(soft_str(v)));
}

Value f_title(const Value& v, CallArgs& a) {
  a.check("title", 0, {});
  // jinja2 splits on runs of [-\s({[<] and upper-cases the first character of each piece.
  std::u32string cps = text::decode(soft_str(v));
  auto is_sep = [](char32_t c) {
    return c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<' || text::is_space(c);
  };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    for (size_t k = i; k < j; ++k) {
      text::append_utf8(out, k == i ? text::to_upper(cps[k]) : text::to_lower(cps[k]));
    }
    i = j;
  }
  return Value(out);
}

Value f_replace(const Value& v, CallArgs& a) {
  a.check("replace", 3, {"old", "new", "count"});
  const Value* old = a.get(0, "old");
  const Value* repl = a.get(1, "new");
  if (!old || !repl) fail("replace filter needs old and new");
  CallArgs m;
  m.args = {Value(soft_str(*old)), Value(soft_str(*repl))};
  Value count = arg_or(a, 2, "count", Value());
  if (!count.is_none()) m.args.push_back(count);
  return get_method(Value(soft_str(v)), "replace").callable_ref().fn(m);
}

Value f_join(const Value& v, CallArgs& a) {
  a.check("join", 2, {"d", "attribute"});
  std::string d = soft_str(arg_or(a, 0, "d", Value("")));
  Value attribute = arg_or(a, 1, "attribute", Value());
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += d;
    first = false;
    out += soft_str(attribute_or_self(item, attribute));
  }
  return Value(out);
}

Value f_first(const Value& v, CallArgs& a) {
  a.check("first", 0, {});
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, CallArgs& a) {
  a.check("last", 0, {});
  if (v.is_iterator() && !v.iterator_ref().sized) {
    fail(fmt::format("'{}' object is not reversible", v.type_name()));
  }
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_list(const Value& v, CallArgs& a) {
  a.check("list", 0, {});
  return Value::list(iterate(v));
}

Value f_default(const Value& v, CallArgs& a) {
  a.check("default", 2, {"default_value", "boolean"});
  Value fallback = arg_or(a, 0, "default_value", Value(""));
  bool boolean = arg_or(a, 1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
  return v;
}

Value f_tojson(const Value& v, CallArgs& a) {
  a.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = arg_or(a, 0, "ensure_ascii", Value(false)).truthy();
  Value indent = arg_or(a, 1, "indent", Value());
  if (indent.is_int()) {
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  } else if (indent.is_string()) {
    o.indent = indent.as_string();
  } else if (!indent.is_none()) {
    fail("tojson indent must be an int, a string or None");
  }
  if (o.indent) o.item_separator = ",";
  Value separators = arg_or(a, 2, "separators", Value());
  if (!separators.is_none()) {
    if (!separators.is_sequence() || separators.items().size() != 2) {
      fail("tojson separators must be an (item_separator, key_separator) pair");
    }
    o.item_separator = separators.items()[0].str();
    o.key_separator = separators.items()[1].str();
  }
  o.sort_keys = arg_or(a, 3, "sort_keys", Value(false)).truthy();
  return Value(json_dumps(v, o));
}

// Extension (not in jinja2 or HF): parses a JSON string, as llama.cpp's engine offers. Templates
// such as DeepSeek-V3.2's use it for OpenAI-style tool call arguments.
Value f_from_json(const Value& v, CallArgs& a) {
  a.check("from_json", 0, {});
  if (!v.is_string()) fail("from_json expects a string");
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(v.as_string(), nullptr, false);
  if (j.is_discarded()) fail("from_json: invalid JSON: " + v.as_string());
  return Value::from_json(j);
}

Value f_string(const Value& v, CallArgs& a) {
  a.check("string", 0, {});
  return Value(soft_str(v));
}

bool parse_python_int(std::string s, int64_t base, int64_t* out) {
  std::u32string cps = text::decode(s);
  size_t b = 0, e = cps.size();
  while (b < e && text::is_space(cps[b])) ++b;
  while (e > b && text::is_space(cps[e - 1])) --e;
  s = text::encode(std::u32string_view(cps).substr(b, e - b));
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() &&
        std::isalnum(static_cast<unsigned char>(s[i - 1])) &&
        std::isalnum(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    digits += s[i];
  }
  if (digits.empty()) return false;
  size_t consumed = 0;
  try {
    *out = std::stoll(digits, &consumed, static_cast<int>(base));
  } catch (const std::exception&) {
    return false;
  }
  return consumed == digits.size() && digits.find_first_of(" \t\n") == std::string::npos;
}

bool parse_python_float(const std::string& raw, double* out) {
  std::string s = text::encode([&] {
    std::u32string cps = text::decode(raw);
    size_t b = 0, e = cps.size();
    while (b < e && text::is_space(cps[b])) ++b;
    while (e > b && text::is_space(cps[e - 1])) --e;
    return cps.substr(b, e - b);
  }());
  if (s.empty()) return false;
  std::string lowered = text::lower(s);
  std::string body = (lowered[0] == '+' || lowered[0] == '-') ? lowered.substr(1) : lowered;
  double sign = lowered[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") {
    *out = sign * INFINITY;
    return true;
  }
  if (body == "nan") {
    *out = NAN;
    return true;
  }
  if (body.find_first_not_of("0123456789.e+-_") != std::string::npos) return false;
  size_t consumed = 0;
  try {
    *out = std::stod(s, &consumed);
  } catch (const std::exception&) {
    return false;
  }
  return consumed == s.size();
}

Value f_int(const Value& v, CallArgs& a) {
  a.check("int", 2, {"default", "base"});
  Value fallback = arg_or(a, 0, "default", Value(int64_t{0}));
  int64_t base = arg_or(a, 1, "base", Value(int64_t{10})).to_int();
  if (v.is_int() || v.is_bool()) return Value(v.to_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return fallback;
    return Value(static_cast<int64_t>(std::trunc(v.as_float())));
  }
  if (v.is_string()) {
    int64_t i = 0;
    if (parse_python_int(v.as_string(), base, &i)) return Value(i);
    double d = 0;
    if (parse_python_float(v.as_string(), &d) && std::isfinite(d)) {
      return Value(static_cast<int64_t>(std::trunc(d)));
    }
  }
  return fallback;
}

Value f_float(const Value& v, CallArgs& a) {
  a.check("float", 1, {"default"});
  Value fallback = arg_or(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.to_double());
  double d = 0;
  if (v.is_string() && parse_python_float(v.as_string(), &d)) return Value(d);
  return fallback;
}

Value f_abs(const Value& v, CallArgs& a) {
  a.check("abs", 0, {});
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    int64_t i = v.to_int();
    return i < 0 ? negate(Value(i)) : Value(i);
  }
  fail(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_round(const Value& v, CallArgs& a) {
  a.check("round", 2, {"precision", "method"});
  int64_t precision = arg_or(a, 0, "precision", Value(int64_t{0})).to_int();
  std::string method = arg_or(a, 1, "method", Value("common")).str();
  if (!v.is_number()) fail(fmt::format("type {} doesn't define __round__ method", v.type_name()));
  if (method == "common") {
    if (!v.is_float()) return Value(v.to_int());  // round(int, n) stays an int
    if (precision < 0 || precision > 300 || !std::isfinite(v.as_float())) {
      fail("round: precision outside the supported range");
    }
    // printf rounds the exact binary value half-to-even, as CPython's round() does.
    return Value(std::stod(fmt::format("{:.{}f}", v.as_float(), precision)));
  }
  if (method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.to_double() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_items(const Value& v, CallArgs& a) {
  a.check("items", 0, {});
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, x] : v.dict_ref().entries) out.push_back(Value::tuple({k, x}));
  return Value::generator(std::move(out));
}

Value select_impl(const Value& v, CallArgs& a, bool by_attribute, bool keep) {
  size_t first_test_arg = by_attribute ? 1 : 0;
  Value attribute;
  if (by_attribute) {
    if (a.args.empty()) fail("Missing parameter for attribute name");
    attribute = a.args[0];
  }
  TestFn test = nullptr;
  CallArgs test_args;
  if (a.args.size() > first_test_arg) {
    std::string name = a.args[first_test_arg].str();
    test = find_test(name);
    if (!test) fail(fmt::format("No test named '{}'.", name));
    test_args.args.assign(a.args.begin() + static_cast<long>(first_test_arg) + 1, a.args.end());
  }
  test_args.kwargs = a.kwargs;
  ValueList out;
  for (const auto& item : iterate(v)) {
    Value x = by_attribute ? attribute_or_self(item, attribute) : item;
    bool passed = test ? test(x, test_args) : x.truthy();
    if (passed == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value f_select(const Value& v, CallArgs& a) {
  return select_impl(v, a, false, true);
}
Value f_reject(const Value& v, CallArgs& a) {
  return select_impl(v, a, false, false);
}
Value f_selectattr(const Value& v, CallArgs& a) {
  return select_impl(v, a, true, true);
}
Value f_rejectattr(const Value& v, CallArgs& a) {
  return select_impl(v, a, true, false);
}

Value f_map(const Value& v, CallArgs& a) {
  ValueList out;
  if (a.args.empty()) {
    a.check("map", 0, {"attribute", "default"});
    const Value* attribute = a.get(99, "attribute");
    if (!attribute) fail("map requires a filter name or attribute=");
    const Value* fallback = a.get(99, "default");
    for (const auto& item : iterate(v)) {
      Value x = attribute_or_self(item, *attribute);
      if (x.is_undefined() && fallback) x = *fallback;
      out.push_back(x);
    }
    return Value::generator(std::move(out));
  }
  std::string name = a.args[0].str();
  FilterFn filter = find_filter(name);
  if (!filter) fail(fmt::format("No filter named '{}'.", name));
  CallArgs filter_args;
  filter_args.args.assign(a.args.begin() + 1, a.args.end());
  filter_args.kwargs = a.kwargs;
  for (const auto& item : iterate(v)) {
    CallArgs copy = filter_args;
    out.push_back(filter(item, copy));
  }
  return Value::generator(std::move(out));
}

Value f_unique(const Value& v, CallArgs& a) {
  a.check("unique", 2, {"case_sensitive", "attribute"});
  bool case_sensitive = arg_or(a, 0, "case_sensitive", Value(false)).truthy();
  Value attribute = arg_or(a, 1, "attribute", Value());
  ValueList out, seen;
  for (const auto& item : iterate(v)) {
    Value key = sort_key(attribute_or_self(item, attribute), case_sensitive);
    bool dup = false;
    for (const auto& s : seen) dup = dup || s.equals(key);
    if (!dup) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::generator(std::move(out));
}

Value f_reverse(const Value& v, CallArgs& a) {
  a.check("reverse", 0, {});
  if (v.is_string()) return slice(v, std::nullopt, std::nullopt, int64_t{-1});
  ValueList items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.is_sequence() || v.is_dict() || v.is_iterator()) {
    // reversed() returns an iterator object (list_reverseiterator, ...).
    return Value::generator(std::move(items));
  }
  return Value::list(std::move(items));
}

Value f_sort(const Value& v, CallArgs& a) {
  a.check("sort", 3, {"reverse", "case_sensitive", "attribute"});
  bool reverse = arg_or(a, 0, "reverse", Value(false)).truthy();
  bool case_sensitive = arg_or(a, 1, "case_sensitive", Value(false)).truthy();
  Value attribute = arg_or(a, 2, "attribute", Value());
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& item : iterate(v)) {
    keyed.emplace_back(sort_key(attribute_or_self(item, attribute), case_sensitive), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? y.first.less_than(x.first) : x.first.less_than(y.first);
  });
  ValueList out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Value f_dictsort(const Value& v, CallArgs& a) {
  a.check("dictsort", 3, {"case_sensitive", "by", "reverse"});
  bool case_sensitive = arg_or(a, 0, "case_sensitive", Value(false)).truthy();
  std::string by = arg_or(a, 1, "by", Value("key")).str();
  bool reverse = arg_or(a, 2, "reverse", Value(false)).truthy();
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) fail("dictsort expects a mapping");
  std::vector<std::pair<Value, Value>> entries = v.dict_ref().entries;
  size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
    Value kx = sort_key(pos == 0 ? x.first : x.second, case_sensitive);
    Value ky = sort_key(pos == 0 ? y.first : y.second, case_sensitive);
    return reverse ? ky.less_than(kx) : kx.less_than(ky);
  });
  ValueList out;
  for (auto& [k, x] : entries) out.push_back(Value::tuple({k, x}));
  return Value::list(std::move(out));
}

Value f_safe(const Value& v, CallArgs& a) {
  a.check("safe", 0, {});
  return Value(soft_str(v));
}

Value f_escape(const Value& v, CallArgs& a) {
  a.check("escape", 0, {});
  std::string out;
  for (char c : soft_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value(out);
}

Value f_indent(const Value& v, CallArgs& a) {
  a.check("indent", 3, {"width", "first", "blank"});
  Value width = arg_or(a, 0, "width", Value(int64_t{4}));
  bool first = arg_or(a, 1, "first", Value(false)).truthy();
  bool blank = arg_or(a, 2, "blank", Value(false)).truthy();
  std::string indention =
      width.is_string() ? width.as_string() : std::string(static_cast<size_t>(width.to_int()), ' ');
  // jinja2 appends "\n" before splitlines() so a trailing newline yields an empty last line.
  CallArgs none;
  ValueList lines =
      get_method(Value(soft_str(v) + "\n"), "splitlines").callable_ref().fn(none).items();
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].as_string();
    if (i > 0) rv += "\n";
    if (blank) {
      rv += (i == 0 ? "" : indention) + line;
    } else {
      rv += (i == 0 || line.empty() ? "" : indention) + line;
    }
  }
  if (first) rv = indention + rv;
  return Value(rv);
}

Value f_wordcount(const Value& v, CallArgs& a) {
  a.check("wordcount", 0, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : text::decode(soft_str(v))) {
    bool w = text::is_word(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_batch(const Value& v, CallArgs& a) {
  a.check("batch", 2, {"linecount", "fill_with"});
  const Value* count_arg = a.get(0, "linecount");
  if (!count_arg) fail("batch requires a line count");
  int64_t count = count_arg->to_int();
  if (count <= 0) fail("batch line count must be positive");
  const Value* fill = a.get(1, "fill_with");
  ValueList out, current;
  for (const auto& item : iterate(v)) {
    current.push_back(item);
    if (static_cast<int64_t>(current.size()) == count) {
      out.push_back(Value::list(std::move(current)));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (fill && !fill->is_none()) {
      while (static_cast<int64_t>(current.size()) < count) current.push_back(*fill);
    }
    out.push_back(Value::list(std::move(current)));
  }
  return Value::generator(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, bool want_max) {
  a.check(want_max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  bool case_sensitive = arg_or(a, 0, "case_sensitive", Value(false)).truthy();
  Value attribute = arg_or(a, 1, "attribute", Value());
  ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(attribute_or_self(items[0], attribute), case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(attribute_or_self(items[i], attribute), case_sensitive);
    if (want_max ? best_key.less_than(key) : key.less_than(best_key)) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

Value f_min(const Value& v, CallArgs& a) {
  return min_max(v, a, false);
}
Value f_max(const Value& v, CallArgs& a) {
  return min_max(v, a, true);
}

Value f_sum(const Value& v, CallArgs& a) {
  a.check("sum", 2, {"attribute", "start"});
  Value attribute = arg_or(a, 0, "attribute", Value());
  Value total = arg_or(a, 1, "start", Value(int64_t{0}));
  for (const auto& item : iterate(v))
    total = binary_op("+", total, attribute_or_self(item, attribute));
  return total;
}

Value f_attr(const Value& v, CallArgs& a) {
  a.check("attr", 1, {"name"});
  const Value* name = a.get(0, "name");
  if (!name) fail("attr requires a name");
  return get_attr(v, name->str());
}

Value f_center(const Value& v, CallArgs& a) {
  a.check("center", 1, {"width"});
  int64_t width = arg_or(a, 0, "width", Value(int64_t{80})).to_int();
  std::string s = soft_str(v);
  int64_t n = static_cast<int64_t>(text::num_code_points(s));
  if (width <= n) return Value(s);
  // CPython str.center: extra padding goes left when the total margin is odd and width is odd.
  int64_t margin = width - n;
  int64_t left = margin / 2 + (margin & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s +
               std::string(static_cast<size_t>(margin - left), ' '));
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"length", f_length},
      {"count", f_length},
      {"trim", f_trim},
      {"upper", f_upper},
      {"lower", f_lower},
      {"title", f_title},
      {"capitalize", f_capitalize},
      {"replace", f_replace},
      {"join", f_join},
      {"first", f_first},
      {"last", f_last},
      {"list", f_list},
      {"default", f_default},
      {"d", f_default},
      {"tojson", f_tojson},
      {"from_json", f_from_json},
      {"string", f_string},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"round", f_round},
      {"items", f_items},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"map", f_map},
      {"unique", f_unique},
      {"reverse", f_reverse},
      {"sort", f_sort},
      {"dictsort", f_dictsort},
      {"safe", f_safe},
      {"escape", f_escape},
      {"e", f_escape},
      {"indent", f_indent},
      {"wordcount", f_wordcount},
      {"batch", f_batch},
      {"min", f_min},
      {"max", f_max},
      {"sum", f_sum},
      {"attr", f_attr},
      {"center", f_center},
  };
  auto it = kFilters.find(name);
  return it == kFilters.end() ? nullptr : it->second;
}

}  // namespace pagoda::jinja
