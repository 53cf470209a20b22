#include "bigbatch/cli/app.h"

#include <CLI/CLI.hpp>
#include <exception>

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

namespace bigbatch::cli {

namespace {

void add_config_options(CLI::App& command, TrainCommandOptions& options) {
  command.add_option("-c,--config", options.config_path, "TOML config file (default: built-in)");
  command
      .add_option("-s,--set", options.overrides,
                  "override a config key, e.g. --set batch.global_batch=128 (repeatable)")
      ->type_name("KEY=VALUE");
}

}  // namespace

int run_app(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "bigbatch: train with any global batch in small memory by exact gradient accumulation",
      "bigbatch"};
  app.set_version_flag("--version", std::string("bigbatch ") + BIGBATCH_VERSION);
  app.require_subcommand(1);

  TrainCommandOptions train_options;
  int64_t steps = 0;
  std::string run_dir;
  CLI::App* train = app.add_subcommand(
      "train", "Train a built-in model (default: a byte-level GPT on Debian's fortunes)");
  add_config_options(*train, train_options);
  train->add_option("--steps", steps, "shortcut for --set train.steps=N");
  train->add_option("--run-dir", run_dir, "shortcut for --set train.run_dir=DIR");
  train->add_flag("--plan", train_options.plan_only, "print the plan and exit without training");
  train
      ->add_option("--resume", train_options.resume_dir,
                   "continue the run in RUN_DIR from its newest usable checkpoint, with its "
                   "config.toml (change keys with --set)")
      ->type_name("RUN_DIR");
  train->add_flag("--auto-resume", train_options.auto_resume,
                  "continue the run in --run-dir when it holds checkpoints, else start it (one "
                  "command line that starts and resumes a job)");
  train
      ->add_option("--nproc", train_options.nproc,
                   "start N data-parallel ranks on this machine (global_batch = micro_batch x "
                   "accum_steps x N); without it, a rank reads RANK, WORLD_SIZE, MASTER_ADDR, "
                   "MASTER_PORT as torchrun sets them")
      ->type_name("N");
  train->add_flag("--allow-changes", train_options.allow_changes,
                  "on resume, accept config changes that alter the later steps (micro_batch, "
                  "steps, epochs, memory.budget, on_nonfinite)");

  TrainCommandOptions config_options;
  CLI::App* config = app.add_subcommand(
      "config", "Print every config key with the value in effect and its meaning, as TOML");
  add_config_options(*config, config_options);

  BenchMemoryOptions bench_memory_options;
  CLI::App* bench = app.add_subcommand("bench", "Measure bigbatch on this machine");
  bench->require_subcommand(1);
  CLI::App* bench_memory = bench->add_subcommand(
      "memory",
      "Peak memory and throughput against micro-batch size, with and without activation "
      "checkpointing (table, bench.json and memory.svg)");
  add_config_options(*bench_memory, bench_memory_options.config);
  bench_memory
      ->add_option("--micro-batches", bench_memory_options.micro_batches,
                   "sizes to measure, e.g. 1,2,4,8 (default: powers of two up to the global batch)")
      ->delimiter(',');
  bench_memory
      ->add_option("--checkpointing", bench_memory_options.checkpointing,
                   "policies to measure, e.g. none,blocks,every:2 (default: none,blocks for gpt)")
      ->delimiter(',');
  bench_memory->add_option("--steps", bench_memory_options.steps,
                           "timed optimizer steps per point, after one warm-up step (default 3)");
  bench_memory->add_option("--out", bench_memory_options.out_dir,
                           "output directory (default: runs/bench-memory-<time>)");

  BenchPrecisionOptions bench_precision_options;
  CLI::App* bench_precision = bench->add_subcommand(
      "precision", "Error of the accumulated window gradient against float64, fp32 and bf16");
  add_config_options(*bench_precision, bench_precision_options.config);
  bench_precision
      ->add_option("--accum-steps", bench_precision_options.accum_steps,
                   "micro-batches per window, e.g. 1,8,64 (default: powers of two up to the "
                   "global batch)")
      ->delimiter(',');

  ReproduceOptions reproduce_options;
  CLI::App* reproduce = app.add_subcommand(
      "reproduce",
      "Run a named experiment of docs/EXPERIMENTS.md (its runs, a results table and charts)");
  reproduce->add_option("name", reproduce_options.name,
                        "experiment: equivalence, batchnorm, lr-scaling, fashion-mnist");
  reproduce
      ->add_option("-s,--set", reproduce_options.overrides,
                   "override a config key in every run, e.g. --set train.epochs=1 (repeatable)")
      ->type_name("KEY=VALUE");
  reproduce->add_option("--out", reproduce_options.out_dir,
                        "output directory (default: runs/reproduce-<name>-<time>)");
  reproduce->add_flag("--list", reproduce_options.list, "list the experiments and exit");

