// Focused tests of the Jinja interpreter behind ChatTemplate: whitespace control, each statement,
// expressions, string methods, filters and tests, and errors that name the template line. The
// expected strings in the tables were produced by Python's jinja2 3.1 in Hugging Face's
// environment (render_reference.py's make_environment), so each row is a jinja2 fact.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "template/chat_template.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::ordered_json;

struct RenderCase {
  const char* source;
  const char* context_json;
  const char* expected;
};

std::string render(const std::string& source, const ordered_json& context = ordered_json::object(),
                   const ordered_json& messages = ordered_json::array(),
                   bool add_generation_prompt = false) {
  return ChatTemplate(source, "t.jinja").render(messages, add_generation_prompt, context);
}

// The message of the pagoda::Error that constructing or rendering `source` throws.
std::string error_of(const std::string& source,
                     const ordered_json& context = ordered_json::object()) {
  try {
    render(source, context);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

template <size_t N>
void check_cases(const RenderCase (&cases)[N]) {
  for (const RenderCase& c : cases) {
    SCOPED_TRACE(c.source);
    EXPECT_EQ(render(c.source, ordered_json::parse(c.context_json)), c.expected);
  }
}

const RenderCase kWhitespaceCases[] = {
    {"{% if true %}\nyes\n{% endif %}\nafter", R"json({})json", "yes\nafter"},
    {"  {% if true %}x{% endif %}", R"json({})json", "x"},
    {"a  {% if true %}b{% endif %}", R"json({})json", "a  b"},
    {"a\n  {%- if true -%}\n  b\n  {%- endif %}\nc", R"json({})json", "abc"},
    {"{{ 'a' }}\n{{ 'b' }}\n", R"json({})json", "a\nb"},
    {"x {{- ' y ' -}} z", R"json({})json", "x y z"},
    {"a\n{# comment #}\nb", R"json({})json", "a\nb"},
    {"{%+ if true %}x{% endif +%}\ny", R"json({})json", "x\ny"},
    {"{% raw %}{{ x }}{% endraw %}", R"json({})json", "{{ x }}"},
    {"end\n", R"json({})json", "end"},
};

const RenderCase kStatementsCases[] = {
    {"{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}", R"json({})json", "c"},
    {"{% for x in xs %}{{ loop.index }}{{ x }}{{ '|' if not loop.last }}{% endfor %}",
     R"json({"xs": ["a", "b"]})json", "1a|2b"},
    {"{% for x in xs %}{{ loop.revindex }}{{ loop.first }}{{ loop.length }}{% endfor %}",
     R"json({"xs": [1, 2]})json", "2True21False2"},
    {"{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
     R"json({"xs": [1, 2, 3]})json", "-2;1-3;2-;"},
    {"{% for x in [] %}a{% else %}empty{% endfor %}", R"json({})json", "empty"},
    {"{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}",
     R"json({})json", "2/2 4/2 "},
    {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}", R"json({})json",
     "a1b2"},
    {"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% "
     "endif %}{{ i }}{% endfor %}",
     R"json({})json", "02"},
    {"{% for c in 'ab' %}{{ c }}{% endfor %}{% for k in {'x': 1} %}{{ k }}{% endfor %}",
     R"json({})json", "abx"},
    {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", R"json({})json", "1"},
    {"{% set ns = namespace(total=0) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% "
     "endfor %}{{ ns.total }}",
     R"json({})json", "6"},
    {"{% set a, b = 'xy' %}{{ b }}{{ a }}", R"json({})json", "yx"},
    {"{% set captured %}[{{ 1 + 1 }}]{% endset %}{{ captured }}{{ captured | length }}",
     R"json({})json", "[2]3"},
    {"{% set shout | upper %}quiet{% endset %}{{ shout }}", R"json({})json", "QUIET"},
    {"{% macro tag(name, cls='x') %}<{{ name }} class={{ cls }}>{% endmacro %}{{ tag('a') }}{{ "
     "tag('b', cls='y') }}",
     R"json({})json", "<a class=x><b class=y>"},
    {"{% macro outer() %}({{ caller() }}){% endmacro %}{% call outer() %}inside{% endcall %}",
     R"json({})json", "(inside)"},
    {"{% filter upper %}abc{% endfilter %}", R"json({})json", "ABC"},
    {"{% with x = 5 %}{{ x * 2 }}{% endwith %}{{ x is defined }}", R"json({})json", "10False"},
    {"{% generation %}kept{% endgeneration %}", R"json({})json", "kept"},
    {"{% print 'printed' %}", R"json({})json", "printed"},
};

const RenderCase kExpressionsCases[] = {
    {"{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 8 }} {{ 'ab' * 2 }}",
     R"json({})json", "7 3 3.5 2 256 abab"},
    {"{{ 'a' ~ 1 ~ none }} {{ [1] + [2] }} {{ (1, 2) }} {{ {'k': 'v'} }}", R"json({})json",
     "a1None [1, 2] (1, 2) {'k': 'v'}"},
    {"{{ 1 < 2 <= 2 }} {{ 1 == 1.0 }} {{ 'b' > 'a' }} {{ [1, 2] != [1, 2] }}", R"json({})json",
     "True True True False"},
    {"{{ 'el' in 'hello' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}", R"json({})json",
     "True True True"},
    {"{{ 'yes' if 1 else 'no' }}[{{ 'x' if false }}]{{ none or 'd' }}{{ 0 and 1 }}{{ not 0 }}",
     R"json({})json", "yes[]d0True"},
    {"{{ 'abcdef'[1:3] }} {{ 'abc'[::-1] }} {{ [1, 2, 3][-1] }} {{ [1, 2, 3, 4][::2] }} {{ "
     "'héllo'[1] }}",
     R"json({})json", "bc cba 3 [1, 3] é"},
    {"{{ d.a }} {{ d['b'][0] }} {{ d.b.0 }} {{ d.missing }}|{{ d.get('missing', 'g') }}",
     R"json({"d": {"a": 1, "b": [2]}})json", "1 2 2 |g"},
    {"{{ x }}|{{ x is defined }}|{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}",
     R"json({})json", "|False|None|True|1.0|1e+20|0.30000000000000004"},
    {"{{ ['a', \"it's\", 'q\"'] }} {{ {'n': none, 't': true} }}", R"json({})json",
     "['a', \"it's\", 'q\"'] {'n': None, 't': True}"},
};

const RenderCase kStringMethodsCases[] = {
    {"{{ '  a  '.strip() }}|{{ 'xax'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a\\n\\n'.rstrip('\\n') "
     "}}",
     R"json({})json", "a|a|a|a"},
    {"{{ 'a,b'.split(',') }} {{ ' a  b '.split() }} {{ 'a-b-c'.split('-', 1) }} {{ "
     "'a-b-c'.rsplit('-', 1) }}",
     R"json({})json", "['a', 'b'] ['a', 'b'] ['a', 'b-c'] ['a-b', 'c']"},
    {"{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'aXa'.replace('a', 'b') }}",
     R"json({})json", "True True bXb"},
    {"{{ 'Ab'.upper() }} {{ 'Ab'.lower() }} {{ 'ab cd'.title() }} {{ 'abc'.find('c') }} {{ "
     "'abc'.find('z') }}",
     R"json({})json", "AB ab Ab Cd 2 -1"},
    {"{{ '{}-{}'.format(1, 'x') }} {{ '|'.join(['a', 'b']) }} {{ 'a1'.isalnum() }} {{ "
     "'abca'.count('a') }}",
     R"json({})json", "1-x a|b True 2"},
};

const RenderCase kFiltersCases[] = {
    {"{{ [1, 2, 3] | length }} {{ 'héllo' | count }} {{ {'a': 1} | length }}", R"json({})json",
     "3 5 1"},
    {"{{ '  x  ' | trim }}|{{ '--x--' | trim('-') }}|{{ 'aB' | upper }}{{ 'aB' | lower }}|{{ "
     "'ab-cd ef' | title }}|{{ 'aBC' | capitalize }}",
     R"json({})json", "x|x|ABab|Ab-Cd Ef|Abc"},
    {"{{ 'a.b.c' | replace('.', '/') }} {{ [1, 2] | join(', ') }} {{ [{'n': 'a'}, {'n': 'b'}] | "
     "join(attribute='n') }}",
     R"json({})json", "a/b/c 1, 2 ab"},
    {"{{ [4, 5] | first }}{{ [4, 5] | last }}{{ 'ab' | list }}{{ x | default('dflt') }}{{ '' | "
     "d('empty', true) }}",
     R"json({})json", "45['a', 'b']dfltempty"},
    {"{{ {'b': 'é', 'a': [1.5, none, true]} | tojson }}", R"json({})json",
     "{\"b\": \"é\", \"a\": [1.5, null, true]}"},
    {"{{ {'a': [1, {}]} | tojson(indent=2) }}", R"json({})json",
     "{\n  \"a\": [\n    1,\n    {}\n  ]\n}"},
    {"{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}{{ 'é' | tojson(ensure_ascii=true) }}",
     R"json({})json", "{\"a\": 2, \"b\": 1}\"\\u00e9\""},
    {"{{ 42 | string ~ '!' }} {{ '12' | int + 1 }} {{ 'x' | int(5) }} {{ '1.5' | float }} {{ -2 | "
     "abs }}",
     R"json({})json", "42! 13 5 1.5 2"},
    {"{{ 2.5 | round }} {{ 2.675 | round(2) }} {{ 1.1 | round(0, 'ceil') }} {{ 1.9 | round(0, "
     "'floor') }} {{ 3 | round }}",
     R"json({})json", "2.0 2.67 2.0 1.0 3"},
    {"{{ {'a': 1} | items | list }} {{ {'b': 2, 'a': 1} | dictsort }} {{ [3, 1, 2] | sort }} {{ "
     "['b', 'A'] | sort(case_sensitive=true) }}",
     R"json({})json", "[('a', 1)] [('a', 1), ('b', 2)] [1, 2, 3] ['A', 'b']"},
    {"{{ us | selectattr('on') | map(attribute='n') | list }} {{ us | rejectattr('on') | "
     "map(attribute='n') | list }}",
     R"json({"us": [{"n": "a", "on": true}, {"n": "b", "on": false}]})json", "['a'] ['b']"},
    {"{{ [1, 2, 3] | select('odd') | list }} {{ [1, 2, 3] | reject('odd') | list }} {{ ['a'] | "
     "map('upper') | list }}",
     R"json({})json", "[1, 3] [2] ['A']"},
    {"{{ [1, 1, 'A', 'a'] | unique | list }} {{ [1, 2] | reverse | list }} {{ 'ab' | reverse }}",
     R"json({})json", "[1, 'A'] [2, 1] ba"},
    {"{{ '<&>\"\\'' | escape }} {{ '<b>' | safe }} {{ 'a b  c' | wordcount }}", R"json({})json",
     "&lt;&amp;&gt;&#34;&#39; <b> 3"},
    {"{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, first=true) }}|{{ 'a\\n\\nb' | "
     "indent(1, blank=true) }}",
     R"json({})json", "a\n  b\n\n  c|  a\n  b|a\n \n b"},
    {"{{ [1, 2, 3] | batch(2) | list }} {{ [1, 2, 3] | sum }} {{ [2, 3, 1] | max }} {{ [2, 3, 1] | "
     "min }}",
     R"json({})json", "[[1, 2], [3]] 6 3 1"},
};

const RenderCase kTestsCases[] = {
    {"{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 1 is none }}", R"json({})json",
     "FalseTrueTrueFalse"},
    {"{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean "
     "}}{{ true is number }}",
     R"json({})json", "TrueTrueTrueTrueTrueTrue"},
    {"{{ {} is mapping }}{{ [] is mapping }}{{ [] is iterable }}{{ 1 is iterable }}{{ 'a' is "
     "sequence }}",
     R"json({})json", "TrueFalseTrueFalseTrue"},
    {"{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}", R"json({})json",
     "TrueFalseTrueFalse"},
    {"{{ 1 is equalto 1 }}{{ 1 is eq 2 }}{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 2 "
     "is gt 1 }}{{ 2 is in [2] }}",
     R"json({})json", "TrueFalseTrueFalseTrueTrueTrue"},
    {"{{ 'a' is not none }}{{ x is not defined }}{{ 'abc' is lower }}{{ 'ABC' is upper }}",
     R"json({})json", "TrueTrueTrueTrue"},
};
TEST(TemplateWhitespace, MatchesJinja2) {
  check_cases(kWhitespaceCases);
}
TEST(TemplateStatements, MatchesJinja2) {
  check_cases(kStatementsCases);
}
TEST(TemplateExpressions, MatchesJinja2) {
  check_cases(kExpressionsCases);
}
TEST(TemplateStringMethods, MatchesJinja2) {
  check_cases(kStringMethodsCases);
}
TEST(TemplateFilters, MatchesJinja2) {
  check_cases(kFiltersCases);
}
TEST(TemplateTests, MatchesJinja2) {
  check_cases(kTestsCases);
}

TEST(TemplateErrors, SyntaxErrorNamesOriginAndLine) {
  try {
    ChatTemplate("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}", "my_model/tokenizer_config.json");
    FAIL() << "expected a syntax error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "my_model/tokenizer_config.json:3: unexpected end of print statement");
  }
}

TEST(TemplateErrors, UnclosedBlockAndUnknownTag) {
  EXPECT_EQ(error_of("{% for x in y %}\nbody\n"),
            "t.jinja:2: Unexpected end of template. Jinja was looking for the following tags: "
            "'endfor' or 'else'.");
  EXPECT_EQ(error_of("a\n\n{% frobnicate %}"), "t.jinja:3: Encountered unknown tag 'frobnicate'.");
  EXPECT_EQ(error_of("{% include 'other.jinja' %}"),
            "t.jinja:1: the 'include' statement is not supported in chat templates");
  EXPECT_EQ(error_of("{% for x in y recursive %}{% endfor %}"),
            "t.jinja:1: recursive for loops are not supported");
  EXPECT_EQ(error_of("{{ 'unterminated }}"), "t.jinja:1: unexpected end of string literal");
  EXPECT_EQ(error_of("{{ (1, 2 }}"), "t.jinja:1: unexpected '}', expected ')'");
  EXPECT_EQ(error_of("{% break %}"), "t.jinja:1: 'break' outside of a for loop");
  EXPECT_EQ(error_of("{% macro m(a=1, b) %}{% endmacro %}"),
            "t.jinja:1: non-default argument follows default argument");
}

TEST(TemplateErrors, UnknownFilterOrTestAtParseTimeOutsideConditionals) {
  // jinja2 rejects these when compiling the template...
  EXPECT_THROW(ChatTemplate("\n{{ x | shout }}", "t"), Error);
  EXPECT_EQ(error_of("a\n{{ x | shout }}"), "t.jinja:2: No filter named 'shout'.");
  EXPECT_EQ(error_of("{{ x is loud }}"), "t.jinja:1: No test named 'loud'.");
  // ...but inside an if (or a conditional expression) only when the branch runs.
  EXPECT_EQ(render("{% if false %}{{ x | shout }}{% endif %}ok"), "ok");
  EXPECT_EQ(error_of("{% if true %}\n{{ x | shout }}{% endif %}"),
            "t.jinja:2: No filter named 'shout'.");
}

TEST(TemplateErrors, RaiseExceptionCarriesTheTemplateMessage) {
  std::string source =
      "{% for m in messages %}\n"
      "{% if m.role == 'system' %}\n"
      "{{ raise_exception('System role not supported') }}\n"
      "{% endif %}\n"
      "{% endfor %}";
  ChatTemplate tmpl(source, "gemma.jinja");
  ordered_json messages = ordered_json::parse(R"([{"role": "system", "content": "x"}])");
  try {
    tmpl.render(messages, false, ordered_json::object());
    FAIL() << "expected raise_exception to throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "gemma.jinja:3: System role not supported");
  }
  EXPECT_EQ(
      tmpl.render(ordered_json::parse(R"([{"role": "user"}])"), false, ordered_json::object()), "");
}

TEST(TemplateErrors, RuntimeErrorsMatchJinja2Semantics) {
  // Undefined prints empty, but attribute access on it fails like jinja2's Undefined.
  EXPECT_EQ(render("[{{ missing }}]"), "[]");
  EXPECT_EQ(error_of("ok\n{{ missing.attr }}"), "t.jinja:2: 'missing' is undefined");
  EXPECT_EQ(error_of("{{ d.a.b }}", {{"d", ordered_json::object()}}),
            "t.jinja:1: 'dict object' has no attribute 'a'");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"), "t.jinja:1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{{ none + 1 }}"),
            "t.jinja:1: unsupported operand type(s) for +: 'NoneType' and 'int'");
  EXPECT_EQ(error_of("{{ 1 / 0 }}"), "t.jinja:1: division by zero");
  EXPECT_EQ(error_of("{{ [1].append(2) }}"),
            "t.jinja:1: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(error_of("{{ range(100001) | length }}"),
            "t.jinja:1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_EQ(error_of("{{ x | tojson }}"),
            "t.jinja:1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(error_of("{{ 9223372036854775807 + 1 }}"),
            "t.jinja:1: integer overflow: Pagoda's templates use 64-bit integers");
}

TEST(TemplateErrors, GeneratorsBehaveLikePythons) {
  // map/select return generators in jinja2: no len(), not JSON serializable, and their printed
  // form holds a memory address, so Pagoda refuses to print them rather than differ.
  EXPECT_EQ(render("{{ [1, 2] | map('string') | list }}"), "['1', '2']");
  EXPECT_EQ(error_of("{{ [1] | select | length }}"),
            "t.jinja:1: object of type 'generator' has no len()");
  EXPECT_EQ(error_of("{{ ['a'] | map('upper') | tojson }}"),
            "t.jinja:1: Object of type generator is not JSON serializable");
  EXPECT_EQ(error_of("{{ [1] | map('string') }}"),
            "t.jinja:1: printing a generator object is not supported (convert it with |list)");
  EXPECT_EQ(render("{{ {'a': 1}.items() }} {{ range(2) }}"), "dict_items([('a', 1)]) range(0, 2)");
}

TEST(TemplateErrors, HostileInputIsAnErrorNotACrash) {
  EXPECT_EQ(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
            "t.jinja:1: template nesting too deep");
  std::string long_sum = "{{ 1";
  for (int i = 0; i < 5000; ++i) long_sum += " + 1";
  EXPECT_EQ(error_of(long_sum + " }}"), "t.jinja:1: template nesting too deep");
  std::string nested_ifs;
  for (int i = 0; i < 2000; ++i) nested_ifs += "{% if true %}";
  EXPECT_EQ(error_of(nested_ifs), "t.jinja:1: template nesting too deep");
  EXPECT_EQ(error_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"),
            "t.jinja:1: macro 'm': maximum recursion depth exceeded");
  // A long but flat template is fine.
  std::string many_outputs;
  for (int i = 0; i < 5000; ++i) many_outputs += "{{ 'x' }}";
  EXPECT_EQ(render(many_outputs).size(), 5000u);
}

TEST(TemplateErrors, MutatedTemplatesFailCleanly) {
  // Deterministic byte-level mutations of a template that uses most constructs: each must render
  // or throw pagoda::Error, never crash (this runs under ASan+UBSan too).
  const std::string base =
      "{%- set ns = namespace(n=0, s='') -%}\n"
      "{% macro m(x, y='d') %}[{{ x ~ y }}]{% endmacro %}\n"
      "{% for msg in messages if msg.role != 'x' %}{% set ns.n = ns.n + loop.index %}\n"
      "  {{- m(msg.content | trim | upper, y=msg.role[:2]) -}}\n"
      "  {%- if msg.tool_calls is defined %}{{ msg.tool_calls | tojson(indent=2) }}{% endif %}\n"
      "{% else %}none{% endfor %}{{ ns.n }}{{ {'k': [1, 2.5, none]} | dictsort }}"
      "{{ 'a,b'.split(',')[-1] if true else 'q' }}{# c #}{% raw %}{{ r }}{% endraw %}";
  ordered_json messages = ordered_json::parse(
      R"([{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo",
          "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}])");
  uint32_t state = 12345;
  auto next = [&state]() {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  const std::string alphabet = "{}%#-+()[]'\".|~,:=*/ \nabcxyz019_";
  int num_rendered = 0, num_errors = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string source = base;
    int num_edits = 1 + static_cast<int>(next() % 3);
    for (int k = 0; k < num_edits; ++k) {
      size_t pos = next() % source.size();
      switch (next() % 3) {
        case 0:
          source.erase(pos, 1 + next() % 4);
          break;
        case 1:
          source.insert(pos, 1, alphabet[next() % alphabet.size()]);
          break;
        default:
          source[pos] = alphabet[next() % alphabet.size()];
      }
    }
    try {
      ChatTemplate(source, "fuzz").render(messages, true, ordered_json::object());
      ++num_rendered;
    } catch (const Error&) {
      ++num_errors;
    }
  }
  EXPECT_EQ(num_rendered + num_errors, 1500);
  EXPECT_GT(num_errors, 0);
  EXPECT_GT(num_rendered, 0);
}

TEST(ChatTemplateApi, PassesMessagesFlagsAndExtraContext) {
  std::string source =
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}"
      "{% if enable_thinking is defined and not enable_thinking %}<nothink>{% endif %}"
      "[{{ tools }}][{{ documents }}]";
  ChatTemplate tmpl(source, "t.jinja");
  nlohmann::json messages = nlohmann::json::parse(
      R"([{"role": "system", "content": "S"}, {"role": "user", "content": "你好"}])");
  nlohmann::json context = {{"bos_token", "<s>"}, {"enable_thinking", false}};
  EXPECT_EQ(tmpl.render(messages, true, context),
            "<s><system>S<user>你好<assistant><nothink>[None][None]");
  EXPECT_EQ(tmpl.render(messages, false, nlohmann::json::object()),
            "<system>S<user>你好[None][None]");
  context["tools"] = nlohmann::json::array({"t"});
  EXPECT_EQ(tmpl.render(nlohmann::json::array(), false, context), "<s><nothink>[['t']][None]");
}

