// int8 weights repacked once at load into the 16-row panels that the x86 W8A8 tiles without
// VNNI read (x86/int8_lane_panels.h), so that neither prefill, batched decode nor a MoE
// expert's few tokens repack a panel per call, and decode streams the same bytes: the panels
// replace the row-major values and scales (WeightView::lane_panels), they do not sit beside
// them.
//
// Layout, panel after panel (panel i holds rows [16 i, 16 i + 16); rows past the matrix are
// zero, values and scales):
//   values [cols / 2][16][2] int8: pair p of row r at (p * 16 + r) * 2, i.e. (w[r][2p],
//          w[r][2p + 1]), so 16 bytes widened by vpmovsxbw are 8 rows' pairs, one per int32
//          lane, ready for vpmaddwd against a broadcast activation pair;
//   scales [num_groups][16] fp16: group g of row r at g * 16 + r.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/kernels.h"

namespace pagoda {

inline constexpr int64_t kLanePanelRows = 16;

// Bytes of one panel of a [*, cols] matrix in groups of group_size.
inline int64_t lane_panel_bytes(int64_t cols, int64_t group_size) {
  return kLanePanelRows * cols + kLanePanelRows * (cols / group_size) * 2;
}
inline int64_t num_lane_panels(int64_t rows) {
  return (rows + kLanePanelRows - 1) / kLanePanelRows;
}

// The panels of an int8 matrix, owning their bytes.
struct LanePanels {
  std::shared_ptr<int8_t[]> bytes;
  int64_t size_bytes = 0;
};

// Bytes of the panels of `w` ([rows, cols] in groups of w.group_size), the last panel padded
// to 16 rows.
inline int64_t lane_panels_bytes(const WeightView& w) {
  return num_lane_panels(w.rows) * lane_panel_bytes(w.cols, w.group_size);
}

// Packs row-major kI8 weights (any group size, cols a multiple of 32) into `dst`,
// lane_panels_bytes(w) bytes (the padding rows are written as zeros), and returns w as the
// panels say (with_lane_panels). Threads over panels. Throws Error for other weights.
WeightView pack_int8_lane_panels_into(const WeightView& w, void* dst);
// The same into bytes of its own.
LanePanels pack_int8_lane_panels(const WeightView& w);

// w as the panels say: lane_panels set, data and scales null (nothing else reads them).
WeightView with_lane_panels(const WeightView& w, const int8_t* panels);

// Row `row` of a panel-packed weight back in row-major form: a one-row WeightView into
// per-thread storage, valid until the next call on this thread (dequantize_row of a packed
// matrix; not a hot path).
WeightView unpacked_lane_panel_row(const WeightView& w, int64_t row);

}  // namespace pagoda