  PlotOptions plot_options;
  CLI::App* plot = app.add_subcommand(
      "plot",
      "SVG charts of runs from their metrics.jsonl: loss (with validation), accuracy, lr, peak "
      "memory, throughput; several runs overlaid");
  plot->add_option("run_dirs", plot_options.run_dirs, "run directories")->required();
  plot->add_option("--out", plot_options.out_dir,
                   "output directory (default: RUN_DIR/charts for one run, runs/plot-<time> for "
                   "several)");

  DoctorOptions doctor_options;
  CLI::App* doctor = app.add_subcommand(
      "doctor",
      "Check the environment: LibTorch, CUDA, threads, BLAS and its GFLOP/s, bf16, memory, data "
      "sets, run directory; exit code 1 when something needs fixing");
  doctor->add_option("--run-dir", doctor_options.run_dir,
                     "run directory to check for writing (default: runs)");

  ExportCommandOptions export_options;
  CLI::App* export_command = app.add_subcommand(
      "export",
      "Write a run's model as safetensors (PyTorch names) plus a JSON spec of its architecture");
  export_command->add_option("run_dir", export_options.run_dir, "the training run's directory")
      ->required();
  export_command
      ->add_option("--out", export_options.out,
                   "the .safetensors file to write; the spec goes beside it as .json")
      ->required();
  export_command->add_option("--checkpoint", export_options.checkpoint,
                             "a checkpoint file to export (default: the run's newest usable one)");

  GenerateOptions generate_options;
  CLI::App* generate =
      app.add_subcommand("generate", "Continue a prompt with an exported GPT (MODEL.safetensors)");
  generate->add_option("model", generate_options.model_path, "the export (.safetensors) of a gpt")
      ->required();
  generate->add_option("--prompt", generate_options.prompt, "the text to continue")->required();
  generate
      ->add_option("--max-new-bytes", generate_options.max_new_bytes,
                   "bytes appended to the prompt")
      ->capture_default_str();
  generate
      ->add_option("--temperature", generate_options.temperature,
                   "logits are divided by this (> 0; smaller is greedier)")
      ->capture_default_str();
  generate
      ->add_option("--top-k", generate_options.top_k,
                   "draw among the k likeliest bytes; 0 = all of them")
      ->capture_default_str();
  generate->add_option("--seed", generate_options.seed, "the same seed gives the same text")
      ->capture_default_str();

  PredictOptions predict_options;
  CLI::App* predict = app.add_subcommand(
      "predict", "Classify images (resnet) or texts (bert) with an exported classifier");
  predict
      ->add_option("model", predict_options.model_path, "the export (.safetensors) of a classifier")
      ->required();
  predict
      ->add_option("--input", predict_options.input_path,
                   "resnet: IDX images (gzip or raw); bert: a text file, inputs separated by lines "
                   "holding only %")
      ->required();
  predict->add_option("--top", predict_options.top, "classes printed per input, likeliest first")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error, out, err);
    return code == 0 ? 0 : 2;
  }

  try {
    if (train->parsed()) {
      if (steps != 0)
        train_options.overrides.push_back("train.steps=" + std::to_string(steps));
      if (!run_dir.empty())
        train_options.overrides.push_back("train.run_dir=" + run_dir);
      return run_train(train_options, out);
    }
    if (bench_memory->parsed())
      return run_bench_memory(bench_memory_options, out);
    if (bench_precision->parsed())
      return run_bench_precision(bench_precision_options, out);
    if (plot->parsed())
      return run_plot(plot_options, out);
    if (doctor->parsed())
      return run_doctor(doctor_options, out);
    if (export_command->parsed())
      return run_export(export_options, out);
    if (generate->parsed())
      return run_generate(generate_options, out);
    if (predict->parsed())
      return run_predict(predict_options, out);
    if (reproduce->parsed()) {
      if (!reproduce_options.list && reproduce_options.name.empty())
        throw InputError("bigbatch reproduce needs an experiment name (see --list)");
      return run_reproduce(reproduce_options, out);
    }
    return run_config(config_options, out);
  } catch (const InputError& error) {
    out.flush();
    err << "error: " << with_config_keys(error.what()) << "\n";
    return 2;
  } catch (const std::exception& error) {
    out.flush();
    err << "error: " << with_config_keys(error.what()) << "\n";
    return 1;
  }
}

}  // namespace bigbatch::cli
