// io/safetensors: every dtype round trip, metadata, the file layout, and every broken file named
// with its cause.
#include "bigbatch/io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace bigbatch {
namespace {

using io::NamedTensor;

/// One tensor of every dtype bigbatch supports, with values that use the whole range.
std::vector<NamedTensor> every_dtype() {
  torch::manual_seed(7);
  const torch::Tensor values = torch::randn({2, 3}) * 100;  // (2, 3)
  return {{"f64", values.to(torch::kFloat64) / 3},
          {"f32", values / 3},
          {"f16", (values / 3).to(torch::kFloat16)},
          {"bf16", (values / 3).to(torch::kBFloat16)},
          {"i64", torch::randint(-(int64_t{1} << 40), int64_t{1} << 40, {4}, torch::kLong)},
          {"i32", torch::randint(-100000, 100000, {2, 2}, torch::kInt)},
          {"i16", torch::randint(-30000, 30000, {5}, torch::kShort)},
          {"i8", torch::randint(-128, 127, {3}, torch::kChar)},
          {"u8", torch::randint(0, 256, {2, 1, 3}, torch::kByte)},
          {"bool", torch::rand({7}) > 0.5},
          {"scalar", torch::tensor(int64_t{42})},
          {"empty", torch::zeros({0, 3})}};
}

/// The bytes of a file with this header text and these data bytes (nothing checked).
std::string raw_file(const std::string& header, const std::string& data) {
  std::string file(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(file.data(), &length, 8);
  return file + header + data;
}

class SafetensorsFiles : public ::testing::Test {
 protected:
  /// The InputError of reading `bytes` written to a file called `name`; the message must name
  /// the file, and mapping the file must fail with the same message.
  std::string error_of(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.write(name, bytes).string();
    const std::string message = testing::input_error_of([&] { io::read_safetensors(path); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_EQ(testing::input_error_of([&] { io::map_safetensors(path); }), message);
    return message;
  }
  /// Reading `bytes` (as the file `name`) fails with an InputError that names the file and says
  /// `cause`.
  void expect_error(const std::string& name, const std::string& bytes, const std::string& cause) {
    const std::string message = error_of(name, bytes);
    EXPECT_NE(message.find(cause), std::string::npos) << message;
  }
  testing::TempDir dir_;
};

TEST_F(SafetensorsFiles, EveryDtypeRoundTripsBitwiseInOrder) {
  const std::vector<NamedTensor> tensors = every_dtype();
  const std::string path = (dir_.path() / "all.safetensors").string();
  io::write_safetensors(path, tensors);
  const io::Safetensors file = io::read_safetensors(path);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].first);
    EXPECT_EQ(file.tensors[i].first, tensors[i].first);
    EXPECT_EQ(file.tensors[i].second.scalar_type(), tensors[i].second.scalar_type());
    EXPECT_EQ(file.tensors[i].second.sizes(), tensors[i].second.sizes());
    EXPECT_TRUE(torch::equal(file.tensors[i].second, tensors[i].second));
  }
  EXPECT_TRUE(file.metadata.empty());
  ASSERT_NE(file.find("u8"), nullptr);
  EXPECT_EQ(file.find("missing"), nullptr);
}

TEST_F(SafetensorsFiles, MappedTensorsAreTheFilesAndWritesNeverReachIt) {
  const std::vector<NamedTensor> tensors = every_dtype();
  const std::string path = (dir_.path() / "all.safetensors").string();
  io::write_safetensors(path, tensors, {{"format", "pt"}});
  const std::string before = testing::read_file(path);
  torch::Tensor kept;
  {
    io::Safetensors file = io::map_safetensors(path);
    ASSERT_EQ(file.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      SCOPED_TRACE(tensors[i].first);
      EXPECT_EQ(file.tensors[i].first, tensors[i].first);
      EXPECT_EQ(file.tensors[i].second.scalar_type(), tensors[i].second.scalar_type());
      EXPECT_TRUE(torch::equal(file.tensors[i].second, tensors[i].second));
    }
    EXPECT_EQ(file.metadata.at("format"), "pt");
    file.find("f32")->mul_(2);  // copy-on-write: the file keeps its bytes
    EXPECT_TRUE(torch::equal(*file.find("f32"), tensors[1].second * 2));
    kept = *file.find("i64");
  }
  // The mapping outlives the Safetensors while a tensor views it.
  EXPECT_TRUE(torch::equal(kept, tensors[4].second));
  EXPECT_EQ(testing::read_file(path), before);
}

TEST_F(SafetensorsFiles, MappingAMissingFileOrADirectoryIsNamed) {
  const std::string absent = (dir_.path() / "absent.safetensors").string();
  EXPECT_NE(testing::input_error_of([&] {
              io::map_safetensors(absent);
            }).find("cannot open " + absent + ": No such file"),
            std::string::npos);
  EXPECT_EQ(testing::input_error_of([&] { io::map_safetensors(dir_.path().string()); }),
            "cannot read " + dir_.path().string() + ": not a regular file");
}

TEST_F(SafetensorsFiles, WritesTheLayoutOfTheFormat) {
  const torch::Tensor strided = torch::arange(12, torch::kFloat).view({3, 4}).t();  // (4, 3)
  const std::string bytes = io::safetensors_bytes(
      {{"b", torch::ones({2}, torch::kLong)}, {"a", strided}}, {{"format", "pt"}});
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  EXPECT_EQ(length % 8, 0u);
  const std::string header = bytes.substr(8, length);
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}')) << header;
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(header);
  std::vector<std::string> keys;
  for (const auto& [key, value] : ordered.items())
    keys.push_back(key);
  const nlohmann::json json = nlohmann::json::parse(header);
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "b", "a"}));  // as given
  EXPECT_EQ(json["__metadata__"]["format"], "pt");
  EXPECT_EQ(json["b"]["dtype"], "I64");
  EXPECT_EQ(json["b"]["data_offsets"], nlohmann::json::parse("[0, 16]"));
  EXPECT_EQ(json["a"]["dtype"], "F32");
  EXPECT_EQ(json["a"]["shape"], nlohmann::json::parse("[4, 3]"));
  EXPECT_EQ(json["a"]["data_offsets"], nlohmann::json::parse("[16, 64]"));
  EXPECT_EQ(bytes.size(), 8 + length + 64);
  // A non-contiguous tensor is stored row-major: its first row is 0, 4, 8.
  float first_row[3];
  std::memcpy(first_row, bytes.data() + 8 + length + 16, sizeof(first_row));
  EXPECT_EQ(first_row[1], 4.0f);
  EXPECT_EQ(first_row[2], 8.0f);
}

