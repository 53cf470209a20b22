#include "bigbatch/cli/train_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "bigbatch/cli/option_keys.h"
#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/data/image_dataset.h"
#include "bigbatch/dist/process_group.h"
#include "bigbatch/engine/trainer.h"
#include "bigbatch/models/peft_adapter.h"

namespace bigbatch::cli {

using models::ModelKind;

namespace {

nn::CheckpointPolicy read_checkpointing(ConfigReader& c, const std::string& section) {
  const std::string key = section + ".checkpointing";
  return nn::parse_checkpoint_policy(
      c.get_string(key, nn::CheckpointPolicy().to_string(),
                   "recompute activations in backward: \"none\", \"blocks\" or \"every:N\""),
      key);
}

/// Runs `validate(options)` with the config source in front of its error.
template <typename Options>
void validated(const ConfigReader& c, const Options& options) {
  try {
    validate(options);
  } catch (const InputError& error) {
    throw InputError(cat(c.source(), ": ", with_config_keys(error.what())));
  }
}

/// train.concurrent_micro_batches = N > 1 against a built-in model, refused here with the config's
/// location (a pretrained model is checked by the job, which reads its config).
void check_concurrency_supported(const ConfigReader& c, const TrainConfig& t) {
  const int64_t concurrent = t.job.trainer.concurrent_micro_batches();
  BB_CHECK_INPUT(concurrent >= 1, c.where("train.concurrent_micro_batches"),
                 ": train.concurrent_micro_batches = ", concurrent,
                 " must be >= 1 (1: one micro-batch at a time) or \"auto\"");
  if (concurrent == 1 || t.hf)
    return;
  const std::string need = job::concurrency_need(t.model, pass_site_of(t));
  BB_CHECK_INPUT(need.empty(), c.where("train.concurrent_micro_batches"),
                 ": train.concurrent_micro_batches = ", concurrent, " needs ", need);
}

/// The GPT's, ResNet's and BERT's sections; the chosen model's checkpointing is the one in effect.
void read_block_models(ConfigReader& c, TrainConfig& t) {
  const nn::CheckpointPolicy gpt = read_checkpointing(c, "gpt");
  const nn::CheckpointPolicy resnet = read_checkpointing(c, "resnet");
  t.model.resnet
      .depth(
          c.get_int("resnet.depth", t.model.resnet.depth(), "layers: 6n+2 (8, 14, 20, 32, 44, 56)"))
      .width(c.get_int("resnet.width", t.model.resnet.width(),
                       "channels of the first stage (x2, x4 in the next)"))
      .norm(nn::parse_norm_kind(c.get_choice("resnet.norm", nn::to_string(t.model.resnet.norm()),
                                             {"batch", "group", "layer", "instance"},
                                             "normalisation after every convolution"),
                                "resnet.norm"));
  const nn::CheckpointPolicy bert = read_checkpointing(c, "bert");
  t.model.bert
      .context(c.get_int("bert.context", t.model.bert.context(),
                         "bytes of a fortune the model reads (longer "
                         "ones are cut)"))
      .layers(c.get_int("bert.layers", t.model.bert.layers(), "encoder blocks"))
      .heads(c.get_int("bert.heads", t.model.bert.heads(), "attention heads per block"))
      .embed(c.get_int("bert.embed", t.model.bert.embed(), "width of the residual stream"))
      .dropout(c.get_double("bert.dropout", t.model.bert.dropout(), "dropout probability"));
  t.model.checkpointing = t.model.kind == ModelKind::kGpt      ? gpt
                          : t.model.kind == ModelKind::kResnet ? resnet
                          : t.model.kind == ModelKind::kBert   ? bert
                                                               : nn::CheckpointPolicy();
  if (t.model.kind == ModelKind::kResnet)
    validated(c, t.model.resnet);
  if (t.model.kind == ModelKind::kBert)
    validated(c, t.model.bert);
}

void read_models(ConfigReader& c, TrainConfig& t) {
  const std::string kind = c.get_choice(
      "model.kind", models::to_string(t.model.kind), {"gpt", "mlp", "resnet", "bert", "hf"},
      "which model: gpt and mlp learn the next byte of data.path, resnet classifies "
      "the images of data.train_images, bert the fortune collections of data.path; "
      "hf = the pretrained Hugging Face model of model.path (hf.*, adapter.*)");
  if (kind == "hf")
    t.hf.emplace();
  else
    t.model.kind = models::parse_model_kind(kind, "model.kind");
  t.model.norm_policy = engine::parse_norm_policy(
      c.get_choice("model.norm_policy", engine::to_string(t.model.norm_policy),
                   {"keep", "group", "ghost"},
                   "BatchNorm under accumulation: keep = per micro-batch, group = GroupNorm "
                   "instead, ghost = running statistics over the whole window"),
      "model.norm_policy");
  t.model.float64 =
      c.get_choice("model.dtype", t.model.float64 ? "float64" : "float32", {"float32", "float64"},
                   "dtype of parameters, gradients and optimizer state") == "float64";
  const std::string device =
      c.get_string("train.device", kDefaultDevice,
                   "where the model trains: auto (a GPU when this build and machine have "
                   "one), cpu, cuda or cuda:N",
                   ResumeChange::kPermitted);
  try {
    t.job.device = parse_device(device, cuda_availability(), "train.device");
  } catch (const InputError& error) {
    throw InputError(cat(c.source(), ": ", error.what()));
  }
  t.job.precision = nn::parse_precision(
      c.get_choice("model.precision", nn::to_string(t.job.precision), {"fp32", "bf16", "fp16"},
                   "compute precision of forward passes (autocast); weights and gradients stay "
                   "in model.dtype"),
      "model.precision");
  BB_CHECK_INPUT(!t.model.float64 || t.job.precision == nn::Precision::kFp32, c.source(),
                 ": model.precision = \"", nn::to_string(t.job.precision),
                 "\" autocasts float32 weights; with model.dtype = \"float64\" use "
                 "model.precision = \"fp32\"");
  t.job.bf16_matmul = nn::parse_bf16_matmul(
      c.get_choice("model.bf16_matmul", nn::to_string(t.job.bf16_matmul),
                   {"auto", "native", "fp32"},
                   "kernels of the matrix products model.precision = \"bf16\" computes in: "
                   "fp32 = bf16-rounded operands on fp32 kernels (the same bf16 results, ~3x "
                   "faster on CPUs without bf16 instructions), native = oneDNN's bf16 kernels, "
                   "auto = fp32 unless the CPU has avx512_bf16 or amx_bf16",
                   ResumeChange::kFree),
      "model.bf16_matmul");
  t.job.fp32_matmul = nn::parse_fp32_matmul(
      c.get_choice("model.fp32_matmul", nn::to_string(t.job.fp32_matmul),
                   {"auto", "blas", "onednn"},
                   "kernels of the float32 matrix products on the CPU (the Linears and the fused "
                   "GPT block): blas = LibTorch's BLAS (MKL or OpenBLAS), onednn = oneDNN's "
                   "float32 kernels (LibTorch 2.x, x86-64 with AVX-512), auto = onednn on an AMD "
                   "CPU with MKL, blas elsewhere",
                   ResumeChange::kFree),
      "model.fp32_matmul");
  nn::check_fp32_matmul_usable(t.job.fp32_matmul, c.source() + ": model.fp32_matmul");
  t.job.row_split = nn::parse_row_split(
      c.get_choice("model.row_split", nn::to_string(t.job.row_split), {"auto", "never", "always"},
                   "bf16 matrix products on the CPU split by rows, one part per thread, where "
                   "oneDNN would run them on one, and independent products (a Llama's q, k and "
                   "v) side by side, one per thread: auto = per shape or group, where its first "
                   "run found that faster and bitwise the same, never = oneDNN's own threading, "
                   "always = every product of 64 or more rows, every group",
                   ResumeChange::kFree),
      "model.row_split");
  t.job.attention = nn::parse_attention_kernel(
      c.get_choice("model.attention", nn::to_string(t.job.attention),
                   {"auto", "fused", "composite"},
                   "kernels of the transformers' attention: fused = LibTorch's "
                   "scaled_dot_product_attention (2.x), composite = masked product, softmax, "
                   "product (nn/bf16_matmul's under bf16), auto = fused except under CPU bf16 "
                   "autocast",
                   ResumeChange::kFree),
      "model.attention");
  t.job.block_kernel = nn::parse_block_kernel(
      c.get_choice("model.block_kernel", nn::to_string(t.job.block_kernel),
                   {"auto", "fused", "composite"},
                   "code of the GPT's and the BERT's transformer blocks: fused = one autograd "
                   "node per block with its backward written out (no dropout; fp32 or bf16 on "
                   "native bf16 products), composite = one operation per step, auto = fused on "
                   "the CPU wherever it applies and the attention is the composite one",
                   ResumeChange::kFree),
      "model.block_kernel");
  try {
    nn::check_precision_supported(t.job.precision, t.job.device.type(), "model.precision");
  } catch (const InputError& error) {
    throw InputError(cat(c.source(), ": ", with_config_keys(error.what())));
  }
  t.model.init_from = c.get_string(
      "model.init_from", "",
      "built-in models: a safetensors file of every parameter and buffer under its PyTorch name "
      "(bigbatch export's MODEL.safetensors, or a state_dict saved with safetensors) that "
      "training starts from; empty = a fresh initialisation from train.seed");
  BB_CHECK_INPUT(!t.hf || t.model.init_from.empty(), c.where("model.init_from"),
                 ": model.init_from is for the built-in models; model.kind = \"hf\" starts from "
                 "the weights in model.path (bigbatch export --format hf writes such a directory)");
  read_block_models(c, t);
  t.model.gpt
      .context(c.get_int("gpt.context", t.model.gpt.context(), "bytes of context the model sees"))
      .layers(c.get_int("gpt.layers", t.model.gpt.layers(), "transformer blocks"))
      .heads(c.get_int("gpt.heads", t.model.gpt.heads(), "attention heads per block"))
      .embed(c.get_int("gpt.embed", t.model.gpt.embed(), "width of the residual stream"))
      .dropout(c.get_double("gpt.dropout", t.model.gpt.dropout(), "dropout probability"));
  t.model.mlp
      .context(c.get_int("mlp.context", t.model.mlp.context(), "previous bytes the model sees"))
      .embed(c.get_int("mlp.embed", t.model.mlp.embed(), "embedding width per byte"))
      .hidden(c.get_int("mlp.hidden", t.model.mlp.hidden(), "hidden layer width"))
      .layers(c.get_int("mlp.layers", t.model.mlp.layers(), "hidden layers"))
      .dropout(c.get_double("mlp.dropout", t.model.mlp.dropout(), "dropout probability"));
}

void read_data_and_batch(ConfigReader& c, TrainConfig& t) {
  t.data.text
      .path(c.get_string("data.path", t.data.text.path(),
                         "a text file, or a directory of text files (Debian's fortunes)"))
      .val_fraction(c.get_double("data.val_fraction", t.data.text.val_fraction(),
                                 "share of the corpus held out"))
      .split_block(c.get_int("data.split_block", t.data.text.split_block(),
                             "bytes per block dealt to train or val"));
  const data::IdxPaths train = data::fashion_mnist_paths(data::kFashionMnistDirectory, "train");
  const data::IdxPaths test = data::fashion_mnist_paths(data::kFashionMnistDirectory, "test");
  t.data.idx.train_images = c.get_string("data.train_images", train.images,
                                         "IDX images to train on (resnet; default Fashion-MNIST)");
  t.data.idx.train_labels = c.get_string("data.train_labels", train.labels, "IDX labels of those");
  t.data.idx.test_images =
      c.get_string("data.test_images", test.images, "IDX images evaluated on (resnet)");
  t.data.idx.test_labels = c.get_string("data.test_labels", test.labels, "IDX labels of those");
  t.data.idx.subsample = c.get_int("data.subsample", t.data.idx.subsample,
                                   "training images used, a seeded subset (resnet); 0 = all");
  BB_CHECK_INPUT(t.data.idx.subsample >= 0, c.where("data.subsample"),
                 ": data.subsample = ", t.data.idx.subsample, " must be >= 0");
  t.data.fortunes.directory(t.data.text.path())
      .min_per_class(c.get_int("data.min_per_class", t.data.fortunes.min_per_class(),
                               "fortunes a collection needs to be a class (bert)"))
      .max_bytes(t.model.bert.context())
      .test_fraction(t.data.text.val_fraction());
  const int64_t accum_steps = c.get_int("batch.accum_steps", t.job.batch.accum_steps(),
                                        "micro-batches per optimizer step; 0 = from micro_batch");
  // micro_batch defaults to 8 unless accum_steps decides it; "auto" fits it to memory.budget.
  const std::optional<int64_t> micro_batch = c.get_int_or_keyword(
      "batch.micro_batch", accum_steps > 0 ? 0 : 8, "auto",
      "samples per forward/backward pass; 0 = from accum_steps; \"auto\" = largest that fits "
      "memory.budget",
      ResumeChange::kPermitted);
  t.job.auto_micro_batch = !micro_batch.has_value();
  BB_CHECK_INPUT(!t.job.auto_micro_batch || accum_steps == 0, c.source(),
                 ": batch.micro_batch = \"auto\" chooses accum_steps too; leave batch.accum_steps "
                 "unset, got ",
                 accum_steps);
  t.job.batch
      .global_batch(
          c.get_int("batch.global_batch", t.job.batch.global_batch(), "samples per optimizer step"))
      .micro_batch(micro_batch.value_or(0))
      .accum_steps(accum_steps);
}

void read_memory(ConfigReader& c, TrainConfig& t) {
  const std::string budget = c.get_string(
      "memory.budget", "", "tensor memory allowed, e.g. \"1.5GiB\"; over it is out of memory",
      ResumeChange::kPermitted);
  t.job.memory_budget = budget.empty() ? 0 : parse_bytes(budget, "memory.budget");
  t.job.reuse_freed_blocks =
      c.get_bool("memory.reuse_freed_blocks", t.job.reuse_freed_blocks,
                 "keep freed CPU tensor blocks for the next tensors of about their size instead of "
                 "returning them to malloc",
                 ResumeChange::kPermitted);
  BB_CHECK_INPUT(!t.job.auto_micro_batch || t.job.memory_budget > 0, c.source(),
                 ": batch.micro_batch = \"auto\" needs memory.budget (for example \"2GiB\")");
}

void read_optimization(ConfigReader& c, TrainConfig& t) {
  const std::string optimizer = c.get_choice(
      "optim.name", engine::to_string(t.job.optimizer.kind()), {"adamw", "sgd"}, "update rule");
  t.job.optimizer.kind(engine::parse_optimizer_kind(optimizer, "optim.name"));
  const double lr =
      c.get_double("optim.lr", t.job.batch.base_lr(), "learning rate at optim.base_batch");
  t.job.batch.base_lr(lr)
      .lr_scaling(engine::parse_lr_scaling(
          c.get_choice("optim.lr_scaling", engine::to_string(t.job.batch.lr_scaling()),
                       {"none", "linear", "sqrt"},
                       "how lr follows global_batch relative to base_batch"),
          "optim.lr_scaling"))
      .base_batch(c.get_int("optim.base_batch", t.job.batch.base_batch(),
                            "batch at which lr was tuned; 0 = global"));
  t.job.optimizer.lr(lr)
      .weight_decay(c.get_double("optim.weight_decay", t.job.optimizer.weight_decay(),
                                 "decoupled (AdamW) or L2 (SGD)"))
      .beta1(c.get_double("optim.beta1", t.job.optimizer.beta1(), "AdamW first-moment decay"))
      .beta2(c.get_double("optim.beta2", t.job.optimizer.beta2(), "AdamW second-moment decay"))
      .eps(c.get_double("optim.eps", t.job.optimizer.eps(), "AdamW denominator epsilon"))
      .momentum(c.get_double("optim.momentum", t.job.optimizer.momentum(), "SGD momentum"))
      .nesterov(c.get_bool("optim.nesterov", t.job.optimizer.nesterov(), "SGD Nesterov momentum"))
      .kernel(engine::parse_optimizer_kernel(
          c.get_choice("optim.kernel", engine::to_string(t.job.optimizer.kernel()),
                       {"auto", "fused", "per_tensor"},
                       "AdamW's update: fused = every parameter group in one kernel (LibTorch "
                       ">= 2.4), per_tensor = LibTorch's AdamW, one tensor operation at a time, "
                       "auto = fused where LibTorch has it",
                       ResumeChange::kFree),
          "optim.kernel"));
  t.job.trainer.max_grad_norm(c.get_double("optim.max_grad_norm", t.job.trainer.max_grad_norm(),
                                           "clip the window gradient's norm; 0 = off"));
  t.job.schedule
      .kind(engine::parse_schedule_kind(
          c.get_choice("schedule.kind", engine::to_string(t.job.schedule.kind()),
                       engine::schedule_kind_names(),
                       "learning-rate shape over the run: warmup_* rise linearly over "
                       "schedule.warmup_steps, then fall to min_lr_ratio x peak by the last step "
                       "as a half cosine or a straight line, or stay at the peak; constant has no "
                       "warmup"),
          "schedule.kind"))
      .warmup_steps(c.get_int("schedule.warmup_steps", t.job.schedule.warmup_steps(),
                              "optimizer steps of linear warmup"))
      .min_lr_ratio(c.get_double("schedule.min_lr_ratio", t.job.schedule.min_lr_ratio(),
                                 "final lr / peak lr"));
}

void read_loss_scale(ConfigReader& c, TrainConfig& t) {
  const std::string mode =
      c.get_choice("loss_scale.mode", job::to_string(t.job.loss_scale), {"auto", "dynamic", "off"},
                   "dynamic loss scaling: auto = only with model.precision = \"fp16\", dynamic = "
                   "always");
  t.job.loss_scale = job::parse_loss_scale_mode(mode, "loss_scale.mode");
  const engine::LossScalerOptions defaults;
  t.job.loss_scaler
      .init_scale(c.get_double("loss_scale.init_scale", defaults.init_scale(),
                               "scale of the first window; powers of two unscale exactly"))
      .growth_factor(c.get_double("loss_scale.growth_factor", defaults.growth_factor(),
                                  "scale x this after growth_interval clean windows (> 1)"))
      .backoff_factor(c.get_double("loss_scale.backoff_factor", defaults.backoff_factor(),
                                   "scale x this after a window with inf/NaN gradients (0..1)"))
      .growth_interval(c.get_int("loss_scale.growth_interval", defaults.growth_interval(),
                                 "clean windows in a row before the scale grows"))
      .min_scale(c.get_double("loss_scale.min_scale", defaults.min_scale(),
                              "lowest scale; an overflow at it stops the run"));
  try {
    engine::check_loss_scaler_options(t.job.loss_scaler);
  } catch (const InputError& error) {
    throw InputError(cat(c.source(), ": ", with_config_keys(error.what())));
  }
}

/// An integer key that must be at least `minimum`.
int64_t read_at_least(ConfigReader& c, const std::string& key, int64_t fallback, int64_t minimum,
                      const std::string& help, ResumeChange resume = ResumeChange::kForbidden) {
  const int64_t value = c.get_int(key, fallback, help, resume);
  BB_CHECK_INPUT(value >= minimum, c.where(key), ": ", key, " = ", value, " must be >= ", minimum);
  return value;
}

/// A number key that must be positive and finite.
double read_positive(ConfigReader& c, const std::string& key, double fallback,
                     const std::string& help, const std::string& unit,
                     ResumeChange resume = ResumeChange::kForbidden) {
  const double value = c.get_double(key, fallback, help, resume);
  BB_CHECK_INPUT(value > 0 && std::isfinite(value), c.where(key), ": ", key, " = ", value,
                 " must be a positive number", unit);
  return value;
}

void read_loop(ConfigReader& c, TrainConfig& t) {
  engine::TrainerOptions& trainer = t.job.trainer;
  const int64_t steps =
      read_at_least(c, "train.steps", trainer.total_steps(), 0,
                    "optimizer steps (windows); 0 = use train.epochs", ResumeChange::kPermitted);
  t.job.epochs =
      read_at_least(c, "train.epochs", t.job.epochs, 0,
                    "passes over the training split; overrides steps", ResumeChange::kPermitted);
  BB_CHECK_INPUT(steps > 0 || t.job.epochs > 0, c.source(),
                 ": train.steps and train.epochs are both 0; set one of them");
  trainer.total_steps(t.job.epochs > 0 ? 0 : steps);
  trainer.eval_every(c.get_int("train.eval_every", trainer.eval_every(),
                               "evaluate every N optimizer steps; 0 = at end",
                               ResumeChange::kFree));
  trainer.eval_samples(c.get_int("train.eval_samples", trainer.eval_samples(),
                                 "validation samples per evaluation", ResumeChange::kFree));
  t.job.run.log_every =
      c.get_int("train.log_every", t.job.run.log_every,
                "progress line every N steps (non-terminal)", ResumeChange::kFree);
  trainer.on_nonfinite(engine::parse_nonfinite_policy(
      c.get_choice("train.on_nonfinite", engine::to_string(trainer.on_nonfinite()),
                   {"skip", "abort"},
                   "a window with inf/NaN loss or gradient: drop it (no step) or stop",
                   ResumeChange::kPermitted),
      "train.on_nonfinite"));
  trainer.max_consecutive_skips(read_at_least(
      c, "train.max_consecutive_skips", trainer.max_consecutive_skips(), 0,
      "more skipped windows in a row than this stop the run", ResumeChange::kPermitted));
  t.data.seed =
      static_cast<uint64_t>(read_at_least(c, "train.seed", static_cast<int64_t>(trainer.seed()), 0,
                                          "seeds initialisation and data order"));
  trainer.seed(t.data.seed);
  t.job.threads.backend(job::builtin_backend(t.model.kind))
      .openmp(read_at_least(c, "train.threads", t.job.threads.openmp(), 0,
                            "OpenMP intra-op threads; 0 = automatic (fp32: 1, bf16: all cores)",
                            ResumeChange::kFree))
      .blas(read_at_least(c, "train.blas_threads", t.job.threads.blas(), 0,
                          "OpenBLAS threads; 0 = automatic (fp32: all cores, bf16: 1)",
                          ResumeChange::kFree));
  trainer.prefetch_depth(
      read_at_least(c, "train.prefetch_depth", trainer.prefetch_depth(), 0,
                    "micro-batches of the next windows gathered on a background thread while "
                    "this one computes (extra memory); 0 = gather in the training thread",
                    ResumeChange::kFree));
  const std::optional<int64_t> concurrent = c.get_int_or_keyword(
      "train.concurrent_micro_batches", std::nullopt, "auto",
      "micro-batches of a window run at once, each on its share of the cores (faster; the same "
      "results; their activations at once); needs a model without dropout, and BatchNorm on CPU "
      "fp32 or ghost; auto = 2 "
      "on a CPU with 2 or more cores per process for such a model, passes of at most 20 GFLOP "
      "and no memory.budget, else 1 (the plan says why)",
      ResumeChange::kFree);
  t.job.auto_concurrent_micro_batches = !concurrent.has_value();
  trainer.concurrent_micro_batches(concurrent.value_or(1));
  check_concurrency_supported(c, t);
}

void read_run_files(ConfigReader& c, TrainConfig& t) {
  t.job.run.directory =
      c.get_string("train.run_dir", t.job.run.directory,
                   "run directory; empty = runs/<model>-<time>", ResumeChange::kFree);
  t.job.trainer.checkpoint_every(read_at_least(
      c, "checkpoint.every", t.job.trainer.checkpoint_every(), 0,
      "save the training state (model, optimizer, data position, ...) every N optimizer steps "
      "and after the last; 0 = after the last only",
      ResumeChange::kFree));
  t.job.run.checkpoint_keep =
      read_at_least(c, "checkpoint.keep", t.job.run.checkpoint_keep, 1,
                    "newest checkpoints kept in <run_dir>/checkpoints", ResumeChange::kFree);
}

void read_dist(ConfigReader& c, TrainConfig& t) {
  t.job.dist_timeout = read_positive(
      c, "dist.timeout", t.job.dist_timeout,
      "data parallel: seconds a collective may wait for the other ranks before the job fails, "
      "naming the rank that stopped",
      " of seconds", ResumeChange::kFree);
  t.job.dist_backend = dist::parse_backend(
      c.get_string("dist.backend", "auto",
                   "data parallel: \"gloo\" (CPU), \"nccl\" (CUDA builds) or \"auto\" (NCCL "
                   "when training on a GPU)",
                   ResumeChange::kFree),
      t.job.device.is_cuda(), c.where("dist.backend") + ": dist.backend");
  const double bucket_mb = read_positive(
      c, "dist.bucket_mb", static_cast<double>(t.job.trainer.bucket_bytes()) / (1024.0 * 1024.0),
      "data parallel: MiB of gradient per all-reduce bucket; smaller buckets start earlier "
      "in the last backward of a window",
      "", ResumeChange::kFree);
  t.job.trainer.bucket_bytes(
      std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024.0 * 1024.0)));
}

