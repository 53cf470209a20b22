// text::ChatTemplate against jinja2: every case of tests/text/chat_templates/golden.json (real
// chat templates over a set of conversations, and small templates for each feature of the
// language) renders byte-identically or fails with jinja2's message; then the errors that name
// the origin, line and column, and the refusals that name what is not supported.
// Regenerate the golden file with tests/text/make_chat_template_golden.py.
#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bigbatch/core/check.h"
#include "bigbatch/text/chat_template.h"

namespace {

using bigbatch::InputError;
using bigbatch::text::ChatTemplate;

const std::string kTemplates = std::string(BIGBATCH_TEST_DATA_DIR) + "/text/chat_templates";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g =
      nlohmann::ordered_json::parse(read_file(kTemplates + "/golden.json"));
  return g;
}

/// The message of the InputError that `f` throws, or "" if it throws none.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string& source) {
  return error_of([&] { ChatTemplate t(source); });
}

std::string render_error(const std::string& source, const nlohmann::json& variables = {}) {
  return error_of([&] {
    ChatTemplate(source).render(variables.is_null() ? nlohmann::json::object() : variables);
  });
}

/// Checks one golden case: the output, or an InputError carrying jinja2's message (or the
/// case's "match" where this interpreter words it differently).
void check_case(const ChatTemplate& t, const nlohmann::ordered_json& c) {
  SCOPED_TRACE(c.at("name").get<std::string>());
  const nlohmann::ordered_json& variables = c.at("variables");
  if (c.contains("output")) {
    std::string got;
    try {
      got = t.render(variables);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
      return;
    }
    EXPECT_EQ(got, c.at("output").get<std::string>());
    // Variables whose keys are all in sorted order render the same from an nlohmann::json.
    const nlohmann::json sorted = nlohmann::json::parse(variables.dump());
    if (sorted.dump() == variables.dump()) {
      EXPECT_EQ(t.render(sorted), got);
    }
    return;
  }
  const nlohmann::ordered_json& error = c.at("error");
  const std::string expected = error.contains("match") ? error.at("match").get<std::string>()
                                                       : error.at("message").get<std::string>();
  const std::string got = error_of([&] { t.render(variables); });
  ASSERT_FALSE(got.empty()) << "rendered without the error " << error.dump();
  EXPECT_NE(got.find(expected), std::string::npos) << got << "\nexpected: " << expected;
  EXPECT_NE(got.find(t.origin() + ", line "), std::string::npos) << got;
}

TEST(ChatTemplateGolden, RealTemplatesRenderAsJinja2) {
  std::map<std::string, ChatTemplate> templates;
  std::size_t cases = 0;
  for (const auto& c : golden().at("real_templates")) {
    const std::string file = c.at("template_file").get<std::string>();
    auto it = templates.find(file);
    if (it == templates.end())
      it = templates.emplace(file, ChatTemplate(read_file(kTemplates + "/" + file), file)).first;
    check_case(it->second, c);
    ++cases;
  }
  EXPECT_EQ(templates.size(), 15u);
  EXPECT_GE(cases, 100u);
}

TEST(ChatTemplateGolden, FeaturesRenderAsJinja2) {
  std::size_t cases = 0;
  for (const auto& c : golden().at("features")) {
    std::string name = c.at("name").get<std::string>();
    std::unique_ptr<ChatTemplate> t;
    try {
      t = std::make_unique<ChatTemplate>(c.at("template").get<std::string>(), name);
    } catch (const InputError& e) {
      ADD_FAILURE() << name << ": does not parse: " << e.what();
      continue;
    }
    check_case(*t, c);
    ++cases;
  }
  EXPECT_GE(cases, 120u);
}

