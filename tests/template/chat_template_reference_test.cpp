// Differential test: every chat template in the shared test data, over a set of conversations,
// must render byte-equal to Python's jinja2 in Hugging Face's environment (render_reference.py
// produces the expected outputs), and the llama.cpp DeepSeek cases must give their expected text.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "template/chat_template.h"
#include "util/error.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

const fs::path kTestData = pagoda::test::testdata_dir();
const fs::path kSourceDir = pagoda::test::source_dir();

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs render_reference.py once per process; empty json when Python/jinja2 is unavailable.
const ordered_json& reference_cases() {
  static const ordered_json cases = [] {
    fs::path out = fs::temp_directory_path() /
                   ("pagoda_chat_template_reference_" + std::to_string(::getpid()) + ".json");
    std::string command = "/usr/bin/python3 '" +
                          (kSourceDir / "tests/template/render_reference.py").string() + "' '" +
                          kTestData.string() + "' '" + out.string() + "' > /dev/null";
    if (std::system(command.c_str()) != 0) return ordered_json();
    ordered_json j = ordered_json::parse(read_file(out));
    fs::remove(out);
    return j;
  }();
  return cases;
}

std::string first_difference(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  auto context = [&](const std::string& s) {
    size_t begin = i > 40 ? i - 40 : 0;
    return ordered_json(s.substr(begin, 80))
        .dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  };
  return "first difference at byte " + std::to_string(i) + "\n  expected: " + context(expected) +
         "\n  actual:   " + context(actual);
}

TEST(ChatTemplateReference, MatchesJinja2ByteForByte) {
  if (!fs::exists(kTestData / "chat-templates")) {
    GTEST_SKIP() << "test data not found at " << kTestData;
  }
  const ordered_json& reference = reference_cases();
  if (reference.is_null()) {
    GTEST_SKIP() << "/usr/bin/python3 with jinja2 is needed to produce the reference renders";
  }
  int num_rendered = 0, num_errors = 0, num_matched = 0, num_errors_matched = 0;
  for (const auto& c : reference["cases"]) {
    std::string label = c["template"].get<std::string>() + " x " +
                        c["conversation"].get<std::string>() +
                        (c["add_generation_prompt"].get<bool>() ? " +gen" : "");
    bool expect_error = c.contains("error");
    std::string actual, error;
    try {
      ChatTemplate tmpl(c["source"].get<std::string>(), c["template"].get<std::string>());
      actual = tmpl.render(c["messages"], c["add_generation_prompt"].get<bool>(), c["context"]);
    } catch (const Error& e) {
      error = e.what();
    }
    if (expect_error) {
      ++num_errors;
      std::string py = c["error"].get<std::string>();
      const std::string kRaised = "TemplateError: ";
      bool ok = !error.empty();
      // raise_exception messages must come through verbatim.
      if (ok && py.rfind(kRaised, 0) == 0) {
        ok = error.find(py.substr(kRaised.size())) != std::string::npos;
      }
      // The error names the same template line as jinja2's.
      if (ok && c.contains("error_line")) {
        ok = error.find(":" + std::to_string(c["error_line"].get<int>()) + ": ") !=
             std::string::npos;
      }
      if (ok) {
        ++num_errors_matched;
      } else {
        ADD_FAILURE() << label << ": jinja2 raised " << py << " but Pagoda "
                      << (error.empty() ? "rendered " + ordered_json(actual).dump(
                                                            -1, ' ', false,
                                                            ordered_json::error_handler_t::replace)
                                        : "said " + error);
      }
      continue;
    }
    ++num_rendered;
    if (!error.empty()) {
      ADD_FAILURE() << label << ": unexpected error: " << error;
    } else if (actual != c["expected"].get<std::string>()) {
      ADD_FAILURE() << label << ": " << first_difference(c["expected"], actual);
    } else {
      ++num_matched;
    }
  }
  std::printf(
      "chat templates: %d/%d renders byte-equal to jinja2 %s; %d/%d expected errors raised\n",
      num_matched, num_rendered, reference["jinja2_version"].get<std::string>().c_str(),
      num_errors_matched, num_errors);
  EXPECT_GT(num_rendered, 300);
}

TEST(ChatTemplateReference, LlamaCppDeepSeekCases) {
  fs::path path = kTestData / "chat-templates/llama.cpp-test-chat-template-deepseek-cases.json";
  if (!fs::exists(path)) GTEST_SKIP() << "test data not found: " << path;
  ordered_json data = ordered_json::parse(read_file(path));
  ASSERT_GE(data["cases"].size(), 2u);
  for (const auto& c : data["cases"]) {
    ordered_json context = {{"bos_token", c.value("bos_token", "")},
                            {"eos_token", c.value("eos_token", "")}};
    ChatTemplate tmpl(c["template_str"].get<std::string>(), c["name"].get<std::string>());
    std::string out =
        tmpl.render(data["conversation"], data["add_generation_prompt"].get<bool>(), context);
    std::string expected = c["expected_output"].get<std::string>();
    if (!c["expected_output_jinja"].get<std::string>().empty()) {
      expected = c["expected_output_jinja"].get<std::string>();
    }
    auto normalize = [](std::string s) {
      for (size_t p; (p = s.find("\r\n")) != std::string::npos;) s.erase(p, 1);
      return s;
    };
    EXPECT_EQ(normalize(out), normalize(expected)) << c["name"];
  }
}

TEST(ChatTemplateReference, EveryTestDataTemplateParses) {
  if (!fs::exists(kTestData / "chat-templates")) GTEST_SKIP() << "test data not found";
  int num_templates = 0;
  for (const auto& entry : fs::directory_iterator(kTestData / "chat-templates")) {
    if (entry.path().extension() != ".jinja") continue;
    EXPECT_NO_THROW(ChatTemplate(read_file(entry.path()), entry.path().filename().string()))
        << entry.path();
    ++num_templates;
  }
  for (const char* dir : {"tokenizers/deepseek-v3", "tokenizers/qwen3", "tokenizers/llama3",
                          "hf-configs/deepseek-ai-DeepSeek-R1",
                          "hf-configs/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"}) {
    fs::path config_path = kTestData / dir / "tokenizer_config.json";
    ordered_json config = ordered_json::parse(read_file(config_path));
    EXPECT_NO_THROW(ChatTemplate::from_tokenizer_config(config, config_path.string()));
    ++num_templates;
  }
  EXPECT_EQ(num_templates, 10);
}

}  // namespace
}  // namespace pagoda
