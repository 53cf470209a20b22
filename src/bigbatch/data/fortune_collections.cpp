#include "bigbatch/data/fortune_collections.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/core/table.h"
#include "bigbatch/data/shuffle.h"
#include "bigbatch/data/text_files.h"

namespace bigbatch::data {
namespace {

namespace fs = std::filesystem;

bool is_blank(const std::string& text) {
  return text.find_first_not_of(" \t\r\n\v\f") == std::string::npos;
}

void check_options(const FortuneCollectionsOptions& options) {
  BB_CHECK_INPUT(options.max_bytes() >= 1, "fortune max_bytes must be at least 1, got ",
                 options.max_bytes());
  BB_CHECK_INPUT(options.min_per_class() >= 1, "fortune min_per_class must be at least 1, got ",
                 options.min_per_class());
  const double fraction = options.test_fraction();
  BB_CHECK_INPUT(fraction >= 0.0 && fraction < 1.0, "fortune test_fraction must be in [0, 1), got ",
                 fraction);
}

/// Throws InputError unless `directory` exists and is a directory.
void check_directory(const fs::path& directory) {
  std::error_code error;
  const fs::file_status status = fs::status(directory, error);
  BB_CHECK_INPUT(status.type() != fs::file_type::not_found, "fortune directory '",
                 directory.string(), "' does not exist");
  BB_CHECK_INPUT(!error, "cannot access fortune directory '", directory.string(),
                 "': ", error.message());
  BB_CHECK_INPUT(fs::is_directory(status), "fortune directory '", directory.string(),
                 "' is not a directory");
}

/// Whether `directory` holds one folder per class: it has folders and no file read as a
/// collection.
bool holds_class_folders(const fs::path& directory) {
  bool folders = false;
  try {
    for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
      const std::string name = entry.path().filename().string();
      if (is_ignored_name(name) || entry.is_symlink())
        continue;
      if (entry.is_regular_file())
        return false;
      folders = folders || entry.is_directory();
    }
  } catch (const fs::filesystem_error& e) {
    throw InputError(cat("cannot list directory '", directory.string(), "': ", e.code().message()));
  }
  return folders;
}

/// The samples of each class, by class name.
using ClassSamples = std::map<std::string, std::vector<std::string>>;

/// The fortune files directly in `directory`, each split into its fortunes.
ClassSamples read_fortune_files(const fs::path& directory, std::vector<std::string>& skipped) {
  const std::vector<NamedText> files = read_text_files(directory.string(), "", skipped);
  BB_CHECK_INPUT(!files.empty(), "fortune directory '", directory.string(),
                 "' has no fortune collections (regular text files, not hidden, not symlinks, "
                 "not *.dat or *.u8)",
                 skipped.empty() ? "" : "; skipped: ", join(skipped));
  ClassSamples samples;
  for (const auto& [name, text] : files)
    samples[name] = split_fortunes(text);
  std::sort(skipped.begin(), skipped.end());
  return samples;
}

/// One class per folder of `directory`, each text file in it one sample (blank ones dropped).
ClassSamples read_class_folders(const fs::path& directory, std::vector<std::string>& skipped) {
  ClassSamples samples;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (is_ignored_name(name) || entry.is_symlink() || !entry.is_directory())
      continue;
    std::vector<std::string>& texts = samples[name];
    for (auto& [file, text] : read_text_files(entry.path().string(), name + "/", skipped)) {
      if (!is_blank(text))
        texts.push_back(std::move(text));
    }
  }
  std::sort(skipped.begin(), skipped.end());
  return samples;
}

/// The fortune files of `texts`, each split into its fortunes; a name given twice is refused.
ClassSamples split_texts(const std::vector<NamedText>& texts, const std::string& origin) {
  ClassSamples samples;
  for (const auto& [name, text] : texts) {
    BB_CHECK_INPUT(samples.count(name) == 0, "fortune collection '", name, "' appears twice in ",
                   origin);
    samples[name] = split_fortunes(text);
  }
  return samples;
}

/// One collection split into fortunes.
struct Collection {
  std::string name;
  std::vector<std::string> fortunes;
};

