// TensorStore and the safetensors writer: round trips, sharded and multi-file directories,
// and one test per kind of broken input, each checking that the error is one line naming
// the file (and tensor) and the problem.
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "test_helpers.h"
#include "util/half.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::error_of;
using test::expect_message;
using test::TempDir;

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TensorBytes f32_tensor(const std::string& name, std::vector<int64_t> shape,
                       const std::vector<float>& values) {
  return {{name, "F32", std::move(shape)}, bytes_of(values)};
}

// A valid file: "a" F32 [2, 3] at [0, 24), "b" BF16 [4] at [24, 32).
std::vector<TensorBytes> small_tensors() {
  std::vector<bf16_t> b = {f32_to_bf16(1.0f), f32_to_bf16(-2.0f), f32_to_bf16(0.5f),
                           f32_to_bf16(3.0f)};
  return {f32_tensor("a", {2, 3}, {1, 2, 3, 4, 5, 6}), {{"b", "BF16", {4}}, bytes_of(b)}};
}

// A file whose header is `header` (as given, so it may be broken) and `data_bytes` zeros.
std::string raw_file(const TempDir& dir, const std::string& header, size_t data_bytes,
                     int64_t header_len = -1) {
  const std::string path = dir.file("model.safetensors");
  std::vector<uint8_t> data(data_bytes, 0);
  write_safetensors_raw(path, header, data, header_len);
  return path;
}

TEST(Safetensors, RoundTripKeepsNamesDtypesShapesAndBytes) {
  TempDir dir;
  std::vector<f16_t> h = {f32_to_f16(0.25f), f32_to_f16(-1.5f)};
  std::vector<TensorBytes> tensors = {
      f32_tensor("model.norm.weight", {3}, {1.0f, 2.0f, 3.0f}),
      {{"half", "F16", {1, 2}}, bytes_of(h)},
      {{"brain", "BF16", {2}}, bytes_of(std::vector<bf16_t>{f32_to_bf16(7.0f), 0})},
      f32_tensor("scalar", {}, {42.0f}),
      {{"empty", "F32", {0, 4}}, {}},
  };
  write_safetensors(dir.file("model.safetensors"), tensors);

  const TensorStore store = TensorStore::open(dir.str());
  EXPECT_EQ(store.num_tensors(), 5u);
  EXPECT_EQ(store.names(),
            (std::vector<std::string>{"brain", "empty", "half", "model.norm.weight", "scalar"}));
  for (const TensorBytes& want : tensors) {
    const Tensor& got = store.get(want.layout.name);
    EXPECT_EQ(got.stored_dtype, want.layout.dtype);
    EXPECT_EQ(got.shape, want.layout.shape);
    EXPECT_EQ(got.size_bytes, static_cast<int64_t>(want.bytes.size()));
    EXPECT_EQ(got.path, dir.file("model.safetensors"));
    ASSERT_TRUE(got.dtype_supported);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data) % dtype_size(got.dtype), 0u) << got.name;
    if (!want.bytes.empty()) {
      EXPECT_EQ(std::memcmp(got.data, want.bytes.data(), want.bytes.size()), 0) << got.name;
    }
  }
  EXPECT_EQ(store.get("half").dtype, DType::kF16);
  EXPECT_EQ(store.get("brain").dtype, DType::kBF16);
  EXPECT_EQ(store.get("scalar").num_elements(), 1);
  EXPECT_EQ(store.get("empty").num_elements(), 0);
  EXPECT_FLOAT_EQ(store.get("model.norm.weight", {3}).data_as<float>()[2], 3.0f);
  EXPECT_EQ(store.total_bytes(), 12 + 4 + 4 + 4 + 0);
}

