// int8 weights repacked once at load into the row-interleaved panels that a table's W8A8 tiles
// read (KernelTable::int8_lane_panels names the layout: x86 without VNNI, x86/int8_lane_panels.h;
// AArch64 with the dot product or i8mm, arm/int8_panels.h), so that neither prefill, batched
// decode nor a MoE expert's few tokens repack a panel per call, and decode streams the same
// bytes: the panels replace the row-major values and scales (WeightView::lane_panels), they do
// not sit beside them.
//
// Layout of R rows x B bytes (LanePanelLayout{R, B}), panel after panel (panel i holds rows
// [R i, R i + R); rows past the matrix are zero, values and scales):
//   values [cols / B][R][B] int8: chunk k of row r (w[r][B k .. B k + B)) at (k * R + r) * B,
//          so one vector load of R * B bytes (or a part of it) is every row's next B values;
//   scales [num_groups][R] fp16: group g of row r at g * R + r.
// x86's 16 x 2: 16 bytes widened by vpmovsxbw are 8 rows' pairs, one per int32 lane, for
// vpmaddwd. AArch64's 4 x 4: 16 bytes are 4 rows' next 4 values, one row per sdot lane against
// 4 activations broadcast by element. 4 x 8: 16 bytes are a row pair's next 8 values, the
// 2 x 8 operand of smmla.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/kernels.h"

namespace pagoda {

// Bytes of one panel of a [*, cols] matrix in groups of group_size.
inline int64_t lane_panel_bytes(int64_t cols, int64_t group_size, LanePanelLayout layout) {
  return layout.rows * cols + layout.rows * (cols / group_size) * 2;
}
inline int64_t num_lane_panels(int64_t rows, LanePanelLayout layout) {
  return (rows + layout.rows - 1) / layout.rows;
}

// The panels of an int8 matrix, owning their bytes.
struct LanePanels {
  std::shared_ptr<int8_t[]> bytes;
  int64_t size_bytes = 0;
};

// Bytes of the panels of `w` ([rows, cols] in groups of w.group_size), the last panel padded
// to layout.rows rows.
inline int64_t lane_panels_bytes(const WeightView& w, LanePanelLayout layout) {
  return num_lane_panels(w.rows, layout) * lane_panel_bytes(w.cols, w.group_size, layout);
}

// Packs row-major kI8 weights (cols a multiple of 32, groups a multiple of layout.row_bytes)
// into `dst`, lane_panels_bytes(w, layout) bytes (the padding rows are written as zeros), and
// returns w as the panels say (with_lane_panels). Threads over panels. Throws Error for other
// weights and layouts.
WeightView pack_int8_lane_panels_into(const WeightView& w, LanePanelLayout layout, void* dst);
// The same into bytes of its own.
LanePanels pack_int8_lane_panels(const WeightView& w, LanePanelLayout layout);

// w as the panels say: lane_panels and lane_panel_layout set, data and scales null (nothing
// else reads them).
WeightView with_lane_panels(const WeightView& w, const int8_t* panels, LanePanelLayout layout);

// Row `row` of a panel-packed weight (any layout) back in row-major form: a one-row WeightView
// into per-thread storage, valid until the next call on this thread (dequantize_row of a
// packed matrix; not a hot path).
WeightView unpacked_lane_panel_row(const WeightView& w, int64_t row);

}  // namespace pagoda
