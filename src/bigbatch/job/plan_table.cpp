#include "bigbatch/job/plan_table.h"

#include <map>
#include <string>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/memory/device_memory.h"
#include "bigbatch/models/model_info.h"
#include "bigbatch/nn/bf16_attention.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::job {
namespace {

/// The blocks row: which code runs the transformer blocks in training (Workload::block_dropout),
/// and why.
void add_block_row(Table& table, const TrainingJobOptions& options, const Workload& w, bool cpu,
                   nn::AttentionKernel attention) {
  const bool dropout_draws = *w.block_dropout > 0.0;
  const bool precision_supported = nn::fused_block_supports(
      {false, options.device.type(), torch::kFloat, nn::compute_dtype(options.precision)});
  const nn::BlockKernel kernel = nn::resolve_block_kernel(
      options.block_kernel,
      {!dropout_draws && !w.block_adapters && precision_supported, cpu, attention});
  const std::string why = kernel == nn::BlockKernel::kFused ? "one autograd node per block"
                          : dropout_draws                   ? "dropout draws in training"
                          : w.block_adapters                ? "adapters on the blocks' products"
                          : !precision_supported            ? "not for this precision's kernels"
                          : options.block_kernel == nn::BlockKernel::kComposite
                              ? "one operation per step"
                              : "LibTorch's fused attention is the faster here";
  table.add("blocks", nn::to_string(kernel),
            cat(why, " (block_kernel = \"", nn::to_string(options.block_kernel), "\")"));
}

/// The elementwise row of the Llama family: whether RMSNorm, the rotary embeddings and SwiGLU
/// run on nn/llama_ops' fused CPU nodes (nn/llama_ops decides per call, by the same rule: float32
/// parameters on the CPU, block_kernel not "composite"; under bf16 autocast the rotary embeddings
/// and SwiGLU take bfloat16 values).
void add_llama_ops_row(Table& table, const TrainingJobOptions& options, bool cpu, bool float64) {
  const std::string setting =
      cat(" (block_kernel = \"", nn::to_string(options.block_kernel), "\")");
  if (options.block_kernel == nn::BlockKernel::kComposite || !cpu || float64) {
    table.add("elementwise", "composite",
              cat(options.block_kernel == nn::BlockKernel::kComposite ? "one operation per step"
                  : !cpu ? "the fused kernels are for the CPU"
                         : "the fused kernels are for float32",
                  setting));
  } else {
    table.add("elementwise", "fused",
              cat("RMSNorm, rotary embeddings, SwiGLU: one autograd node each",
                  options.precision == nn::Precision::kFp32
                      ? ""
                      : cat(" (rotary embeddings and SwiGLU on ", nn::to_string(options.precision),
                            " values, in float32)"),
                  setting));
  }
}

void add_model_section(Table& table, const TrainingJobOptions& options, const Workload& w,
                       const engine::Plan& plan) {
  table.section("model");
  table.add("model", w.name, w.description);
  // The dtype of the parameters, or each dtype's share when frozen weights are stored narrower.
  std::map<std::string, int64_t> by_dtype;
  for (const torch::Tensor& p : w.module->parameters())
    by_dtype[std::string(c10::toString(p.scalar_type()))] += p.numel();
  std::string dtypes;
  for (const auto& [dtype, count] : by_dtype) {
    const std::string name = dtype == "Double"     ? "float64"
                             : dtype == "Float"    ? "float32"
                             : dtype == "BFloat16" ? "bfloat16"
                             : dtype == "Half"     ? "float16"
                                                   : dtype;
    dtypes += (dtypes.empty() ? "" : ", ") + name +
              (by_dtype.size() > 1 ? " " + human_count(static_cast<double>(count)) : "");
  }
  table.add("parameters", human_count(static_cast<double>(models::parameter_count(*w.module))),
            dtypes.empty() ? "float32" : dtypes);
  table.add("precision", nn::to_string(options.precision),
            options.precision == nn::Precision::kFp32
                ? std::string("no autocast")
                : cat("forward passes autocast to ", nn::to_string(options.precision),
                      "; weights, gradients and accumulation in float32"));
  if (options.precision == nn::Precision::kBf16) {
    const bool fp32_kernels = nn::bf16_matmul() == nn::Bf16Matmul::kFp32;
    const std::string split =
        options.row_split == nn::RowSplit::kNever ? ""
        : options.row_split == nn::RowSplit::kAlways
            ? ", split by rows over the threads"
            : ", split by rows over the threads where faster and bitwise the same";
    table.add("bf16 matmuls", fp32_kernels ? "fp32 kernels" : "native",
              cat(fp32_kernels ? "bf16-rounded operands and results, fp32 arithmetic"
                               : "oneDNN's bf16 kernels" + split,
                  " (bf16_matmul = \"", nn::to_string(options.bf16_matmul), "\", row_split = \"",
                  nn::to_string(options.row_split), "\")"));
  }
  const bool cpu = options.device.is_cpu();
  if (cpu && options.precision == nn::Precision::kFp32 && by_dtype.count("Float") > 0) {
    const bool onednn = nn::fp32_matmul() == nn::Fp32Matmul::kOneDnn;
    table.add("fp32 matmuls", onednn ? "oneDNN" : "BLAS",
              cat(onednn ? "oneDNN's float32 kernels for the Linears and fused blocks"
                         : "LibTorch's BLAS",
                  " (fp32_matmul = \"", nn::to_string(options.fp32_matmul), "\")"));
  }
  const nn::AttentionKernel attention =
      w.attention_softcap ? nn::AttentionKernel::kComposite
                          : nn::resolve_attention_kernel(
                                options.attention,
                                {cpu, options.precision == nn::Precision::kBf16, w.attention_keys});
  if (w.attention_keys > 0) {
    const bool bf16_kernels =
        cpu && options.precision == nn::Precision::kBf16 && nn::bf16_attention_available();
    std::string how = "masked product, softmax, product";
    if (w.attention_softcap)
      how =
          "product, soft-cap (attn_logit_softcapping: the fused kernel has none), mask, softmax, "
          "product";
    else if (attention == nn::AttentionKernel::kFused)
      how = "LibTorch's scaled_dot_product_attention";
    else if (bf16_kernels)
      how = cat("bf16 attention kernels, one pass per head",
                nn::bf16_attention_amx_available()
                    ? ", products on AMX tiles where the head dimension is a multiple of 32"
                    : "",
                " (with dropout: masked product, softmax, product)");
    table.add("attention", nn::to_string(attention),
              cat(how, " over ", w.attention_keys, " keys (attention = \"",
                  nn::to_string(options.attention), "\")"));
  }
  if (w.block_dropout)
    add_block_row(table, options, w, cpu, attention);
  if (w.llama_ops)
    add_llama_ops_row(table, options, cpu, by_dtype.count("Double") > 0);
  if (w.add_model_rows)
    w.add_model_rows(table, plan);
}

/// The loss_scale and on_nonfinite rows of the optimization section.
void add_nonfinite_rows(Table& table, const TrainingJobOptions& options) {
  const engine::LossScalerOptions& scaler = options.loss_scaler;
  if (loss_scaling_enabled(options)) {
    table.add("loss_scale", "dynamic",
              cat("init ", scaler.init_scale(), ", x", scaler.growth_factor(), " after ",
                  scaler.growth_interval(), " clean windows, x", scaler.backoff_factor(),
                  " on overflow, min ", scaler.min_scale()));
  } else {
    table.add("loss_scale", "off",
              options.loss_scale == LossScaleMode::kAuto ? "auto: only with fp16, not in use"
                                                         : "not scaled");
  }
  const engine::TrainerOptions& trainer = options.trainer;
  table.add("on_nonfinite", engine::to_string(trainer.on_nonfinite()),
            trainer.on_nonfinite() == engine::NonFinitePolicy::kSkip
                ? cat("inf/NaN window dropped, no step; stop after ",
                      trainer.max_consecutive_skips(), " in a row")
                : std::string("stop at the first inf/NaN loss or gradient"));
}

void add_optimization_section(Table& table, const TrainingJobOptions& options, const Workload& w) {
  table.section("optimization");
  const engine::OptimizerOptions& optim = options.optimizer;
  table.add(
      "optimizer", engine::to_string(optim.kind()),
      optim.kind() == engine::OptimizerKind::kAdamW
          ? cat("betas (", optim.beta1(), ", ", optim.beta2(), "), weight decay ",
                optim.weight_decay(), ", ",
                engine::to_string(engine::resolve_optimizer_kernel(optim.kernel())), " kernel")
          : cat("momentum ", optim.momentum(), ", weight decay ", optim.weight_decay()));
  table.add("schedule", engine::to_string(options.schedule.kind()),
            engine::describe(options.schedule));
  table.add("max_grad_norm", cat(options.trainer.max_grad_norm()),
            "clipping of the window gradient");
  add_nonfinite_rows(table, options);
  table.add("loss", w.objective->unit() == engine::LossUnit::kToken ? "per token" : "per sample",
            "mean over the whole window");
}

void add_run_section(Table& table, const TrainingJobOptions& options, const PlanFacts& facts) {
  table.section("run");
  table.add(
      "steps", std::to_string(facts.steps),
      cat(facts.windows_per_epoch, " windows per epoch (",
          format_fixed(
              static_cast<double>(facts.steps) / static_cast<double>(facts.windows_per_epoch), 2),
          " epochs)"));
  table.add("device", describe_device(options.device),
            options.device.is_cpu() ? "model, batches and optimizer state in host memory"
                                    : cat(format_bytes(device_memory_bytes(options.device)),
                                          " of GPU memory; batches are gathered on the CPU"));
  const bool onednn = facts.threads.backend == MatmulBackend::kOneDnn;
  const bool openblas = facts.threads.blas > 0;
  table.add("threads", std::to_string(facts.threads.openmp),
            onednn     ? "OpenMP; oneDNN (convolutions, matmuls) runs over these"
            : openblas ? "OpenMP (intra-op)"
                       : "OpenMP; LibTorch's BLAS (fp32 matmuls) runs over these");
  if (openblas) {
    table.add(
        "blas_threads", std::to_string(facts.threads.blas),
        onednn ? "OpenBLAS (fp32 matmuls; few in bf16)" : "OpenBLAS; fp32 matmuls run on these");
  } else {
    table.add("blas_threads", "-",
              "no OpenBLAS in this LibTorch: its BLAS runs on the OpenMP threads");
  }
  const int64_t concurrent = options.trainer.concurrent_micro_batches();
  if (!facts.concurrency.empty()) {
    table.add("concurrent", std::to_string(concurrent), facts.concurrency);
  } else if (concurrent > 1) {
    table.add("concurrent", std::to_string(concurrent),
              "micro-batches of a window run at once, each on its share of the cores; their "
              "activations exist at once");
  }
  table.add("run_dir", facts.run_dir.empty() ? "(not written)" : facts.run_dir);
}

}  // namespace

Table plan_table(const TrainingJobOptions& options, const Workload& w, const engine::Plan& plan,
                 const PlanFacts& facts) {
  Table table("bigbatch plan");
  add_model_section(table, options, w, plan);
  table.section("data");
  table.add("source", w.data_description);
  table.add("train", w.train->describe());
  table.add("validation", w.val ? w.val->describe() : "none");
  table.section("batch");
  plan.describe(table);
  if (!facts.micro_batch_search.empty())
    table.add("micro_batch auto", facts.micro_batch_search, "largest that fits memory.budget");
  const c10::Device device = options.device;
  table.add("memory.budget",
            options.memory_budget > 0 ? format_bytes(options.memory_budget) : "none",
            cat("tensor memory", device.is_cpu() ? "" : cat(" on ", device.str()), "; ",
                format_bytes(memory::current_bytes(device)), " in use at start"));
  add_optimization_section(table, options, w);
  add_run_section(table, options, facts);
  return table;
}

}  // namespace bigbatch::job
