#include "bigbatch/cli/experiments.h"

#include "bigbatch/core/check.h"

namespace bigbatch::cli {

namespace {

/// A ResNet on Fashion-MNIST trained with SGD + Nesterov momentum and warmup + cosine, evaluated
/// on the whole 10,000-image test split at the end of every epoch (`eval_every` steps).
std::vector<std::string> resnet_base(const std::string& norm, int64_t epochs, int64_t eval_every) {
  return {"model.kind=resnet",
          "resnet.depth=8",
          "resnet.width=16",
          "resnet.norm=" + norm,
          "optim.name=sgd",
          "optim.lr=0.1",
          "optim.momentum=0.9",
          "optim.nesterov=true",
          "optim.weight_decay=5e-4",
          "optim.max_grad_norm=0",
          "schedule.warmup_steps=20",
          "train.epochs=" + std::to_string(epochs),
          "train.eval_every=" + std::to_string(eval_every),
          "train.eval_samples=0",
          "train.seed=1"};
}

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

/// A run of `accum` passes of `micro` samples per window, labelled "micro x accum".
ExperimentRun split(int64_t micro, int64_t accum, std::vector<std::string> more = {},
                    const std::string& suffix = "") {
  ExperimentRun run;
  run.id =
      std::to_string(micro) + "x" + std::to_string(accum) + (suffix.empty() ? "" : "-") + suffix;
  run.label =
      std::to_string(micro) + " x " + std::to_string(accum) + (suffix.empty() ? "" : " " + suffix);
  run.overrides = {"batch.micro_batch=" + std::to_string(micro)};
  run.overrides.insert(run.overrides.end(), more.begin(), more.end());
  return run;
}

std::vector<Experiment> make_experiments() {
  std::vector<Experiment> all;

  Experiment equivalence;
  equivalence.name = "equivalence";
  equivalence.question =
      "Does a ResNet trained at global batch 256 end in the same place as 256 x 1, 64 x 4 and "
      "16 x 16?";
  // GroupNorm: no statistic depends on the micro-batch, so the three runs compute the same
  // window gradients up to float rounding; BatchNorm is the next experiment's subject.
  equivalence.base = with(resnet_base("group", 3, 235), {"batch.global_batch=256"});
  equivalence.runs = {split(256, 1), split(64, 4), split(16, 16)};
  equivalence.note = "3 epochs of the full 60,000 training images";
  all.push_back(equivalence);

  Experiment batchnorm;
  batchnorm.name = "batchnorm";
  batchnorm.question =
      "What does BatchNorm lose when it sees micro-batches of 8 instead of the window of 256, "
      "and what do norm_policy = group and ghost get back?";
  batchnorm.base = with(resnet_base("batch", 2, 235), {"batch.global_batch=256"});
  batchnorm.runs = {split(256, 1, {}, "batchnorm"),
                    split(8, 32, {"model.norm_policy=keep"}, "keep"),
                    split(8, 32, {"model.norm_policy=ghost"}, "ghost"),
                    split(8, 32, {"model.norm_policy=group"}, "group")};
  batchnorm.note = "2 epochs of the full 60,000 training images";
  all.push_back(batchnorm);

  Experiment lr_scaling;
  lr_scaling.name = "lr-scaling";
  lr_scaling.question =
      "Moving from batch 64 to 512 by accumulation: keep the learning rate, or scale it "
      "linearly or by the square root?";
  lr_scaling.base = with(resnet_base("group", 2, 0),
                         {"optim.lr=0.025", "optim.base_batch=64", "schedule.warmup_steps=10"});
  const auto at_512 = [](const std::string& rule) {
    ExperimentRun run;
    run.id = "512-" + rule;
    run.label = "512 (64 x 8), lr " + rule;
    run.overrides = {"batch.global_batch=512", "batch.micro_batch=64", "optim.lr_scaling=" + rule};
    return run;
  };
  ExperimentRun reference;
  reference.id = "64";
  reference.label = "64 x 1 (reference)";
  reference.overrides = {"batch.global_batch=64", "batch.micro_batch=64"};
  lr_scaling.runs = {reference, at_512("none"), at_512("linear"), at_512("sqrt")};
  lr_scaling.note = "2 epochs of the full 60,000 training images";
  all.push_back(lr_scaling);

  Experiment fashion;
  fashion.name = "fashion-mnist";
  fashion.question = "How accurate does a small ResNet get on Fashion-MNIST on two cores?";
  fashion.base =
      with(resnet_base("batch", 12, 235), {"batch.global_batch=256", "batch.micro_batch=64"});
  ExperimentRun single;
  single.id = "resnet8";
  single.label = "ResNet-8 width 16, 64 x 4";
  fashion.runs = {single};
  fashion.note = "";
  all.push_back(fashion);
  return all;
}

}  // namespace

const std::vector<Experiment>& experiments() {
  static const std::vector<Experiment> all = make_experiments();
  return all;
}

const Experiment& find_experiment(const std::string& name) {
  std::string names;
  for (const Experiment& experiment : experiments()) {
    if (experiment.name == name)
      return experiment;
    names += (names.empty() ? "" : ", ") + experiment.name;
  }
  throw InputError(cat("no experiment called \"", name, "\"; there are: ", names));
}

std::vector<std::string> run_overrides(const Experiment& experiment, const ExperimentRun& run,
                                       const std::vector<std::string>& extra) {
  std::vector<std::string> all = experiment.base;
  all.insert(all.end(), run.overrides.begin(), run.overrides.end());
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

std::string train_command_line(const std::vector<std::string>& overrides) {
  std::string line = "bigbatch train";
  for (const std::string& assignment : overrides)
    line += " -s " + assignment;
  return line;
}

}  // namespace bigbatch::cli
