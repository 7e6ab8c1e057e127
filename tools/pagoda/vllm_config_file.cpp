#include "tools/pagoda/vllm_config_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "util/error.h"

namespace pagoda::cli {
namespace {

std::string dashes_for_underscores(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// PyYAML's (YAML 1.1) booleans, which vLLM's safe_load turns into True/False; a quoted scalar
// is a string, as there.
std::optional<bool> yaml_bool(const YAML::Node& node) {
  if (node.Tag() != "?") return std::nullopt;  // "!" marks a quoted scalar
  static const std::set<std::string> kTrue = {"true", "True", "TRUE", "yes", "Yes",
                                              "YES",  "on",   "On",   "ON"};
  static const std::set<std::string> kFalse = {"false", "False", "FALSE", "no", "No",
                                               "NO",    "off",   "Off",   "OFF"};
  if (kTrue.count(node.Scalar())) return true;
  if (kFalse.count(node.Scalar())) return false;
  return std::nullopt;
}

bool is_switch(const CLI::Option& option) {
  return option.get_expected_max() == 0;  // add_flag sets expected(0)
}

// The option a command-line word names (`--port`, `--port=1`, `-q`), or null.
const CLI::Option* option_named(const CLI::App& command, const std::string& arg) {
  if (arg.size() < 2 || arg[0] != '-') return nullptr;
  const std::string name = arg.substr(0, arg.find('='));
  const CLI::Option* option = command.get_option_no_throw(name);
  return option != nullptr && option->nonpositional() ? option : nullptr;
}

// One key for `--x` and `--no-x`, so that either on the command line overrides both in the file.
std::string setting_of(const CLI::Option& option) {
  std::string name = option.get_lnames().empty() ? option.get_name() : option.get_lnames().front();
  if (name.rfind("no-", 0) == 0) name = name.substr(3);
  return name;
}

std::string read_config_text(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension != ".yaml" && extension != ".yml") {
    fail("--config {}: the file must be YAML, named *.yaml or *.yml (as vLLM requires)", path);
  }
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) fail("--config {}: no such file", path);
  std::ifstream in(path);
  if (!in) fail("--config {}: cannot be read", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

void normalize_option_names(std::vector<std::string>& args) {
  for (std::string& arg : args) {
    if (arg.rfind("--", 0) != 0) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + 2, arg.begin() + static_cast<std::ptrdiff_t>(end), '_', '-');
  }
}

std::vector<std::string> config_file_arguments(const std::string& path, const CLI::App& command) {
  const std::string text = read_config_text(path);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail("--config {}: not valid YAML: line {}, column {}: {}", path, e.mark.line + 1,
         e.mark.column + 1, e.msg);
  }
  if (!root.IsMap()) {
    fail("--config {}: expected a mapping of option names to values (`port: 8000`)", path);
  }
  std::vector<std::string> args;
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) fail("--config {}: every key must be an option name", path);
    const std::string key = entry.first.Scalar();
    const std::string flag = "--" + dashes_for_underscores(key);
    const CLI::Option* option = command.get_option_no_throw(flag);
    if (option == nullptr || !option->nonpositional()) {
      fail("--config {}: unknown key '{}': `pagoda {}` has no option {}", path, key,
           command.get_name(), flag);
    }
    if (flag == "--config") fail("--config {}: a config file cannot name another one", path);
    const YAML::Node& value = entry.second;
    if (value.IsNull()) fail("--config {}: key '{}' has no value", path, key);
    if (value.IsMap()) {
      fail("--config {}: key '{}': {} takes no nested mapping", path, key, flag);
    }
    if (is_switch(*option)) {
      const std::optional<bool> on = value.IsScalar() ? yaml_bool(value) : std::nullopt;
      if (!on) fail("--config {}: key '{}': {} is a switch, give true or false", path, key, flag);
      if (*on) {
        args.push_back(flag);
      } else if (const std::string negative = "--no-" + flag.substr(2);
                 command.get_option_no_throw(negative) != nullptr) {
        args.push_back(negative);
      }  // false on a switch without a --no- form: as if not given (vLLM does the same)
      continue;
    }
    if (value.IsScalar()) {
      if (yaml_bool(value)) {
        fail("--config {}: key '{}': {} takes a value, not {}", path, key, flag, value.Scalar());
      }
      args.push_back(flag + "=" + value.Scalar());
      continue;
    }
    // A list: one --key=item per item, which multi-value options collect (and which no option
    // can mistake for a positional argument).
    if (value.size() > 1 && option->get_items_expected_max() <= 1) {
      fail("--config {}: key '{}': {} takes one value, the file gives {}", path, key, flag,
           value.size());
    }
    for (const YAML::Node& item : value) {
      if (!item.IsScalar()) {
        fail("--config {}: key '{}': list items must be plain values", path, key);
      }
      args.push_back(flag + "=" + item.Scalar());
    }
  }
  return args;
}

void expand_config_file(std::vector<std::string>& args, const CLI::App& app) {
  auto config = std::find_if(args.begin(), args.end(), [](const std::string& a) {
    return a == "--config" || a.rfind("--config=", 0) == 0;
  });
  if (config == args.end() || args.empty()) return;
  const CLI::App* command = nullptr;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == args.front()) command = sub;
  }
  // Only commands that take --config (serve); elsewhere CLI11 reports it as unknown.
  if (command == nullptr || command->get_option_no_throw("--config") == nullptr) return;
  if (std::count_if(config + 1, args.end(), [](const std::string& a) {
        return a == "--config" || a.rfind("--config=", 0) == 0;
      }) > 0) {
    fail("--config given twice; give one file");
  }
  std::string path;
  auto rest = config + 1;
  if (*config == "--config") {
    if (rest == args.end()) fail("--config needs a file: --config FILE.yaml");
    path = *rest++;
  } else {
    path = config->substr(std::string("--config=").size());
  }
  std::vector<std::string> command_line(args.begin(), config);
  command_line.insert(command_line.end(), rest, args.end());

  // What the command line sets itself, which the file must not set again.
  std::set<std::string> given;
  for (const std::string& arg : command_line) {
    if (const CLI::Option* option = option_named(*command, arg)) given.insert(setting_of(*option));
  }
  const bool positional_model =
      command_line.size() > 1 && !command_line[1].empty() && command_line[1][0] != '-';
  std::vector<std::string> from_file;
  for (const std::string& arg : config_file_arguments(path, *command)) {
    const CLI::Option* option = option_named(*command, arg);
    const std::string setting = setting_of(*option);
    if (given.count(setting) > 0) continue;
    if (setting == "model" && positional_model) continue;  // `serve MODEL` wins, as in vLLM
    from_file.push_back(arg);
  }
  // After the subcommand (and `serve MODEL`), before the command line's own options.
  command_line.insert(command_line.begin() + (positional_model ? 2 : 1), from_file.begin(),
                      from_file.end());
  args = std::move(command_line);
}

}  // namespace pagoda::cli
