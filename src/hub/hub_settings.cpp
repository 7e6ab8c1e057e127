// The hub's settings from the environment; see hub_settings.h.
#include "hub/hub_settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace pagoda::hub {
namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// huggingface_hub's booleans: 1/true/yes/on are true, anything else (unset) false. vLLM reads
// VLLM_USE_MODELSCOPE as "true"/"1" likewise.
bool environment_flag(const char* name) {
  std::string value = environment(name);
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (value.empty() || value == "0" || value == "false" || value == "no" || value == "off")
    return false;
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  fail("{}='{}': expected 1, true, 0 or false", name, environment(name));
}

std::string trimmed(std::string text) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  text.erase(text.begin(), std::find_if_not(text.begin(), text.end(), space));
  text.erase(std::find_if_not(text.rbegin(), text.rend(), space).base(), text.end());
  return text;
}

std::string without_trailing_slash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

std::string home_cache() {
  if (const std::string xdg = environment("XDG_CACHE_HOME"); !xdg.empty()) return xdg;
  const std::string home = environment("HOME");
  return (home.empty() ? std::string("/tmp") : home) + "/.cache";
}

std::string read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  return trimmed(text.str());
}

}  // namespace

HubSettings hub_settings_from_environment() {
  HubSettings s;
  s.offline = environment_flag("HF_HUB_OFFLINE") || environment_flag("TRANSFORMERS_OFFLINE");
  if (environment_flag("VLLM_USE_MODELSCOPE")) {
    s.source = HubSource::kModelScope;
    s.endpoint = environment("MODELSCOPE_ENDPOINT");
    if (s.endpoint.empty()) s.endpoint = "https://www.modelscope.cn";
    s.token = trimmed(environment("MODELSCOPE_API_TOKEN"));
    s.cache_dir = environment("MODELSCOPE_CACHE");
    if (s.cache_dir.empty()) s.cache_dir = home_cache() + "/modelscope";
    s.cache_dir += "/hub";
  } else {
    s.endpoint = environment("HF_ENDPOINT");
    if (s.endpoint.empty()) s.endpoint = "https://huggingface.co";
    std::string hf_home = environment("HF_HOME");
    if (hf_home.empty()) hf_home = home_cache() + "/huggingface";
    s.cache_dir = environment("HF_HUB_CACHE");
    if (s.cache_dir.empty()) s.cache_dir = environment("HUGGINGFACE_HUB_CACHE");
    if (s.cache_dir.empty()) s.cache_dir = hf_home + "/hub";
    s.token = trimmed(environment("HF_TOKEN"));
    if (s.token.empty()) s.token = trimmed(environment("HUGGING_FACE_HUB_TOKEN"));
    if (s.token.empty()) {
      std::string token_path = environment("HF_TOKEN_PATH");
      if (token_path.empty()) token_path = hf_home + "/token";
      s.token = read_token_file(token_path);
    }
  }
  s.endpoint = without_trailing_slash(s.endpoint);
  return s;
}

std::string source_name(const HubSettings& settings) {
  return settings.source == HubSource::kModelScope ? "ModelScope" : "the Hugging Face Hub";
}

}  // namespace pagoda::hub
