// A byte-level text corpus read from a file or a directory, split into train and validation.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bigbatch::data {

/// Where Debian's `fortunes` package puts its collections: the default text of gpt, mlp and bert.
inline constexpr const char* kFortunesDirectory = "/usr/share/games/fortunes";

/// Where a TextCorpus comes from and how it is split. Chained setters:
///   TextCorpusOptions().path("corpus.txt").val_fraction(0.05)
struct TextCorpusOptions {
  /// A text file, read whole, or a directory whose regular, non-symlink files not ending in
  /// ".dat" are concatenated in file-name order. The default is the English texts of Debian's
  /// `fortunes` package (the ".dat" files there are binary indexes, the ".u8" files symlinks).
  TORCH_ARG(std::string, path) = kFortunesDirectory;
  /// Fraction of the blocks that go to validation, in [0, 0.5]; 0 leaves validation empty.
  TORCH_ARG(double, val_fraction) = 0.1;
  /// Size in bytes of the blocks the split deals out (at least 1).
  TORCH_ARG(int64_t, split_block) = 4096;
};

/// The bytes of a text corpus, split deterministically and in-distribution into train and
/// validation. The bytes are cut into consecutive blocks of `split_block` bytes; block i goes to
/// validation when val_fraction > 0 and i % period == period - 1, with
/// period = max(2, round(1 / val_fraction)); every other block goes to train. A corpus of fewer
/// than `period` such blocks is cut into `period` smaller blocks instead (of
/// total_bytes / period bytes, at least 1), so that a small corpus has a validation split too. Each
/// split is the concatenation of its blocks in order. Usage:
///   auto corpus = TextCorpus::load(TextCorpusOptions().path("data/"));
///   SequenceDataset train(corpus.train_shared(), SequenceDatasetOptions(64).name("train"));
class TextCorpus {
 public:
  /// Reads and splits the corpus at `options.path()`. Throws InputError naming the path and the
  /// cause when it does not exist, cannot be read, is a directory without usable text files or
  /// is empty, and naming the value when val_fraction or split_block is out of range.
  static TextCorpus load(const TextCorpusOptions& options = {});
  /// Splits bytes already in memory (`options.path()` is ignored; files() is empty). Throws
  /// InputError for empty bytes and out-of-range options, as load() does.
  static TextCorpus from_bytes(std::vector<uint8_t> bytes, const TextCorpusOptions& options = {});

  /// The training split.
  const std::vector<uint8_t>& train() const { return *train_; }
  /// The validation split (empty when val_fraction is 0 or the corpus has fewer than period
  /// bytes).
  const std::vector<uint8_t>& val() const { return *val_; }
  /// The training split, shared: datasets built from it keep it alive without a copy.
  std::shared_ptr<const std::vector<uint8_t>> train_shared() const { return train_; }
  /// The validation split, shared.
  std::shared_ptr<const std::vector<uint8_t>> val_shared() const { return val_; }
  /// The files read, in the order their bytes were concatenated.
  std::vector<std::string> files() const { return files_; }
  /// Bytes in the whole corpus: train().size() + val().size().
  int64_t total_bytes() const { return total_bytes_; }
  /// Every `val_period()`-th block goes to validation; 0 when val_fraction is 0.
  int64_t val_period() const { return val_period_; }
  /// Bytes per block of the split: options().split_block(), or less for a small corpus.
  int64_t block_bytes() const { return block_bytes_; }
  /// The options the corpus was made with.
  const TextCorpusOptions& options() const { return options_; }
  /// One line for the plan table, for example
  /// "2,576,674 bytes from 60 files in /usr/share/games/fortunes (train 2,318,674, val 258,000)".
  std::string describe() const;

 private:
  TextCorpus(std::vector<uint8_t> bytes, std::vector<std::string> files,
             const TextCorpusOptions& options);

  TextCorpusOptions options_;
  std::vector<std::string> files_;
  int64_t total_bytes_ = 0;
  int64_t block_bytes_ = 0;
  int64_t val_period_ = 0;
  std::shared_ptr<const std::vector<uint8_t>> train_;
  std::shared_ptr<const std::vector<uint8_t>> val_;
};

}  // namespace bigbatch::data