void read_sample(ConfigReader& c, TrainConfig& t) {
  t.model.prompt = c.get_string("sample.prompt", t.model.prompt,
                                "text the final sample continues (GPT)", ResumeChange::kFree);
  t.model.sample
      .max_new_bytes(c.get_int("sample.bytes", t.model.sample.max_new_bytes(),
                               "bytes to generate; 0 = no sample", ResumeChange::kFree))
      .temperature(c.get_double("sample.temperature", t.model.sample.temperature(),
                                "softmax temperature", ResumeChange::kFree))
      .top_k(c.get_int("sample.top_k", t.model.sample.top_k(),
                       "sample among the k likeliest bytes; 0 = all", ResumeChange::kFree))
      .seed(t.data.seed);
}

/// The float dtype spelled `name` ("float32", "bfloat16", "float16").
torch::Dtype parse_float_dtype(const std::string& name) {
  return name == "bfloat16" ? torch::kBFloat16 : name == "float16" ? torch::kHalf : torch::kFloat;
}

/// Comma-separated names ("q_proj, v_proj") as a list; empty text is an empty list.
std::vector<std::string> name_list(const std::string& text) {
  std::vector<std::string> names;
  std::string name;
  std::istringstream in(text);
  while (std::getline(in, name, ',')) {
    const size_t begin = name.find_first_not_of(" \t");
    if (begin != std::string::npos)
      names.push_back(name.substr(begin, name.find_last_not_of(" \t") - begin + 1));
  }
  return names;
}

