// `pagoda encrypt` and encrypted weights read back by the commands that take --model, run as a
// user runs them: the same greedy text from the encrypted copy as from the plain model, a key
// from a file, PAGODA_MODEL_KEY or --model-key-command; and a wrong key, a damaged chunk, a
// truncated shard or a missing key each refused naming the file, with no plaintext left on disk.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_process.h"

namespace pagoda::cli::testing {
namespace {

const std::string kKey = "3f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

struct EncryptedModel {
  std::string plain, encrypted, key_file;
};

EncryptedModel make_encrypted_model(const Scratch& scratch) {
  EncryptedModel m{scratch.path("tiny"), scratch.path("tiny-enc"), scratch.path("key.hex")};
  std::ofstream(m.key_file) << kKey << "\n";
  RunResult r = run_pagoda({"make-model", "--preset", "tiny", "--out", m.plain}, scratch.dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_pagoda({"encrypt", "--model", m.plain, "--out", m.encrypted, "--key-file", m.key_file},
                 scratch.dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return m;
}

std::vector<std::string> generate_args(const std::string& model) {
  return {"generate",     "--model", model,           "--prompt", "hello world",
          "--max-tokens", "8",       "--temperature", "0"};
}

std::vector<fs::path> safetensors_in(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") out.push_back(e.path());
  }
  return out;
}

TEST(EncryptCli, TheEncryptedCopyGeneratesWhatThePlainModelDoes) {
  const Scratch scratch;
  const EncryptedModel m = make_encrypted_model(scratch);
  // Config and tokenizer copied as they are; weights not readable as safetensors any more.
  EXPECT_EQ(read_text(fs::path(m.plain) / "config.json"),
            read_text(fs::path(m.encrypted) / "config.json"));
  const std::vector<fs::path> shards = safetensors_in(m.encrypted);
  ASSERT_FALSE(shards.empty());
  EXPECT_EQ(read_text(shards[0]).substr(0, 8), "PGDAENC1");

  const RunResult plain = run_pagoda(generate_args(m.plain), scratch.dir());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_FALSE(plain.out.empty());

  // A private TMPDIR: nothing decrypted may land there (or anywhere else on disk).
  const std::string tmp = scratch.path("tmp");
  fs::create_directories(tmp);
  std::vector<std::string> with_file = generate_args(m.encrypted);
  with_file.insert(with_file.end(), {"--model-key-file", m.key_file});
  const RunResult from_file = run_pagoda(with_file, scratch.dir(), {"TMPDIR=" + tmp});
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_EQ(from_file.out, plain.out);
  EXPECT_TRUE(fs::is_empty(tmp));

  const RunResult from_env =
      run_pagoda(generate_args(m.encrypted), scratch.dir(), {"PAGODA_MODEL_KEY=" + kKey});
  ASSERT_EQ(from_env.exit_code, 0) << from_env.err;
  EXPECT_EQ(from_env.out, plain.out);

  std::vector<std::string> with_command = generate_args(m.encrypted);
  with_command.insert(with_command.end(), {"--model-key-command", "cat " + m.key_file});
  const RunResult from_command = run_pagoda(with_command, scratch.dir());
  ASSERT_EQ(from_command.exit_code, 0) << from_command.err;
  EXPECT_EQ(from_command.out, plain.out);

  const RunResult info =
      run_pagoda({"info", "--model", m.encrypted, "--model-key-file", m.key_file}, scratch.dir());
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("weight format:      f32"), std::string::npos) << info.out;
}

TEST(EncryptCli, AMissingOrWrongKeyIsRefusedNamingTheFile) {
  const Scratch scratch;
  const EncryptedModel m = make_encrypted_model(scratch);
  const std::string shard = safetensors_in(m.encrypted)[0].string();

  const RunResult none = run_pagoda(generate_args(m.encrypted), scratch.dir());
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find(shard + ": the weights are encrypted"), std::string::npos) << none.err;

  const RunResult wrong = run_pagoda(generate_args(m.encrypted), scratch.dir(),
                                     {"PAGODA_MODEL_KEY=" + std::string(64, 'a')});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find(shard + ": the model key does not open this file"), std::string::npos)
      << wrong.err;
  EXPECT_TRUE(wrong.out.empty()) << wrong.out;

  // A key for plain weights is a mistake too: the operator believes they are encrypted.
  const RunResult plain =
      run_pagoda(generate_args(m.plain), scratch.dir(), {"PAGODA_MODEL_KEY=" + kKey});
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_NE(plain.err.find("not encrypted"), std::string::npos) << plain.err;
}

TEST(EncryptCli, ADamagedOrTruncatedShardLoadsNothing) {
  const Scratch scratch;
  const EncryptedModel m = make_encrypted_model(scratch);
  const std::string shard = safetensors_in(m.encrypted)[0].string();
  std::string bytes = read_text(shard);
  ASSERT_GT(bytes.size(), 200u);

  std::string damaged = bytes;
  damaged[150] = static_cast<char>(damaged[150] ^ 0x01);  // inside chunk 0
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << damaged;
  RunResult r = run_pagoda(generate_args(m.encrypted), scratch.dir(), {"PAGODA_MODEL_KEY=" + kKey});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(shard + ": chunk 0 of"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;

  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 10);
  r = run_pagoda(generate_args(m.encrypted), scratch.dir(), {"PAGODA_MODEL_KEY=" + kKey});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(shard + ": truncated"), std::string::npos) << r.err;
}

TEST(EncryptCli, ANewKeyFileIsPrivateAndOpensTheCopy) {
  const Scratch scratch;
  RunResult r =
      run_pagoda({"make-model", "--preset", "tiny", "--out", scratch.path("tiny")}, scratch.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string key_file = scratch.path("new.key");
  r = run_pagoda({"encrypt", "--model", scratch.path("tiny"), "--out", scratch.path("enc"),
                  "--new-key-file", key_file},
                 scratch.dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(fs::status(key_file).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(r.out.find(read_text(key_file).substr(0, 64)), std::string::npos)
      << "the key was printed";
  std::vector<std::string> args = generate_args(scratch.path("enc"));
  args.insert(args.end(), {"--model-key-file", key_file});
  r = run_pagoda(args, scratch.dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Refuses to overwrite: an existing key file or a non-empty output directory.
  r = run_pagoda({"encrypt", "--model", scratch.path("tiny"), "--out", scratch.path("enc2"),
                  "--new-key-file", key_file},
                 scratch.dir());
  EXPECT_NE(r.exit_code, 0);
  r = run_pagoda({"encrypt", "--model", scratch.path("tiny"), "--out", scratch.path("enc"),
                  "--key-file", key_file},
                 scratch.dir());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pagoda::cli::testing