TEST_F(SafetensorsFiles, MetadataRoundTrips) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"spec", R"({"kind": "gpt", "quote": "\"", "unicode": "é"})"}, {"", ""}};
  const std::string path = (dir_.path() / "m.safetensors").string();
  io::write_safetensors(path, {{"x", torch::zeros({1})}}, metadata);
  EXPECT_EQ(io::read_safetensors(path).metadata, metadata);
  io::write_safetensors(path, {}, metadata);  // no tensors at all
  const io::Safetensors file = io::read_safetensors(path);
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_EQ(file.metadata, metadata);
}

TEST_F(SafetensorsFiles, WriterRejectsBadNamesAndDtypes) {
  EXPECT_NE(testing::input_error_of([] {
              io::safetensors_bytes({{"w", torch::zeros({1})}, {"w", torch::ones({1})}});
            }).find("two tensors are called \"w\""),
            std::string::npos);
  EXPECT_NE(testing::input_error_of([] {
              io::safetensors_bytes({{"__metadata__", torch::zeros({1})}});
            }).find("cannot be called \"__metadata__\""),
            std::string::npos);
  const std::string complex = testing::input_error_of([] {
    io::safetensors_bytes({{"z", torch::zeros({1}, torch::kComplexFloat)}});
  });
  EXPECT_NE(complex.find("tensor \"z\""), std::string::npos) << complex;
  EXPECT_NE(complex.find("supported: F64, F32"), std::string::npos) << complex;
}