/// model.path, hf.* and adapter.*: the pretrained model of model.kind = "hf".
void read_hf(ConfigReader& c, TrainConfig& t) {
  job::HfWorkloadOptions hf;
  hf.model_path = c.get_string("model.path", "",
                               "model.kind = \"hf\": a directory in Hugging Face's layout "
                               "(config.json, model.safetensors, tokenizer.json)");
  hf.context = c.get_int("hf.context", hf.context,
                         "tokens per sample; 0 = 128 (classification) or 256 (causal LM), at "
                         "most the model's positions");
  hf.checkpointing = read_checkpointing(c, "hf");
  hf.skip_padding = c.get_bool("hf.skip_padding", hf.skip_padding,
                               "classification (bert): compute only the real tokens of padded "
                               "texts; the same results up to float rounding, less work");
  const std::string adapter = c.get_choice("adapter.kind", "none", {"none", "lora"},
                                           "none = every weight trains; lora = low-rank "
                                           "adapters on frozen pretrained weights");
  hf.adapter.lora = adapter == "lora";
  hf.adapter.init_from =
      c.get_string("adapter.init_from", "",
                   "a PEFT LoRA adapter directory to start from: its rank, alpha, targets and "
                   "weights; empty = fresh adapters");
  // An adapter to start from gives the defaults of rank, alpha and targets (so that a resolved
  // config, which holds them all, reads back the same).
  std::optional<models::PeftLoraConfig> start;
  if (!hf.adapter.init_from.empty())
    start = models::read_peft_lora_config(hf.adapter.init_from);
  const bool listed_targets = start && start->target_modules.is_array();
  hf.adapter.lora_options
      .rank(c.get_int("adapter.rank", start ? start->rank : hf.adapter.lora_options.rank(),
                      "LoRA rank r"))
      .alpha(c.get_double("adapter.alpha", start ? start->alpha : hf.adapter.lora_options.alpha(),
                          "LoRA alpha: the update is scaled by alpha / rank"))
      .dropout(c.get_double("adapter.dropout", hf.adapter.lora_options.dropout(),
                            "dropout on the adapters' input"))
      .targets(name_list(c.get_string(
          "adapter.targets",
          listed_targets ? join(start->target_modules.get<std::vector<std::string>>(), ",") : "",
          "comma-separated module names or name endings to adapt; empty = q_proj,v_proj (llama), "
          "c_attn (gpt2), query,value (bert), q_lin,v_lin (distilbert), Wqkv (modernbert)")))
      .trainable(name_list(c.get_string("adapter.trainable", "",
                                        "comma-separated modules trained in full besides the "
                                        "adapters (a fresh classifier always is)")));
  if (start) {
    const nn::LoraOptions& lora = hf.adapter.lora_options;
    const std::string leave_out = cat(" (", start->path, "); leave it out");
    BB_CHECK_INPUT(hf.adapter.lora, c.where("adapter.init_from"), ": adapter.init_from = \"",
                   hf.adapter.init_from,
                   "\" starts LoRA adapters, which need adapter.kind = \"lora\"");
    BB_CHECK_INPUT(lora.rank() == start->rank, c.where("adapter.rank"),
                   ": adapter.rank = ", lora.rank(), ", but adapter.init_from's adapter has r ",
                   start->rank, leave_out);
    BB_CHECK_INPUT(std::abs(lora.alpha() - start->alpha) <= 1e-12 * start->alpha,
                   c.where("adapter.alpha"), ": adapter.alpha = ", lora.alpha(),
                   ", but adapter.init_from's adapter has ", start->alpha,
                   " (lora_alpha, times sqrt(r) with use_rslora)", leave_out);
    const std::vector<std::string> listed =
        listed_targets ? start->target_modules.get<std::vector<std::string>>()
                       : std::vector<std::string>();
    BB_CHECK_INPUT(lora.targets() == listed, c.where("adapter.targets"), ": adapter.targets = \"",
                   join(lora.targets(), ","), "\", but adapter.init_from's adapter targets ",
                   start->target_modules.dump(), leave_out);
  }
  const std::string frozen = c.get_choice(
      "adapter.base_dtype", "float32", {"float32", "bfloat16", "float16"},
      "storage of the frozen weights of the linear layers (bfloat16/float16 halve it)");
  hf.adapter.frozen_dtype = parse_float_dtype(frozen);
  hf.float64 = t.model.float64;
  hf.data_path = t.data.text.path();
  hf.val_fraction = t.data.text.val_fraction();
  hf.min_per_class = t.data.fortunes.min_per_class();
  hf.seed = t.data.seed;
  hf.prompt = t.model.prompt;
  hf.sample = t.model.sample;
  if (!t.hf)
    return;
  BB_CHECK_INPUT(!hf.model_path.empty(), c.source(),
                 ": model.kind = \"hf\" needs model.path, a directory in Hugging Face's layout");
  BB_CHECK_INPUT(hf.adapter.lora || frozen == "float32", c.where("adapter.base_dtype"),
                 ": adapter.base_dtype = \"", frozen,
                 "\" stores frozen weights, which only adapter.kind = \"lora\" has");
  BB_CHECK_INPUT(hf.context >= 0, c.where("hf.context"), ": hf.context = ", hf.context,
                 " must be >= 0 (0: the default)");
  const nn::LoraOptions& lora = hf.adapter.lora_options;
  BB_CHECK_INPUT(lora.rank() >= 1, c.where("adapter.rank"), ": adapter.rank = ", lora.rank(),
                 " must be >= 1");
  BB_CHECK_INPUT(lora.alpha() > 0, c.where("adapter.alpha"), ": adapter.alpha = ", lora.alpha(),
                 " must be positive");
  BB_CHECK_INPUT(lora.dropout() >= 0 && lora.dropout() < 1, c.where("adapter.dropout"),
                 ": adapter.dropout = ", lora.dropout(), " must be in [0, 1)");
  *t.hf = hf;
}

}  // namespace

job::PassSite pass_site_of(const TrainConfig& config) {
  return job::PassSite{config.job.precision, config.job.device.type()};
}

TrainConfig read_train_config(ConfigReader& config) {
  TrainConfig result;
  read_models(config, result);
  read_data_and_batch(config, result);
  read_memory(config, result);
  read_optimization(config, result);
  read_loss_scale(config, result);
  read_loop(config, result);
  read_run_files(config, result);
  read_dist(config, result);
  read_sample(config, result);
  read_hf(config, result);
  config.check_all_used();
  result.resolved_toml = config.resolved_toml();
  result.resolved_values = config.resolved_values();
  result.resume_changes = config.resume_changes();
  return result;
}

}  // namespace bigbatch::cli
