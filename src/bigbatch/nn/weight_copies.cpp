#include "bigbatch/nn/weight_copies.h"

#include <cstdint>
#include <vector>

namespace bigbatch::nn {
namespace {

/// One kept copy: its sources (held, so that no other tensor can take their place) and their
/// versions when it was made.
struct KeptCopy {
  std::vector<torch::Tensor> sources;
  std::vector<uint32_t> versions;
  torch::ScalarType dtype;
  torch::Tensor copy;
};

/// This thread's open scopes and the copies of the outermost.
struct ThreadCopies {
  int depth = 0;
  std::vector<KeptCopy> kept;  // a block's few weights each: a scan is cheaper than a cast
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

WeightCopyScope::WeightCopyScope() {
  ++this_thread.depth;
}

WeightCopyScope::~WeightCopyScope() {
  if (--this_thread.depth == 0)
    this_thread.kept.clear();
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
  std::vector<KeptCopy>& kept = this_thread.kept;
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
