// The Jinja subset (src/moe/jinja/template.h): each language feature against a
// hand-computed string (what Python's jinja2 with trim_blocks/lstrip_blocks renders),
// and each error path: load-time rejection of what the subset lacks, runtime errors.
#include "moe/jinja/template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace moe::jinja {
namespace {

using nlohmann::json;

std::string render(const std::string& text, const json& context = json::object(), RenderOptions options = {}) {
  auto t = Template::parse(text);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return "<parse error>";
  auto out = t.value().render(context, options);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? out.value() : "<render error: " + out.status().message() + ">";
}

std::string parse_error(const std::string& text) {
  auto t = Template::parse(text);
  EXPECT_FALSE(t.ok()) << text;
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  return t.status().message();
}

std::string render_error(const std::string& text, const json& context = json::object(), RenderOptions options = {}) {
  auto t = Template::parse(text);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return "";
  auto out = t.value().render(context, options);
  EXPECT_FALSE(out.ok()) << text << " rendered " << out.value();
  if (out.ok()) return "";
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  return out.status().message();
}

TEST(Jinja, TextExpressionsAndLiterals) {
  EXPECT_EQ(render("plain text"), "plain text");
  EXPECT_EQ(render("{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 2.5 }}{{ true }}{{ none }}{{ [1, 'x'] }}{{ {'k': 'v'} }}"),
            "ab12.5TrueNone[1, 'x']{'k': 'v'}");
  EXPECT_EQ(render("{{ 'esc\\n\\t\\'q\\'' }}"), "esc\n\t'q'");
  EXPECT_EQ(render("{{ x }}|{{ y.z is defined }}", {{"x", "X"}, {"y", json::object()}}), "X|False");
  EXPECT_EQ(render("[{{ missing }}]"), "[]");  // undefined prints nothing
  EXPECT_EQ(render("{{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 * 2 }}"), "2.0 3 -4 2 1024 3.0");
  EXPECT_EQ(render("{{ 'ab' ~ 1 ~ none }} {{ 'ab' + 'cd' }} {{ [1] + [2] }} {{ 'ab' * 2 }}"), "ab1None abcd [1, 2] abab");
}

TEST(Jinja, WhitespaceControlTrimAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before it.
  EXPECT_EQ(render("{% if true %}\n    yes\n    {% endif %}\nend"), "    yes\nend");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("x\n  {%- if true -%}\n  y  \n{%- endif %}"), "xy");
  EXPECT_EQ(render("a {# a comment #}b\n  {# own line #}\nc"), "a b\nc");
  EXPECT_EQ(render("{{ 1 }}\n{{ 2 }}\n"), "1\n2");  // an expression keeps its newline; the last one is dropped
  EXPECT_EQ(render("  {{ 'kept indent' }}"), "  kept indent");
  EXPECT_EQ(render("{% if true +%}\nnewline kept{% endif %}"), "\nnewline kept");
}

TEST(Jinja, IfElifElse) {
  const std::string t = "{% if n > 2 %}big{% elif n == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(render(t, {{"n", 3}}), "big");
  EXPECT_EQ(render(t, {{"n", 2}}), "two");
  EXPECT_EQ(render(t, {{"n", 1}}), "small");
  EXPECT_EQ(render("{{ 'y' if a and not b else 'n' }}{{ a or 'z' }}{{ b and 'w' }}", {{"a", "A"}, {"b", ""}}), "yA");
}

