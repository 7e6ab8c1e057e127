// Evaluates one token sequence with llama.cpp (through its public llama.h API) and writes the
// logits of every position as raw fp32 [positions, vocab], for comparing llama.cpp's reading of
// a GGUF file with Pagoda's (bench/peers/deepseek_gguf_crosscheck.py). Not part of Pagoda's
// build: deepseek_gguf_crosscheck.py compiles it against a llama.cpp checkout it is given.
//
// usage: llama_cpp_logits MODEL.gguf OUT.bin ID,ID,...
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: llama_cpp_logits MODEL.gguf OUT.bin ID,ID,...\n");
    return 2;
  }
  std::vector<llama_token> ids;
  std::stringstream list(argv[3]);
  for (std::string item; std::getline(list, item, ',');) ids.push_back(std::stoi(item));
  const auto n = static_cast<int32_t>(ids.size());

  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) return 1;
  llama_context_params params = llama_context_default_params();
  params.n_ctx = params.n_batch = params.n_ubatch = static_cast<uint32_t>(n);
  llama_context* ctx = llama_init_from_model(model, params);
  if (ctx == nullptr) return 1;

  // One batch, one sequence, logits at every position.
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int32_t i = 0; i < n; ++i) {
    batch.token[i] = ids[static_cast<size_t>(i)];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n;
  if (llama_decode(ctx, batch) != 0) return 1;

  const int32_t vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  FILE* out = std::fopen(argv[2], "wb");
  if (out == nullptr) return 1;
  for (int32_t i = 0; i < n; ++i) {
    std::fwrite(llama_get_logits_ith(ctx, i), sizeof(float), static_cast<size_t>(vocab), out);
  }
  std::fclose(out);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
