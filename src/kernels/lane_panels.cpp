#include "kernels/lane_panels.h"

#include <cstring>
#include <vector>

#include "util/error.h"

namespace pagoda {

namespace {

// Throws unless `w` can be packed in `layout` (before any size is computed from either).
void check_packable(const WeightView& w, LanePanelLayout layout) {
  if (layout.rows <= 0 || layout.row_bytes <= 0 || 32 % layout.row_bytes != 0) {
    fail("lane panels: a layout of {} rows x {} bytes (expected rows > 0, bytes dividing 32)",
         layout.rows, layout.row_bytes);
  }
  if (w.dtype != DType::kI8 || w.lane_panels != nullptr || w.data == nullptr || w.rows <= 0 ||
      w.scales == nullptr || w.group_size <= 0 || w.group_size % layout.row_bytes != 0 ||
      w.cols % 32 != 0 || w.cols % w.group_size != 0) {
    fail(
        "lane panels of {} bytes: expected row-major int8 weights in groups of a multiple of {} "
        "over a multiple of 32 columns, got dtype {} [{}, {}] in groups of {}",
        layout.row_bytes, layout.row_bytes, dtype_name(w.dtype), w.rows, w.cols, w.group_size);
  }
}

}  // namespace

WeightView pack_int8_lane_panels_into(const WeightView& w, LanePanelLayout layout, void* dst) {
  check_packable(w, layout);
  const int64_t cols = w.cols, num_groups = cols / w.group_size;
  const int64_t num_rows = layout.rows, chunk = layout.row_bytes;
  const int64_t panel_bytes = lane_panel_bytes(cols, w.group_size, layout);
  const int64_t num_panels = num_lane_panels(w.rows, layout);
  auto* bytes = static_cast<int8_t*>(dst);
  // Rows past the matrix: the tiles compute them (and nobody stores them), so they must be
  // finite, and zeros are.
  std::memset(bytes + (num_panels - 1) * panel_bytes, 0, static_cast<size_t>(panel_bytes));
  const auto* values = static_cast<const int8_t*>(w.data);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < num_panels; ++i) {
    int8_t* panel = bytes + i * panel_bytes;
    int8_t* scales = panel + num_rows * cols;
    const int64_t first = i * num_rows;
    for (int64_t r = 0; r < num_rows && first + r < w.rows; ++r) {
      const int8_t* src = values + (first + r) * cols;
      for (int64_t k = 0; k < cols / chunk; ++k) {
        std::memcpy(panel + (k * num_rows + r) * chunk, src + k * chunk,
                    static_cast<size_t>(chunk));
      }
      for (int64_t g = 0; g < num_groups; ++g) {
        // memcpy: the panel's scales need not be 2-byte aligned in a buffer of int8.
        std::memcpy(scales + (g * num_rows + r) * 2, &w.scales[(first + r) * num_groups + g], 2);
      }
    }
  }
  return with_lane_panels(w, bytes, layout);
}

LanePanels pack_int8_lane_panels(const WeightView& w, LanePanelLayout layout) {
  check_packable(w, layout);
  LanePanels out;
  out.size_bytes = lane_panels_bytes(w, layout);
  out.bytes = std::shared_ptr<int8_t[]>(new int8_t[static_cast<size_t>(out.size_bytes)]);
  pack_int8_lane_panels_into(w, layout, out.bytes.get());
  return out;
}

WeightView with_lane_panels(const WeightView& w, const int8_t* panels, LanePanelLayout layout) {
  WeightView out = w;
  out.lane_panels = panels;
  out.lane_panel_layout = layout;
  out.data = nullptr;
  out.scales = nullptr;
  return out;
}

WeightView unpacked_lane_panel_row(const WeightView& w, int64_t row) {
  static thread_local std::vector<int8_t> values;
  static thread_local std::vector<uint16_t> scales;
  const LanePanelLayout layout = w.lane_panel_layout;
  const int64_t cols = w.cols, num_groups = cols / w.group_size;
  const int64_t num_rows = layout.rows, chunk = layout.row_bytes;
  values.resize(static_cast<size_t>(cols));
  scales.resize(static_cast<size_t>(num_groups));
  const int8_t* panel =
      w.lane_panels + row / num_rows * lane_panel_bytes(cols, w.group_size, layout);
  const int64_t r = row % num_rows;
  for (int64_t k = 0; k < cols / chunk; ++k) {
    std::memcpy(&values[k * chunk], panel + (k * num_rows + r) * chunk, static_cast<size_t>(chunk));
  }
  const int8_t* panel_scales = panel + num_rows * cols;
  for (int64_t g = 0; g < num_groups; ++g) {
    std::memcpy(&scales[g], panel_scales + (g * num_rows + r) * 2, 2);
  }
  WeightView one = w;
  one.lane_panels = nullptr;
  one.lane_panel_layout = {};
  one.data = values.data();
  one.scales = scales.data();
  one.rows = 1;
  return one;
}

}  // namespace pagoda