TEST(Jinja, ForLoopsAndLoopVariables) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.length }}"
                   "{{ 'F' if loop.first }}{{ 'L' if loop.last }}{{ x }};{% endfor %}",
                   {{"xs", {"a", "b"}}}),
            "1022Fa;2112Lb;");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}",
                   {{"d", {{"b", 1}, {"a", 2}}}}),
            "a=2,b=1,|ab");  // nlohmann orders object keys
  EXPECT_EQ(render("{% for x in range(10) if x % 3 == 0 %}{{ x }}/{{ loop.length }} {% endfor %}"), "0/4 3/4 6/4 9/4 ");
  EXPECT_EQ(render("{% for x in range(6) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "023");
  EXPECT_EQ(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
  EXPECT_EQ(render("{% for x in [1,2] %}{{ loop.previtem is defined }}{{ loop.nextitem }}{% endfor %}"), "False2True");
}

TEST(Jinja, SetNamespaceAndScoping) {
  EXPECT_EQ(render("{% set x = 1 %}{% set a, b = [2, 3] %}{{ x + a + b }}"), "6");
  // A set inside a loop does not leak out; a namespace attribute does.
  EXPECT_EQ(render("{% set x = 0 %}{% set ns = namespace(n=0) %}{% for i in [1,2,3] %}{% set x = i %}"
                   "{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}"),
            "0 6");
  EXPECT_EQ(render("{% set block %}A{{ 1 + 1 }}B{% endset %}[{{ block }}]"), "[A2B]");
  EXPECT_EQ(render("{% set messages = messages[1:] %}{{ messages | length }}", {{"messages", {1, 2, 3}}}), "2");
}

TEST(Jinja, Macros) {
  EXPECT_EQ(render("{% macro tag(name, cls='x') %}<{{ name }} {{ cls }}>{% endmacro %}{{ tag('a') }}{{ tag('b', cls='y') }}"),
            "<a x><b y>");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "321");
}

TEST(Jinja, ComparisonsMembershipAndAccess) {
  EXPECT_EQ(render("{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ 2 >= 3 }}{{ 'b' in 'abc' }}{{ 4 not in [1, 2] }}{{ 'k' in d }}",
                   {{"d", {{"k", 1}}}}),
            "TrueTrueFalseTrueTrueTrue");
  EXPECT_EQ(render("{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[::-1] }}{{ xs[:-1] }}{{ 'hello'[1:3] }}{{ 'abc'[::-1] }}{{ d.k }}{{ d['k'] }}",
                   {{"xs", {1, 2, 3}}, {"d", {{"k", "v"}}}}),
            "13[2, 3][3, 2, 1][1, 2]elcbavv");
  EXPECT_EQ(render("{{ xs[5] is defined }}{{ d.nope is defined }}", {{"xs", {1}}, {"d", json::object()}}), "FalseFalse");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(render("{{ '  a b  ' | trim }}|{{ [1,2,3] | length }}|{{ 'ab' | upper }}{{ 'AB' | lower }}|{{ 'hello world' | capitalize }}|{{ 'hello world' | title }}"),
            "a b|3|ABab|Hello world|Hello World");
  EXPECT_EQ(render("{{ [1, 'a'] | join('-') }}|{{ missing | default('dflt') }}|{{ '' | default('e', true) }}|{{ [3,4] | first }}{{ [3,4] | last }}"),
            "1-a|dflt|e|34");
  EXPECT_EQ(render("{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}|{{ 42 | string }}{{ '7' | int + 1 }}{{ 'x' | int }}{{ '2.5' | float }}|{{ 'aXbX' | replace('X', '-') }}",
                   {{"d", {{"a", 1}}}}),
            "a1|4280" "2.5|a-b-");
  EXPECT_EQ(render("{{ ms | map(attribute='role') | join(',') }}|{{ ms | selectattr('role', 'equalto', 'user') | list | length }}"
                   "|{{ ms | rejectattr('role', 'eq', 'user') | map(attribute='c') | first }}|{{ ['a', 'B'] | map('upper') | list }}",
                   {{"ms", {{{"role", "user"}, {"c", 1}}, {{"role", "bot"}, {"c", 2}}}}}),
            "user,bot|1|2|['A', 'B']");
  EXPECT_EQ(render("{{ [1,2,2,3] | unique | list }}{{ [1,3,2] | sort }}{{ [1,3,2] | sort(reverse=true) }}{{ [1,2] | sum }}{{ [4,1] | min }}{{ [4,1] | max }}"
                   "{{ [0, 1, 2] | select('odd') | list }}{{ [0, 1] | reject | list }}{{ -3 | abs }}{{ 2.567 | round(2) }}"),
            "[1, 2, 3][1, 2, 3][3, 2, 1]314[1][0]32.57");
  EXPECT_EQ(render("{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}"), "a\n  b|  a\n  b");
}

TEST(Jinja, ToJson) {
  const json ctx = {{"v", json::parse(R"({"s": "q\"\\\n é", "n": [1, 2.5, null, true], "e": {}, "l": []})")}};
  EXPECT_EQ(render("{{ v | tojson }}", ctx), R"({"e": {}, "l": [], "n": [1, 2.5, null, true], "s": "q\"\\\n é"})");
  EXPECT_EQ(render("{{ v.n | tojson(indent=2) }}", ctx), "[\n  1,\n  2.5,\n  null,\n  true\n]");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [2]} | tojson }}"), R"({"b": 1, "a": [2]})");  // literal order, no sorting
}

