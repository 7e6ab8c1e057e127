// Methods of Python's builtin types as templates call them (str.split, str.strip, dict.items,
// ...), with CPython's semantics on code points; mutating list/dict methods raise the sandbox's
// SecurityError as jinja2's ImmutableSandboxedEnvironment does.
#include <fmt/format.h>

#include "template/operations.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

bool in_chars(char32_t c, const std::u32string* chars) {
  return chars ? chars->find(c) != std::u32string::npos : text::is_space(c);
}

Value strip(const std::string& s, const CallArgs& a, bool left, bool right) {
  a.check("strip", 1, {});
  std::u32string chars;
  const Value* arg = a.get(0, "");
  bool have_chars = arg && !arg->is_none();
  if (have_chars) {
    if (!arg->is_string()) fail("strip arg must be None or str");
    chars = text::decode(arg->as_string());
  }
  std::u32string cps = text::decode(s);
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && in_chars(cps[b], have_chars ? &chars : nullptr)) ++b;
  }
  if (right) {
    while (e > b && in_chars(cps[e - 1], have_chars ? &chars : nullptr)) --e;
  }
  return Value(text::encode(std::u32string_view(cps).substr(b, e - b)));
}

Value split(const std::string& s, const CallArgs& a, bool from_right) {
  a.check("split", 2, {"sep", "maxsplit"});
  Value sep = a.get_or(0, "sep", Value());
  int64_t maxsplit = a.get_or(1, "maxsplit", Value(int64_t{-1})).to_int();
  ValueList parts;
  if (sep.is_none()) {
    // Runs of whitespace; leading/trailing whitespace ignored.
    std::u32string cps = text::decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && text::is_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t j = i;
      while (j < cps.size() && !text::is_space(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      if (!from_right) {
        size_t start = words[static_cast<size_t>(maxsplit)].first;
        size_t end = cps.size();
        while (end > start && text::is_space(cps[end - 1])) --end;
        words.resize(static_cast<size_t>(maxsplit));
        words.emplace_back(start, end);
      } else {
        size_t keep_from = words.size() - static_cast<size_t>(maxsplit);
        size_t end = words[keep_from - 1].second;
        size_t start = 0;
        while (start < end && text::is_space(cps[start])) ++start;
        std::vector<std::pair<size_t, size_t>> tail(words.begin() + keep_from, words.end());
        words.clear();
        words.emplace_back(start, end);
        words.insert(words.end(), tail.begin(), tail.end());
      }
    }
    for (const auto& [b, e] : words) {
      parts.emplace_back(text::encode(std::u32string_view(cps).substr(b, e - b)));
    }
    return Value::list(std::move(parts));
  }
  if (!sep.is_string()) fail("must be str or None, not " + sep.type_name());
  const std::string& d = sep.as_string();
  if (d.empty()) fail("empty separator");
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(pieces.size()) < maxsplit) {
      size_t found = s.find(d, start);
      if (found == std::string::npos) break;
      pieces.push_back(s.substr(start, found - start));
      start = found + d.size();
    }
    pieces.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    std::vector<std::string> reversed;
    while (maxsplit < 0 || static_cast<int64_t>(reversed.size()) < maxsplit) {
      if (end < d.size()) break;
      size_t found = s.rfind(d, end - d.size());
      if (found == std::string::npos) break;
      reversed.push_back(s.substr(found + d.size(), end - found - d.size()));
      end = found;
    }
    reversed.push_back(s.substr(0, end));
    pieces.assign(reversed.rbegin(), reversed.rend());
  }
  for (auto& p : pieces) parts.emplace_back(std::move(p));
  return Value::list(std::move(parts));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& x) {
    if (!x.is_string()) fail("startswith/endswith first arg must be str or a tuple of str");
    const std::string& p = x.as_string();
    if (p.size() > s.size()) return false;
    return prefix ? s.compare(0, p.size(), p) == 0
                  : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (affix.is_sequence()) {
    for (const auto& x : affix.items()) {
      if (one(x)) return true;
    }
    return false;
  }
  return one(affix);
}

