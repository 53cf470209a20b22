// A single process as a job of one rank: every collective is a no-op.
#pragma once

#include "bigbatch/dist/communicator.h"

namespace bigbatch::dist {

/// The communicator of a process that trains alone: rank 0 of 1. A sum over one rank, a
/// broadcast from it and a gather of it leave the tensors as they are, so code written for
/// data parallel runs unchanged in a single process. Nothing is sent; stats() stay zero.
class LocalCommunicator : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 1; }
  std::unique_ptr<PendingWork> start_all_reduce(torch::Tensor tensor, Traffic traffic,
                                                const std::string& what) override;
  void broadcast(torch::Tensor tensor, int64_t root, const std::string& what) override;
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor,
                                        const std::string& what) override;
  CommStats stats() const override { return {}; }
};

/// The LocalCommunicator that every single-process user can share: it holds no state.
Communicator& single_process();

}  // namespace bigbatch::dist