TEST(ChatTemplateApi, OrderedJsonKeepsClientKeyOrder) {
  ChatTemplate tmpl("{{ tools[0] | tojson }}", "t.jinja");
  std::string tool = R"({"type": "function", "function": {"name": "f", "description": "d"}})";
  ordered_json ordered = {{"tools", ordered_json::array({ordered_json::parse(tool)})}};
  EXPECT_EQ(tmpl.render(ordered_json::array(), false, ordered), tool);
  // nlohmann::json sorts keys, so the same schema prints alphabetically.
  nlohmann::json sorted = {{"tools", nlohmann::json::array({nlohmann::json::parse(tool)})}};
  EXPECT_EQ(tmpl.render(nlohmann::json::array(), false, sorted),
            R"({"function": {"description": "d", "name": "f"}, "type": "function"})");
}

TEST(ChatTemplateApi, RejectsReservedContextKeys) {
  ChatTemplate tmpl("x", "t.jinja");
  EXPECT_THROW(tmpl.render(nlohmann::json::array(), false, {{"messages", 1}}), Error);
  EXPECT_THROW(tmpl.render(nlohmann::json::array(), false, nlohmann::json::array()), Error);
}

TEST(ChatTemplateApi, FromTokenizerConfig) {
  ordered_json config = ordered_json::parse(R"({
    "bos_token": {"__type": "AddedToken", "content": "<|begin|>"},
    "eos_token": "<|end|>",
    "pad_token": null,
    "chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"
  })");
  ChatTemplate tmpl = ChatTemplate::from_tokenizer_config(config, "cfg.json");
  ordered_json tokens = special_tokens_context(config);
  EXPECT_EQ(tokens.dump(), R"({"bos_token":"<|begin|>","eos_token":"<|end|>"})");
  EXPECT_EQ(
      tmpl.render(ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), false, tokens),
      "<|begin|>hi<|end|>");

  ordered_json named = ordered_json::parse(R"({"chat_template": [
      {"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(named, "c")
                .render(ordered_json::array(), false, ordered_json::object()),
            "D");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(named, "c", "tool_use")
                .render(ordered_json::array(), false, ordered_json::object()),
            "T");
  try {
    ChatTemplate::from_tokenizer_config(ordered_json::object(), "model/tokenizer_config.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "model/tokenizer_config.json: no 'chat_template' key");
  }
}

TEST(ChatTemplateApi, TemplateIsReusableAndConst) {
  const ChatTemplate tmpl(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ "
      "ns.n }}",
      "t.jinja");
  ordered_json two = ordered_json::parse(R"([{"role": "user"}, {"role": "user"}])");
  EXPECT_EQ(tmpl.render(two, false, ordered_json::object()), "2");
  EXPECT_EQ(tmpl.render(two, false, ordered_json::object()), "2");
}

}  // namespace
}  // namespace pagoda
