#include "bigbatch/metrics/progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "bigbatch/core/bytes.h"
#include "bigbatch/core/table.h"

namespace bigbatch::metrics {

namespace {

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), pattern, value);
  return buffer;
}

std::string bar(int64_t done, int64_t total, int width) {
  const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

/// "  scale 65536" with a loss scaler, "  skipped 3" once a window was skipped; else nothing.
std::string amp_fields(const WindowRecord& r) {
  std::string text;
  if (r.loss_scale > 0)
    text += "  scale " + format("%g", r.loss_scale);
  if (r.skipped_steps > 0)
    text += "  skipped " + std::to_string(r.skipped_steps);
  return text;
}

}  // namespace

ProgressPrinter::ProgressPrinter(std::ostream& out, ProgressOptions options)
    : out_(out), options_(options) {}

void ProgressPrinter::on_window(const WindowRecord& r) {
  if (r.skipped)
    return;  // the trainer's notice says what happened; the next step is drawn as usual
  const double rate = options_.count_tokens ? r.tokens_per_second : r.samples_per_second;
  const double per_step = r.elapsed_seconds / static_cast<double>(r.step);
  const double eta = per_step * static_cast<double>(r.total_steps - r.step);
  const std::string width = std::to_string(std::to_string(r.total_steps).size());
  char step_text[64];
  std::snprintf(step_text, sizeof(step_text), ("step %" + width + "lld/%lld").c_str(),
                static_cast<long long>(r.step), static_cast<long long>(r.total_steps));
  const std::string fields = " loss " + format("%.4f", r.loss) + "  lr " + format("%.2e", r.lr) +
                             "  " + human_count(rate) +
                             (options_.count_tokens ? " tok/s" : " samples/s") + "  ETA " +
                             human_duration(eta) + amp_fields(r);
  if (options_.interactive) {
    out_ << "\r\033[K" << step_text << " " << bar(r.step, r.total_steps, 20) << fields
         << std::flush;
    bar_drawn_ = true;
    return;
  }
  const bool due = r.step == 1 || r.step == r.total_steps ||
                   (options_.log_every > 0 && r.step % options_.log_every == 0);
  if (!due)
    return;
  out_ << step_text << fields << (r.peak_bytes > 0 ? "  mem " + format_bytes(r.peak_bytes) : "")
       << "  grad_norm " << format("%.3f", r.grad_norm) << "  elapsed "
       << human_duration(r.elapsed_seconds) << "\n"
       << std::flush;
}

void ProgressPrinter::on_eval(const EvalRecord& r) {
  end_bar_line();
  out_ << "eval  step " << r.step << "  val_loss " << format("%.4f", r.loss)
       << (r.accuracy ? "  val_acc " + format("%.2f%%", 100.0 * *r.accuracy) : std::string())
       << "  (" << human_count(static_cast<double>(options_.count_tokens ? r.tokens : r.samples))
       << (options_.count_tokens ? " tokens" : " samples") << ", " << format("%.1f", r.seconds)
       << "s)\n"
       << std::flush;
}

void ProgressPrinter::on_notice(const std::string& message) {
  end_bar_line();
  out_ << "note: " << message << "\n" << std::flush;
}

void ProgressPrinter::on_finish() {
  end_bar_line();
}

void ProgressPrinter::end_bar_line() {
  if (bar_drawn_)
    out_ << "\n";
  bar_drawn_ = false;
}

bool is_terminal(int fd) {
  return ::isatty(fd) == 1;
}

}  // namespace bigbatch::metrics
