// vLLM's `--config FILE.yaml` and option spellings (tools/pagoda/vllm_config_file.cpp), against a
// small command shaped like `pagoda serve`: what the file becomes on the command line, that the
// command line wins, and the errors for everything a file can get wrong.
#include "tools/pagoda/vllm_config_file.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "util/error.h"

namespace pagoda::cli {
namespace {

namespace fs = std::filesystem;
using Args = std::vector<std::string>;

struct Command {
  CLI::App app{"test"};
  CLI::App* serve = app.add_subcommand("serve");
  std::string model_tag, model, config, api_key;
  int port = 8000;
  bool eager = false, prefix = true;
  std::vector<std::string> names;
  Command() {
    serve->add_option("model_tag", model_tag);
    serve->add_option("--model", model);
    serve->add_option("--config", config);
    serve->add_option("--port", port);
    serve->add_option("--max-model-len", port);
    serve->add_option("--api-key", api_key);
    serve->add_option("--quantization,-q", model);
    serve->add_option("--served-model-name", names);
    serve->add_flag("--enforce-eager", eager);
    serve->add_flag("--enable-prefix-caching", prefix);
    serve->add_flag_callback("--no-enable-prefix-caching", [this] { prefix = false; });
    app.add_subcommand("generate")->add_option("--port", port);
  }
};

struct ConfigFile {
  fs::path path;
  explicit ConfigFile(const std::string& text, const std::string& name = "config.yaml") {
    const fs::path dir =
        fs::temp_directory_path() / ("pagoda_cfg_test_" + std::to_string(getpid()));
    fs::create_directories(dir);
    path = dir / name;
    std::ofstream(path) << text;
  }
  ~ConfigFile() {
    std::error_code ignored;
    fs::remove_all(path.parent_path(), ignored);
  }
};

Args expand(Args args, const Command& c = Command()) {
  expand_config_file(args, c.app);
  return args;
}

// The error message of expand_config_file, or "" when it succeeds.
std::string expand_error(const Args& args) {
  try {
    expand(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(VllmConfigFile, KeysBecomeOptionsInEitherSpelling) {
  const ConfigFile file(
      "port: 8001\n"
      "max_model_len: 4k\n"
      "enforce-eager: true\n"
      "enable_prefix_caching: false\n"
      "served-model-name: [a, b]\n"
      "api-key: '-secret'\n");
  EXPECT_EQ(
      config_file_arguments(file.path.string(), *Command().serve),
      (Args{"--port=8001", "--max-model-len=4k", "--enforce-eager", "--no-enable-prefix-caching",
            "--served-model-name=a", "--served-model-name=b", "--api-key=-secret"}));
}

TEST(VllmConfigFile, TheFileGoesAfterTheSubcommandAndTheModelAndTheCommandLineWins) {
  const ConfigFile file(
      "model: from-file\n"
      "port: 8001\n"
      "enable-prefix-caching: true\n"
      "served-model-name: [a, b]\n"
      "quantization: int8\n");
  EXPECT_EQ(expand({"serve", "MODEL", "--config", file.path.string(), "--port", "9000",
                    "--no-enable-prefix-caching", "-q", "int4"}),
            (Args{"serve", "MODEL", "--served-model-name=a", "--served-model-name=b", "--port",
                  "9000", "--no-enable-prefix-caching", "-q", "int4"}));
  EXPECT_EQ(expand({"serve", "--config=" + file.path.string(), "--served-model-name", "c"}),
            (Args{"serve", "--model=from-file", "--port=8001", "--enable-prefix-caching",
                  "--quantization=int8", "--served-model-name", "c"}));
}

TEST(VllmConfigFile, AFalseSwitchWithoutANegativeFormIsLeftOut) {
  const ConfigFile file("enforce-eager: false\nport: 1\n");
  EXPECT_EQ(expand({"serve", "--config", file.path.string()}), (Args{"serve", "--port=1"}));
}

TEST(VllmConfigFile, ParsedByCli11AsTheCommandLineWouldBe) {
  const ConfigFile file("served_model_name: [a, b]\nenforce_eager: yes\nport: 8123\n");
  Command c;
  Args args = expand({"serve", "M", "--config", file.path.string()}, c);
  std::reverse(args.begin(), args.end());
  c.app.parse(args);
  EXPECT_EQ(c.model_tag, "M");
  EXPECT_EQ(c.names, (Args{"a", "b"}));
  EXPECT_TRUE(c.eager);
  EXPECT_EQ(c.port, 8123);
}

TEST(VllmConfigFile, WithoutConfigOrOnACommandWithoutItNothingChanges) {
  EXPECT_EQ(expand({"serve", "M", "--port", "1"}), (Args{"serve", "M", "--port", "1"}));
  EXPECT_EQ(expand({"generate", "--config", "x.yaml"}), (Args{"generate", "--config", "x.yaml"}));
}

TEST(VllmConfigFile, ErrorsNameTheFileTheKeyAndTheCause) {
  const ConfigFile unknown("port: 1\nmax-lora-rank: 8\n");
  EXPECT_NE(expand_error({"serve", "--config", unknown.path.string()})
                .find("unknown key 'max-lora-rank': `pagoda serve` has no option --max-lora-rank"),
            std::string::npos);
  const ConfigFile bad_yaml("port: [1, 2\n");
  EXPECT_NE(expand_error({"serve", "--config", bad_yaml.path.string()}).find("not valid YAML"),
            std::string::npos);
  const ConfigFile not_a_map("- port\n- 1\n");
  EXPECT_NE(expand_error({"serve", "--config", not_a_map.path.string()}).find("expected a mapping"),
            std::string::npos);
  EXPECT_NE(expand_error({"serve", "--config", "/no/such/dir/c.yaml"}).find("no such file"),
            std::string::npos);
  const ConfigFile json_file("{}", "config.json");
  EXPECT_NE(expand_error({"serve", "--config", json_file.path.string()}).find("must be YAML"),
            std::string::npos);
  EXPECT_NE(expand_error({"serve", "--config"}).find("needs a file"), std::string::npos);
  const ConfigFile twice("port: 1\n");
  EXPECT_NE(
      expand_error({"serve", "--config", twice.path.string(), "--config", twice.path.string()})
          .find("given twice"),
      std::string::npos);
  const ConfigFile switch_value("enforce-eager: 3\n");
  EXPECT_NE(expand_error({"serve", "--config", switch_value.path.string()})
                .find("--enforce-eager is a switch, give true or false"),
            std::string::npos);
  const ConfigFile bool_value("port: true\n");
  EXPECT_NE(expand_error({"serve", "--config", bool_value.path.string()})
                .find("--port takes a value, not true"),
            std::string::npos);
  const ConfigFile list_value("port: [1, 2]\n");
  EXPECT_NE(expand_error({"serve", "--config", list_value.path.string()})
                .find("--port takes one value, the file gives 2"),
            std::string::npos);
  const ConfigFile null_value("port:\n");
  EXPECT_NE(expand_error({"serve", "--config", null_value.path.string()}).find("has no value"),
            std::string::npos);
  const ConfigFile nested("config: other.yaml\n");
  EXPECT_NE(expand_error({"serve", "--config", nested.path.string()}).find("cannot name another"),
            std::string::npos);
  const ConfigFile positional("model_tag: x\n");
  EXPECT_NE(expand_error({"serve", "--config", positional.path.string()}).find("unknown key"),
            std::string::npos);
}

TEST(VllmOptionNames, UnderscoresBecomeDashesInNamesOnly) {
  Args args = {"--max_model_len", "4k", "--served_model_name=a_b", "a_b", "-q", "--x-y_z"};
  normalize_option_names(args);
  EXPECT_EQ(args,
            (Args{"--max-model-len", "4k", "--served-model-name=a_b", "a_b", "-q", "--x-y-z"}));
}

}  // namespace
}  // namespace pagoda::cli