/// The collections that become classes, sorted by name.
std::vector<Collection> choose(ClassSamples all, const std::vector<std::string>& skipped,
                               const FortuneCollectionsOptions& options,
                               const std::string& origin) {
  std::vector<std::string> names;
  for (const auto& named : all)
    names.push_back(named.first);  // sorted: a map's order

  std::vector<Collection> chosen;
  if (!options.collections().empty()) {
    std::set<std::string> wanted;
    for (const std::string& name : options.collections()) {
      BB_CHECK_INPUT(wanted.insert(name).second, "fortune collection '", name,
                     "' is requested twice");
      const auto found = all.find(name);
      if (found == all.end()) {
        std::string reason;
        for (const std::string& skip : skipped) {
          if (skip.rfind(name + ": ", 0) == 0)
            reason = cat(" (skipped: ", skip.substr(name.size() + 2), ")");
        }
        throw InputError(cat("fortune collection '", name, "' is not in ", origin, reason,
                             "; collections there: ", join(names)));
      }
      BB_CHECK_INPUT(!found->second.empty(), "fortune collection '", name, "' in ", origin,
                     " has no fortunes");
    }
    for (const std::string& name : wanted)
      chosen.push_back({name, all[name]});
  } else {
    for (const std::string& name : names) {
      if (static_cast<int64_t>(all[name].size()) >= options.min_per_class())
        chosen.push_back({name, all[name]});
    }
  }
  if (chosen.size() < 2) {
    std::vector<std::pair<size_t, std::string>> by_size;
    for (const std::string& name : names)
      by_size.emplace_back(all[name].size(), name);
    std::sort(by_size.rbegin(), by_size.rend());
    std::vector<std::string> largest;
    for (size_t i = 0; i < std::min<size_t>(by_size.size(), 5); ++i)
      largest.push_back(cat(by_size[i].second, " ", by_size[i].first));
    throw InputError(
        cat("fortune classification needs at least 2 collections, got ", chosen.size(), " from ",
            origin,
            options.collections().empty()
                ? cat(" with at least min_per_class = ", options.min_per_class(), " fortunes")
                : std::string(),
            "; largest collections (fortunes): ", join(largest)));
  }
  return chosen;
}

}  // namespace

std::vector<std::string> split_fortunes(std::string_view text) {
  std::vector<std::string> fortunes;
  std::string current;
  const auto finish = [&] {
    // Drop the line break that ends the fortune's last line.
    if (!current.empty() && current.back() == '\n')
      current.pop_back();
    if (!current.empty() && current.back() == '\r')
      current.pop_back();
    if (!is_blank(current))
      fortunes.push_back(std::move(current));
    current.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t newline = text.find('\n', pos);
    const size_t next = newline == std::string_view::npos ? text.size() : newline + 1;
    const std::string_view line =
        text.substr(pos, (newline == std::string_view::npos ? text.size() : newline) - pos);
    if (line == "%" || line == "%\r") {
      finish();
    } else {
      current.append(text.substr(pos, next - pos));
    }
    pos = next;
  }
  finish();
  return fortunes;
}

FortuneDataset::FortuneDataset(std::vector<std::string> texts, std::vector<int64_t> labels,
                               std::vector<std::string> class_names, int64_t max_bytes)
    : texts_(std::move(texts)),
      labels_(std::move(labels)),
      class_names_(std::move(class_names)),
      max_bytes_(max_bytes) {
  BB_CHECK_INPUT(max_bytes_ >= 1, "fortune max_bytes must be at least 1, got ", max_bytes_);
  BB_CHECK_INPUT(texts_.size() == labels_.size(), "fortune dataset: ", texts_.size(), " texts but ",
                 labels_.size(), " labels");
  const auto classes = static_cast<int64_t>(class_names_.size());
  for (size_t i = 0; i < texts_.size(); ++i) {
    BB_CHECK_INPUT(!texts_[i].empty(), "fortune dataset: text ", i, " is empty");
    BB_CHECK_INPUT(labels_[i] >= 0 && labels_[i] < classes, "fortune dataset: label ", labels_[i],
                   " of text ", i, " is outside [0, ", classes, ")");
    if (static_cast<int64_t>(texts_[i].size()) > max_bytes_) {
      texts_[i].resize(static_cast<size_t>(max_bytes_));
      ++truncated_;
    }
  }
}

int64_t FortuneDataset::size() const {
  return static_cast<int64_t>(texts_.size());
}

