// Token embeddings whose gradient can be only the rows a micro-batch used. LibTorch's embedding
// hands autograd a dense (V, C) gradient per backward, which is allocated, zeroed and added to
// the weight's gradient: 47 MB each way per micro-batch for BERT's 30,522 tokens at width 384,
// where a micro-batch of 8 texts uses a few hundred rows. nn::embedding's backward can hand over
// those rows alone, as a coalesced sparse gradient that LibTorch adds into a dense .grad in place.
#pragma once

#include <torch/torch.h>

namespace bigbatch::nn {

/// When nn::embedding's backward, on this thread, may return a sparse gradient.
enum class SparseEmbeddingGrad {
  kNever,          ///< always dense (the default): what any consumer of gradients expects
  kIntoDenseGrad,  ///< where the weight's .grad is already a dense tensor of its dtype, which
                   ///< autograd's accumulation then adds the rows to (a backward() into .grad)
  kAlways,         ///< the caller adds the returned gradients to dense buffers itself
};

/// Sets this thread's SparseEmbeddingGrad for its lifetime and restores the previous one.
class SparseEmbeddingGradScope {
 public:
  explicit SparseEmbeddingGradScope(SparseEmbeddingGrad mode);
  ~SparseEmbeddingGradScope();
  SparseEmbeddingGradScope(const SparseEmbeddingGradScope&) = delete;
  SparseEmbeddingGradScope& operator=(const SparseEmbeddingGradScope&) = delete;

 private:
  SparseEmbeddingGrad previous_;
};

/// This thread's setting (kNever unless a scope says otherwise).
SparseEmbeddingGrad sparse_embedding_grad();

/// The rows of `weight` at `ids`, as torch::embedding without padding_idx, max_norm or
/// scale_grad_by_freq. The weight's gradient is the sum of the output gradients of each id's
/// positions, in their order, whether it is returned dense or (as sparse_embedding_grad() allows)
/// as a coalesced sparse tensor of the used rows: the two add into a dense gradient to the same
/// values. On a GPU, and where no gradient is taken, it is torch::embedding itself.
/// weight (V, C), ids (...) int64 or int32 -> (..., C)
torch::Tensor embedding(const torch::Tensor& weight, const torch::Tensor& ids);

}  // namespace bigbatch::nn
