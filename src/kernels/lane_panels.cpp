#include "kernels/lane_panels.h"

#include <cstring>
#include <vector>

#include "util/error.h"
#include "util/half.h"

namespace pagoda {

namespace {

// int4 panels store each nibble q as q ^ 8 (lane_panels.h): xor-ing a byte of two nibbles
// with this flips both, and flipping again gives the row-major byte back.
constexpr uint8_t kInt4PanelFlip = 0x88;

bool has_mins_plane(const WeightView& w) {
  return w.dtype == DType::kI4 && !w.symmetric_int4;
}

// Throws unless `w` can be packed in `layout` (before any size is computed from either).
void check_packable(const WeightView& w, LanePanelLayout layout) {
  // int4: a panel byte pairs a value with the one 16 columns on, which sits 16 R bytes later in
  // the int8 order only when chunks do not straddle the run's halves.
  const int64_t divides = w.dtype == DType::kI4 ? 16 : 32;
  if (layout.rows <= 0 || layout.row_bytes <= 0 || divides % layout.row_bytes != 0) {
    fail("lane panels of {}: a layout of {} rows x {} bytes (expected rows > 0, bytes dividing {})",
         dtype_name(w.dtype), layout.rows, layout.row_bytes, divides);
  }
  if ((w.dtype != DType::kI8 && w.dtype != DType::kI4) || w.lane_panels != nullptr ||
      w.data == nullptr || w.rows <= 0 || w.scales == nullptr ||
      (has_mins_plane(w) && w.mins == nullptr) || w.group_size <= 0 ||
      w.group_size % layout.row_bytes != 0 || w.cols % 32 != 0 || w.cols % w.group_size != 0) {
    fail(
        "lane panels of {} bytes: expected row-major int8 or int4 weights in groups of a "
        "multiple of {} over a multiple of 32 columns, got dtype {} [{}, {}] in groups of {}",
        layout.row_bytes, layout.row_bytes, dtype_name(w.dtype), w.rows, w.cols, w.group_size);
  }
}

// The byte offsets of a panel's planes.
struct PanelPlanes {
  int64_t row_bytes, scales, mins, bytes;
};
PanelPlanes panel_planes(const WeightView& w, LanePanelLayout layout) {
  const int64_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
  const int64_t scales = layout.rows * row_bytes;
  const int64_t mins = scales + layout.rows * (w.cols / w.group_size) * 2;
  return {row_bytes, scales, mins, lane_panel_bytes(w, layout)};
}

}  // namespace

WeightView pack_lane_panels_into(const WeightView& w, LanePanelLayout layout, void* dst) {
  check_packable(w, layout);
  const int64_t num_groups = w.cols / w.group_size;
  const int64_t num_rows = layout.rows, chunk = layout.row_bytes;
  const PanelPlanes planes = panel_planes(w, layout);
  const int64_t num_panels = num_lane_panels(w.rows, layout);
  const uint8_t flip = w.dtype == DType::kI4 ? kInt4PanelFlip : 0;
  const bool mins = has_mins_plane(w);
  auto* bytes = static_cast<int8_t*>(dst);
  // Rows past the matrix: the tiles compute them (and nobody stores them), so they must be
  // finite, and zeros are.
  std::memset(bytes + (num_panels - 1) * planes.bytes, 0, static_cast<size_t>(planes.bytes));
  const auto* values = static_cast<const uint8_t*>(w.data);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < num_panels; ++i) {
    auto* panel = reinterpret_cast<uint8_t*>(bytes + i * planes.bytes);
    const int64_t first = i * num_rows;
    for (int64_t r = 0; r < num_rows && first + r < w.rows; ++r) {
      const uint8_t* src = values + (first + r) * planes.row_bytes;
      for (int64_t k = 0; k < planes.row_bytes / chunk; ++k) {
        uint8_t* out = panel + (k * num_rows + r) * chunk;
        for (int64_t j = 0; j < chunk; ++j) out[j] = src[k * chunk + j] ^ flip;
      }
      for (int64_t g = 0; g < num_groups; ++g) {
        // memcpy: the panel's planes need not be 2-byte aligned in a buffer of int8.
        const int64_t at = (first + r) * num_groups + g, to = (g * num_rows + r) * 2;
        std::memcpy(panel + planes.scales + to, &w.scales[at], 2);
        if (mins) std::memcpy(panel + planes.mins + to, &w.mins[at], 2);
      }
    }
  }
  return with_lane_panels(w, bytes, layout);
}

LanePanels pack_lane_panels(const WeightView& w, LanePanelLayout layout) {
  check_packable(w, layout);
  LanePanels out;
  out.size_bytes = lane_panels_bytes(w, layout);
  out.bytes = std::shared_ptr<int8_t[]>(new int8_t[static_cast<size_t>(out.size_bytes)]);
  pack_lane_panels_into(w, layout, out.bytes.get());
  return out;
}

WeightView with_lane_panels(const WeightView& w, const int8_t* panels, LanePanelLayout layout) {
  WeightView out = w;
  out.lane_panels = panels;
  out.lane_panel_layout = layout;
  out.data = nullptr;
  out.scales = nullptr;
  out.mins = nullptr;
  return out;
}

WeightView unpacked_lane_panel_row(const WeightView& w, int64_t row) {
  static thread_local std::vector<uint8_t> values;
  static thread_local std::vector<uint16_t> scales, mins;
  const LanePanelLayout layout = w.lane_panel_layout;
  const int64_t num_groups = w.cols / w.group_size;
  const int64_t num_rows = layout.rows, chunk = layout.row_bytes;
  const PanelPlanes planes = panel_planes(w, layout);
  const bool int4 = w.dtype == DType::kI4;
  const uint8_t flip = int4 ? kInt4PanelFlip : 0;
  values.resize(static_cast<size_t>(planes.row_bytes));
  scales.resize(static_cast<size_t>(num_groups));
  mins.resize(static_cast<size_t>(int4 ? num_groups : 0));
  const auto* panel =
      reinterpret_cast<const uint8_t*>(w.lane_panels) + row / num_rows * planes.bytes;
  const int64_t r = row % num_rows;
  for (int64_t k = 0; k < planes.row_bytes / chunk; ++k) {
    const uint8_t* in = panel + (k * num_rows + r) * chunk;
    for (int64_t j = 0; j < chunk; ++j) values[k * chunk + j] = in[j] ^ flip;
  }
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t at = (g * num_rows + r) * 2;
    std::memcpy(&scales[g], panel + planes.scales + at, 2);
    if (has_mins_plane(w)) {
      std::memcpy(&mins[g], panel + planes.mins + at, 2);
    } else if (int4) {  // exact: the packer stored no plane only where min == -8 * scale held
      mins[g] = f32_to_f16(-8.0f * f16_to_f32(scales[g]));
    }
  }
  WeightView one = w;
  one.lane_panels = nullptr;
  one.lane_panel_layout = {};
  one.data = values.data();
  one.scales = scales.data();
  one.mins = int4 ? mins.data() : nullptr;
  one.rows = 1;
  return one;
}

}  // namespace pagoda
