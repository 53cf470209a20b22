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

namespace bigbatch::nn {

/// For its lifetime, weight_copy on this thread keeps what it makes and hands it out again while
/// its sources are unchanged. Nested scopes share the outermost one's copies, which are freed when
/// it ends. Open it only where the weights do not change (in place or by `.data()`) between its
/// start and its end except through operations that bump their version: an accumulation window's
/// passes, before its optimizer step.
class WeightCopyScope {
 public:
  WeightCopyScope();
  ~WeightCopyScope();
  WeightCopyScope(const WeightCopyScope&) = delete;
  WeightCopyScope& operator=(const WeightCopyScope&) = delete;
};

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
