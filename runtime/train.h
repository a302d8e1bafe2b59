// The training loop of `loom run`: steps of a runner over minibatches drawn from whole feed
// tensors, with progress lines, a timeline of the last steps and parameters saved at the end.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "framework/tensor.h"
#include "runtime/runner.h"

namespace loom::runtime {

// A feed's whole data: minibatches are its rows [offset, offset + batch) along dim 0, wrapping
// around to row 0 past the end.
struct FeedData {
  std::string name;
  Tensor data;
};

struct TrainOptions {
  int64_t iters = 100;
  int64_t batch = 0;  // global minibatch rows (1 .. the feeds' rows)
  int64_t print_every = 10;
  std::vector<std::string> fetches;
  std::string timeline;  // a chrome://tracing JSON of the last timeline_iters steps; empty: none
  int64_t timeline_iters = 5;
  std::string save_params;  // rank 0's persistables at the end; empty: not saved
  // Checkpoints on a schedule: every checkpoint_every steps rank 0's persistables go to
  // checkpoint_dir/step-<N> (written whole and swapped in, as SaveParams does); only the newest
  // keep_checkpoints complete ones are kept. 0: none.
  int64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  int64_t keep_checkpoints = 3;
  // Resumed from a checkpoint of step first_step (the parameters already loaded): the steps
  // first_step + 1 .. iters run, reading the minibatches those steps read.
  int64_t first_step = 0;
  FILE* out = stdout;  // progress (written by the process running rank 0 only)
};

// The complete checkpoints under dir (step-<N> directories holding their CHECKPOINT file), as
// (N, path), ascending by N. A directory that does not exist holds none.
StatusOr<std::vector<std::pair<int64_t, std::string>>> ListCheckpoints(const std::string& dir);

// Rows [offset, offset + batch) of data, wrapping around past the end (a copy then; a view
// otherwise). Requires 0 <= offset < rows and 1 <= batch <= rows.
Tensor Minibatch(const Tensor& data, int64_t offset, int64_t batch);

// Runs options.iters steps. The progress line of a step shows each fetch (the first as a number
// over the global batch, see Runner::GlobalFirstValue) and the steps per second since the last
// line; the last line the first and last value of the first fetch.
Status Train(Runner& runner, const std::vector<FeedData>& feeds, const TrainOptions& options);

}  // namespace loom::runtime
