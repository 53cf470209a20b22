#include "bigbatch/engine/trainer.h"

#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/core/rng_state.h"
#include "bigbatch/core/threads.h"
#include "bigbatch/dist/local_communicator.h"
#include "bigbatch/engine/evaluation.h"
#include "bigbatch/engine/window_feed.h"
#include "bigbatch/memory/device_memory.h"
#include "bigbatch/nn/mode_guard.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch::engine {

namespace {

using Clock = Trainer::Clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Every rank's random generator states, in rank order (each rank's states have the same sizes).
std::vector<std::vector<std::pair<std::string, torch::Tensor>>> gather_rng_states(
    dist::Communicator& communicator, torch::nn::Module& model) {
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> ranks(communicator.world_size());
  for (const auto& [name, state] : RngState::capture(model).states()) {
    const std::vector<torch::Tensor> gathered =
        communicator.all_gather(state, cat("all-gather of the ", name, " random generator states"));
    for (size_t rank = 0; rank < ranks.size(); ++rank)
      ranks[rank].emplace_back(name, gathered[rank]);
  }
  return ranks;
}

/// A window's communication, from the counters before and after it and its gradient reduction.
void add_communication(metrics::WindowRecord& record, const dist::CommStats& before,
                       const dist::CommStats& after, const dist::ReductionStats& reduction) {
  record.comm_calls =
      after.gradients.calls + after.control.calls - before.gradients.calls - before.control.calls;
  record.gradient_bytes = after.gradients.bytes - before.gradients.bytes;
  record.comm_bytes = record.gradient_bytes + after.control.bytes - before.control.bytes;
  record.comm_seconds = reduction.busy_seconds;
  record.comm_hidden_seconds = reduction.hidden_seconds;
}

}  // namespace

void validate(const TrainerOptions& options) {
  BB_CHECK_INPUT(options.total_steps() > 0, "TrainerOptions.total_steps = ", options.total_steps(),
                 " must be positive");
  BB_CHECK_INPUT(options.eval_every() >= 0, "TrainerOptions.eval_every = ", options.eval_every(),
                 " must be >= 0");
  BB_CHECK_INPUT(options.eval_samples() >= 0,
                 "TrainerOptions.eval_samples = ", options.eval_samples(), " must be >= 0");
  BB_CHECK_INPUT(options.max_consecutive_skips() >= 0,
                 "TrainerOptions.max_consecutive_skips = ", options.max_consecutive_skips(),
                 " must be >= 0");
  BB_CHECK_INPUT(options.prefetch_depth() >= 0,
                 "TrainerOptions.prefetch_depth = ", options.prefetch_depth(), " must be >= 0");
  BB_CHECK_INPUT(options.checkpoint_every() >= 0,
                 "TrainerOptions.checkpoint_every = ", options.checkpoint_every(), " must be >= 0");
  BB_CHECK_INPUT(options.concurrent_micro_batches() >= 1,
                 "TrainerOptions.concurrent_micro_batches = ", options.concurrent_micro_batches(),
                 " must be >= 1 (1: one at a time)");
  BB_CHECK_INPUT(options.evaluation_threads() >= 0,
                 "TrainerOptions.evaluation_threads = ", options.evaluation_threads(),
                 " must be >= 0 (0: the training thread's)");
}

Trainer::Trainer(const TrainingSetup& setup, TrainerOptions options)
    : setup_(setup), options_(options) {
  BB_CHECK(setup.model && setup.objective && setup.optimizer && setup.schedule && setup.plan &&
               setup.train_data,
           "TrainingSetup is missing a part");
  plan_ = *setup.plan;
  device_ = device_of(*setup.model);
  transfer_ = std::make_unique<BatchTransfer>(device_);
  validate(options);
  // A single process is a job of one rank: the same code runs, every collective a no-op.
  communicator_ = setup.communicator != nullptr ? setup.communicator : &dist::single_process();
  rank_ = communicator_->rank();
  world_size_ = communicator_->world_size();
  BB_CHECK_INPUT(plan_.world_size == world_size_, "the plan is for ", plan_.world_size,
                 " process(es) but the job has ", world_size_);
  if (options_.concurrent_micro_batches() > 1)
    concurrent_ = std::make_unique<ConcurrentMicroBatches>(options_.concurrent_micro_batches());
}

