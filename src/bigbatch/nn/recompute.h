// Activation checkpointing: run a block without keeping its activations and recompute it during
// backward, trading one extra forward of the block for the memory of everything inside it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>

namespace bigbatch::nn {

/// A differentiable function of one tensor, such as one transformer block: x -> block(x).
using Block = std::function<torch::Tensor(const torch::Tensor&)>;

/// Returns `block(input)` with the gradients of a plain call, but without keeping the block's
/// activations for backward.
///
/// When grad mode is on and `input` or one of `parameters` requires grad, the block runs under
/// NoGradGuard and only `input` (plus references to `parameters`, which are alive anyway) is kept.
/// During backward the block is run again with grad mode on and differentiated with
/// torch::autograd::grad; the gradients of `input` and of every parameter are returned to the
/// graph. Parameters the block does not use get no gradient (undefined, as in a plain call).
/// Memory: the graph of a checkpointed block is one node holding its input, (B, T, C) for a
/// transformer block, instead of every intermediate tensor; at most one block's activations are
/// alive at a time, during its recompute. Cost: one extra forward of the block per backward.
///
/// Randomness: the state of the default CPU generator (and, in CUDA builds, the CUDA generator of
/// the input's device) is captured before the forward and replayed before the recompute, so
/// dropout draws the same mask twice and results are bit-identical to a plain call. The state
/// current at backward time is restored after the recompute, so the global random stream is the
/// same with and without checkpointing.
///
/// Autocast: the recompute runs under the autocast settings the forward ran under (captured with
/// the random state, re-entered with AutocastGuard), whatever is in effect during backward, so a
/// bf16 forward is recomputed in bf16 and gradients equal those of a plain call under autocast.
/// The forward does not fill autocast's weight cache (its casts carry no gradient).
///
/// Contract: `parameters` must list every tensor that requires grad and that the block uses
/// besides `input`; a missing one is detected during backward and throws std::logic_error, since
/// it would otherwise silently get no gradient. The block must compute the same function at
/// backward time as at forward time (same module mode: do not switch train()/eval() between
/// forward and backward) and must not modify `parameters` in place in between (LibTorch's
/// version counter check reports that).
///
/// When grad mode is off or nothing requires grad, this is exactly `block(input)`.
torch::Tensor checkpoint(Block block, const torch::Tensor& input, torch::TensorList parameters);

/// True only while checkpoint()'s backward recomputes a block on the calling thread (also inside
/// a checkpoint nested in the recomputed block); false during every ordinary forward, including
/// the no-grad forward of a checkpointed block. Layers with side effects on state consult it so
/// that a recompute does not repeat them: nn::BatchNorm skips its running-statistics update.
bool is_recomputing();

/// Which blocks of a model are checkpointed.
enum class CheckpointMode {
  /// No block: every activation is kept (fastest, most memory).
  kNone,
  /// Every block.
  kBlocks,
  /// Blocks 0, every, 2*every, ...
  kEvery,
};

/// A checkpointing choice for a model made of numbered blocks.
/// Usage: `model->set_checkpointing(parse_checkpoint_policy("every:2", "checkpointing"));`
struct CheckpointPolicy {
  /// Which blocks are checkpointed.
  CheckpointMode mode = CheckpointMode::kNone;
  /// The stride for CheckpointMode::kEvery; must be >= 1. Ignored by the other modes.
  int64_t every = 1;

  /// Whether block `block_index` (0-based) is checkpointed. Throws bigbatch::InputError when
  /// mode is kEvery and every < 1.
  bool applies_to(int64_t block_index) const;
  /// The text form that parse_checkpoint_policy reads: "none", "blocks" or "every:N".
  std::string to_string() const;
};

/// Throws bigbatch::InputError naming CheckpointPolicy.every and its value unless the policy is
/// usable (every >= 1 in mode kEvery).
void validate(const CheckpointPolicy& policy);

/// Reads "none", "blocks" (every block) or "every:N" (blocks 0, N, 2N, ...; an integer N >= 1).
/// Anything else throws bigbatch::InputError naming `field`, `text` and the accepted forms.
CheckpointPolicy parse_checkpoint_policy(const std::string& text, const std::string& field);

}  // namespace bigbatch::nn