TEST_F(SafetensorsFiles, MissingFileOrADirectoryIsNamed) {
  const std::string path = (dir_.path() / "absent.safetensors").string();
  const std::string message = testing::input_error_of([&] { io::read_safetensors(path); });
  EXPECT_NE(message.find("cannot open " + path), std::string::npos) << message;
  // A directory opens as a stream of no bytes; it is named as a directory, not as a short file.
  EXPECT_EQ(testing::input_error_of([&] { io::read_safetensors(dir_.path().string()); }),
            "cannot read " + dir_.path().string() + ": it is a directory, not a file");
}

TEST_F(SafetensorsFiles, TruncatedBeforeTheHeaderLength) {
  expect_error("short.safetensors", std::string("\x10\0\0", 3),
               "3 bytes, fewer than the 8 of the header length");
}

TEST_F(SafetensorsFiles, HeaderLengthBeyondTheFile) {
  expect_error("long.safetensors", raw_file("{}", "").substr(0, 9),
               "header length 2 bytes runs past the end of the file (1 bytes");
}

TEST_F(SafetensorsFiles, HeaderThatIsNotJson) {
  expect_error("json.safetensors", raw_file("{\"a\": ", ""), "header is not valid JSON");
  expect_error("array.safetensors", raw_file("[1, 2]  ", ""),
               "header must be a JSON object, got array");
}

TEST_F(SafetensorsFiles, UnknownDtype) {
  expect_error(
      "dtype.safetensors",
      raw_file(R"({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})", "ab"),
      "tensor \"w\": unknown dtype \"F8_E4M3\" (supported: F64, F32, F16, BF16, I64, I32, I16, "
      "I8, U8, BOOL)");
}

TEST_F(SafetensorsFiles, MalformedEntries) {
  const auto one_tensor = [](const std::string& entry) {
    return raw_file("{\"w\": {" + entry + "}}", "ab");
  };
  expect_error("shape.safetensors",
               one_tensor(R"("dtype": "U8", "shape": [-2], "data_offsets": [0, 2])"),
               "tensor \"w\": shape must hold non-negative integers, got [-2]");
  expect_error("offsets.safetensors",
               one_tensor(R"("dtype": "U8", "shape": [2], "data_offsets": [0])"),
               "no \"data_offsets\" [begin, end]");
  expect_error("reversed.safetensors",
               one_tensor(R"("dtype": "U8", "shape": [0], "data_offsets": [2, 1])"),
               "data_offsets [2, 1] end before they begin");
  expect_error("dtypeless.safetensors", one_tensor(R"("shape": [2], "data_offsets": [0, 2])"),
               "tensor \"w\": header entry has no string \"dtype\"");
  expect_error("metadata.safetensors", raw_file(R"({"__metadata__": {"n": 1}})", ""),
               "\"__metadata__\" entry \"n\" must be a string, got 1");
}

TEST_F(SafetensorsFiles, DataTruncatedOrOffsetsOutOfRange) {
  const std::string whole = io::safetensors_bytes({{"w", torch::zeros({4})}});  // 16 data bytes
  expect_error("cut.safetensors", whole.substr(0, whole.size() - 4),
               "tensor \"w\": data_offsets [0, 16] run past the end of the data (12 bytes after "
               "the header; is the file truncated?)");
}

TEST_F(SafetensorsFiles, OffsetsThatDoNotMatchShapeTimesDtype) {
  expect_error("size.safetensors",
               raw_file(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})",
                        std::string(20, '\0')),
               "tensor \"w\": shape [2, 3] x F32 (4 bytes) needs 24 bytes, but data_offsets "
               "[0, 20] hold 20");
}

TEST_F(SafetensorsFiles, OverlappingTensors) {
  expect_error("overlap.safetensors",
               raw_file(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                        R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
                        "abcdef"),
               "tensor \"b\": data_offsets [2, 6] overlap those of tensor \"a\" [0, 4]");
}

TEST_F(SafetensorsFiles, BytesOfNoTensor) {
  const std::string entry = R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": )";
  expect_error("gap.safetensors", raw_file(entry + "[1, 3]}}", "abc"),
               "data bytes [0, 1) before tensor \"a\" belong to no tensor");
  expect_error("tail.safetensors", raw_file(entry + "[0, 2]}}", "abcd"),
               "data bytes [2, 4) after the last tensor belong to no tensor");
}

}  // namespace
}  // namespace bigbatch
