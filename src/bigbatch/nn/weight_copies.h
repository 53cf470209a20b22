// Compute-dtype copies of the fused blocks' weights, made once per accumulation window. Under bf16
// autocast every micro-batch's forward casts each float32 weight to bf16 again (autocast's own
// cache lives only as long as one forward), although the weights do not change until the window's
// optimizer step: 12.6M values read and half as many bytes written per micro-batch on a GPT of
// width 512. The engine opens a WeightCopyScope around a window's passes; the fused blocks then
// reuse their copies (docs/BENCHMARKS.md).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <initializer_list>
#include <memory>

namespace bigbatch::nn {

/// The copies an open WeightCopyScope keeps, which scopes on other threads may share.
struct KeptWeightCopies;

/// For its lifetime, weight_copy on this thread keeps what it makes and hands it out again while
/// its sources are unchanged. Nested scopes share the outermost one's copies, which are freed when
/// it ends (and, where other threads' scopes share them, when the last of those ends). Open it only
/// where the weights do not change (in place or by `.data()`) between its start and its end except
/// through operations that bump their version: an accumulation window's passes, before its
/// optimizer step.
class WeightCopyScope {
 public:
  WeightCopyScope();
  /// A scope that keeps its copies with `shared`, another thread's open scope's
  /// (shared_weight_copies() on that thread): passes of one window on several threads
  /// (engine::ConcurrentMicroBatches) then cast each weight once between them. Null: a scope of
  /// its own. Nested in an open scope, the outermost one's copies stay this thread's.
  explicit WeightCopyScope(std::shared_ptr<KeptWeightCopies> shared);
  ~WeightCopyScope();
  WeightCopyScope(const WeightCopyScope&) = delete;
  WeightCopyScope& operator=(const WeightCopyScope&) = delete;
};

/// The copies of the scope open on this thread, to open a WeightCopyScope with on another thread;
/// null where none is open.
std::shared_ptr<KeptWeightCopies> shared_weight_copies();

/// Whether a WeightCopyScope is open on this thread.
bool weight_copies_kept();

/// `make()`, a copy of `sources` in `dtype` (for example a cast, or several weights stacked), kept
/// by this thread's WeightCopyScope and returned again for the same sources and dtype until one of
/// them changes version. Only copies of parameters (leaves that require a gradient) are kept: not
/// of tensors computed in the forward pass or made afresh for it (`.detach()`), which would pile
/// up; nor anything outside a scope.
torch::Tensor weight_copy(std::initializer_list<const torch::Tensor*> sources,
                          torch::ScalarType dtype, const std::function<torch::Tensor()>& make);

/// `weight` in `dtype`: itself where it already is, else its cast, kept as weight_copy keeps it.
torch::Tensor weight_in_dtype(const torch::Tensor& weight, torch::ScalarType dtype);

}  // namespace bigbatch::nn
