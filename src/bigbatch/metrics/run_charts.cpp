#include "bigbatch/metrics/run_charts.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "bigbatch/core/check.h"

namespace bigbatch::metrics {

namespace {

/// A per-step quantity of a window that stepped.
using WindowValue = std::function<double(const WindowRecord&)>;

/// The steps and values of a run's windows that took an optimizer step.
Series stepped(const std::string& name, const MetricsHistory& history, const WindowValue& value) {
  Series series{name, {}, {}};
  for (const WindowRecord& w : history.windows) {
    if (w.skipped)
      continue;
    series.xs.push_back(static_cast<double>(w.step));
    series.ys.push_back(value(w));
  }
  return series;
}

/// Whether a run's loss is per token: its windows count more tokens than samples.
bool counts_tokens(const MetricsHistory& history) {
  return std::any_of(history.windows.begin(), history.windows.end(),
                     [](const WindowRecord& w) { return w.tokens != w.samples; });
}

/// `what` for a single run, "label what" for several.
std::string legend(const std::vector<RunCurves>& runs, const RunCurves& run,
                   const std::string& what) {
  if (runs.size() == 1)
    return what.empty() ? run.label : what;
  return what.empty() ? run.label : run.label + " " + what;
}

ChartPanel loss_panel(const std::vector<RunCurves>& runs) {
  ChartPanel panel{"loss", "optimizer step", "loss", false, {}};
  for (size_t k = 0; k < runs.size(); ++k) {
    const MetricsHistory& h = runs[k].history;
    const Series raw = stepped("", h, [](const WindowRecord& w) { return w.loss; });
    const size_t smoothing = loss_smoothing(raw.xs.size());
    Series train = trailing_mean(
        legend(runs, runs[k],
               smoothing > 1 ? cat("train (mean of ", smoothing, " steps)") : "train"),
        raw.xs, raw.ys, smoothing);
    train.colour = static_cast<int>(k);
    panel.series.push_back(train);
    Series val{legend(runs, runs[k], "validation"), {}, {}};
    for (const EvalRecord& e : h.evals) {
      val.xs.push_back(static_cast<double>(e.step));
      val.ys.push_back(e.loss);
    }
    val.colour = static_cast<int>(k);
    val.dashed = true;
    if (!val.xs.empty())
      panel.series.push_back(val);
  }
  return panel;
}

/// A panel with one series per run, each in its run's colour.
ChartPanel per_run_panel(const std::vector<RunCurves>& runs, const std::string& title,
                         const std::string& y_label,
                         const std::function<Series(const RunCurves&)>& series_of) {
  ChartPanel panel{title, "optimizer step", y_label, false, {}};
  for (size_t k = 0; k < runs.size(); ++k) {
    Series series = series_of(runs[k]);
    series.name = legend(runs, runs[k], series.name);
    series.colour = static_cast<int>(k);
    panel.series.push_back(series);
  }
  return panel;
}

ChartPanel accuracy_panel(const std::vector<RunCurves>& runs) {
  return per_run_panel(runs, "validation accuracy", "accuracy (%)", [](const RunCurves& run) {
    Series series{"", {}, {}};
    for (const EvalRecord& e : run.history.evals) {
      series.xs.push_back(static_cast<double>(e.step));
      series.ys.push_back(e.accuracy ? 100.0 * *e.accuracy : NAN);
    }
    return series;
  });
}

ChartPanel lr_panel(const std::vector<RunCurves>& runs) {
  return per_run_panel(runs, "learning rate", "lr", [](const RunCurves& run) {
    return stepped("", run.history, [](const WindowRecord& w) { return w.lr; });
  });
}

ChartPanel memory_panel(const std::vector<RunCurves>& runs) {
  return per_run_panel(runs, "peak tensor memory per step", "MiB", [](const RunCurves& run) {
    return stepped("", run.history, [](const WindowRecord& w) {
      return w.peak_bytes > 0 ? static_cast<double>(w.peak_bytes) / (1024.0 * 1024.0) : NAN;
    });
  });
}

/// Tokens per second for runs whose loss is per token, samples per second for the others.
ChartPanel throughput_panel(const std::vector<RunCurves>& runs) {
  bool tokens = false;
  bool samples = false;
  for (const RunCurves& run : runs)
    (counts_tokens(run.history) ? tokens : samples) = true;
  const bool mixed = tokens && samples;
  const std::string unit = mixed    ? "per second (tokens or samples)"
                           : tokens ? "tokens per second"
                                    : "samples per second";
  return per_run_panel(runs, "throughput", unit, [mixed](const RunCurves& run) {
    const bool per_token = counts_tokens(run.history);
    const std::string name = !mixed ? "" : per_token ? "(tokens/s)" : "(samples/s)";
    return stepped(name, run.history, [per_token](const WindowRecord& w) {
      return per_token ? w.tokens_per_second : w.samples_per_second;
    });
  });
}

bool has_finite(const ChartPanel& panel) {
  for (const Series& s : panel.series) {
    if (std::any_of(s.ys.begin(), s.ys.end(), [](double y) { return std::isfinite(y); }))
      return true;
  }
  return false;
}

}  // namespace

Series trailing_mean(std::string name, const std::vector<double>& xs, const std::vector<double>& ys,
                     size_t window) {
  BB_CHECK(xs.size() == ys.size() && window > 0, "trailing_mean of ", xs.size(), " xs and ",
           ys.size(), " ys over ", window);
  Series series{std::move(name), {}, {}};
  double sum = 0.0;
  for (size_t i = 0; i < ys.size(); ++i) {
    sum += ys[i];
    if (i >= window)
      sum -= ys[i - window];
    if (i + 1 >= std::min(window, ys.size())) {
      series.xs.push_back(xs[i]);
      series.ys.push_back(sum / static_cast<double>(std::min(i + 1, window)));
    }
  }
  return series;
}

size_t loss_smoothing(size_t steps) {
  return steps < 100 ? 1 : steps / 50;
}

std::vector<ChartFile> render_run_charts(const std::vector<RunCurves>& runs,
                                         const std::string& title) {
  std::vector<ChartFile> files;
  files.push_back({"loss.svg", render_svg({loss_panel(runs)}, title)});
  const ChartPanel accuracy = accuracy_panel(runs);
  if (has_finite(accuracy))
    files.push_back({"accuracy.svg", render_svg({accuracy}, title)});
  files.push_back({"lr.svg", render_svg({lr_panel(runs)}, title)});
  files.push_back({"memory.svg", render_svg({memory_panel(runs)}, title)});
  files.push_back({"throughput.svg", render_svg({throughput_panel(runs)}, title)});
  return files;
}

}  // namespace bigbatch::metrics