TEST(ChatTemplate, SyntaxErrorsNameOriginLineColumnAndExpectation) {
  EXPECT_EQ(
      error_of([] { ChatTemplate("a\n{% if x %}\nb", "DIR/tokenizer_config.json chat_template"); }),
      "DIR/tokenizer_config.json chat_template, line 3, column 2: syntax error: unexpected "
      "end of template. Jinja was looking for the following tags: 'elif' or 'else' or "
      "'endif'. The innermost block that needs to be closed is 'if'.");
  EXPECT_EQ(parse_error("x\n  {{ 1 + }}"),
            "chat template, line 2, column 10: syntax error: unexpected 'end of print statement'");
  EXPECT_EQ(parse_error("{% for x in xs %}{% endif %}"),
            "chat template, line 1, column 21: syntax error: Encountered unknown tag 'endif'. "
            "Jinja was looking for the following tags: 'endfor' or 'else'. The innermost block "
            "that needs to be closed is 'for'.");
  EXPECT_EQ(parse_error("{{ x y }}"),
            "chat template, line 1, column 6: syntax error: expected token 'end of print "
            "statement', got 'y'");
  EXPECT_EQ(parse_error("{% set = 1 %}"),
            "chat template, line 1, column 8: syntax error: can't assign to '='");
  EXPECT_EQ(parse_error("{{ (1, 2] }}"),
            "chat template, line 1, column 9: syntax error: unexpected ']', expected ')'");
  EXPECT_EQ(parse_error("{{ 'open }}"),
            "chat template, line 1, column 4: syntax error: unexpected char \"'\"");
  EXPECT_EQ(parse_error("ab {# never closed"),
            "chat template, line 1, column 4: syntax error: Missing end of comment tag");
  EXPECT_EQ(parse_error("{% break %}"),
            "chat template, line 1, column 4: syntax error: 'break' outside of a loop");
  EXPECT_EQ(parse_error("{{ x | nope }}"),
            "chat template, line 1, column 8: syntax error: No filter named 'nope'.");
  EXPECT_EQ(parse_error("{{ x is nope }}"),
            "chat template, line 1, column 9: syntax error: No test named 'nope'.");
  EXPECT_EQ(parse_error("{% do x %}"),
            "chat template, line 1, column 4: syntax error: Encountered unknown tag 'do'.");
  EXPECT_EQ(parse_error("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"),
            "chat template, line 1, column 204: syntax error: the template nests deeper than 200 "
            "levels");
  EXPECT_EQ(parse_error("é\n  é {{ '\\xZZ' }}"),
            "chat template, line 2, column 9: syntax error: truncated \\xXX escape");
}

TEST(ChatTemplate, UnsupportedConstructsAreNamed) {
  EXPECT_EQ(parse_error("{% extends 'base.html' %}"),
            "chat template, line 1, column 4: the 'extends' tag is not supported (templates are "
            "rendered alone, without a loader)");
  for (const char* tag : {"include", "import", "from", "block", "call", "autoescape"}) {
    const std::string e = parse_error(std::string("{% ") + tag + " x %}");
    EXPECT_NE(e.find(std::string("the '") + tag + "' tag is not supported"), std::string::npos)
        << e;
  }
  EXPECT_EQ(parse_error("{% for x in xs recursive %}{% endfor %}"),
            "chat template, line 1, column 16: recursive for loops are not supported");
  EXPECT_EQ(parse_error("{{ s | wordwrap }}"),
            "chat template, line 1, column 8: the 'wordwrap' filter is not supported");
  for (const char* filter : {"format", "groupby", "random", "striptags", "urlize", "xmlattr"}) {
    const std::string e = parse_error(std::string("{{ x | ") + filter + " }}");
    EXPECT_NE(e.find(std::string("the '") + filter + "' filter is not supported"),
              std::string::npos)
        << e;
  }
  EXPECT_EQ(parse_error("{{ x is escaped }}"),
            "chat template, line 1, column 9: the 'escaped' test is not supported");
  EXPECT_EQ(parse_error("{{ f(*args) }}"),
            "chat template, line 1, column 6: *args and **kwargs in calls are not supported");
  EXPECT_EQ(parse_error("{{ 99999999999999999999 }}"),
            "chat template, line 1, column 4: integer literal 99999999999999999999 is beyond 64 "
            "bits");
  EXPECT_EQ(render_error("{{ '%s' % 1 }}"),
            "chat template, line 1, column 9: printf-style formatting ('%' on a string) is not "
            "supported");
  EXPECT_EQ(render_error("{{ 'x'.format(1) }}"),
            "chat template, line 1, column 4: str.format() is not supported");
  EXPECT_EQ(render_error("{{ joiner() }}"),
            "chat template, line 1, column 4: the 'joiner' global is not supported");
  EXPECT_EQ(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            "chat template, line 1, column 20: OverflowError: maximum recursion depth exceeded "
            "in macro 'f'");
  std::string nested;
  for (int i = 0; i < 250; ++i)
    nested += "{% if true %}";
  EXPECT_NE(parse_error(nested).find("the template nests deeper than 200 levels"),
            std::string::npos);
  EXPECT_EQ(render_error("{{ 2 ** 64 }}"),
            "chat template, line 1, column 6: integers beyond 64 bits are not supported");
}

