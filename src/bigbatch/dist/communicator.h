// Collective operations between the ranks of a data-parallel job, without c10d in the interface.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace bigbatch::dist {

/// A collective operation failed: a peer died, hung past the timeout, or the network broke. The
/// message names this rank, the operation and, where it could be found out, the rank at fault.
/// The process group is unusable afterwards; the process should exit.
class DistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What a collective is for, so that gradient traffic can be told from the rest.
enum class Traffic {
  kGradients,  ///< gradient buckets at the window boundary
  kControl,    ///< counts, agreements, evaluation sums, broadcasts, gathers
};

/// Collective calls and the bytes each rank handed in (the payload, not the wire bytes).
struct CommCounter {
  int64_t calls = 0;
  int64_t bytes = 0;
};

/// Counters since the communicator was made, by purpose.
struct CommStats {
  CommCounter gradients;
  CommCounter control;
};

/// An asynchronous collective in flight.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  /// Blocks until the operation is done on this rank; throws DistError when it failed.
  virtual void wait() = 0;
  /// When it finished, in seconds of std::chrono::steady_clock (valid after wait()).
  virtual double finished_at() const = 0;
};

/// The ranks of a job and the collectives between them. Every rank must issue the same
/// collectives in the same order; a rank that skips one makes the others fail with DistError
/// once the timeout passes. Implemented over c10d (dist/process_group.h).
class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This process's rank, in [0, world_size()).
  virtual int64_t rank() const = 0;
  /// The number of ranks.
  virtual int64_t world_size() const = 0;
  /// Starts summing `tensor` (contiguous) over the ranks, in place; every rank gets the same bits.
  virtual std::unique_ptr<PendingWork> start_all_reduce(torch::Tensor tensor, Traffic traffic,
                                                        const std::string& what) = 0;
  /// Copies rank `root`'s `tensor` (contiguous) into every other rank's, in place.
  virtual void broadcast(torch::Tensor tensor, int64_t root, const std::string& what) = 0;
  /// Every rank's `tensor` (the same shape and dtype on each), in rank order.
  virtual std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor,
                                                const std::string& what) = 0;
  /// Calls and bytes so far.
  virtual CommStats stats() const = 0;

  /// Sums `tensor` over the ranks in place and waits.
  void all_reduce(torch::Tensor tensor, Traffic traffic, const std::string& what);
  /// Whether any rank passed true.
  bool any(bool local, const std::string& what);
};

/// Makes every rank's parameters and buffers of `module` equal to rank 0's (one broadcast per
/// dtype).
void broadcast_module(Communicator& communicator, torch::nn::Module& module);

/// Sets every floating-point buffer of `module` (BatchNorm running statistics) to its mean over
/// the ranks, so that all ranks evaluate and save the same model (one all-reduce per dtype;
/// nothing without such buffers). Each rank's statistics come from its own shard: for equal
/// shards the mean of the running means is exactly the running mean of the whole windows' means,
/// while the mean of the running variances leaves out the spread between the shards' means.
void average_buffers(Communicator& communicator, torch::nn::Module& module);

}  // namespace bigbatch::dist