ShardRange Trainer::shard_of(int64_t samples) const {
  return shard_range(samples, rank_, world_size_);
}

void Trainer::resume(const LoopState& state) {
  BB_CHECK_INPUT(state.micro_batch >= 1 && state.micro_batch <= plan_.rank_batch(),
                 "cannot resume at micro-batch ", state.micro_batch, ": it must lie in [1, ",
                 plan_.rank_batch(), "] (the batch of one process)");
  BB_CHECK_INPUT(state.summary.steps >= 0 && state.summary.steps <= options_.total_steps(),
                 "cannot resume after optimizer step ", state.summary.steps, " of a run of ",
                 options_.total_steps(), " steps");
  BB_CHECK_INPUT(state.windows >= state.summary.steps && state.consecutive_skips >= 0,
                 "inconsistent loop state: ", state.windows, " windows, ", state.summary.steps,
                 " steps, ", state.consecutive_skips, " consecutive skips");
  plan_.set_micro_batch(state.micro_batch);
  resume_from_ = state;
}

void Trainer::join_data_parallel(GradientAccumulator& accumulator) {
  if (world_size_ == 1)
    return;  // nothing to broadcast, and no gradient to reduce
  torch::nn::Module& model = *setup_.model;
  dist::broadcast_module(*communicator_, model);  // every rank starts from rank 0's weights
  reducer_ = std::make_unique<dist::GradientReducer>(
      *communicator_, model.parameters(),
      dist::ReducerOptions().bucket_bytes(options_.bucket_bytes()));
  accumulator.set_data_parallel(communicator_, reducer_.get());
}

Trainer::RunProgress Trainer::start_run(GradientAccumulator& accumulator) {
  RunProgress run;
  run.summary.first_val_loss = run.summary.last_val_loss = std::numeric_limits<double>::quiet_NaN();
  windows_ = consecutive_skips_ = 0;
  if (resume_from_) {
    run.summary = resume_from_->summary;
    run.summary.stopped = false;
    windows_ = resume_from_->windows;
    consecutive_skips_ = resume_from_->consecutive_skips;
    accumulator.set_steps_taken(run.summary.steps);
    steps_taken_ = run.summary.steps;
  }
  run.seconds_before = run.summary.seconds;
  run.start = Clock::now();
  run.has_val = setup_.val_data != nullptr && setup_.val_data->size() > 0;
  if (run.has_val && options_.eval_every() > 0 && !resume_from_) {
    const metrics::EvalRecord first = evaluate();
    run.summary.first_val_loss = first.loss;
    report_eval(first);
  }
  return run;
}

TrainSummary Trainer::fit() {
  GradientAccumulator accumulator(setup_.model->parameters(), *setup_.optimizer, setup_.schedule,
                                  AccumulatorOptions()
                                      .unit(setup_.objective->unit())
                                      .max_grad_norm(options_.max_grad_norm())
                                      .on_nonfinite(options_.on_nonfinite()));
  accumulator.set_loss_scaler(setup_.loss_scaler);
  join_data_parallel(accumulator);
  WindowFeed feed(*setup_.train_data, plan_, options_.seed(), options_.prefetch_depth(),
                  resume_from_ ? resume_from_->data : DataPosition{}, rank_);
  if (device_.is_cuda())
    feed.pin_batches();  // copied to the GPU asynchronously (BatchTransfer)
  RunProgress run = start_run(accumulator);
  nn::ModeGuard training(*setup_.model, true);
  while (accumulator.steps_taken() < options_.total_steps()) {
    const auto window_start = Clock::now();
    memory::reset_peak_bytes(device_);
    const dist::CommStats comm_before = communicator_->stats();
    const Window window = feed.take(plan_);                             // 1. take a window
    const WindowResult result = run_window(accumulator, feed, window);  // 2. + 3.
    steps_taken_ = accumulator.steps_taken();
    observe(run, window, result, seconds_since(window_start), comm_before);  // 4.
    if (persist(run, window, result))                                        // 5.
      break;
  }
  update_totals(run);
  for (metrics::MetricsSink* sink : sinks_)
    sink->on_finish();
  accumulator.set_data_parallel(nullptr, nullptr);
  reducer_.reset();
  return run.summary;
}

