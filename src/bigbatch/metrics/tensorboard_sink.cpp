#include "bigbatch/metrics/tensorboard_sink.h"

#include <vector>

namespace bigbatch::metrics {

TensorBoardSink::TensorBoardSink(const TensorBoardOptions& options)
    : options_(options), events_(options.directory) {
  if (options_.resumed_after_step > 0)
    events_.write(session_start_event(wall_time_now(), options_.resumed_after_step + 1));
}

void TensorBoardSink::on_window(const WindowRecord& r) {
  std::vector<Scalar> scalars;
  if (!r.skipped) {
    scalars.push_back({"train/loss", r.loss});
    scalars.push_back({"train/lr", r.lr});
    scalars.push_back({"train/grad_norm", r.grad_norm});
    scalars.push_back({"throughput/samples_per_second", r.samples_per_second});
    if (options_.count_tokens)
      scalars.push_back({"throughput/tokens_per_second", r.tokens_per_second});
    if (r.peak_bytes > 0)
      scalars.push_back({"memory/peak_mib", static_cast<double>(r.peak_bytes) / (1024.0 * 1024.0)});
  }
  if (r.loss_scale > 0)
    scalars.push_back({"train/loss_scale", r.loss_scale});
  if (r.world_size > 1) {
    scalars.push_back({"comm/gradient_mib", static_cast<double>(r.gradient_bytes) / 1048576.0});
    scalars.push_back({"comm/calls", static_cast<double>(r.comm_calls)});
    if (r.comm_seconds > 0)
      scalars.push_back({"comm/hidden_fraction", r.comm_hidden_seconds / r.comm_seconds});
  }
  scalars.push_back({"train/skipped_steps", static_cast<double>(r.skipped_steps)});
  events_.write(scalars_event(wall_time_now(), r.step, scalars));
}

void TensorBoardSink::on_eval(const EvalRecord& r) {
  std::vector<Scalar> scalars = {{"val/loss", r.loss}};
  if (r.accuracy)
    scalars.push_back({"val/accuracy", *r.accuracy});
  events_.write(scalars_event(wall_time_now(), r.step, scalars));
}

}  // namespace bigbatch::metrics