Value string_format(const std::string& s, const CallArgs& a) {
  std::string out;
  size_t next_auto = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t close = s.find('}', i);
      if (close == std::string::npos) fail("Single '{' encountered in format string");
      std::string field = s.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        fail("str.format with conversions or format specs is not supported");
      }
      const Value* v = nullptr;
      if (field.empty()) {
        v = next_auto < a.args.size() ? &a.args[next_auto++] : nullptr;
      } else if (field.find_first_not_of("0123456789") == std::string::npos) {
        size_t idx = std::stoul(field);
        v = idx < a.args.size() ? &a.args[idx] : nullptr;
      } else {
        for (const auto& [k, x] : a.kwargs) {
          if (k == field) v = &x;
        }
      }
      if (!v) fail(fmt::format("Replacement index {} out of range for format", field));
      out += v->str();
      i = close;
    } else if (c == '}') {
      fail("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return Value(std::move(out));
}

int64_t code_point_index(const std::string& s, size_t byte_offset) {
  return static_cast<int64_t>(text::num_code_points(std::string_view(s).substr(0, byte_offset)));
}

Value unsafe_method(const Value& obj, const std::string& name) {
  std::string type = obj.type_name();
  return Value::callable(name, [type, name](CallArgs&) -> Value {
    fail(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type));
  });
}

template <typename F>
Value method(const std::string& name, F f) {
  return Value::callable(name, [f](CallArgs& a) -> Value { return f(a); });
}