TEST(Safetensors, HeaderIsPaddedAndDataContiguous) {
  TempDir dir;
  write_safetensors(dir.file("x.safetensors"), small_tensors());
  std::ifstream in(dir.file("x.safetensors"), std::ios::binary);
  uint8_t prefix[8];
  in.read(reinterpret_cast<char*>(prefix), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | prefix[i];
  EXPECT_EQ(header_len % 8, 0u);
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  const json j = json::parse(header);
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  // F32 first (larger elements), then BF16, with no hole between them.
  EXPECT_EQ(j["a"]["data_offsets"], json::array({0, 24}));
  EXPECT_EQ(j["b"]["data_offsets"], json::array({24, 32}));
  EXPECT_EQ(fs::file_size(dir.file("x.safetensors")), 8 + header_len + 32);
}

TEST(Safetensors, OpensASingleFilePath) {
  TempDir dir;
  write_safetensors(dir.file("weights.safetensors"), small_tensors());
  const TensorStore store = TensorStore::open(dir.file("weights.safetensors"));
  EXPECT_EQ(store.num_tensors(), 2u);
}

TEST(Safetensors, LoadsShardsThroughTheIndex) {
  TempDir dir;
  write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                    {f32_tensor("x", {2}, {1, 2}), f32_tensor("y", {1}, {3})});
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), {f32_tensor("z", {2}, {4, 5})});
  const json index = {{"metadata", {{"total_size", 20}}},
                      {"weight_map",
                       {{"x", "model-00001-of-00002.safetensors"},
                        {"y", "model-00001-of-00002.safetensors"},
                        {"z", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();

  const TensorStore store = TensorStore::open(dir.str());
  EXPECT_EQ(store.num_tensors(), 3u);
  EXPECT_EQ(store.files().size(), 2u);
  EXPECT_EQ(store.get("z").path, dir.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(store.get("z", {2}).data_as<float>()[1], 5.0f);
  EXPECT_EQ(store.get("x").data_as<float>()[0], 1.0f);
}

TEST(Safetensors, LoadsSeveralFilesWithoutAnIndex) {
  TempDir dir;
  write_safetensors(dir.file("part-a.safetensors"), {f32_tensor("x", {1}, {1})});
  write_safetensors(dir.file("part-b.safetensors"), {f32_tensor("y", {1}, {2})});
  const TensorStore store = TensorStore::open(dir.str());
  EXPECT_EQ(store.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(store.get("y").data_as<float>()[0], 2.0f);
}

TEST(Safetensors, SameTensorInTwoFilesIsAnError) {
  TempDir dir;
  write_safetensors(dir.file("part-a.safetensors"), {f32_tensor("x", {1}, {1})});
  write_safetensors(dir.file("part-b.safetensors"), {f32_tensor("x", {1}, {2})});
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {dir.file("part-b.safetensors"), "tensor x", dir.file("part-a.safetensors")});
}

TEST(Safetensors, MetadataIsAllowed) {
  TempDir dir;
  raw_file(dir,
           R"({"__metadata__":{"format":"pt","note":"hi"},)"
           R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
           8);
  EXPECT_EQ(TensorStore::open(dir.str()).names(), std::vector<std::string>{"w"});
}

// --- broken input -------------------------------------------------------------------------

TEST(SafetensorsErrors, MissingPath) {
  expect_message(error_of([] { TensorStore::open("/nonexistent/pagoda-model"); }),
                 {"/nonexistent/pagoda-model", "no such file or directory"});
}

TEST(SafetensorsErrors, DirectoryWithoutWeights) {
  TempDir dir;
  expect_message(error_of([&] { TensorStore::open(dir.str()); }), {dir.str(), "model.safetensors"});
}

TEST(SafetensorsErrors, UnknownQuantMethodNamesTheKey) {
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), small_tensors());
  std::ofstream(dir.file("config.json"))
      << R"({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true}})";
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {dir.file("config.json"), "quantization_config.quant_method", "bitsandbytes"});
}

TEST(SafetensorsErrors, FileShorterThanEightBytes) {
  TempDir dir;
  std::ofstream(dir.file("model.safetensors"), std::ios::binary) << "abc";
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {dir.file("model.safetensors"), "3 bytes", "too short"});
}

TEST(SafetensorsErrors, HeaderLengthBeyondTheFile) {
  TempDir dir;
  const std::string path = raw_file(dir, R"({})", 0, 1000000);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "header length 1000000 exceeds the file size"});
}

TEST(SafetensorsErrors, TruncatedFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_safetensors(path, small_tensors());
  fs::resize_file(path, fs::file_size(path) - 5);  // cut into the data section
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "tensor b", "outside the data section"});
  fs::resize_file(path, 20);  // cut into the header
  expect_message(error_of([&] { TensorStore::open(dir.str()); }), {path, "header length"});
}

TEST(SafetensorsErrors, HeaderNotJson) {
  TempDir dir;
  const std::string path = raw_file(dir, "{\"a\": [1,\n2", 0);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "header is not valid JSON"});
}

TEST(SafetensorsErrors, HeaderNotAnObject) {
  TempDir dir;
  const std::string path = raw_file(dir, "[1, 2]", 0);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "header is a JSON array", "expected an object"});
}

TEST(SafetensorsErrors, EntryMissingAKey) {
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    TempDir dir;
    json entry = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
    entry.erase(key);
    const std::string path = raw_file(dir, json{{"w", entry}}.dump(), 8);
    expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                   {path, "tensor w", std::string("missing '") + key + "'"});
  }
}

TEST(SafetensorsErrors, BadShapeAndOffsets) {
  TempDir dir;
  std::string path = raw_file(dir, R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "tensor w", "not a non-negative integer"});
  path = raw_file(dir, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "tensor w", "end before they begin"});
  path = raw_file(dir, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "tensor w", "expected [begin, end]"});
  path = raw_file(dir, R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "tensor w", "'dtype'", "expected a string"});
}

