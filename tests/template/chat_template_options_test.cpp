// vLLM's --chat-template VALUE (a file, or the template itself) and
// --chat-template-content-format (string, openai, auto-detected from the template).
#include "template/chat_template_options.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "template/chat_template.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplateArgument, AFileIsReadAndAnythingTemplateLikeIsTheTemplate) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("pagoda_tpl_" + std::to_string(getpid()) + ".jinja");
  std::ofstream(file) << "{{ messages[0]['content'] }}";
  const ChatTemplateText from_file = read_chat_template_argument(file.string());
  EXPECT_EQ(from_file.source, "{{ messages[0]['content'] }}");
  EXPECT_EQ(from_file.origin, file.string());
  std::filesystem::remove(file);

  // Inline, as a shell passes it: the escapes a user types become the characters.
  const ChatTemplateText inline_text =
      read_chat_template_argument(R"({% for m in messages %}{{ m.content }}\n{% endfor %})");
  EXPECT_EQ(inline_text.source, "{% for m in messages %}{{ m.content }}\n{% endfor %}");
  EXPECT_EQ(inline_text.origin, "--chat-template (inline)");
  const ChatTemplate rendered(inline_text.source, inline_text.origin);
  EXPECT_EQ(
      rendered.render(json::parse(R"([{"role": "user", "content": "hi"}])"), false, json::object()),
      "hi\n");
  // No template characters: a path that is not there.
  EXPECT_NE(error_of([] {
              read_chat_template_argument("/no/such/template.jinja");
            }).find("--chat-template /no/such/template.jinja: no such file"),
            std::string::npos);
}

TEST(ContentFormat, AutoIsOpenAiWhenTheTemplateLoopsOverContent) {
  EXPECT_EQ(resolve_content_format("auto", "{{ message['content'] }}"), ContentFormat::kString);
  EXPECT_EQ(resolve_content_format("auto", ""), ContentFormat::kString);
  EXPECT_EQ(resolve_content_format(
                "auto", "{% for m in messages %}{% for part in m['content'] %}{{ part.text }}"),
            ContentFormat::kOpenAi);
  EXPECT_EQ(resolve_content_format("auto", "{%- for c in message.content | selectattr('type') %}"),
            ContentFormat::kOpenAi);
  EXPECT_EQ(resolve_content_format("openai", ""), ContentFormat::kOpenAi);
  EXPECT_EQ(resolve_content_format("string", "{% for p in m['content'] %}"),
            ContentFormat::kString);
  EXPECT_NE(error_of([] { resolve_content_format("list", ""); }).find("auto, string or openai"),
            std::string::npos);
}

TEST(ContentFormat, StringJoinsPartsAndOpenAiWrapsStrings) {
  const json messages = json::parse(R"([
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": null}])");
  const json as_string = format_message_contents(messages, ContentFormat::kString);
  EXPECT_EQ(as_string[0]["content"], "be brief");
  EXPECT_EQ(as_string[1]["content"], "a\nb");
  EXPECT_TRUE(as_string[2]["content"].is_null());
  const json as_openai = format_message_contents(messages, ContentFormat::kOpenAi);
  EXPECT_EQ(as_openai[0]["content"], json::parse(R"([{"type": "text", "text": "be brief"}])"));
  EXPECT_EQ(as_openai[1]["content"], messages[1]["content"]);
  EXPECT_EQ(as_openai[1]["role"], "user");
}

}  // namespace
}  // namespace pagoda