Batch FortuneDataset::get(const std::vector<int64_t>& indices) const {
  const auto batch = static_cast<int64_t>(indices.size());
  const int64_t n = size();
  torch::Tensor inputs = torch::full({batch, max_bytes_}, kFortunePadId, torch::kLong);  // (B, T)
  torch::Tensor targets = torch::empty({batch}, torch::kLong);                           // (B)
  int64_t* input_rows = inputs.data_ptr<int64_t>();
  int64_t* target_ids = targets.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t i = indices[b];
    BB_CHECK(i >= 0 && i < n, "fortune index ", i, " is outside [0, ", n, ")");
    const std::string& text = texts_[static_cast<size_t>(i)];
    for (size_t t = 0; t < text.size(); ++t)
      input_rows[b * max_bytes_ + static_cast<int64_t>(t)] = static_cast<unsigned char>(text[t]);
    target_ids[b] = labels_[static_cast<size_t>(i)];
  }
  return {inputs, targets};
}

std::string FortuneDataset::describe() const {
  return cat(group_thousands(size()), " fortunes from ", class_names_.size(),
             " collections, up to ", max_bytes_, " bytes (", group_thousands(truncated_),
             " truncated)");
}

std::vector<int64_t> FortuneDataset::class_counts() const {
  std::vector<int64_t> counts(class_names_.size(), 0);
  for (const int64_t label : labels_)
    ++counts[static_cast<size_t>(label)];
  return counts;
}

FortuneCollections FortuneCollections::load(const FortuneCollectionsOptions& options) {
  check_options(options);
  check_directory(options.directory());
  std::vector<std::string> skipped;
  const bool folders = holds_class_folders(options.directory());
  ClassSamples samples = folders ? read_class_folders(options.directory(), skipped)
                                 : read_fortune_files(options.directory(), skipped);
  return FortuneCollections(std::move(samples), std::move(skipped),
                            cat("'", options.directory(), "'"), options, folders);
}

FortuneCollections FortuneCollections::from_texts(const std::vector<NamedText>& collections,
                                                  const FortuneCollectionsOptions& options) {
  check_options(options);
  return FortuneCollections(split_texts(collections, "the given texts"), {}, "the given texts",
                            options, /*folders=*/false);
}

FortuneCollections::FortuneCollections(std::map<std::string, std::vector<std::string>> samples,
                                       std::vector<std::string> skipped, const std::string& origin,
                                       const FortuneCollectionsOptions& options, bool folders)
    : options_(options), skipped_(std::move(skipped)), folders_(folders) {
  const std::vector<Collection> chosen = choose(std::move(samples), skipped_, options, origin);
  std::vector<std::string> class_names;
  for (const Collection& collection : chosen)
    class_names.push_back(collection.name);

  std::vector<std::string> train_texts, test_texts;
  std::vector<int64_t> train_labels, test_labels;
  for (size_t k = 0; k < chosen.size(); ++k) {
    const std::vector<std::string>& fortunes = chosen[k].fortunes;
    const auto n = static_cast<int64_t>(fortunes.size());
    const int64_t n_test =
        std::min<int64_t>(n - 1, std::llround(options.test_fraction() * static_cast<double>(n)));
    std::vector<bool> is_test(static_cast<size_t>(n), false);
    const std::vector<int64_t> order =
        epoch_permutation(n, options.seed(), static_cast<int64_t>(k));
    for (int64_t j = 0; j < n_test; ++j)
      is_test[static_cast<size_t>(order[j])] = true;
    for (int64_t i = 0; i < n; ++i) {
      const bool test = is_test[static_cast<size_t>(i)];
      (test ? test_texts : train_texts).push_back(fortunes[static_cast<size_t>(i)]);
      (test ? test_labels : train_labels).push_back(static_cast<int64_t>(k));
    }
  }
  train_ = std::make_shared<const FortuneDataset>(std::move(train_texts), std::move(train_labels),
                                                  class_names, options.max_bytes());
  test_ = std::make_shared<const FortuneDataset>(std::move(test_texts), std::move(test_labels),
                                                 class_names, options.max_bytes());
}

std::string FortuneCollections::describe() const {
  return cat(group_thousands(train_->size() + test_->size()),
             folders_ ? " texts from " : " fortunes from ", class_names().size(),
             folders_ ? " folders, up to " : " collections, up to ", options_.max_bytes(),
             " bytes (", group_thousands(train_->truncated() + test_->truncated()),
             " truncated); train ", group_thousands(train_->size()), ", test ",
             group_thousands(test_->size()));
}

}  // namespace bigbatch::data
