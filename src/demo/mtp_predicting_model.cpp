// make_mtp_layer_predict_the_model: patches tensor bytes in the file through its header's
// offsets, a row at a time (no copy of the model in memory).
#include "demo/mtp_predicting_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "util/error.h"
#include "util/half.h"

namespace pagoda {
namespace {

struct Entry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // file offset
  uint64_t size = 0;
};

class File {
 public:
  explicit File(const std::string& path) : path_(path) {
    io_.open(path, std::ios::in | std::ios::out | std::ios::binary);
    if (!io_) fail("{}: cannot open for rewriting", path);
    uint64_t header_len = 0;
    io_.read(reinterpret_cast<char*>(&header_len), 8);
    std::string header(header_len, '\0');
    io_.read(header.data(), static_cast<std::streamsize>(header_len));
    if (!io_) fail("{}: truncated header", path);
    const nlohmann::json parsed = nlohmann::json::parse(header);
    for (const auto& [name, info] : parsed.items()) {
      if (name == "__metadata__") continue;
      Entry e;
      e.dtype = info.at("dtype").get<std::string>();
      e.shape = info.at("shape").get<std::vector<int64_t>>();
      const auto offsets = info.at("data_offsets").get<std::vector<uint64_t>>();
      e.begin = 8 + header_len + offsets.at(0);
      e.size = offsets.at(1) - offsets.at(0);
      if (e.dtype != "F32" && e.dtype != "BF16")
        fail("{}: tensor {} is {}; only F32 and BF16 can be rewritten", path, name, e.dtype);
      entries_.emplace(name, std::move(e));
    }
  }

  const std::map<std::string, Entry>& entries() const { return entries_; }
  const Entry& at(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) fail("{}: no tensor {}", path_, name);
    return it->second;
  }

  void write(uint64_t offset, const void* data, size_t n) {
    io_.seekp(static_cast<std::streamoff>(offset));
    io_.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    if (!io_) fail("{}: write failed", path_);
  }
  void read(uint64_t offset, void* data, size_t n) {
    io_.seekg(static_cast<std::streamoff>(offset));
    io_.read(static_cast<char*>(data), static_cast<std::streamsize>(n));
    if (!io_) fail("{}: read failed", path_);
  }

  // Every element of `name` set to `value`.
  void fill(const std::string& name, float value) {
    const Entry& e = at(name);
    std::vector<uint8_t> chunk(std::min<uint64_t>(e.size, uint64_t{1} << 24));
    encode_fill(e.dtype, value, chunk);
    for (uint64_t done = 0; done < e.size; done += chunk.size())
      write(e.begin + done, chunk.data(), std::min<uint64_t>(chunk.size(), e.size - done));
  }

  // `dst` takes `src`'s bytes (same dtype and shape).
  void copy(const std::string& src, const std::string& dst) {
    const Entry& s = at(src);
    const Entry& d = at(dst);
    if (s.dtype != d.dtype || s.shape != d.shape)
      fail("{}: tensor {} and {} differ in type or shape", path_, src, dst);
    std::vector<uint8_t> chunk(std::min<uint64_t>(s.size, uint64_t{1} << 24));
    for (uint64_t done = 0; done < s.size; done += chunk.size()) {
      const size_t n = std::min<uint64_t>(chunk.size(), s.size - done);
      read(s.begin + done, chunk.data(), n);
      write(d.begin + done, chunk.data(), n);
    }
  }

  // Row `dst_row` of `dst` takes row `src_row` of `src` (matrices of one dtype and row size).
  void copy_row(const std::string& src, int64_t src_row, const std::string& dst, int64_t dst_row) {
    const Entry& s = at(src);
    const Entry& d = at(dst);
    const uint64_t row_bytes = s.size / static_cast<uint64_t>(s.shape.at(0));
    row_.resize(row_bytes);
    read(s.begin + static_cast<uint64_t>(src_row) * row_bytes, row_.data(), row_bytes);
    write(d.begin + static_cast<uint64_t>(dst_row) * row_bytes, row_.data(), row_bytes);
  }

  // [rows, 2 rows]: the identity on the first half of the columns, zero on the second.
  void left_identity(const std::string& name) {
    const Entry& e = at(name);
    const int64_t rows = e.shape.at(0);
    if (e.shape.size() != 2 || e.shape[1] != 2 * rows)
      fail("{}: tensor {} is not [rows, 2 rows]", path_, name);
    const size_t elem = e.dtype == "F32" ? 4 : 2;
    std::vector<uint8_t> row(static_cast<size_t>(2 * rows) * elem);
    std::vector<uint8_t> one(elem);
    encode_fill(e.dtype, 1.0f, one);
    for (int64_t r = 0; r < rows; ++r) {
      std::fill(row.begin(), row.end(), uint8_t{0});
      std::memcpy(row.data() + static_cast<size_t>(r) * elem, one.data(), elem);
      write(e.begin + static_cast<uint64_t>(r) * row.size(), row.data(), row.size());
    }
  }

 private:
  static void encode_fill(const std::string& dtype, float value, std::vector<uint8_t>& out) {
    if (dtype == "F32") {
      for (size_t i = 0; i + 4 <= out.size(); i += 4) std::memcpy(out.data() + i, &value, 4);
    } else {
      const bf16_t b = f32_to_bf16(value);
      for (size_t i = 0; i + 2 <= out.size(); i += 2) std::memcpy(out.data() + i, &b, 2);
    }
  }

  std::string path_;
  std::fstream io_;
  std::vector<uint8_t> row_;
  std::map<std::string, Entry> entries_;
};

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

void make_mtp_layer_predict_the_model(const std::string& dir, double acceptance, uint64_t seed) {
  if (!(acceptance >= 0.0 && acceptance <= 1.0))
    fail("MTP acceptance rate {} is not in [0, 1]", acceptance);
  const ModelConfig config = ModelConfig::from_dir(dir);
  const int64_t mtp_index = config.num_hidden_layers;
  File file(dir + "/model.safetensors");
  const std::string mtp = "model.layers." + std::to_string(mtp_index) + ".";
  file.at(mtp + "eh_proj.weight");  // fails naming the file when there is no MTP layer
  std::vector<std::string> zeroed;
  for (const auto& [name, entry] : file.entries()) {
    if (ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight"))
      zeroed.push_back(name);
  }
  for (const std::string& name : zeroed) file.fill(name, 0.0f);
  file.left_identity(mtp + "eh_proj.weight");
  file.fill(mtp + "enorm.weight", 1.0f);
  file.copy("model.embed_tokens.weight", mtp + "embed_tokens.weight");
  file.copy("model.norm.weight", mtp + "shared_head.norm.weight");
  const std::string head = mtp + "shared_head.head.weight";
  file.copy("lm_head.weight", head);

  const int64_t vocab = file.at("lm_head.weight").shape.at(0);
  const auto num_rotated = static_cast<int64_t>(std::llround((1.0 - acceptance) * vocab));
  if (num_rotated < 2) return;  // one id cannot be sent anywhere else
  std::vector<int64_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(static_cast<size_t>(num_rotated));
  // Row ids[i] of the head becomes the model's row ids[i + 1]: the layer's logit for ids[i] is
  // the model's for ids[i + 1], so where the model's argmax is ids[i + 1] the draft is ids[i].
  for (size_t i = 0; i < ids.size(); ++i)
    file.copy_row("lm_head.weight", ids[(i + 1) % ids.size()], head, ids[i]);
}

}  // namespace pagoda
