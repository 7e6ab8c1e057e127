// EngineBackend over the real pagoda::Engine: a thin forwarding layer, kept in its own file so
// that tests of the streaming client and the server can link without the model.
#include <memory>

#include "pagoda/async_engine.h"

namespace pagoda {
namespace {

class EngineAdapter final : public EngineBackend {
 public:
  explicit EngineAdapter(const EngineArgs& args) : engine_(args) {}

  void add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                   const SamplingParams& params) override {
    engine_.add_request_tokens(request_id, std::move(prompt_token_ids), params);
  }
  void abort_request(const std::string& request_id) override { engine_.abort_request(request_id); }
  void prepare_request(const SamplingParams& params) override { engine_.prepare_request(params); }
  std::vector<RequestOutput> step() override { return engine_.step(); }
  bool has_unfinished_requests() const override { return engine_.has_unfinished_requests(); }
  EngineStats stats() const override { return engine_.stats(); }
  CacheInfo cache_info() const override { return engine_.cache_info(); }
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override {
    return engine_.encode(text, add_special_tokens);
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    return engine_.decode(ids, skip_special_tokens);
  }
  std::string apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                  const std::string& kwargs_json) const override {
    return engine_.apply_chat_template(messages_json, add_generation_prompt, kwargs_json);
  }
  std::string model_name() const override { return engine_.model_name(); }
  int32_t max_model_len() const override { return engine_.max_model_len(); }
  SamplingParams default_sampling_params() const override {
    return engine_.default_sampling_params();
  }

 private:
  Engine engine_;
};

}  // namespace

std::unique_ptr<EngineBackend> make_engine_backend(const EngineArgs& args) {
  return std::make_unique<EngineAdapter>(args);
}

}  // namespace pagoda