TEST(Jinja, Tests) {
  EXPECT_EQ(render("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}{{ 1.5 is number }}"
                   "{{ d is mapping }}{{ [] is iterable }}{{ 's' is sequence }}{{ true is boolean }}{{ true is true }}"
                   "{{ 0 is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is eq 'a' }}{{ x is not none }}",
                   {{"x", 1}, {"d", json::object()}}),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrue");
}

TEST(Jinja, StringAndDictMethods) {
  EXPECT_EQ(render("{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na'.lstrip('\\n') }}|{{ 'a  '.rstrip() }}|"
                   "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a</think>b'.split('</think>')[-1] }}"),
            "x|a|a|a|['a', 'b', '', 'c']|['a', 'b']|b");
  EXPECT_EQ(render("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'aaa'.replace('a', 'b', 2) }}"
                   "{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'hello wORLD'.title() }}"),
            "TrueTruebbaABabHello World");
  EXPECT_EQ(render("{{ d.get('a') }}{{ d.get('z', 'dz') }}{{ d.get('z') }}{{ d.keys() | list }}{{ d.values() | list }}",
                   {{"d", {{"a", 1}}}}),
            "1dzNone['a'][1]");
}

TEST(Jinja, GlobalFunctions) {
  EXPECT_EQ(render("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}"), "[0, 1, 2][1, 3, 5][3, 2, 1]");
  RenderOptions at;
  at.now_unix = 1764633600;  // 2025-12-02 00:00:00 UTC
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}", json::object(), at), "02 Dec 2025");
  EXPECT_EQ(render("{{ dict(a=1).a }}"), "1");
  EXPECT_EQ(render_error("{{ raise_exception('Custom message: ' ~ n) }}", {{"n", 3}}), "Custom message: 3");
}

TEST(Jinja, LoadRejectsUnsupportedFeaturesNamingTheLine) {
  EXPECT_EQ(parse_error("a\n{% include 'x' %}"), "line 2: unsupported tag 'include'");
  EXPECT_EQ(parse_error("{{ x | wordwrap }}"), "line 1: unsupported filter 'wordwrap'");
  EXPECT_EQ(parse_error("\n\n{% if x is prime %}{% endif %}"), "line 3: unsupported test 'prime'");
  EXPECT_EQ(parse_error("{{ s.format(1) }}"), "line 1: unsupported method 'format()'");
  EXPECT_EQ(parse_error("{{ lipsum(2) }}"), "line 1: unsupported function 'lipsum' (not a built-in or a macro of this template)");
  EXPECT_EQ(parse_error("{% for x in y recursive %}{% endfor %}"), "line 1: unsupported: recursive for loops");
  EXPECT_EQ(parse_error("{{ x"), "line 1: unclosed tag (no \"}}\")");
  EXPECT_EQ(parse_error("{# never closed"), "line 1: unclosed comment (no \"#}\")");
  EXPECT_EQ(parse_error("{% if x %}no end"), "line 1: missing {% endif %} before the end of the template");
  EXPECT_EQ(parse_error("{% endfor %}"), "line 1: unexpected {% endfor %} (no open block it closes)");
  EXPECT_EQ(parse_error("{% break %}"), "line 1: 'break' outside a for loop");
  EXPECT_EQ(parse_error("{{ 'abc }}"), "line 1: unclosed tag (no \"}}\")");
  EXPECT_EQ(parse_error("{{ 1 + }}"), "line 1: expected an expression before the end of the tag");
  EXPECT_EQ(parse_error("{{ a b }}"), "line 1: expected the end of the tag, found 'b'");
  EXPECT_EQ(parse_error("{{ x ; }}"), "line 1: unexpected character ';' in a tag");
  EXPECT_EQ(parse_error("{{ f(a=1, 2) }}"), "line 1: a positional argument after a keyword argument");
}

TEST(Jinja, RuntimeErrorsAreInvalidArgumentWithTheLine) {
  EXPECT_EQ(render_error("\n{{ missing.attr }}"), "line 2: attribute 'attr' of undefined 'missing'");
  EXPECT_EQ(render_error("{{ 'a' + 1 }}"), "line 1: unsupported operand types for +: string and int");
  EXPECT_EQ(render_error("{{ missing + 'a' }}"), "line 1: '+' on undefined 'missing'");
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "line 1: division by zero");
  EXPECT_EQ(render_error("{% set d = {} %}{% set d.x = 1 %}"), "line 1: cannot set attribute 'x' of a dict (only of a namespace())");
  EXPECT_EQ(render_error("{{ [x][0]() }}", {{"x", 1}}), "line 1: cannot call a int");
  EXPECT_EQ(render_error("{{ 1 < 'a' }}"), "line 1: cannot order a int and a string");
  EXPECT_EQ(render_error("{% for a, b in [[1]] %}{% endfor %}"), "line 1: cannot unpack 1 values into 2 names");
  EXPECT_EQ(render_error("{{ missing | tojson }}"), "line 1: tojson: cannot serialise an undefined value ('missing')");
  EXPECT_EQ(render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "line 1: macro 'f' nested deeper than 64");
  RenderOptions small;
  small.max_output_bytes = 100;
  EXPECT_EQ(render_error("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", json::object(), small),
            "line 1: the rendered text is longer than 100 bytes");
  auto t = Template::parse("x");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t.value().render(json::array()).ok());
}

}  // namespace
}  // namespace moe::jinja
