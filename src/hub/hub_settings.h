// Where models by name come from and go to, read once from the environment with the variables
// huggingface_hub and vLLM read, so that a cache and a token set up for Python tools serve
// Pagoda too:
//   HF_ENDPOINT           the Hub (default https://huggingface.co); a mirror's address
//   HF_TOKEN              the access token for gated and private repos; else the file named by
//                         HF_TOKEN_PATH, else $HF_HOME/token (what `huggingface-cli login` wrote)
//   HF_HOME               default ~/.cache/huggingface ($XDG_CACHE_HOME/huggingface if set)
//   HF_HUB_CACHE          default $HF_HOME/hub (also the older HUGGINGFACE_HUB_CACHE)
//   HF_HUB_OFFLINE=1      no network: only what the cache holds (also TRANSFORMERS_OFFLINE)
//   VLLM_USE_MODELSCOPE=1 ModelScope instead of the Hub (MODELSCOPE_ENDPOINT, MODELSCOPE_CACHE)
#pragma once

#include <string>

namespace pagoda::hub {

enum class HubSource { kHuggingFace, kModelScope };

struct HubSettings {
  HubSource source = HubSource::kHuggingFace;
  std::string endpoint;   // no trailing '/'
  std::string token;      // "" for anonymous access
  std::string cache_dir;  // the hub cache: models--org--name/ folders go here
  bool offline = false;
  int num_workers = 8;  // files fetched at once
  // Attempts per file before a cut or failing connection is an error (each resumes).
  int max_attempts = 5;
  double retry_delay_s = 1;  // doubled after each failed attempt
};

// Reads the variables above; throws pagoda::Error for a boolean that is neither 0/1 nor
// true/false.
HubSettings hub_settings_from_environment();

// The source by name, for messages: "the Hugging Face Hub" or "ModelScope".
std::string source_name(const HubSettings& settings);

}  // namespace pagoda::hub
