// Text classification: which collection of Debian's `fortunes` package a fortune comes from.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bigbatch/data/dataset.h"
#include "bigbatch/data/text_corpus.h"

namespace bigbatch::data {

/// Byte id that pads a fortune shorter than the context; byte ids are 0..255, so a model's
/// vocabulary is kFortunePadId + 1 = 257.
inline constexpr int64_t kFortunePadId = 256;

/// Splits the text of a fortune file into fortunes. A line consisting of exactly "%" (or "%\r")
/// separates fortunes; text before the first separator is a fortune, and so is the text after
/// the last one (a missing final "%" and a missing final newline are fine). Each fortune is the
/// text of its lines, inner line breaks kept as found, without the line break that ends its last
/// line. Empty and whitespace-only fortunes (for example between consecutive "%" lines) are
/// dropped. Usage: split_fortunes("one\n%\ntwo\n%\n") == {"one", "two"}.
std::vector<std::string> split_fortunes(std::string_view text);

/// Where the fortunes come from and how they are cut and split. Chained setters:
///   FortuneCollectionsOptions().collections({"art", "computers", "law"}).max_bytes(128)
struct FortuneCollectionsOptions {
  /// A directory whose fortune files are the collections; the default is Debian's `fortunes`
  /// package. Its subdirectories (such as off/) are not read.
  TORCH_ARG(std::string, directory) = kFortunesDirectory;
  /// The collections (file names) to use, each one class. Empty: every collection in the
  /// directory with at least min_per_class fortunes.
  TORCH_ARG(std::vector<std::string>, collections) = {};
  /// With collections empty, collections with fewer fortunes are left out (at least 1).
  TORCH_ARG(int64_t, min_per_class) = 50;
  /// Context T: bytes per fortune (at least 1); longer fortunes are cut to their first T bytes.
  TORCH_ARG(int64_t, max_bytes) = 256;
  /// Fraction of each class's fortunes that go to the test split, in [0, 1).
  TORCH_ARG(double, test_fraction) = 0.1;
  /// Seed of the per-class test split.
  TORCH_ARG(uint64_t, seed) = 0;
};

/// Fortunes with the class they come from: inputs (B, T) int64 byte ids padded with
/// kFortunePadId, targets (B) int64 class ids. Immutable, so several threads may read it.
class FortuneDataset : public Dataset {
 public:
  /// `texts[i]` has class `labels[i]` in [0, class_names.size()); texts longer than `max_bytes`
  /// are cut. Throws InputError for different lengths, an empty text, a label out of range or
  /// max_bytes < 1.
  FortuneDataset(std::vector<std::string> texts, std::vector<int64_t> labels,
                 std::vector<std::string> class_names, int64_t max_bytes);

  /// Number of fortunes.
  int64_t size() const override;
  /// inputs (B, T) int64: the fortune's bytes, then kFortunePadId; targets (B) int64 class
  /// ids. An index outside [0, size()) throws std::logic_error.
  Batch get(const std::vector<int64_t>& indices) const override;
  /// For example "12,345 fortunes from 20 collections, up to 256 bytes (1,234 truncated)".
  std::string describe() const override;

  /// Class names by class id (sorted collection names when loaded by FortuneCollections).
  const std::vector<std::string>& class_names() const { return class_names_; }
  /// Fortune `i`, cut to max_bytes().
  const std::string& text(int64_t i) const { return texts_.at(static_cast<size_t>(i)); }
  /// Class id of fortune `i`.
  int64_t label(int64_t i) const { return labels_.at(static_cast<size_t>(i)); }
  /// Number of fortunes of each class, by class id.
  std::vector<int64_t> class_counts() const;
  /// Context T.
  int64_t max_bytes() const { return max_bytes_; }
  /// Number of fortunes that were longer than max_bytes() and were cut.
  int64_t truncated() const { return truncated_; }

 private:
  std::vector<std::string> texts_;
  std::vector<int64_t> labels_;
  std::vector<std::string> class_names_;
  int64_t max_bytes_ = 0;
  int64_t truncated_ = 0;
};

/// The task "which collection does a fortune come from", split into train and test.
///
/// load() reads `options.directory()`. Its collections are the regular files directly in it
/// whose names do not start with "." and do not end in ".dat" (fortune's binary indexes) or
/// ".u8"; symbolic links are skipped (in Debian's package every NAME.u8 is a link to NAME, so
/// following them would count collections twice), and so is a file holding a NUL byte (not
/// text) or one that cannot be read; skipped() lists those last two with the reason. Classes are
/// the chosen collections in sorted name order. The test split takes, from each class
/// separately, round(test_fraction * n) of its n fortunes (at most n - 1), drawn with
/// epoch_permutation(n, seed, class id); everything else is train. Both splits keep file order.
/// A directory that holds folders and no such file is read as one class per folder instead:
/// each text file of a folder (the same rules) is one sample, blank ones dropped, in file-name
/// order, and skipped() names files as "folder/file: reason".
/// Usage:
///   auto fortunes = FortuneCollections::load(FortuneCollectionsOptions().max_bytes(128));
///   Batch batch = fortunes.train().get({0, 1});  // inputs (2, 128), targets (2), int64
class FortuneCollections {
 public:
  /// Reads the directory. Throws InputError naming the directory when it does not exist, is not
  /// a directory or holds no collection; naming a requested collection that is missing (with the
  /// list of collections that exist) or has no fortunes; when fewer than 2 classes remain
  /// (naming min_per_class and the largest collections); and naming the value for options out
  /// of range.
  static FortuneCollections load(const FortuneCollectionsOptions& options = {});
  /// Builds the task from collections already in memory: (name, file text) pairs. Ignores
  /// options.directory(); otherwise the same rules and errors as load().
  static FortuneCollections from_texts(
      const std::vector<std::pair<std::string, std::string>>& collections,
      const FortuneCollectionsOptions& options = {});

  /// The training split.
  const FortuneDataset& train() const { return *train_; }
  /// The test split.
  const FortuneDataset& test() const { return *test_; }
  /// The training split, shared.
  std::shared_ptr<const FortuneDataset> train_shared() const { return train_; }
  /// The test split, shared.
  std::shared_ptr<const FortuneDataset> test_shared() const { return test_; }
  /// Class names: the collections used, sorted.
  const std::vector<std::string>& class_names() const { return train_->class_names(); }
  /// Files of the directory that were not read, each "name: reason".
  const std::vector<std::string>& skipped() const { return skipped_; }
  /// The options the task was made with.
  const FortuneCollectionsOptions& options() const { return options_; }
  /// For example "12,345 fortunes from 20 collections, up to 256 bytes (1,234 truncated);
  /// train 11,100, test 1,245".
  std::string describe() const;

 private:
  FortuneCollections(std::map<std::string, std::vector<std::string>> samples,
                     std::vector<std::string> skipped, const std::string& origin,
                     const FortuneCollectionsOptions& options, bool folders);

  FortuneCollectionsOptions options_;
  std::vector<std::string> skipped_;
  bool folders_ = false;  ///< classes from folders of text files, not fortune files
  std::shared_ptr<const FortuneDataset> train_;
  std::shared_ptr<const FortuneDataset> test_;
};

}  // namespace bigbatch::data
