// The plan table a job prints before training and writes to <run>/plan.txt.
#pragma once

#include <cstdint>
#include <string>

#include "bigbatch/core/table.h"
#include "bigbatch/core/threads.h"
#include "bigbatch/engine/plan.h"
#include "bigbatch/job/training_job.h"
#include "bigbatch/job/workload.h"

namespace bigbatch::job {

/// What the plan table shows besides the options and the workload.
struct PlanFacts {
  int64_t steps = 0;
  int64_t windows_per_epoch = 0;
  std::string micro_batch_search;  ///< how "auto" chose, or empty
  std::string run_dir;             ///< empty when nothing is written
  ThreadSettings threads;          ///< OpenMP and OpenBLAS threads in effect
  std::string concurrency;         ///< how "auto" chose the passes at once, or empty
};

/// The table: model, data, batch, optimization and run sections.
Table plan_table(const TrainingJobOptions& options, const Workload& w, const engine::Plan& plan,
                 const PlanFacts& facts);

}  // namespace bigbatch::job
