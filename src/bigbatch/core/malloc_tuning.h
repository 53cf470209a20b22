// glibc malloc settings for training. Tensors of a training step are allocated and freed in the
// same sizes at every micro-batch; with glibc's defaults, blocks above the (dynamic) mmap
// threshold are mapped and unmapped, and free memory at the top of the heap is returned to the
// kernel, so the next micro-batch page-faults the same memory in again, zeroed. Measured in
// docs/BENCHMARKS.md, "What was fixed: page faults of freed tensor memory". Where another
// allocator serves malloc (mimalloc, linked into the bigbatch executable), nothing is set.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace bigbatch {

/// glibc's largest M_MMAP_THRESHOLD on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): blocks up to this
/// size come from the heap and are reused.
inline constexpr size_t kMallocMmapThreshold = size_t{32} << 20;
/// Free memory kept at the top of the heap before it is returned to the kernel.
inline constexpr size_t kMallocTrimThreshold = size_t{512} << 20;

/// Whether bigbatch should set its malloc thresholds, given the environment variables that set
/// them already (nullopt: unset): not when the user chose any malloc setting through
/// GLIBC_TUNABLES (a glibc.malloc. entry), MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_.
bool malloc_tuning_wanted(const std::optional<std::string>& glibc_tunables,
                          const std::optional<std::string>& mmap_threshold_env,
                          const std::optional<std::string>& trim_threshold_env);

/// What tune_malloc_for_training did.
enum class MallocTuning {
  kNotRun,        ///< not called in this process (a program that uses the bigbatch library)
  kSet,           ///< glibc's thresholds set to the values above
  kUserSettings,  ///< the user chose malloc settings: kept
  kNotGlibc,      ///< another allocator serves malloc (mimalloc in the bigbatch executable)
  kRefused,       ///< glibc refused the values
};

/// Sets M_MMAP_THRESHOLD and M_TRIM_THRESHOLD to the values above when glibc serves malloc and
/// malloc_tuning_wanted for this process's environment; says what it did. Call first in main(),
/// before large allocations.
MallocTuning tune_malloc_for_training();

/// What tune_malloc_for_training did in this process (kNotRun before it is called).
MallocTuning malloc_tuning_outcome();

}  // namespace bigbatch
