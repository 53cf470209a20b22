#include "bigbatch/cli/app.h"

#include <CLI/CLI.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "bigbatch/cli/bench_memory_command.h"
#include "bigbatch/cli/bench_precision_command.h"
#include "bigbatch/cli/doctor_command.h"
#include "bigbatch/cli/export_command.h"
#include "bigbatch/cli/generate_command.h"
#include "bigbatch/cli/option_keys.h"
#include "bigbatch/cli/plot_command.h"
#include "bigbatch/cli/predict_command.h"
#include "bigbatch/cli/reproduce_command.h"
#include "bigbatch/cli/train_command.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/error_message.h"

namespace bigbatch::cli {

namespace {

/// A subcommand and what runs it once the command line named it. Its options live in the
/// runner's captures, so they outlive the parse.
struct Subcommand {
  CLI::App* command = nullptr;
  std::function<int(std::ostream& out)> run;
};

void add_config_options(CLI::App& command, TrainCommandOptions& options) {
  command.add_option("-c,--config", options.config_path, "TOML config file (default: built-in)");
  command
      .add_option("-s,--set", options.overrides,
                  "override a config key, e.g. --set batch.global_batch=128 (repeatable)")
      ->type_name("KEY=VALUE");
}

Subcommand add_train(CLI::App& app) {
  struct TrainLine {
    TrainCommandOptions options;
    std::optional<int64_t> steps;  // given, 0 included (train.steps = 0: train.epochs decides)
    std::string run_dir;
  };
  auto line = std::make_shared<TrainLine>();
  CLI::App* train = app.add_subcommand(
      "train", "Train a built-in model (default: a byte-level GPT on Debian's fortunes)");
  add_config_options(*train, line->options);
  train->add_option("--steps", line->steps, "shortcut for --set train.steps=N");
  train->add_option("--run-dir", line->run_dir, "shortcut for --set train.run_dir=DIR");
  train->add_flag("--plan", line->options.plan_only, "print the plan and exit without training");
  train
      ->add_option("--resume", line->options.resume_dir,
                   "continue the run in RUN_DIR from its newest usable checkpoint, with its "
                   "config.toml (change keys with --set)")
      ->type_name("RUN_DIR");
  train->add_flag("--auto-resume", line->options.auto_resume,
                  "continue the run in --run-dir when it holds checkpoints, else start it (one "
                  "command line that starts and resumes a job)");
  train
      ->add_option("--nproc", line->options.nproc,
                   "start N data-parallel ranks on this machine (global_batch = micro_batch x "
                   "accum_steps x N); without it, a rank reads RANK, WORLD_SIZE, MASTER_ADDR, "
                   "MASTER_PORT as torchrun sets them")
      ->type_name("N");
  train->add_flag("--allow-changes", line->options.allow_changes,
                  "on resume, accept config changes that alter the later steps (micro_batch, "
                  "steps, epochs, memory.budget, on_nonfinite)");
  return {train, [line](std::ostream& out) {
            if (line->steps) {
              BB_CHECK_INPUT(*line->steps >= 0, "--steps ", *line->steps,
                             " must be >= 0 (0: train.epochs decides)");
              line->options.overrides.push_back("train.steps=" + std::to_string(*line->steps));
            }
            if (!line->run_dir.empty())
              line->options.overrides.push_back("train.run_dir=" + line->run_dir);
            return run_train(line->options, out);
          }};
}

Subcommand add_config(CLI::App& app) {
  auto options = std::make_shared<TrainCommandOptions>();
  CLI::App* config = app.add_subcommand(
      "config", "Print every config key with the value in effect and its meaning, as TOML");
  add_config_options(*config, *options);
  return {config, [options](std::ostream& out) { return run_config(*options, out); }};
}

Subcommand add_bench_memory(CLI::App& bench) {
  auto options = std::make_shared<BenchMemoryOptions>();
  CLI::App* memory = bench.add_subcommand(
      "memory",
      "Peak memory and throughput against micro-batch size, with and without activation "
      "checkpointing (table, bench.json and memory.svg)");
  add_config_options(*memory, options->config);
  memory
      ->add_option("--micro-batches", options->micro_batches,
                   "sizes to measure, e.g. 1,2,4,8 (default: powers of two up to the global batch)")
      ->delimiter(',');
  memory
      ->add_option("--checkpointing", options->checkpointing,
                   "policies to measure, e.g. none,blocks,every:2 (default: none,blocks for gpt)")
      ->delimiter(',');
  memory->add_option("--steps", options->steps,
                     "timed optimizer steps per point, after one warm-up step (default 3)");
  memory->add_option("--out", options->out_dir,
                     "output directory (default: runs/bench-memory-<time>)");
  return {memory, [options](std::ostream& out) { return run_bench_memory(*options, out); }};
}

Subcommand add_bench_precision(CLI::App& bench) {
  auto options = std::make_shared<BenchPrecisionOptions>();
  CLI::App* precision = bench.add_subcommand(
      "precision", "Error of the accumulated window gradient against float64, fp32 and bf16");
  add_config_options(*precision, options->config);
  precision
      ->add_option("--accum-steps", options->accum_steps,
                   "micro-batches per window, e.g. 1,8,64 (default: powers of two up to the "
                   "global batch)")
      ->delimiter(',');
  return {precision, [options](std::ostream& out) { return run_bench_precision(*options, out); }};
}

Subcommand add_reproduce(CLI::App& app) {
  auto options = std::make_shared<ReproduceOptions>();
  CLI::App* reproduce = app.add_subcommand(
      "reproduce",
      "Run a named experiment of docs/EXPERIMENTS.md (its runs, a results table and charts)");
  reproduce->add_option("name", options->name,
                        "experiment: equivalence, batchnorm, lr-scaling, fashion-mnist");
  reproduce
      ->add_option("-s,--set", options->overrides,
                   "override a config key in every run, e.g. --set train.epochs=1 (repeatable)")
      ->type_name("KEY=VALUE");
  reproduce->add_option("--out", options->out_dir,
                        "output directory (default: runs/reproduce-<name>-<time>)");
  reproduce->add_flag("--list", options->list, "list the experiments and exit");
  return {reproduce, [options](std::ostream& out) {
            if (!options->list && options->name.empty())
              throw InputError("bigbatch reproduce needs an experiment name (see --list)");
            return run_reproduce(*options, out);
          }};
}

Subcommand add_plot(CLI::App& app) {
  auto options = std::make_shared<PlotOptions>();
  CLI::App* plot = app.add_subcommand(
      "plot",
      "SVG charts of runs from their metrics.jsonl: loss (with validation), accuracy, lr, peak "
      "memory, throughput; several runs overlaid");
  plot->add_option("run_dirs", options->run_dirs, "run directories")->required();
  plot->add_option("--out", options->out_dir,
                   "output directory (default: RUN_DIR/charts for one run, runs/plot-<time> for "
                   "several)");
  return {plot, [options](std::ostream& out) { return run_plot(*options, out); }};
}

Subcommand add_doctor(CLI::App& app) {
  auto options = std::make_shared<DoctorOptions>();
  CLI::App* doctor = app.add_subcommand(
      "doctor",
      "Check the environment: LibTorch, CUDA, threads, BLAS and its GFLOP/s, bf16, memory, data "
      "sets, run directory; exit code 1 when something needs fixing");
  doctor->add_option("--run-dir", options->run_dir,
                     "run directory to check for writing (default: runs)");
  return {doctor, [options](std::ostream& out) { return run_doctor(*options, out); }};
}

Subcommand add_export(CLI::App& app) {
  auto options = std::make_shared<ExportCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "export",
      "Write a run's model as safetensors (PyTorch names) plus a JSON spec of its architecture, "
      "or a pretrained model's as a Hugging Face directory or a PEFT adapter");
  command->add_option("run_dir", options->run_dir, "the training run's directory")->required();
  command
      ->add_option("--out", options->out,
                   "the .safetensors file to write (the spec goes beside it as .json), or the "
                   "directory of --format hf or peft")
      ->required();
  command
      ->add_option("--format", options->format,
                   "auto (bigbatch for built-in models, hf for model.kind = \"hf\"), bigbatch, "
                   "hf (config.json, model.safetensors, tokenizer; adapters merged) or peft "
                   "(adapter_config.json, adapter_model.safetensors)")
      ->capture_default_str();
  command->add_flag("--overwrite", options->overwrite,
                    "replace an existing .safetensors file and its .json spec, or an output "
                    "directory that holds files (hf, peft)");
  command->add_option("--checkpoint", options->checkpoint,
                      "a checkpoint file to export (default: the run's newest usable one)");
  return {command, [options](std::ostream& out) { return run_export(*options, out); }};
}

/// The help of generate's and predict's --precision.
const char* const kInferencePrecisionHelp =
    "fp32, or bf16: products in bfloat16 (autocast) and a Hugging Face model's linear weights "
    "loaded in bfloat16 (half the memory); fp16 (autocast) on a GPU";
/// The help of generate's and predict's --device.
const char* const kInferenceDeviceHelp =
    "where the model computes: cpu, cuda (cuda:0), cuda:N, or auto (the first GPU where there is "
    "one, else the CPU)";
/// The help of generate's and predict's --base.
const char* const kAdapterBaseHelp =
    "a PEFT adapter's base model directory (default: its adapter_config.json's "
    "base_model_name_or_path)";

Subcommand add_generate(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* generate =
      app.add_subcommand("generate",
                         "Continue a prompt with an exported GPT (MODEL.safetensors) or a Hugging "
                         "Face causal LM (a directory)");
  generate
      ->add_option("model", options->model_path,
                   "the export (.safetensors) of a gpt, a Hugging Face model directory, or a PEFT "
                   "adapter directory")
      ->required();
  generate->add_option("--base", options->base, kAdapterBaseHelp);
  generate->add_option("--prompt", options->prompt, "the text to continue")->required();
  generate->add_option("--max-new-bytes", options->max_new_bytes, "bytes appended to the prompt")
      ->capture_default_str();
  generate
      ->add_option("--temperature", options->temperature,
                   "logits are divided by this (> 0; smaller is greedier)")
      ->capture_default_str();
  generate
      ->add_option("--top-k", options->top_k, "draw among the k likeliest bytes; 0 = all of them")
      ->capture_default_str();
  generate->add_option("--seed", options->seed, "the same seed gives the same text")
      ->capture_default_str();
  generate->add_option("--precision", options->precision, kInferencePrecisionHelp)
      ->capture_default_str();
  generate->add_option("--device", options->device, kInferenceDeviceHelp)->capture_default_str();
  generate->add_flag("--no-kv-cache", options->no_kv_cache,
                     "Hugging Face models: a forward of the whole window for every token instead "
                     "of keeping keys and values (the same text, slower; for checks and timing)");
  return {generate, [options](std::ostream& out) { return run_generate(*options, out); }};
}

Subcommand add_predict(CLI::App& app) {
  auto options = std::make_shared<PredictOptions>();
  CLI::App* predict = app.add_subcommand(
      "predict",
      "Classify images (resnet) or texts (bert) with an exported classifier or a "
      "Hugging Face one");
  predict
      ->add_option("model", options->model_path,
                   "the export (.safetensors) of a classifier, a Hugging Face classifier "
                   "directory, or a PEFT adapter directory")
      ->required();
  predict->add_option("--base", options->base, kAdapterBaseHelp);
  predict
      ->add_option("--input", options->input_path,
                   "resnet: IDX images (gzip or raw); bert and the Hugging Face classifiers: a "
                   "text file, inputs separated by lines holding only %")
      ->required();
  predict->add_option("--top", options->top, "classes printed per input, likeliest first")
      ->capture_default_str();
  predict->add_option("--precision", options->precision, kInferencePrecisionHelp)
      ->capture_default_str();
  predict->add_option("--device", options->device, kInferenceDeviceHelp)->capture_default_str();
  return {predict, [options](std::ostream& out) { return run_predict(*options, out); }};
}

}  // namespace

