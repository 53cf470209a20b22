#include "bigbatch/cli/reproduce_command.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bigbatch/cli/experiments.h"
#include "bigbatch/cli/train_command.h"
#include "bigbatch/core/check.h"
#include "bigbatch/core/table.h"
#include "bigbatch/io/atomic_file.h"
#include "bigbatch/io/read_file.h"
#include "bigbatch/job/run_directory.h"
#include "bigbatch/metrics/jsonl_reader.h"
#include "bigbatch/metrics/run_charts.h"
#include "bigbatch/metrics/svg_chart.h"

namespace bigbatch::cli {

namespace {

/// Windows averaged into one point of the training-loss curve.
constexpr size_t kLossSmoothing = 20;

/// What one finished run left in its directory.
struct RunOutcome {
  const ExperimentRun* run = nullptr;
  std::vector<std::string> overrides;
  nlohmann::json summary;
  std::vector<double> window_epochs;  ///< position of every optimizer step, in epochs
  std::vector<double> window_losses;  ///< its window's mean training loss
  std::vector<double> eval_epochs;
  std::vector<double> eval_losses;
  std::vector<double> eval_accuracies;  ///< NaN where the model has no accuracy
};

/// Fills the curves from metrics.jsonl: an optimizer step's position is its epoch plus the share
/// of that epoch's windows done (a full epoch has as many windows as the first one).
void read_curves(const std::string& run_dir, RunOutcome& outcome) {
  const std::string path = run_dir + "/metrics.jsonl";
  const metrics::MetricsHistory history = metrics::parse_metrics_jsonl(io::read_file(path), path);
  std::vector<const metrics::WindowRecord*> windows;
  for (const metrics::WindowRecord& w : history.windows) {
    if (!w.skipped)
      windows.push_back(&w);
  }
  std::map<int64_t, int64_t> windows_in_epoch;
  for (const metrics::WindowRecord* w : windows)
    ++windows_in_epoch[w->epoch];
  const int64_t full_epoch = windows_in_epoch.empty() ? 1 : windows_in_epoch.begin()->second;
  std::map<int64_t, double> epoch_of_step = {{0, 0.0}};
  std::map<int64_t, int64_t> seen;
  for (const metrics::WindowRecord* w : windows) {
    const double at = static_cast<double>(w->epoch) +
                      static_cast<double>(++seen[w->epoch]) / static_cast<double>(full_epoch);
    epoch_of_step[w->step] = at;
    outcome.window_epochs.push_back(at);
    outcome.window_losses.push_back(w->loss);
  }
  for (const metrics::EvalRecord& e : history.evals) {
    const auto found = epoch_of_step.find(e.step);
    outcome.eval_epochs.push_back(found != epoch_of_step.end() ? found->second : NAN);
    outcome.eval_losses.push_back(e.loss);
    outcome.eval_accuracies.push_back(e.accuracy ? *e.accuracy : NAN);
  }
}

std::string render_curves(const Experiment& experiment, const std::vector<RunOutcome>& outcomes) {
  metrics::ChartPanel loss{
      cat("training loss (mean of ", kLossSmoothing, " steps)"), "epoch", "loss", false, {}};
  metrics::ChartPanel accuracy{"validation accuracy", "epoch", "accuracy (%)", false, {}};
  metrics::ChartPanel val_loss{"validation loss", "epoch", "loss", false, {}};
  bool has_accuracy = false;
  for (const RunOutcome& outcome : outcomes) {
    loss.series.push_back(metrics::trailing_mean(outcome.run->label, outcome.window_epochs,
                                                 outcome.window_losses, kLossSmoothing));
    metrics::Series acc{outcome.run->label, {}, {}};
    for (size_t i = 0; i < outcome.eval_epochs.size(); ++i) {
      if (std::isfinite(outcome.eval_epochs[i]) && std::isfinite(outcome.eval_accuracies[i])) {
        acc.xs.push_back(outcome.eval_epochs[i]);
        acc.ys.push_back(100.0 * outcome.eval_accuracies[i]);
        has_accuracy = true;
      }
    }
    accuracy.series.push_back(acc);
    val_loss.series.push_back({outcome.run->label, outcome.eval_epochs, outcome.eval_losses});
  }
  return metrics::render_svg({loss, has_accuracy ? accuracy : val_loss},
                             "bigbatch reproduce " + experiment.name);
}

std::string percent(const nlohmann::json& value) {
  return value.is_number() ? format_fixed(100.0 * value.get<double>(), 2) + "%" : std::string("-");
}

std::string fixed4(const nlohmann::json& value) {
  return value.is_number() ? format_fixed(value.get<double>(), 4) : std::string("-");
}

/// The results as a Markdown page: the question, a table, the largest accuracy gap, commands.
std::string results_markdown(const Experiment& experiment, const std::vector<RunOutcome>& outcomes,
                             const std::vector<std::string>& extra) {
  std::ostringstream md;
  md << "# bigbatch reproduce " << experiment.name << "\n\n" << experiment.question << "\n\n";
  if (!experiment.note.empty())
    md << "Scope: " << experiment.note << ".\n\n";
  md << "| run | steps | final val loss | final val accuracy | time |\n";
  md << "|---|---:|---:|---:|---:|\n";
  const RunOutcome* best = nullptr;
  const RunOutcome* worst = nullptr;
  for (const RunOutcome& o : outcomes) {
    const nlohmann::json& s = o.summary;
    md << "| " << o.run->label << " | " << s["steps"].get<int64_t>() << " | "
       << fixed4(s["last_val_loss"]) << " | " << percent(s["last_val_accuracy"]) << " | "
       << human_duration(s["seconds"].get<double>()) << " |\n";
    if (!s["last_val_accuracy"].is_number())
      continue;
    const double accuracy = s["last_val_accuracy"].get<double>();
    if (best == nullptr || accuracy > best->summary["last_val_accuracy"].get<double>())
      best = &o;
    if (worst == nullptr || accuracy < worst->summary["last_val_accuracy"].get<double>())
      worst = &o;
  }
  if (best != nullptr && outcomes.size() > 1) {
    const double gap = best->summary["last_val_accuracy"].get<double>() -
                       worst->summary["last_val_accuracy"].get<double>();
    md << "\nLargest difference in final validation accuracy: " << format_fixed(100.0 * gap, 2)
       << " points (" << best->run->label << " against " << worst->run->label << ").\n";
  }
  md << "\nEach run alone:\n\n";
  for (const RunOutcome& o : outcomes)
    md << "- " << o.run->label << ": `" << train_command_line(o.overrides) << "`\n";
  md << "\nAll of them: `bigbatch reproduce " << experiment.name;
  for (const std::string& assignment : extra)
    md << " -s " << assignment;
  md << "`\n";
  return md.str();
}

nlohmann::json results_json(const Experiment& experiment, const std::vector<RunOutcome>& outcomes) {
  nlohmann::json runs = nlohmann::json::array();
  for (const RunOutcome& o : outcomes) {
    runs.push_back({{"id", o.run->id},
                    {"label", o.run->label},
                    {"overrides", o.overrides},
                    {"summary", o.summary},
                    {"eval_epochs", o.eval_epochs},
                    {"eval_losses", o.eval_losses},
                    {"eval_accuracies", o.eval_accuracies}});
  }
  return {{"experiment", experiment.name}, {"question", experiment.question}, {"runs", runs}};
}

void list_experiments(std::ostream& out) {
  out << "experiments (bigbatch reproduce NAME):\n";
  for (const Experiment& experiment : experiments()) {
    std::string runs;
    for (const ExperimentRun& run : experiment.runs)
      runs += (runs.empty() ? "" : "; ") + run.label;
    out << "\n" << experiment.name << "\n  " << experiment.question << "\n  runs: " << runs << "\n";
  }
}

}  // namespace

int run_reproduce(const ReproduceOptions& options, std::ostream& out) {
  if (options.list) {
    list_experiments(out);
    return 0;
  }
  const Experiment& experiment = find_experiment(options.name);
  // Every run's configuration is read before anything is written or trained.
  for (const ExperimentRun& run : experiment.runs) {
    TrainCommandOptions check;
    check.overrides = run_overrides(experiment, run, options.overrides);
    try {
      load_config(check);
    } catch (const InputError& error) {
      throw InputError(
          cat("run \"", run.label, "\" of experiment ", experiment.name, ": ", error.what()));
    }
  }
  const std::string out_dir = job::create_run_dir(options.out_dir, "reproduce-" + experiment.name);
  out << "bigbatch reproduce " << experiment.name << ": " << experiment.question << "\n"
      << (experiment.note.empty() ? "" : "scope: " + experiment.note + "\n") << "writing to "
      << out_dir << "\n";
  std::vector<RunOutcome> outcomes;
  for (size_t i = 0; i < experiment.runs.size(); ++i) {
    const ExperimentRun& run = experiment.runs[i];
    RunOutcome outcome;
    outcome.run = &run;
    outcome.overrides = run_overrides(experiment, run, options.overrides);
    const std::string run_dir = out_dir + "/" + run.id;
    TrainCommandOptions train;
    train.overrides = outcome.overrides;
    train.overrides.push_back("train.run_dir=" + run_dir);
    out << "run " << i + 1 << "/" << experiment.runs.size() << " " << run.label << " ... "
        << std::flush;
    std::ofstream log(out_dir + "/" + run.id + ".log");
    BB_CHECK_INPUT(log.good(), "cannot write ", out_dir, "/", run.id, ".log");
    const int code = run_train(train, log);
    BB_CHECK(code == 0, "run ", run.label, " ended with exit code ", code, "; see ", out_dir, "/",
             run.id, ".log");
    outcome.summary = nlohmann::json::parse(io::read_file(run_dir + "/summary.json"));
    read_curves(run_dir, outcome);
    out << "val accuracy " << percent(outcome.summary["last_val_accuracy"]) << ", val loss "
        << fixed4(outcome.summary["last_val_loss"]) << " in "
        << human_duration(outcome.summary["seconds"].get<double>()) << "\n"
        << std::flush;
    outcomes.push_back(std::move(outcome));
  }
  const std::string markdown = results_markdown(experiment, outcomes, options.overrides);
  io::write_file_atomically(out_dir + "/results.md", markdown);
  io::write_file_atomically(out_dir + "/results.json", results_json(experiment, outcomes).dump(2));
  io::write_file_atomically(out_dir + "/curves.svg", render_curves(experiment, outcomes));
  out << "\n" << markdown << "\nwritten: " << out_dir << "/{results.md,results.json,curves.svg}\n";
  return 0;
}

}  // namespace bigbatch::cli
