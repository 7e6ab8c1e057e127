#include "loader/awq_gptq.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "util/error.h"
#include "util/half.h"

namespace pagoda {
namespace {

enum class Format { kAwq, kGptqV1, kGptqV2 };

// AWQ's interleaving: nibble i of a word holds output column 8k + kAwqOrder[i].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

struct Layer {
  std::string prefix;  // "model.layers.0.self_attn.q_proj."
  const Tensor* qweight;
  const Tensor* qzeros;
  const Tensor* scales;
  const Tensor* g_idx;  // may be null
  int64_t out = 0, in = 0, group = 0, groups = 0;
};

const Tensor& require(const TensorStore& store, const std::string& name, const char* dtype) {
  const Tensor* t = store.find(name);
  if (t == nullptr) fail("tensor {} not found in {} (AWQ/GPTQ layer)", name, store.path());
  if (t->stored_dtype != dtype) {
    fail("{}: tensor {} has dtype {}, expected {}", t->path, name, t->stored_dtype, dtype);
  }
  return *t;
}

void expect_shape(const Tensor& t, std::vector<int64_t> shape) {
  if (t.shape != shape) {
    fail("{}: tensor {} has shape {}, expected {}", t.path, t.name, format_shape(t.shape),
         format_shape(shape));
  }
}

// The 4-bit value at output o of a word row packed along `out` (qzeros; AWQ qweight).
int nibble_along_out(const int32_t* row, int64_t o, bool awq) {
  const auto word = static_cast<uint32_t>(row[o / 8]);
  int slot = static_cast<int>(o % 8);
  if (awq) slot = static_cast<int>(std::find(kAwqOrder, kAwqOrder + 8, slot) - kAwqOrder);
  return static_cast<int>(word >> (4 * slot) & 0xf);
}

int weight_nibble(const Layer& l, Format f, int64_t o, int64_t c) {
  const auto* q = l.qweight->data_as<int32_t>();
  if (f == Format::kAwq) return nibble_along_out(q + c * (l.out / 8), o, true);
  const auto word = static_cast<uint32_t>(q[(c / 8) * l.out + o]);
  return static_cast<int>(word >> (4 * (c % 8)) & 0xf);
}

struct Repacked {
  std::shared_ptr<uint8_t[]> packed;
  std::shared_ptr<uint16_t[]> scales, mins;
};

Repacked repack(const Layer& l, Format f) {
  const int64_t out = l.out, in = l.in, groups = l.groups;
  Repacked r;
  r.packed = std::shared_ptr<uint8_t[]>(new uint8_t[static_cast<size_t>(out * in / 2)]);
  r.scales = std::shared_ptr<uint16_t[]>(new uint16_t[static_cast<size_t>(out * groups)]);
  r.mins = std::shared_ptr<uint16_t[]>(new uint16_t[static_cast<size_t>(out * groups)]);
  const auto* scales = l.scales->data_as<uint16_t>();
  const auto* zeros = l.qzeros->data_as<int32_t>();
  const int zero_offset = f == Format::kGptqV1 ? 1 : 0;
  const bool awq = f == Format::kAwq;
  auto group_of = [&](int64_t c) {
    return l.g_idx != nullptr ? static_cast<int64_t>(l.g_idx->data_as<int32_t>()[c]) : c / l.group;
  };
  bool contiguous = true;
  for (int64_t c = 0; c < in && contiguous; ++c) contiguous = group_of(c) == c / l.group;

#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < out; ++o) {
    std::vector<uint8_t> q(static_cast<size_t>(in));
    if (contiguous) {
      for (int64_t g = 0; g < groups; ++g) {
        const float s = f16_to_f32(scales[g * out + o]);
        const int z = nibble_along_out(zeros + g * (out / 8), o, awq) + zero_offset;
        r.scales[static_cast<size_t>(o * groups + g)] = scales[g * out + o];
        r.mins[static_cast<size_t>(o * groups + g)] = f32_to_f16(-s * static_cast<float>(z));
      }
      for (int64_t c = 0; c < in; ++c)
        q[static_cast<size_t>(c)] = static_cast<uint8_t>(weight_nibble(l, f, o, c));
    } else {
      // Scattered groups: dequantize the row exactly, then refit contiguous groups.
      std::vector<float> row(static_cast<size_t>(in));
      for (int64_t c = 0; c < in; ++c) {
        const int64_t g = group_of(c);
        const int z = nibble_along_out(zeros + g * (out / 8), o, awq) + zero_offset;
        row[static_cast<size_t>(c)] =
            f16_to_f32(scales[g * out + o]) * static_cast<float>(weight_nibble(l, f, o, c) - z);
      }
      quantize_rows_i4(row.data(), 1, in, l.group, r.packed.get() + o * in / 2,
                       r.scales.get() + o * groups, r.mins.get() + o * groups);
      continue;
    }
    uint8_t* dst = r.packed.get() + o * in / 2;
    for (int64_t run = 0; run < in; run += 32) {
      for (int64_t j = 0; j < 16; ++j) {
        dst[run / 2 + j] = static_cast<uint8_t>(q[static_cast<size_t>(run + j)] |
                                                q[static_cast<size_t>(run + j + 16)] << 4);
      }
    }
  }
  return r;
}

}  // namespace

