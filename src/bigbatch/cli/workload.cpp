#include "bigbatch/cli/workload.h"

#include <numeric>

#include "bigbatch/cli/config_reader.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/rng_state.h"
#include "bigbatch/data/context_dataset.h"
#include "bigbatch/data/fortune_collections.h"
#include "bigbatch/data/image_dataset.h"
#include "bigbatch/data/sequence_dataset.h"
#include "bigbatch/models/bert.h"
#include "bigbatch/models/mlp.h"
#include "bigbatch/models/resnet.h"
#include "bigbatch/nn/norm.h"

namespace bigbatch::cli {

TrainConfig load_config(const TrainCommandOptions& options) {
  ConfigReader reader =
      options.config_path.empty() ? ConfigReader() : ConfigReader::from_file(options.config_path);
  for (const std::string& assignment : options.overrides)
    reader.set_override(assignment);
  return read_train_config(reader);
}

LoadedData load_data(const TrainConfig& config) {
  LoadedData loaded;
  if (config.model == ModelKind::kResnet) {
    // Inputs are normalised with the training images' own per-channel mean and deviation.
    const data::ImageDataset raw = data::load_idx_classification(
        config.idx.train_images, config.idx.train_labels,
        data::ImageDatasetOptions().subsample(config.idx.subsample).subsample_seed(config.seed));
    const data::PixelStats stats = raw.pixel_stats();
    const auto options =
        data::ImageDatasetOptions().mean(stats.mean).std(stats.std).num_classes(raw.num_classes());
    auto train = std::make_shared<data::ImageDataset>(
        raw.images(), raw.labels(), data::ImageDatasetOptions(options).name("train"));
    auto test = std::make_shared<data::ImageDataset>(
        data::load_idx_classification(config.idx.test_images, config.idx.test_labels,
                                      data::ImageDatasetOptions(options).name("test")));
    loaded.classes = train->num_classes();
    loaded.in_channels = train->images().size(1);
    loaded.description = cat("IDX files ", config.idx.train_images, ", ", config.idx.test_images);
    loaded.train = std::move(train);
    loaded.test = std::move(test);
  } else if (config.model == ModelKind::kBert) {
    const data::FortuneCollections fortunes = data::FortuneCollections::load(
        data::FortuneCollectionsOptions(config.fortunes).seed(config.seed));
    loaded.classes = static_cast<int64_t>(fortunes.class_names().size());
    loaded.description = cat(fortunes.describe(), " in ", config.fortunes.directory());
    loaded.train = fortunes.train_shared();
    loaded.test = fortunes.test_shared();
  } else {
    auto corpus = std::make_shared<data::TextCorpus>(data::TextCorpus::load(config.data));
    loaded.description = corpus->describe();
    loaded.corpus = std::move(corpus);
  }
  return loaded;
}

namespace {

/// The GPT's or MLP's next-byte datasets over the corpus, objective and description.
void build_language_model(const TrainConfig& config, const data::TextCorpus& corpus,
                          const BuiltModel& model, Workload& w) {
  if (config.model == ModelKind::kGpt) {
    const auto options = data::SequenceDatasetOptions(config.gpt.context());
    w.train = std::make_shared<data::SequenceDataset>(
        corpus.train_shared(), data::SequenceDatasetOptions(options).name("train"));
    if (corpus.val().size() >= 2) {  // one input byte and its target
      w.val = std::make_shared<data::SequenceDataset>(
          corpus.val_shared(), data::SequenceDatasetOptions(options).name("validation"));
    }
    w.objective = std::make_unique<engine::CrossEntropyObjective>(
        model.forward, engine::LossUnit::kToken, options.ignore_index());
    w.description = cat(config.gpt.layers(), " layers, ", config.gpt.heads(), " heads, width ",
                        config.gpt.embed(), ", context ", config.gpt.context(), " bytes");
    return;
  }
  const auto options = data::ContextDatasetOptions(config.mlp.context());
  w.train = std::make_shared<data::ContextDataset>(
      corpus.train_shared(), data::ContextDatasetOptions(options).name("train"));
  if (corpus.val().size() > static_cast<size_t>(config.mlp.context())) {
    w.val = std::make_shared<data::ContextDataset>(
        corpus.val_shared(), data::ContextDatasetOptions(options).name("validation"));
  }
  w.objective =
      std::make_unique<engine::CrossEntropyObjective>(model.forward, engine::LossUnit::kSample);
  w.description = cat(config.mlp.layers(), " hidden layers of ", config.mlp.hidden(), ", context ",
                      config.mlp.context(), " bytes");
}

/// The ResNet's or BERT's objective and description, and the loaded splits.
void build_classifier(const TrainConfig& config, const LoadedData& data, const BuiltModel& model,
                      Workload& w) {
  w.objective =
      std::make_unique<engine::CrossEntropyObjective>(model.forward, engine::LossUnit::kSample);
  if (config.model == ModelKind::kResnet) {
    const models::ResNetOptions& options = w.spec.resnet;
    const bool to_group = options.norm() != config.resnet.norm();  // model.norm_policy = "group"
    w.description = cat(options.depth(), " layers, width ", options.width(), ", ",
                        nn::to_string(options.norm()), " norm",
                        to_group ? " (BatchNorm replaced, norm_policy = group)" : "", ", ",
                        options.classes(), " classes");
  } else {
    const models::BertOptions& options = w.spec.bert;
    w.description =
        cat(options.layers(), " layers, ", options.heads(), " heads, width ", options.embed(),
            ", context ", options.context(), " bytes, ", options.classes(), " classes");
  }
  w.train = data.train;
  w.val = data.test;
}

}  // namespace

Workload build_workload(const TrainConfig& config, const LoadedData& data) {
  Workload w;
  // Built through the spec, so an export rebuilds exactly this module (names and structure).
  w.spec = describe_model(config, data);
  BuiltModel model = build_model(w.spec);  // in model.dtype
  set_checkpointing(model, config.checkpointing);
  w.module = model.module;
  w.gpt = model.gpt;
  if (data.corpus)
    build_language_model(config, *data.corpus, model, w);
  else
    build_classifier(config, data, model, w);
  w.batch_norms = nn::count_batch_norms(*w.module);
  if (config.norm_policy == engine::NormPolicy::kGhost && w.batch_norms > 0) {
    nn::set_running_stats_mode(*w.module, nn::RunningStatsMode::kPerWindow);
    w.window_hooks = std::make_shared<engine::BatchNormWindowHooks>(*w.module);
  }
  if (config.precision != nn::Precision::kFp32) {
    w.objective = std::make_unique<engine::AutocastObjective>(std::move(w.objective),
                                                              config.precision, torch::kCPU);
  }
  return w;
}

ThreadSettings apply_thread_settings(const TrainConfig& config, int64_t processes) {
  // Convolutions run on oneDNN over OpenMP threads in any precision, and so do bf16 matmuls on
  // native kernels; fp32 matmuls (bf16 ones on fp32 kernels too) run on OpenBLAS.
  nn::set_bf16_matmul(config.bf16_matmul);
  const bool native_bf16 =
      config.precision != nn::Precision::kFp32 && nn::bf16_matmul() == nn::Bf16Matmul::kNative;
  const bool onednn = native_bf16 || config.model == ModelKind::kResnet;
  return apply_threads(ThreadRequest()
                           .backend(onednn ? MatmulBackend::kOneDnn : MatmulBackend::kBlas)
                           .openmp(config.threads)
                           .blas(config.blas_threads)
                           .processes(processes * config.concurrent_micro_batches));
}

engine::TrainingSetup TrainingParts::setup(const Workload& w, const engine::Plan& plan) const {
  engine::TrainingSetup setup;
  setup.model = w.module.get();
  setup.objective = w.objective.get();
  setup.optimizer = optimizer.get();
  setup.schedule = schedule.get();
  setup.plan = &plan;
  setup.train_data = w.train.get();
  setup.val_data = w.val.get();
  setup.loss_scaler = loss_scaler.get();
  if (w.window_hooks)
    setup.window_hooks.push_back(w.window_hooks.get());
  return setup;
}

TrainingParts make_training_parts(const TrainConfig& config, const Workload& w,
                                  const engine::Plan& plan, int64_t steps) {
  TrainingParts parts;
  parts.optimizer =
      engine::make_optimizer(*w.module, engine::OptimizerOptions(config.optim).lr(plan.lr));
  parts.schedule = std::make_unique<engine::LrSchedule>(
      engine::LrScheduleOptions(config.schedule).peak_lr(plan.lr).total_steps(steps));
  if (loss_scaling_enabled(config))
    parts.loss_scaler = std::make_unique<engine::LossScaler>(config.loss_scaler);
  parts.options = engine::TrainerOptions()
                      .total_steps(steps)
                      .eval_every(config.eval_every)
                      .eval_samples(config.eval_samples)
                      .seed(config.seed)
                      .max_grad_norm(config.max_grad_norm)
                      .on_nonfinite(config.on_nonfinite)
                      .max_consecutive_skips(config.max_consecutive_skips)
                      .prefetch_depth(config.prefetch_depth)
                      .concurrent_micro_batches(config.concurrent_micro_batches)
                      .checkpoint_every(config.checkpoint_every)
                      .bucket_bytes(config.bucket_bytes);
  return parts;
}

int64_t optimizer_state_bytes(const TrainConfig& config, const torch::nn::Module& module) {
  int64_t parameter_bytes = 0;
  for (const torch::Tensor& parameter : module.parameters()) {
    parameter_bytes += parameter.numel() * static_cast<int64_t>(parameter.element_size());
  }
  if (config.optim.kind() == engine::OptimizerKind::kAdamW)
    return 2 * parameter_bytes;
  return config.optim.momentum() > 0 ? parameter_bytes : 0;
}

engine::MicroBatchSearchResult search_micro_batch(const TrainConfig& config, const Workload& w,
                                                  int64_t global_batch) {
  const RngState rng = RngState::capture(torch::kCPU);
  // Training-mode trials move BatchNorm running statistics; they are put back afterwards.
  std::vector<torch::Tensor> buffers_before;
  for (const torch::Tensor& buffer : w.module->buffers())
    buffers_before.push_back(buffer.clone());
  const bool was_training = w.module->is_training();
  w.module->train(true);
  auto trial = [&](int64_t micro_batch) {
    // As from the second micro-batch of a window on: the gradients of the earlier ones are held
    // through the whole pass and the new ones are added to them.
    for (torch::Tensor& parameter : w.module->parameters()) {
      if (parameter.requires_grad())
        parameter.mutable_grad() = torch::zeros_like(parameter);
    }
    std::vector<int64_t> indices(static_cast<size_t>(micro_batch));
    std::iota(indices.begin(), indices.end(), 0);
    const data::Batch batch = w.train->get(indices);
    if (config.concurrent_micro_batches == 1) {
      w.objective->loss_sum(batch).backward();
    } else {
      // train.concurrent_micro_batches passes at once, as at worst in training: their graphs all
      // alive, the first one's backward into .grad, each other's gradients held until added
      // (engine::ConcurrentMicroBatches).
      std::vector<torch::Tensor> differentiated;
      for (const torch::Tensor& parameter : w.module->parameters()) {
        if (parameter.requires_grad())
          differentiated.push_back(parameter);
      }
      std::vector<torch::Tensor> losses;
      for (int64_t pass = 0; pass < config.concurrent_micro_batches; ++pass)
        losses.push_back(w.objective->loss_sum(batch));
      losses.front().backward();
      std::vector<std::vector<torch::Tensor>> held;
      for (size_t pass = 1; pass < losses.size(); ++pass) {
        held.push_back(
            torch::autograd::grad({losses[pass]}, differentiated, {}, false, false, true));
      }
    }
    for (torch::Tensor& parameter : w.module->parameters())
      parameter.mutable_grad().reset();
  };
  engine::MicroBatchSearchResult found = engine::find_micro_batch(
      trial, engine::MicroBatchSearchOptions()
                 .global_batch(global_batch)
                 .budget_bytes(config.memory_budget)
                 .reserved_bytes(optimizer_state_bytes(config, *w.module)));
  w.module->train(was_training);
  {
    torch::NoGradGuard no_grad;
    const std::vector<torch::Tensor> buffers = w.module->buffers();
    for (size_t i = 0; i < buffers.size(); ++i)
      buffers[i].copy_(buffers_before[i]);
  }
  nn::discard_window(*w.module);
  rng.restore();
  return found;
}

engine::Plan even_plan(engine::BatchOptions batch, int64_t largest_micro_batch) {
  const int64_t per_rank = batch.global_batch() / std::max<int64_t>(1, batch.world_size());
  const int64_t passes = (per_rank + largest_micro_batch - 1) / largest_micro_batch;
  batch.accum_steps(0);
  return engine::resolve_plan(batch.micro_batch((per_rank + passes - 1) / passes));
}

}  // namespace bigbatch::cli
