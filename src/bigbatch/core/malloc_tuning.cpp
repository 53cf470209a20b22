#include "bigbatch/core/malloc_tuning.h"

#include <malloc.h>

#include "bigbatch/core/malloc_library.h"
#include "bigbatch/core/system_info.h"

namespace bigbatch {
namespace {

MallocTuning tuning_outcome = MallocTuning::kNotRun;

}  // namespace

bool malloc_tuning_wanted(const std::optional<std::string>& glibc_tunables,
                          const std::optional<std::string>& mmap_threshold_env,
                          const std::optional<std::string>& trim_threshold_env) {
  if (mmap_threshold_env.has_value() || trim_threshold_env.has_value())
    return false;
  return !glibc_tunables.has_value() || glibc_tunables->find("glibc.malloc.") == std::string::npos;
}

MallocTuning tune_malloc_for_training() {
  if (malloc_kind() != MallocKind::kGlibc)
    return tuning_outcome = MallocTuning::kNotGlibc;
  if (!malloc_tuning_wanted(environment_variable("GLIBC_TUNABLES"),
                            environment_variable("MALLOC_MMAP_THRESHOLD_"),
                            environment_variable("MALLOC_TRIM_THRESHOLD_")))
    return tuning_outcome = MallocTuning::kUserSettings;
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMallocMmapThreshold)) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kMallocTrimThreshold)) == 1;
  return tuning_outcome = mmap_set && trim_set ? MallocTuning::kSet : MallocTuning::kRefused;
}

MallocTuning malloc_tuning_outcome() {
  return tuning_outcome;
}

}  // namespace bigbatch