void Trainer::observe(RunProgress& run, const Window& window, const WindowResult& result,
                      double step_seconds, const dist::CommStats& comm_before) {
  TrainSummary& summary = run.summary;
  ++windows_;
  summary.train_seconds += step_seconds;
  summary.steps = steps_taken_;
  summary.epochs_started = window.epoch + 1;
  summary.samples += result.counts.samples;
  summary.tokens += result.counts.tokens;
  summary.skipped_steps += result.skipped ? 1 : 0;
  consecutive_skips_ = result.skipped ? consecutive_skips_ + 1 : 0;
  if (!result.skipped)
    summary.last_train_loss = result.mean_loss;
  metrics::WindowRecord record = make_record(result, window.epoch, step_seconds,
                                             run.seconds_before + seconds_since(run.start));
  record.peak_bytes = memory::peak_bytes(device_);
  record.skipped_steps = summary.skipped_steps;
  if (reducer_)
    add_communication(record, comm_before, communicator_->stats(), reducer_->last_window());
  summary.peak_bytes = std::max(summary.peak_bytes, record.peak_bytes);
  for (metrics::MetricsSink* sink : sinks_)
    sink->on_window(record);
  if (result.skipped) {
    on_skipped(result, consecutive_skips_);  // no evaluation is due: not a step
    return;
  }
  const bool last = result.step == options_.total_steps();
  if (run.has_val &&
      (last || (options_.eval_every() > 0 && result.step % options_.eval_every() == 0))) {
    const metrics::EvalRecord eval = evaluate();
    summary.last_val_loss = eval.loss;
    summary.last_val_accuracy = eval.accuracy;
    report_eval(eval);
  }
}

bool Trainer::persist(RunProgress& run, const Window& window, const WindowResult& result) {
  update_totals(run);
  const bool last = !result.skipped && result.step == options_.total_steps();
  const bool stop = stop_requested();
  const bool due = !result.skipped && options_.checkpoint_every() > 0 &&
                   result.step % options_.checkpoint_every() == 0;
  if (last || due || stop)
    save_checkpoint(run.summary, window.end());
  if (!stop || last)
    return false;
  run.summary.stopped = true;
  notify(cat("stopped on request after ", windows_, " windows (optimizer step ", run.summary.steps,
             " of ", options_.total_steps(), ")"));
  return true;
}

void Trainer::update_totals(RunProgress& run) const {
  run.summary.final_micro_batch = plan_.micro_batch;
  run.summary.final_loss_scale = setup_.loss_scaler != nullptr ? setup_.loss_scaler->scale() : 0.0;
  run.summary.seconds = run.seconds_before + seconds_since(run.start);
}

bool Trainer::stop_requested() {
  if (setup_.stop_requested == nullptr)
    return false;
  return communicator_->any(setup_.stop_requested->load(), "agreement on a stop request");
}