TEST(ChatTemplate, RenderErrorsNameTheLine) {
  const std::string source =
      "{% for m in messages %}\n"
      "{% if m.role == 'system' %}\n"
      "  {{ raise_exception('No system messages, got: ' ~ m.content) }}\n"
      "{% endif %}\n"
      "{% endfor %}";
  const nlohmann::json messages = {{"messages", {{{"role", "system"}, {"content", "be nice"}}}}};
  EXPECT_EQ(error_of([&] { ChatTemplate(source, "T").render(messages); }),
            "T, line 3, column 6: raise_exception: No system messages, got: be nice");
  EXPECT_EQ(render_error("a\nb {{ x.y }}"),
            "chat template, line 2, column 6: UndefinedError: 'x' is undefined");
  EXPECT_EQ(render_error("{{ [1].append(2) }}"),
            "chat template, line 1, column 4: SecurityError: access to attribute 'append' of "
            "'list' object is unsafe.");
  EXPECT_EQ(render_error("{{ 1 + 'a' }}"),
            "chat template, line 1, column 6: TypeError: unsupported operand type(s) for +: 'int' "
            "and 'str'");
}

TEST(ChatTemplate, RefusesBadInput) {
  EXPECT_EQ(error_of([] { ChatTemplate("{{ x }}").render(nlohmann::json::array()); }),
            "chat template: the variables to render with must be a JSON object, not array");
  EXPECT_EQ(parse_error("\xff"), "chat template: the template is not valid UTF-8");
  EXPECT_EQ(error_of([] {
              ChatTemplate("{{ x }}").render(nlohmann::json{{"x", 18446744073709551615ull}});
            }),
            "chat template: ValueError: integer 18446744073709551615 is beyond 64 bits");
}

TEST(ChatTemplate, StrftimeNowIsTheLocalDate) {
  // Llama 3.2's template dates its system message with strftime_now("%d %b %Y").
  const ChatTemplate t(read_file(kTemplates + "/llama3.2.jinja"), "llama3.2");
  auto today = [] {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[32];
    std::strftime(buf, sizeof buf, "%d %b %Y", &local);
    return std::string(buf);
  };
  const std::string before = today();
  const std::string out = t.render(nlohmann::json{
      {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"bos_token", "<|begin_of_text|>"}});
  const std::string after = today();
  EXPECT_TRUE(out.find("Today Date: " + before + "\n") != std::string::npos ||
              out.find("Today Date: " + after + "\n") != std::string::npos)
      << out;
  EXPECT_EQ(ChatTemplate("{{ strftime_now('%Y') | length }}").render(nlohmann::json::object()),
            "4");
}

TEST(ChatTemplate, MovesAndRendersRepeatedly) {
  ChatTemplate a("{{ x }}{% set x = 2 %}{{ x }}", "a");
  ChatTemplate b = std::move(a);
  EXPECT_EQ(b.render(nlohmann::json{{"x", 1}}), "12");
  EXPECT_EQ(b.render(nlohmann::json{{"x", "y"}}), "y2");  // no state survives a rendering
  ChatTemplate c("c");
  c = std::move(b);
  EXPECT_EQ(c.origin(), "a");
  EXPECT_EQ(c.render(nlohmann::json{{"x", 3}}), "32");
}

/// The time to parse Llama 3.1's template and to render a typical conversation (system + 6
/// turns) with it, printed for docs/TOKENIZERS.md; the bound only catches a pathological
/// slowdown.
TEST(ChatTemplateSpeed, RendersAConversationInMicroseconds) {
  using Clock = std::chrono::steady_clock;
  const std::string source = read_file(kTemplates + "/llama3.1.jinja");
  const int parses = 200;
  const auto parse_start = Clock::now();
  for (int i = 0; i < parses; ++i)
    ChatTemplate parsed(source, "llama3.1");
  const double parse_us =
      std::chrono::duration<double, std::micro>(Clock::now() - parse_start).count() / parses;
  const ChatTemplate t(source, "llama3.1");
  nlohmann::json messages = nlohmann::json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  for (int i = 0; i < 3; ++i) {
    messages.push_back(
        {{"role", "user"}, {"content", "What is the capital of France? " + std::to_string(i)}});
    messages.push_back(
        {{"role", "assistant"},
         {"content", "The capital of France is Paris, a city of about two million people."}});
  }
  const nlohmann::json variables = {{"messages", messages},
                                    {"bos_token", "<|begin_of_text|>"},
                                    {"add_generation_prompt", true},
                                    {"tools", nullptr}};
  std::string out;
  const int renders = 2000;
  const auto start = Clock::now();
  for (int i = 0; i < renders; ++i)
    out = t.render(variables);
  const double us =
      std::chrono::duration<double, std::micro>(Clock::now() - start).count() / renders;
  std::cout << "Llama 3.1 chat template: parsed in " << parse_us << " us; 7 messages ("
            << out.size() << " bytes) rendered in " << us << " us\n";
  EXPECT_LT(us, 1000.0);
}

}  // namespace