int run_app(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "bigbatch: train with any global batch in small memory by exact gradient accumulation",
      "bigbatch"};
  app.set_version_flag("--version", std::string("bigbatch ") + BIGBATCH_VERSION);
  app.require_subcommand(1);
  std::vector<Subcommand> subcommands = {add_train(app), add_config(app)};
  CLI::App* bench = app.add_subcommand("bench", "Measure bigbatch on this machine");
  bench->require_subcommand(1);
  subcommands.push_back(add_bench_memory(*bench));
  subcommands.push_back(add_bench_precision(*bench));
  for (Subcommand (*add)(CLI::App&) :
       {add_reproduce, add_plot, add_doctor, add_export, add_generate, add_predict})
    subcommands.push_back(add(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error, out, err);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const Subcommand& subcommand : subcommands) {
      if (subcommand.command->parsed())
        return subcommand.run(out);
    }
    throw std::logic_error("the command line named no subcommand");  // require_subcommand(1)
  } catch (const InputError& error) {
    out.flush();
    err << "error: " << with_config_keys(error.what()) << "\n";
    return 2;
  } catch (const std::exception& error) {
    out.flush();
    err << "error: " << with_config_keys(message_of(error)) << "\n";
    return 1;
  }
}

}  // namespace bigbatch::cli