void Trainer::save_checkpoint(const TrainSummary& summary, const DataPosition& position) {
  LoopState state;
  state.summary = summary;
  state.data = position;
  state.windows = windows_;
  state.consecutive_skips = consecutive_skips_;
  state.micro_batch = plan_.micro_batch;
  // A single process's checkpoint captures its generators itself (LoopState::rank_rng_states).
  if (world_size_ > 1)
    state.rank_rng_states = gather_rng_states(*communicator_, *setup_.model);
  // Rank 0 writes; the others learn whether it could, so that none goes on alone.
  std::exception_ptr failure;
  if (setup_.checkpoints != nullptr) {
    try {
      setup_.checkpoints->save(state);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (communicator_->any(failure != nullptr, "agreement on the checkpoint write")) {
    if (failure)
      std::rethrow_exception(failure);
    throw std::runtime_error(cat("rank ", rank_, ": stopping at optimizer step ", summary.steps,
                                 " because another rank could not write its checkpoint (its own "
                                 "message says why)"));
  }
}

Trainer::PreparedWindow Trainer::prepare(WindowFeed& feed, const Window& window,
                                         int64_t windows_ahead) const {
  PreparedWindow prepared;
  const size_t micro_batches =
      plan_.split_window(shard_of(static_cast<int64_t>(window.indices.size())).size()).size();
  for (size_t i = 0; i < micro_batches; ++i) {
    // Counted where it was gathered (no device synchronisation), then moved to the model.
    const data::Batch batch = feed.next();
    prepared.counts.push_back(setup_.objective->count(batch));
    prepared.total += prepared.counts.back();
    prepared.batches.push_back(transfer_->to_device(batch));
  }
  feed.look_ahead(plan_, windows_ahead);
  return prepared;
}

WindowResult Trainer::run_window(GradientAccumulator& accumulator, WindowFeed& feed,
                                 const Window& window) {
  // A retried window draws the same random numbers (dropout) as its first attempt did.
  const RngState rng_at_start = RngState::capture(device_);
  while (true) {
    try {
      accumulate_window(accumulator, feed, window);
    } catch (const c10::OutOfMemoryError& error) {
      // From forward, backward or gathering a batch (on the prefetch worker or not): the window
      // starts over from its first micro-batch with half the micro-batch. No sample is skipped
      // or counted twice, and the window gradient is the same sum as before. Under data
      // parallel abort_window() tells the other ranks, which restart the window with it.
      accumulator.abort_window();
      memory::release_cached_memory(device_);
      if (!options_.retry_on_oom())
        throw;
      if (plan_.micro_batch == 1) {
        C10_THROW_ERROR(
            OutOfMemoryError,
            cat("out of memory at micro-batch 1 in step ", accumulator.steps_taken() + 1,
                ", the smallest there is; raise the memory budget or recompute "
                "activations in backward (checkpointing). ",
                error.what_without_backtrace()));
      }
      restart_window(accumulator, feed, window, world_size_ > 1 ? cat(" on rank ", rank_) : "");
      rng_at_start.restore();
      continue;
    }
    const WindowResult result = finish_window(accumulator);
    if (!result.restarted)
      return result;
    // Another rank ran out of memory: every rank runs the window again at half the micro-batch.
    std::string ranks;
    for (const int64_t rank : result.abandoned_by)
      ranks += cat(ranks.empty() ? "" : ", ", rank);
    if (!options_.retry_on_oom() || plan_.micro_batch == 1) {
      throw std::runtime_error(cat("rank ", ranks, " ran out of memory in optimizer step ",
                                   result.step, " at micro-batch ", plan_.micro_batch,
                                   " and cannot retry; raise the memory budget"));
    }
    restart_window(accumulator, feed, window, cat(" on rank ", ranks));
    rng_at_start.restore();
  }
}

void Trainer::accumulate_window(GradientAccumulator& accumulator, WindowFeed& feed,
                                const Window& window) {
  // The windows after this one that will be trained if no window is skipped.
  const int64_t windows_ahead = options_.total_steps() - accumulator.steps_taken() - 1;
  const PreparedWindow prepared = prepare(feed, window, windows_ahead);
  for (WindowHooks* hooks : setup_.window_hooks)
    hooks->on_window_begin();
  // 2. Forward and backward each micro-batch, normalised by the whole window. The weights do not
  // change until the window's step: the fused blocks cast them once (passes on helper threads
  // share the copies: engine::ConcurrentMicroBatches).
  const nn::WeightCopyScope weight_copies;
  accumulator.begin_window(prepared.total);
  if (concurrent_) {
    concurrent_->run(accumulator, *setup_.objective, prepared.batches, prepared.counts);
    return;
  }
  for (size_t i = 0; i < prepared.batches.size(); ++i)
    accumulator.backward(setup_.objective->loss_sum(prepared.batches[i]), prepared.counts[i]);
}

void Trainer::restart_window(const GradientAccumulator& accumulator, WindowFeed& feed,
                             const Window& window, const std::string& where) {
  const int64_t smaller = plan_.micro_batch / 2;
  notify(cat("out of memory", where, " at micro-batch ", plan_.micro_batch, " in step ",
             accumulator.steps_taken() + 1, "; restarting the window at micro-batch ", smaller,
             " (global batch unchanged)"));
  plan_.set_micro_batch(smaller);
  feed.restart(window, plan_);
}

WindowResult Trainer::finish_window(GradientAccumulator& accumulator) {
  try {
    // 3. Boundary: clip, schedule, step, zero.
    const WindowResult result = accumulator.step();
    if (result.restarted)
      return result;  // another rank ran out of memory: the window begins again
    for (WindowHooks* hooks : setup_.window_hooks)
      hooks->on_window_end(!result.skipped);
    if (!result.skipped && world_size_ > 1)
      dist::average_buffers(*communicator_, *setup_.model);
    return result;
  } catch (const c10::OutOfMemoryError& error) {
    // The optimizer may have updated some parameters already, and its memory does not depend on
    // the micro-batch: nothing to retry.
    throw std::runtime_error(
        cat("out of memory at the window boundary of step ", accumulator.steps_taken() + 1,
            " (gradient check, clipping or the optimizer step, which a smaller micro-batch does "
            "not shrink); raise the memory budget. ",
            error.what_without_backtrace()));
  }
}

metrics::WindowRecord Trainer::make_record(const WindowResult& result, int64_t epoch,
                                           double step_seconds, double elapsed_seconds) const {
  metrics::WindowRecord record;
  record.step = result.step;
  record.total_steps = options_.total_steps();
  record.epoch = epoch;
  record.loss = result.mean_loss;
  record.lr = result.lr;
  record.grad_norm = result.grad_norm;
  record.clipped = result.clipped;
  record.samples = result.counts.samples;
  record.tokens = result.counts.tokens;
  record.micro_batches = result.micro_batches;
  record.micro_batch = plan_.micro_batch;
  record.step_seconds = step_seconds;
  record.elapsed_seconds = elapsed_seconds;
  record.samples_per_second = static_cast<double>(result.counts.samples) / step_seconds;
  record.tokens_per_second = static_cast<double>(result.counts.tokens) / step_seconds;
  record.skipped = result.skipped;
  record.skip_reason = to_string(result.skip_reason);
  record.loss_scale = result.loss_scale;
  record.world_size = world_size_;
  return record;
}

metrics::EvalRecord Trainer::evaluate() {
  BB_CHECK(setup_.val_data != nullptr, "evaluate() without validation data");
  std::optional<IntraOpThreadsOnThisThread> threads;
  if (options_.evaluation_threads() > 0)
    threads.emplace(static_cast<int>(options_.evaluation_threads()));
  while (true) {
    const int64_t batch =
        eval_batch_limit_ > 0 ? std::min(plan_.micro_batch, eval_batch_limit_) : plan_.micro_batch;
    try {
      return engine::evaluate({setup_.model, setup_.objective, setup_.val_data,
                               options_.eval_samples(), batch, steps_taken_, communicator_});
    } catch (const c10::OutOfMemoryError& error) {
      // Before the sums are all-reduced: each rank retries on its own, as the loss is a sum.
      memory::release_cached_memory(device_);
      if (!options_.retry_on_oom() || batch == 1) {
        throw std::runtime_error(cat("out of memory in the evaluation after optimizer step ",
                                     steps_taken_, " (", batch,
                                     " samples a forward pass, no gradients); raise the memory "
                                     "budget. ",
                                     error.what_without_backtrace()));
      }
      eval_batch_limit_ = batch / 2;
      notify(cat("out of memory in the evaluation after optimizer step ", steps_taken_, " at ",
                 batch, " samples a pass; evaluating at ", eval_batch_limit_));
    }
  }
}

void Trainer::report_eval(metrics::EvalRecord record) {
  for (metrics::MetricsSink* sink : sinks_)
    sink->on_eval(record);
}

void Trainer::notify(const std::string& message) {
  for (metrics::MetricsSink* sink : sinks_)
    sink->on_notice(message);
}

void Trainer::on_skipped(const WindowResult& result, int64_t consecutive) {
  const std::string cause = result.skip_reason == SkipReason::kNonFiniteLoss
                                ? cat("non-finite loss (", result.mean_loss, ")")
                            : result.loss_scale > 0
                                ? cat("gradient overflow at loss scale ", result.loss_scale)
                                : std::string("non-finite gradient");
  const std::string scale = setup_.loss_scaler != nullptr
                                ? cat("; loss scale now ", setup_.loss_scaler->scale())
                                : std::string();
  notify(cat("step ", result.step, " skipped: ", cause, scale,
             " (weights, optimizer state and lr schedule unchanged; its data dropped)"));
  if (consecutive > options_.max_consecutive_skips()) {
    throw NonFiniteError(cat("stopping at optimizer step ", result.step, ": ", consecutive,
                             " windows in a row were skipped as non-finite (more than "
                             "TrainerOptions.max_consecutive_skips = ",
                             options_.max_consecutive_skips(), "); the last had a ", cause,
                             ". Look for a learning rate that is too high or bad input data"),
                         result.step);
  }
}

}  // namespace bigbatch::engine