Value string_method(const Value& obj, const std::string& name) {
  const std::string s = obj.as_string();
  auto predicate = [&](auto pred, bool need_cased) {
    return method(name, [s, pred, need_cased](CallArgs&) {
      std::u32string cps = text::decode(s);
      if (cps.empty()) return Value(false);
      for (char32_t c : cps) {
        if (!pred(c)) return Value(false);
      }
      return Value(true);
    });
  };
  if (name == "strip") return method(name, [s](CallArgs& a) { return strip(s, a, true, true); });
  if (name == "lstrip") return method(name, [s](CallArgs& a) { return strip(s, a, true, false); });
  if (name == "rstrip") return method(name, [s](CallArgs& a) { return strip(s, a, false, true); });
  if (name == "split") return method(name, [s](CallArgs& a) { return split(s, a, false); });
  if (name == "rsplit") return method(name, [s](CallArgs& a) { return split(s, a, true); });
  if (name == "upper") return method(name, [s](CallArgs&) { return Value(text::upper(s)); });
  if (name == "lower") return method(name, [s](CallArgs&) { return Value(text::lower(s)); });
  if (name == "title") return method(name, [s](CallArgs&) { return Value(text::title(s)); });
  if (name == "capitalize") {
    return method(name, [s](CallArgs&) { return Value(text::capitalize(s)); });
  }
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return method(name, [s, prefix](CallArgs& a) {
      a.check(prefix ? "startswith" : "endswith", 1, {});
      if (a.args.empty()) fail("startswith/endswith takes at least 1 argument");
      return Value(affix_match(s, a.args[0], prefix));
    });
  }
  if (name == "replace") {
    return method(name, [s](CallArgs& a) {
      a.check("replace", 3, {});
      if (a.args.size() < 2 || !a.args[0].is_string() || !a.args[1].is_string()) {
        fail("replace() takes two str arguments");
      }
      const std::string& old = a.args[0].as_string();
      const std::string& repl = a.args[1].as_string();
      int64_t count = a.args.size() > 2 ? a.args[2].to_int() : -1;
      std::string out;
      if (old.empty()) {
        // Python inserts the replacement between every character.
        std::u32string cps = text::decode(s);
        int64_t done = 0;
        for (size_t i = 0; i <= cps.size(); ++i) {
          if (count < 0 || done < count) {
            out += repl;
            ++done;
          }
          if (i < cps.size()) text::append_utf8(out, cps[i]);
        }
        return Value(out);
      }
      size_t start = 0;
      int64_t done = 0;
      while (count < 0 || done < count) {
        size_t found = s.find(old, start);
        if (found == std::string::npos) break;
        out += s.substr(start, found - start) + repl;
        start = found + old.size();
        ++done;
      }
      out += s.substr(start);
      return Value(out);
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return method(name, [s, name](CallArgs& a) {
      a.check(name, 1, {});
      if (a.args.empty() || !a.args[0].is_string()) fail(name + "() argument must be str");
      const std::string& sub = a.args[0].as_string();
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(text::num_code_points(s)) + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value(n);
      }
      size_t found = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (found == std::string::npos) {
        if (name == "index" || name == "rindex") fail("substring not found");
        return Value(int64_t{-1});
      }
      return Value(code_point_index(s, found));
    });
  }
  if (name == "join") {
    return method(name, [s](CallArgs& a) {
      a.check("join", 1, {});
      if (a.args.empty()) fail("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const auto& x : iterate(a.args[0])) {
        if (!x.is_string()) {
          fail(fmt::format("sequence item: expected str instance, {} found", x.type_name()));
        }
        if (!first) out += s;
        first = false;
        out += x.as_string();
      }
      return Value(out);
    });
  }
  if (name == "format") return method(name, [s](CallArgs& a) { return string_format(s, a); });
  if (name == "splitlines") {
    return method(name, [s](CallArgs& a) {
      a.check("splitlines", 0, {});
      ValueList lines;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          lines.emplace_back(s.substr(start, i - start));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) lines.emplace_back(s.substr(start));
      return Value::list(std::move(lines));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return method(name, [s, prefix](CallArgs& a) {
      if (a.args.size() != 1 || !a.args[0].is_string()) fail("expected one str argument");
      const std::string& p = a.args[0].as_string();
      if (affix_match(s, a.args[0], prefix)) {
        return Value(prefix ? s.substr(p.size()) : s.substr(0, s.size() - p.size()));
      }
      return Value(s);
    });
  }
  if (name == "isdigit") return predicate([](char32_t c) { return text::is_digit(c); }, false);
  if (name == "isalpha") return predicate([](char32_t c) { return text::is_alpha(c); }, false);
  if (name == "isalnum") {
    return predicate([](char32_t c) { return text::is_alpha(c) || text::is_digit(c); }, false);
  }
  if (name == "isspace") return predicate([](char32_t c) { return text::is_space(c); }, false);
  if (name == "isupper" || name == "islower") {
    bool want_upper = name == "isupper";
    return method(name, [s, want_upper](CallArgs&) {
      bool any_cased = false;
      for (char32_t c : text::decode(s)) {
        if (want_upper ? text::is_lower(c) : text::is_upper(c)) return Value(false);
        any_cased = any_cased || text::is_lower(c) || text::is_upper(c);
      }
      return Value(any_cased);
    });
  }
  return Value::undefined();
}

Value dict_method(const Value& obj, const std::string& name) {
  std::shared_ptr<ValueDict> d = obj.dict_ptr();
  if (name == "items" || name == "keys" || name == "values") {
    return method(name, [d, name](CallArgs& a) {
      a.check(name, 0, {});
      ValueList out;
      for (const auto& [k, v] : d->entries) {
        out.push_back(name == "items" ? Value::tuple({k, v}) : (name == "keys" ? k : v));
      }
      std::string repr = "dict_" + name + "(" + Value::list(out).repr() + ")";
      return Value::view(std::move(out), "dict_" + name, std::move(repr), false);
    });
  }
  if (name == "get") {
    return method(name, [d](CallArgs& a) {
      a.check("get", 2, {});
      if (a.args.empty()) fail("get expected at least 1 argument, got 0");
      const Value* v = d->find(a.args[0]);
      return v ? *v : (a.args.size() > 1 ? a.args[1] : Value());
    });
  }
  if (name == "copy") {
    return method(name, [d](CallArgs&) { return Value::dict(std::make_shared<ValueDict>(*d)); });
  }
  if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" ||
      name == "clear") {
    return unsafe_method(obj, name);
  }
  return Value::undefined();
}

Value list_method(const Value& obj, const std::string& name) {
  if (name == "index" || name == "count") {
    ValueList items = obj.items();
    bool index = name == "index";
    return method(name, [items, index](CallArgs& a) {
      if (a.args.size() != 1) fail("expected one argument");
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i].equals(a.args[0])) {
          if (index) return Value(static_cast<int64_t>(i));
          ++n;
        }
      }
      if (index) fail(fmt::format("{} is not in list", a.args[0].repr()));
      return Value(n);
    });
  }
  if (obj.is_list() &&
      (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
       name == "remove" || name == "reverse" || name == "sort" || name == "clear")) {
    return unsafe_method(obj, name);
  }
  return Value::undefined();
}

}  // namespace

Value get_method(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kString:
      return string_method(obj, name);
    case Kind::kDict:
      return dict_method(obj, name);
    case Kind::kList:
    case Kind::kTuple:
      return list_method(obj, name);
    default:
      return Value::undefined();
  }
}

}  // namespace pagoda::jinja
