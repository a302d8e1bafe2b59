// SelectedRows: what a SELECTED_ROWS variable holds (Fluid's SelectedRows), a sparse slice of a
// [height, ...] tensor. `value` is [rows.size(), ...]: its row i is row rows[i] of the slice.
// An embedding's sparse gradient is one: only the rows a batch looked up, each id once per
// occurrence, so an id may repeat (unmerged); MergeRows sums repeats into one row per id.
// Every rows[i] lies in [0, height) once a producer has checked it (CheckSelectedRows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "framework/tensor.h"

namespace loom {

struct SelectedRows {
  std::vector<int64_t> rows;
  Tensor value;
  int64_t height = 0;

  // The dense shape the slice belongs to: [height] + value's dims after the first.
  DDim DenseDims() const;
  // The number of elements in one row (value's dims after the first).
  int64_t RowWidth() const;
};

// rows.size() equals value's first dim, every row lies in [0, height), and value is an
// initialized CPU or CUDA tensor of at least one dim. `where` names the variable in errors.
Status CheckSelectedRows(const SelectedRows& s, const std::string& where);

// out = s with repeated rows summed, one row per id, ids in ascending order (host only).
// Deterministic: each id's row is summed in the order the repeats appear.
Status MergeRows(const SelectedRows& s, SelectedRows* out);

// dense = s scattered into a zero tensor of DenseDims(); repeats add up (host only).
Status SelectedRowsToDense(const SelectedRows& s, Tensor* dense);

// "rows 3 of height 10 {1, 4, 7} value float32[3, 2] {...}" for errors and `loom inspect`.
std::string SelectedRowsSummary(const SelectedRows& s, int max_elems = 8);

}  // namespace loom
