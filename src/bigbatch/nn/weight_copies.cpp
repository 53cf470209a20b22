#include "bigbatch/nn/weight_copies.h"

#include <cstdint>
#include <mutex>
#include <vector>

namespace bigbatch::nn {

/// A scope's copies (a block's few weights each: a scan is cheaper than a cast), guarded for the
/// threads that share them.
struct KeptWeightCopies {
  /// One kept copy: its sources (held, so that no other tensor can take their place) and their
  /// versions when it was made.
  struct Copy {
    std::vector<torch::Tensor> sources;
    std::vector<uint32_t> versions;
    torch::ScalarType dtype;
    torch::Tensor copy;
  };
  std::mutex mutex;
  std::vector<Copy> kept;
};

namespace {

using KeptCopy = KeptWeightCopies::Copy;

/// This thread's open scopes and the copies of the outermost.
struct ThreadCopies {
  int depth = 0;
  std::shared_ptr<KeptWeightCopies> copies;  // while depth > 0
};

thread_local ThreadCopies this_thread;

bool same_sources(const KeptCopy& kept, std::initializer_list<const torch::Tensor*> sources,
                  torch::ScalarType dtype) {
  if (kept.dtype != dtype || kept.sources.size() != sources.size())
    return false;
  size_t i = 0;
  for (const torch::Tensor* source : sources) {
    if (!kept.sources[i].is_same(*source))
      return false;
    ++i;
  }
  return true;
}

bool unchanged(const KeptCopy& kept) {
  for (size_t i = 0; i < kept.sources.size(); ++i)
    if (kept.sources[i]._version() != kept.versions[i])
      return false;
  return true;
}

}  // namespace

WeightCopyScope::WeightCopyScope() : WeightCopyScope(nullptr) {}

WeightCopyScope::WeightCopyScope(std::shared_ptr<KeptWeightCopies> shared) {
  if (this_thread.depth++ == 0)
    this_thread.copies = shared ? std::move(shared) : std::make_shared<KeptWeightCopies>();
}

WeightCopyScope::~WeightCopyScope() {
  if (--this_thread.depth == 0)
    this_thread.copies.reset();
}

std::shared_ptr<KeptWeightCopies> shared_weight_copies() {
  return this_thread.copies;
}

bool weight_copies_kept() {
  return this_thread.depth > 0;
}

torch::Tensor weight_copy(std::initializer_list<const torch::Tensor*> sources,
                          torch::ScalarType dtype, const std::function<torch::Tensor()>& make) {
  if (this_thread.depth == 0)
    return make();
  for (const torch::Tensor* source : sources)
    if (!source->defined() || !source->is_leaf() || !source->requires_grad())
      return make();
  KeptWeightCopies& copies = *this_thread.copies;
  // Held while a copy is made: a thread sharing the copies waits for it rather than casting too.
  const std::lock_guard<std::mutex> lock(copies.mutex);
  std::vector<KeptCopy>& kept = copies.kept;
  for (auto it = kept.begin(); it != kept.end(); ++it) {
    if (!same_sources(*it, sources, dtype))
      continue;
    if (unchanged(*it))
      return it->copy;
    kept.erase(it);  // changed in place: made again below
    break;
  }
  KeptCopy entry;
  for (const torch::Tensor* source : sources) {
    entry.sources.push_back(*source);
    entry.versions.push_back(source->_version());
  }
  entry.dtype = dtype;
  entry.copy = make();
  kept.push_back(entry);
  return entry.copy;
}

torch::Tensor weight_in_dtype(const torch::Tensor& weight, torch::ScalarType dtype) {
  if (!weight.defined() || weight.scalar_type() == dtype)
    return weight;
  return weight_copy({&weight}, dtype, [&] { return weight.to(dtype); });
}

}  // namespace bigbatch::nn
