// Reads a TOML config with command-line overrides, strictly: wrong types and unknown keys are
// errors that name the key, the value and what was expected.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bigbatch::cli {

/// How a key may differ between a run and its resumption, declared where the key is read.
enum class ResumeChange {
  kForbidden,  ///< another model, data, batch or optimizer: a new run, never a resumption
  kPermitted,  ///< changes later steps but continues the same run: needs --allow-changes
  kFree,       ///< does not change what is computed (threads, logging, evaluation, checkpoints)
};

/// Typed access to a TOML document by dotted key ("batch.global_batch"). Every key read is
/// recorded with its default and help text, so that after reading, any key the user wrote that no
/// one read is reported as unknown (a typo must not be silently ignored) and the resolved config
/// can be written out. Usage:
///
///   ConfigReader config = ConfigReader::from_file("run.toml");
///   config.set_override("batch.global_batch=128");
///   int64_t global = config.get_int("batch.global_batch", 64, "samples per optimizer step");
///   config.check_all_used();                    // throws on unknown keys
///   write(config.resolved_toml());
class ConfigReader {
 public:
  /// An empty config: every key takes its default.
  ConfigReader();
  ~ConfigReader();
  ConfigReader(ConfigReader&&) noexcept;
  ConfigReader& operator=(ConfigReader&&) noexcept;

  /// Parses a file; throws InputError naming the path (missing, unreadable, malformed TOML with
  /// line and column).
  static ConfigReader from_file(const std::string& path);
  /// Parses text; `source` names it in messages.
  static ConfigReader from_string(const std::string& text, const std::string& source);

  /// Applies "key=value" on top of the file. The value is read as a TOML value when it parses
  /// as one (128, 1e-3, true, "text") and as a plain string otherwise (gpt, /tmp/run).
  void set_override(const std::string& assignment);

  /// The integer at `key`, or `fallback` when absent. A float, string or boolean is an error.
  /// Each getter takes the key's ResumeChange last (kForbidden when not given).
  int64_t get_int(const std::string& key, int64_t fallback, const std::string& help,
                  ResumeChange resume = ResumeChange::kForbidden);
  /// The number at `key` (integers accepted), or `fallback`.
  double get_double(const std::string& key, double fallback, const std::string& help,
                    ResumeChange resume = ResumeChange::kForbidden);
  /// The boolean at `key`, or `fallback`.
  bool get_bool(const std::string& key, bool fallback, const std::string& help,
                ResumeChange resume = ResumeChange::kForbidden);
  /// The string at `key`, or `fallback`.
  std::string get_string(const std::string& key, const std::string& fallback,
                         const std::string& help, ResumeChange resume = ResumeChange::kForbidden);
  /// A string that must be one of `choices`; the help lists them.
  std::string get_choice(const std::string& key, const std::string& fallback,
                         const std::vector<std::string>& choices, const std::string& help,
                         ResumeChange resume = ResumeChange::kForbidden);

  /// An integer, or the string `keyword` (returned as nullopt): batch.micro_batch = 8 | "auto".
  /// A `fallback` of nullopt makes the keyword the default.
  std::optional<int64_t> get_int_or_keyword(const std::string& key, std::optional<int64_t> fallback,
                                            const std::string& keyword, const std::string& help,
                                            ResumeChange resume = ResumeChange::kForbidden);

  /// Throws InputError listing every key present in the document that was never read, with the
  /// closest known key as a suggestion.
  void check_all_used() const;
  /// Every key read, with the value in effect, as commented TOML grouped by section.
  std::string resolved_toml() const;
  /// How each key read may change on resume, as its getter declared it.
  std::map<std::string, ResumeChange> resume_changes() const;
  /// Every key read and its value in effect as TOML text ("batch.global_batch" -> "64"), in the
  /// order read.
  std::vector<std::pair<std::string, std::string>> resolved_values() const;
  /// Where the document came from, for messages about several keys: the file's path or
  /// "defaults", "--set" when only --set gave values, "<path> with --set" for both.
  std::string source() const;
  /// Where the value of `key` came from, for messages about it: "--set", the path or "defaults".
  std::string where(const std::string& key) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Levenshtein edit distance (for "did you mean" suggestions).
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace bigbatch::cli
