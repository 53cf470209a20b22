// The checkpoint container: round trip, and every way a file can be unusable, named.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "bigbatch/io/checkpoint_file.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

class CheckpointFile : public ::testing::Test {
 protected:
  void SetUp() override {
    good_.header = R"({"format": "test", "steps": 3})";
    good_.payload = std::string("\x00\x01\x02 tensors \xff", 13);
    for (int i = 0; i < 1000; ++i)
      good_.payload += static_cast<char>(i * 7);
    path_ = (dir_.path() / "step-00000003.ckpt").string();
    io::write_checkpoint_file(path_, good_);
  }
  std::string bytes() const { return testing::read_file(path_); }
  void overwrite(const std::string& content) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << content;
  }
  /// The cause read_checkpoint_file gives, after checking that the message names the file.
  std::string cause() const {
    try {
      io::read_checkpoint_file(path_);
    } catch (const io::CheckpointFileError& error) {
      EXPECT_EQ(error.path(), path_);
      EXPECT_EQ(std::string(error.what()).rfind(path_ + ": ", 0), 0u) << error.what();
      return error.cause();
    }
    ADD_FAILURE() << "expected io::CheckpointFileError";
    return "";
  }

  testing::TempDir dir_;
  io::CheckpointFile good_;
  std::string path_;
};

TEST_F(CheckpointFile, RoundTripsHeaderAndPayload) {
  const io::CheckpointFile read = io::read_checkpoint_file(path_);
  EXPECT_EQ(read.header, good_.header);
  EXPECT_EQ(read.payload, good_.payload);
  EXPECT_EQ(bytes().size(),
            io::kCheckpointPreambleBytes + good_.header.size() + good_.payload.size());
  EXPECT_EQ(bytes().substr(0, 8), std::string("BBCKPT\r\n"));
}

TEST_F(CheckpointFile, EveryTruncationIsNamed) {
  const std::string whole = bytes();
  for (const size_t keep : {size_t{0}, size_t{7}, size_t{31}, size_t{32}, size_t{40},
                            whole.size() / 2, whole.size() - 1}) {
    overwrite(whole.substr(0, keep));
    const std::string text = cause();
    EXPECT_EQ(text.rfind("truncated: " + std::to_string(keep) + " bytes", 0), 0u)
        << "kept " << keep << ": " << text;
  }
}

TEST_F(CheckpointFile, AFlippedBitAnywhereAfterThePreambleIsCaughtByTheChecksum) {
  const std::string whole = bytes();
  for (const size_t at : {io::kCheckpointPreambleBytes, io::kCheckpointPreambleBytes + 5,
                          whole.size() / 2, whole.size() - 1}) {
    std::string flipped = whole;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    overwrite(flipped);
    EXPECT_EQ(cause().rfind("corrupt: the CRC-32 of its contents is 0x", 0), 0u) << at;
  }
}

TEST_F(CheckpointFile, AFlippedLengthIsNamed) {
  std::string flipped = bytes();
  flipped[16] = static_cast<char>(flipped[16] ^ 0x01);  // header length +-1
  overwrite(flipped);
  const std::string text = cause();
  EXPECT_TRUE(text.rfind("truncated: ", 0) == 0 || text.rfind("trailing bytes: ", 0) == 0) << text;
  EXPECT_NE(text.find("announces"), std::string::npos) << text;
}

TEST_F(CheckpointFile, TrailingBytesAreNamed) {
  overwrite(bytes() + "extra");
  EXPECT_EQ(cause().rfind("trailing bytes: ", 0), 0u);
}

TEST_F(CheckpointFile, AnotherFileTypeIsNamedByItsFirstBytes) {
  overwrite(std::string("PK\x03\x04") + std::string(100, 'x'));
  EXPECT_EQ(cause(),
            "not a bigbatch checkpoint: it starts with \"PK\\x03\\x04xxxx\", not "
            "\"BBCKPT\\r\\n\"");
}

TEST_F(CheckpointFile, AnotherFormatVersionIsNamed) {
  std::string other = bytes();
  other[8] = 7;
  overwrite(other);
  EXPECT_EQ(cause(), "checkpoint format version 7; this bigbatch reads version 1");
}

TEST_F(CheckpointFile, AMissingFileIsNamed) {
  fs::remove(path_);
  EXPECT_EQ(cause(), "cannot open: No such file or directory");
}

TEST_F(CheckpointFile, AFailedWriteLeavesThePreviousFileIntact) {
  const std::string before = bytes();
  const std::string missing_dir = (dir_.path() / "gone" / "step-00000004.ckpt").string();
  try {
    io::write_checkpoint_file(missing_dir, good_);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("No such file or directory"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(bytes(), before);
}

TEST_F(CheckpointFile, AStreamedPayloadWritesTheSameFile) {
  const std::string whole = bytes();
  const std::string streamed = (dir_.path() / "streamed.ckpt").string();
  io::write_checkpoint_file(streamed, good_.header, [&](const io::PayloadSink& sink) {
    for (size_t at = 0; at < good_.payload.size(); at += 300)  // in pieces of 300 bytes
      sink(good_.payload.data() + at, std::min<size_t>(300, good_.payload.size() - at));
  });
  EXPECT_EQ(testing::read_file(streamed), whole);
  const io::CheckpointFile read = io::read_checkpoint_file(streamed);
  EXPECT_EQ(read.payload, good_.payload);
}

TEST_F(CheckpointFile, AFailingPayloadLeavesThePreviousFileAndNoTemporaryFile) {
  const std::string before = bytes();
  EXPECT_THROW(io::write_checkpoint_file(path_, good_.header,
                                         [](const io::PayloadSink& sink) {
                                           sink("half", 4);
                                           throw std::runtime_error("the archive failed");
                                         }),
               std::runtime_error);
  EXPECT_EQ(bytes(), before);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().string(), path_) << "left behind";
    ++files;
  }
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace bigbatch
