#include "bigbatch/data/text_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/core/table.h"

namespace bigbatch::data {
namespace {

namespace fs = std::filesystem;

void check_options(const TextCorpusOptions& options) {
  const double fraction = options.val_fraction();
  BB_CHECK_INPUT(fraction >= 0.0 && fraction <= 0.5,
                 "text corpus val_fraction must be in [0, 0.5], got ", fraction);
  BB_CHECK_INPUT(options.split_block() >= 1,
                 "text corpus split_block must be at least 1 byte, got ", options.split_block());
}

/// Every period-th block is validation; 0 when there is no validation split.
int64_t val_period_for(double val_fraction) {
  if (val_fraction <= 0.0)
    return 0;
  return std::max<int64_t>(2, std::llround(1.0 / val_fraction));
}

/// The files that make up the corpus at `path`: the file itself, or the usable files of the
/// directory sorted by name.
std::vector<fs::path> corpus_files(const fs::path& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  BB_CHECK_INPUT(status.type() != fs::file_type::not_found, "text corpus path '", path.string(),
                 "' does not exist");
  BB_CHECK_INPUT(!error, "cannot access text corpus path '", path.string(), "': ", error.message());
  if (fs::is_regular_file(status))
    return {path};
  BB_CHECK_INPUT(fs::is_directory(status), "text corpus path '", path.string(),
                 "' is neither a regular file nor a directory");

  std::vector<fs::path> files;
  try {
    for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
      if (entry.is_symlink() || !entry.is_regular_file())
        continue;
      if (ends_with(entry.path().filename().string(), ".dat"))
        continue;
      files.push_back(entry.path());
    }
  } catch (const fs::filesystem_error& e) {
    throw InputError(
        cat("cannot list text corpus directory '", path.string(), "': ", e.code().message()));
  }
  BB_CHECK_INPUT(!files.empty(), "text corpus directory '", path.string(),
                 "' has no usable text files (regular files, not symlinks, not ending in .dat)");
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().string() < b.filename().string();
  });
  return files;
}

/// Appends the whole of `file` to `bytes`.
void append_file(const fs::path& file, std::vector<uint8_t>& bytes) {
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const std::string cause =
        errno != 0 ? std::error_code(errno, std::generic_category()).message() : "open failed";
    throw InputError(cat("cannot read text corpus file '", file.string(), "': ", cause));
  }
  std::error_code error;
  const uintmax_t size = fs::file_size(file, error);
  BB_CHECK_INPUT(!error, "cannot read text corpus file '", file.string(), "': ", error.message());
  const size_t start = bytes.size();
  bytes.resize(start + size);
  in.read(reinterpret_cast<char*>(bytes.data() + start), static_cast<std::streamsize>(size));
  BB_CHECK_INPUT(static_cast<uintmax_t>(in.gcount()) == size, "cannot read text corpus file '",
                 file.string(), "': read ", in.gcount(), " of ", size, " bytes");
}

}  // namespace

TextCorpus TextCorpus::load(const TextCorpusOptions& options) {
  check_options(options);
  const fs::path path(options.path());
  std::vector<uint8_t> bytes;
  std::vector<std::string> names;
  for (const fs::path& file : corpus_files(path)) {
    append_file(file, bytes);
    names.push_back(file.string());
  }
  BB_CHECK_INPUT(!bytes.empty(), "text corpus '", path.string(), "' is empty (0 bytes in ",
                 names.size(), names.size() == 1 ? " file)" : " files)");
  return TextCorpus(std::move(bytes), std::move(names), options);
}

TextCorpus TextCorpus::from_bytes(std::vector<uint8_t> bytes, const TextCorpusOptions& options) {
  check_options(options);
  BB_CHECK_INPUT(!bytes.empty(), "text corpus is empty (0 bytes)");
  return TextCorpus(std::move(bytes), {}, options);
}

TextCorpus::TextCorpus(std::vector<uint8_t> bytes, std::vector<std::string> files,
                       const TextCorpusOptions& options)
    : options_(options),
      files_(std::move(files)),
      total_bytes_(static_cast<int64_t>(bytes.size())),
      val_period_(val_period_for(options.val_fraction())) {
  auto train = std::make_shared<std::vector<uint8_t>>();
  auto val = std::make_shared<std::vector<uint8_t>>();
  // A corpus of fewer blocks than the period would get no validation at all: its blocks shrink so
  // that there are `period` of them (35 KB in 4 KiB blocks with period 10: blocks of 3,500 bytes).
  int64_t block = options.split_block();
  if (val_period_ > 0 && (total_bytes_ + block - 1) / block < val_period_)
    block = std::max<int64_t>(1, total_bytes_ / val_period_);
  block_bytes_ = block;
  int64_t start = 0;
  for (int64_t i = 0; start < total_bytes_; ++i) {
    const int64_t end = start + std::min(block, total_bytes_ - start);
    const bool is_val = val_period_ > 0 && i % val_period_ == val_period_ - 1;
    std::vector<uint8_t>& split = is_val ? *val : *train;
    split.insert(split.end(), bytes.begin() + start, bytes.begin() + end);
    start = end;
  }
  train->shrink_to_fit();
  val->shrink_to_fit();
  train_ = std::move(train);
  val_ = std::move(val);
}

std::string TextCorpus::describe() const {
  std::string origin = "in memory";
  if (files_.size() == 1) {
    origin = "from " + files_.front();
  } else if (!files_.empty()) {
    origin = cat("from ", files_.size(), " files in ", options_.path());
  }
  return cat(group_thousands(total_bytes_), " bytes ", origin, " (train ",
             group_thousands(static_cast<int64_t>(train_->size())), ", val ",
             group_thousands(static_cast<int64_t>(val_->size())), ")");
}

}  // namespace bigbatch::data