TEST(SafetensorsErrors, ShapeTimesDtypeDoesNotMatchTheRange) {
  TempDir dir;
  const std::string path =
      raw_file(dir, R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", 8);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "tensor w", "shape [2, 3] of BF16 needs 12 bytes", "cover 8"});
}

TEST(SafetensorsErrors, RangeOutsideTheFile) {
  TempDir dir;
  const std::string path =
      raw_file(dir, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "tensor w", "[0, 16]", "outside the data section (8 bytes)"});
}

TEST(SafetensorsErrors, OverlappingRanges) {
  TempDir dir;
  const std::string path = raw_file(dir,
                                    R"({"p":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("q":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                    12);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "tensors p [0, 8] and q [4, 12] overlap"});
}

TEST(SafetensorsErrors, UnsupportedDtypeFailsOnlyWhenRequested) {
  TempDir dir;
  const std::string path = raw_file(dir,
                                    R"({"ok":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("fp8":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[4,8]},)"
                                    R"("ids":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},)"
                                    R"("odd":{"dtype":"Q4_K","shape":[3],"data_offsets":[16,17]}})",
                                    17);
  const TensorStore store = TensorStore::open(dir.str());  // odd tensors do not stop loading
  EXPECT_EQ(store.get("ok", {1}).dtype, DType::kF32);
  expect_message(error_of([&] { store.get("fp8"); }), {path, "tensor fp8", "dtype F8_E4M3"});
  expect_message(error_of([&] { store.get("ids"); }), {path, "tensor ids", "dtype I64"});
  expect_message(error_of([&] { store.get("odd", {3}); }), {path, "tensor odd", "dtype Q4_K"});
  ASSERT_NE(store.find("fp8"), nullptr);
  EXPECT_FALSE(store.find("fp8")->dtype_supported);
}

TEST(SafetensorsErrors, SizeOfAKnownOddDtypeIsStillChecked) {
  TempDir dir;
  const std::string path =
      raw_file(dir, R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,8]}})", 8);
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {path, "tensor ids", "needs 16 bytes"});
}

TEST(SafetensorsErrors, TensorMissing) {
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), small_tensors());
  const TensorStore store = TensorStore::open(dir.str());
  expect_message(error_of([&] {
                   store.get("lm_head.weight", {4, 2});
                 }),
                 {"tensor lm_head.weight not found in " + dir.str()});
  EXPECT_EQ(store.find("lm_head.weight"), nullptr);
  EXPECT_FALSE(store.contains("lm_head.weight"));
}

TEST(SafetensorsErrors, WrongShape) {
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), small_tensors());
  const TensorStore store = TensorStore::open(dir.str());
  expect_message(error_of([&] {
                   store.get("a", {3, 2});
                 }),
                 {dir.file("model.safetensors") + ": tensor a has shape [2, 3], expected [3, 2]"});
  expect_message(error_of([&] {
                   store.get("b", {4, 1});
                 }),
                 {"tensor b has shape [4], expected [4, 1]"});
  const std::vector<int64_t> runtime_shape = {2, 3};
  EXPECT_EQ(store.get("a", runtime_shape).num_elements(), 6);
}

TEST(SafetensorsErrors, IndexPointsToAMissingShard) {
  TempDir dir;
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), {f32_tensor("x", {1}, {1})});
  const json index = {
      {"weight_map",
       {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {dir.file("model.safetensors.index.json"), "model-00002-of-00002.safetensors",
                  "does not exist"});
}

TEST(SafetensorsErrors, IndexNamesATensorItsShardLacks) {
  TempDir dir;
  write_safetensors(dir.file("model-00001-of-00001.safetensors"), {f32_tensor("x", {1}, {1})});
  const json index = {
      {"weight_map",
       {{"x", "model-00001-of-00001.safetensors"}, {"ghost", "model-00001-of-00001.safetensors"}}}};
  std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {dir.file("model.safetensors.index.json"), "tensor ghost", "does not contain it"});
}

TEST(SafetensorsErrors, IndexNotJsonOrWithoutWeightMap) {
  TempDir dir;
  std::ofstream(dir.file("model.safetensors.index.json")) << "{\"weight_map\": ";
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {dir.file("model.safetensors.index.json"), "not valid JSON"});
  std::ofstream(dir.file("model.safetensors.index.json")) << R"({"metadata": {}})";
  expect_message(error_of([&] { TensorStore::open(dir.str()); }),
                 {dir.file("model.safetensors.index.json"), "'weight_map'"});
}

TEST(SafetensorsWriter, RejectsUnknownDtypeAndWrongByteCount) {
  TempDir dir;
  expect_message(error_of([&] {
                   write_safetensors(dir.file("x.safetensors"), {{{"w", "F7", {1}}, {0}}});
                 }),
                 {dir.file("x.safetensors"), "tensor w", "'F7'"});
  expect_message(
      error_of([&] { write_safetensors(dir.file("x.safetensors"), {f32_tensor("w", {2}, {1})}); }),
      {dir.file("x.safetensors"), "tensor w", "4 bytes given", "need 8"});
}

}  // namespace
}  // namespace pagoda