int repack_awq_gptq(TensorStore& store, const nlohmann::json& qc) {
  if (!qc.is_object()) return 0;
  const std::string method = qc.value("quant_method", std::string());
  if (method != "awq" && method != "gptq") return 0;
  const int bits = qc.value("bits", qc.value("w_bit", 0));
  if (bits != 4) {
    fail("{}: {} checkpoints with {} bits are not supported (Pagoda reads 4-bit AWQ/GPTQ)",
         store.path(), method, bits);
  }
  Format format = Format::kAwq;
  if (method == "gptq") {
    const std::string ckpt = qc.value("checkpoint_format", std::string("gptq"));
    format = ckpt == "gptq_v2" ? Format::kGptqV2 : Format::kGptqV1;
  }
  if (method == "awq" && qc.value("version", std::string("gemm")) != "gemm") {
    fail("{}: AWQ version '{}' is not supported (Pagoda reads the GEMM layout)", store.path(),
         qc.value("version", std::string()));
  }
  const int64_t group_size = qc.value("group_size", qc.value("q_group_size", int64_t{128}));

  std::vector<Layer> layers;
  for (const auto& [name, t] : store.tensors()) {
    const std::string suffix = ".qweight";
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    Layer l;
    l.prefix = name.substr(0, name.size() - suffix.size() + 1);
    l.qweight = &require(store, name, "I32");
    l.qzeros = &require(store, l.prefix + "qzeros", "I32");
    l.scales = &require(store, l.prefix + "scales", "F16");
    l.g_idx = store.find(l.prefix + "g_idx");
    if (l.qweight->shape.size() != 2 || l.scales->shape.size() != 2) {
      fail("{}: tensor {} must be 2-D, has shape {}", t.path, name, format_shape(t.shape));
    }
    l.out = l.scales->shape[1];
    l.in = format == Format::kAwq ? l.qweight->shape[0] : l.qweight->shape[0] * 8;
    l.group = group_size > 0 ? group_size : l.in;
    if (l.in % l.group != 0 || l.group % 32 != 0 || l.out % 8 != 0) {
      fail("{}: layer {} ([{}, {}]) does not split into groups of {} (a multiple of 32 is needed)",
           t.path, l.prefix, l.out, l.in, l.group);
    }
    l.groups = l.in / l.group;
    expect_shape(*l.qweight, format == Format::kAwq ? std::vector<int64_t>{l.in, l.out / 8}
                                                    : std::vector<int64_t>{l.in / 8, l.out});
    expect_shape(*l.qzeros, {l.groups, l.out / 8});
    expect_shape(*l.scales, {l.groups, l.out});
    if (l.g_idx != nullptr) {
      if (l.g_idx->stored_dtype != "I32") {
        fail("{}: tensor {}g_idx has dtype {}, expected I32", l.g_idx->path, l.prefix,
             l.g_idx->stored_dtype);
      }
      expect_shape(*l.g_idx, {l.in});
      const auto* g = l.g_idx->data_as<int32_t>();
      for (int64_t c = 0; c < l.in; ++c) {
        if (g[c] < 0 || g[c] >= l.groups) {
          fail("{}: tensor {}g_idx[{}] = {} is outside [0, {})", l.g_idx->path, l.prefix, c, g[c],
               l.groups);
        }
      }
    }
    layers.push_back(l);
  }

  for (const Layer& l : layers) {
    Repacked r = repack(l, format);
    Tensor w;
    w.name = l.prefix + "weight";
    w.path = l.qweight->path;
    w.stored_dtype = method == "awq" ? "AWQ" : "GPTQ";
    w.dtype_supported = true;
    w.dtype = DType::kI4;
    w.shape = {l.out, l.in};
    w.data = r.packed.get();
    w.size_bytes = l.out * l.in / 2;
    w.scales = r.scales.get();
    w.mins = r.mins.get();
    w.group_size = l.group;
    const std::string name = w.name;
    store.add(std::move(w), r.packed);
    store.add_keep_alive(r.scales, name);
    store.add_keep_alive(r.mins, name);
  }
  return static_cast<int>(layers.size());
}

}  // namespace pagoda
