// Running a job under Slurm: what `loom launch --slurm` reads from Slurm's environment. Inside an
// allocation (sbatch / salloc) the launcher starts one task per process with srun; each task
// (SLURM_PROCID set) takes its rank from Slurm, ranks 0..S-1 being the servers and S..S+N-1 the
// workers, and every process's endpoint from the step's node list: the node Slurm placed the
// task on, port BASE + the task's index on that node.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace loom::runtime {

// "node[01-03,7],gpu5" -> node01 node02 node03 node7 gpu5 (Slurm's compressed host list; a
// range keeps its zero padding). Errors name the malformed part.
StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list);

// "2(x3),1" -> 2 2 2 1 (SLURM_TASKS_PER_NODE).
StatusOr<std::vector<int>> ExpandTasksPerNode(const std::string& spec);

// This task of a job step: its rank, and every task's host in rank order (Slurm's default block
// distribution: the first node's tasks, then the second's, ...).
struct SlurmStep {
  int rank = 0;
  std::vector<std::string> task_hosts;
  std::vector<int> local_index;  // each task's index among the tasks of its node
};

// From SLURM_PROCID, SLURM_NTASKS (or SLURM_STEP_NUM_TASKS), SLURM_STEP_NODELIST (or
// SLURM_JOB_NODELIST) and SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE). An unset or
// inconsistent variable is an error naming it.
StatusOr<SlurmStep> SlurmStepFromEnv();

}  // namespace loom::runtime
