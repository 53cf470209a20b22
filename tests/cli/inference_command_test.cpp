// `bigbatch generate` and `bigbatch predict` on exports (and generate in bf16 on a Hugging Face
// directory): output, equality with the library, and every bad input with exit code 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bigbatch/cli/predict_command.h"
#include "bigbatch/core/device.h"
#include "bigbatch/data/fortune_collections.h"
#include "bigbatch/data/idx.h"
#include "bigbatch/io/safetensors.h"
#include "bigbatch/models/hf_model.h"
#include "bigbatch/models/model_export.h"
#include "bigbatch/models/sampling.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/text/tokenizer.h"
#include "cli/cli_support.h"
#include "support/export_support.h"
#include "support/gzip.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using models::ModelKind;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in(line);
  for (std::string field; std::getline(in, field, '\t');)
    fields.push_back(field);
  return fields;
}

class InferenceCommands : public ::testing::Test {
 protected:
  /// The export of a trained model of `spec`, written once per test under `name`.
  std::string exported(const models::ModelSpec& spec, const std::string& name) {
    const std::string out = (dir_.path() / (name + ".safetensors")).string();
    models::export_model(*testing::trained_model(spec, 9).module, spec, out);
    return out;
  }
  /// A resnet export with Fashion-MNIST-like class names (spaces and a slash).
  std::string resnet_export() {
    models::ModelSpec spec = testing::small_spec(ModelKind::kResnet);
    spec.class_names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Ankle boot"};
    return exported(spec, "resnet");
  }
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }

  testing::TempDir dir_;
};

TEST_F(InferenceCommands, GenerateContinuesThePromptAsGenerateTextDoes) {
  const std::string model = exported(testing::small_spec(ModelKind::kGpt), "gpt");
  const Result result =
      run("generate " + model + " --prompt 'The fox' --max-new-bytes 24 --seed 5 --top-k 10");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  models::ExportedModel loaded = models::load_exported(model);
  const std::string expected = models::generate_text(
      loaded.model.gpt, "The fox",
      models::SampleOptions().max_new_bytes(24).seed(5).top_k(10).temperature(0.8));
  EXPECT_EQ(result.output, expected + "\n");
  EXPECT_EQ(run("generate " + model + " --prompt 'The fox' --max-new-bytes 24 --seed 5 --top-k 10")
                .output,
            result.output);
}

TEST_F(InferenceCommands, GenerateRejectsOtherModelsAndBadOptions) {
  const std::string resnet = resnet_export();
  Result result = run("generate " + resnet + " --prompt x");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("bigbatch generate needs a gpt; " + resnet +
                               " holds a resnet classifier (use bigbatch predict)"),
            std::string::npos)
      << result.output;
  const std::string gpt = exported(testing::small_spec(ModelKind::kGpt), "gpt");
  result = run("generate " + gpt + " --prompt x --temperature 0");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("--temperature must be > 0, got 0"), std::string::npos)
      << result.output;
  result = run("generate " + path("absent.safetensors") + " --prompt x");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("cannot open " + path("absent.safetensors")), std::string::npos)
      << result.output;
  result = run("generate " + gpt);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("--prompt is required"), std::string::npos) << result.output;
}

TEST_F(InferenceCommands, GenerateNeverDrawsTheRowsOfAVocabularyPaddedBeyondTheTokenizer) {
  // tiny-llama with 100 more embedding and head rows than its tokenizer has ids (as Qwen2 and
  // Pythia pad theirs): nearly uniform draws over 558 ids would soon take one without a token.
  const fs::path model = dir_.path() / "padded-llama";
  fs::copy(std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tiny-llama", model,
           fs::copy_options::recursive);
  io::Safetensors weights = io::read_safetensors((model / "model.safetensors").string());
  torch::manual_seed(3);
  for (auto& [name, tensor] : weights.tensors) {
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight")
      tensor = torch::cat({tensor, torch::randn({100, tensor.size(1)})});  // (558, 32)
  }
  io::write_safetensors((model / "model.safetensors").string(), weights.tensors);
  nlohmann::json config = nlohmann::json::parse(testing::read_file(model / "config.json"));
  config["vocab_size"] = 558;
  std::ofstream(model / "config.json") << config.dump();

  const Result generated = run("generate " + model.string() +
                               " --prompt the --max-new-bytes 200 --temperature 100 --top-k 0");
  EXPECT_EQ(generated.exit_code, 0) << generated.output;
  EXPECT_EQ(generated.output.rfind("the", 0), 0u) << generated.output;
  EXPECT_EQ(generated.output.find("out of range"), std::string::npos) << generated.output;

  // The sample at the end of a training run draws the same way.
  const fs::path corpus = dir_.write("corpus.txt", small_corpus());
  const Result trained =
      run("train -s model.kind=hf -s model.path=" + model.string() +
          " -s data.path=" + corpus.string() +
          " -s hf.context=24 -s batch.global_batch=4 -s batch.micro_batch=4 -s train.steps=1 "
          "-s sample.bytes=200 -s sample.temperature=100 -s sample.top_k=0 "
          "--run-dir " +
          path("run"));
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(fs::exists(path("run") + "/summary.json")) << trained.output;
}

TEST_F(InferenceCommands, GenerateInBf16LoadsLinearWeightsNarrowAndRunsUnderAutocast) {
  const std::string llama = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tiny-llama";
  const Result result =
      run("generate " + llama + " --prompt the --max-new-bytes 12 --top-k 1 --precision bf16");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // The library's way: linear weights stored in bf16 from loading on, forward under autocast.
  models::HfModel model;
  {
    const nn::LinearStorageScope narrow(torch::kBFloat16);
    model = models::load_hf_model(llama);
  }
  EXPECT_EQ(model.llama->layers->ptr(1)
                ->as<models::HfLlamaLayer>()
                ->self_attn->o_proj->weight.scalar_type(),
            torch::kBFloat16);
  const std::unique_ptr<text::Tokenizer> tokenizer = text::load_tokenizer(llama);
  std::vector<int64_t> generated;
  {
    torch::NoGradGuard no_grad;
    model.module()->eval();
    const nn::AutocastGuard autocast(nn::Precision::kBf16, torch::kCPU);
    generated = models::generate_ids(
        model.causal_lm(), tokenizer->encode("the"), model.max_positions(),
        models::SampleOptions().top_k(1).max_new_bytes(12), tokenizer->special_tokens().eos);
  }
  EXPECT_EQ(result.output, "the" + tokenizer->decode(generated) + "\n");

  const std::string gpt = exported(testing::small_spec(ModelKind::kGpt), "gpt");
  EXPECT_EQ(run("generate " + gpt + " --prompt x --max-new-bytes 4 --precision bf16").exit_code, 0);
  Result refused = run("generate " + llama + " --prompt the --precision fp16");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("--precision = \"fp16\" needs a CUDA build"), std::string::npos)
      << refused.output;
  refused = run("generate " + gpt + " --prompt x --precision bf61");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("--precision"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("bf61"), std::string::npos) << refused.output;
}

TEST_F(InferenceCommands, DeviceChoosesWhereGenerateAndPredictRunAndABadOneIsNamed) {
  const std::string llama = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tiny-llama";
  const std::string bert = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tiny-bert";
  const std::string texts = dir_.write("texts.txt", "a short text\n%\nanother one\n").string();
  const std::string generate = "generate " + llama + " --prompt the --max-new-bytes 6 --top-k 1";
  const std::string predict = "predict " + bert + " --input " + texts + " --top 2";
  // The CPU is the default; naming it, or auto where there is no GPU, changes nothing.
  const Result on_cpu = run(generate + " --device cpu");
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.output;
  EXPECT_EQ(run(generate).output, on_cpu.output);
  EXPECT_EQ(run(predict + " --device cpu").output, run(predict).output);
  if (cuda_availability().device_count == 0) {
    EXPECT_EQ(run(generate + " --device auto").output, on_cpu.output);
    for (const std::string& command : {generate, predict}) {
      const Result refused = run(command + " --device cuda");
      EXPECT_EQ(refused.exit_code, 2) << refused.output;
      EXPECT_NE(refused.output.find("--device = \"cuda\": "), std::string::npos) << refused.output;
    }
  }
  const Result typo = run(generate + " --device gpu");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.output.find("--device = \"gpu\" is not a device; expected \"auto\", \"cpu\", "
                             "\"cuda\" or \"cuda:N\""),
            std::string::npos)
      << typo.output;
}

TEST_F(InferenceCommands, PredictClassifiesIdxImagesRawAndGzipped) {
  const std::string model = resnet_export();
  torch::manual_seed(3);
  const torch::Tensor images = torch::randint(0, 256, {3, 3, 8, 8}, torch::kByte);  // (N, C, H, W)
  const std::string idx = dir_.write("images.idx", data::idx_bytes(images)).string();
  const std::string gz =
      dir_.write("images.idx.gz", testing::gzip(data::idx_bytes(images))).string();
  const Result result = run("predict " + model + " --input " + idx + " --top 2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(run("predict " + model + " --input " + gz + " --top 2").output, result.output);

  // The same as the library: the spec's normalisation, softmax, the two likeliest.
  const models::ExportedModel loaded = models::load_exported(model);
  const auto inputs = cli::classifier_inputs(loaded.spec, idx);
  torch::NoGradGuard no_grad;
  const torch::Tensor probs =
      torch::softmax(loaded.model.forward(inputs->get({0, 1, 2}).inputs).to(torch::kFloat64), -1);
  const std::vector<std::string> lines = lines_of(result.output);
  ASSERT_EQ(lines.size(), 3u) << result.output;
  for (int64_t i = 0; i < 3; ++i) {
    const std::vector<std::string> fields = fields_of(lines[static_cast<size_t>(i)]);
    ASSERT_EQ(fields.size(), 5u) << lines[static_cast<size_t>(i)];
    EXPECT_EQ(fields[0], std::to_string(i));
    const auto [values, classes] = torch::topk(probs[i], 2);
    EXPECT_EQ(fields[1], loaded.spec.class_names[static_cast<size_t>(classes[0].item<int64_t>())]);
    EXPECT_NEAR(std::stod(fields[2]), values[0].item<double>(), 5e-5);
    EXPECT_EQ(fields[3], loaded.spec.class_names[static_cast<size_t>(classes[1].item<int64_t>())]);
    EXPECT_NEAR(std::stod(fields[4]), values[1].item<double>(), 5e-5);
  }
}

TEST_F(InferenceCommands, PredictClassifiesFortuneSeparatedTexts) {
  const std::string model = exported(testing::small_spec(ModelKind::kBert), "bert");
  const std::string texts = dir_.write("texts.txt",
                                       "A first fortune,\nover two lines.\n%\nShort.\n%\n%\nThird, "
                                       "longer than the context of twelve bytes.\n")
                                .string();
  const Result result = run("predict " + model + " --input " + texts);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::vector<std::string> lines = lines_of(result.output);
  ASSERT_EQ(lines.size(), 3u) << result.output;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::string> fields = fields_of(lines[i]);
    ASSERT_EQ(fields.size(), 3u) << lines[i];
    EXPECT_EQ(fields[0], std::to_string(i));
    EXPECT_TRUE(fields[1] == "art" || fields[1] == "law" || fields[1] == "zippy") << lines[i];
    EXPECT_GT(std::stod(fields[2]), 1.0 / 3 - 1e-4);  // the likeliest of three
  }
  const auto inputs = cli::classifier_inputs(testing::small_spec(ModelKind::kBert), texts);
  const torch::Tensor ids = inputs->get({0, 1, 2}).inputs;  // (3, 12)
  EXPECT_EQ(ids.sizes(), (std::vector<int64_t>{3, 12}));
  // As in training: cut to the context, padded at the end.
  EXPECT_EQ(ids[0][11].item<int64_t>(), static_cast<unsigned char>("A first fortune"[11]));
  EXPECT_EQ(ids[1][5].item<int64_t>(), '.');
  EXPECT_EQ(ids[1][6].item<int64_t>(), data::kFortunePadId);
  EXPECT_EQ(ids[1][11].item<int64_t>(), data::kFortunePadId);

  // In bf16 the same classes come out, with probabilities within bf16's rounding of the logits.
  const Result bf16 = run("predict " + model + " --input " + texts + " --top 3 --precision bf16");
  const Result fp32 = run("predict " + model + " --input " + texts + " --top 3");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  const std::vector<std::string> bf16_lines = lines_of(bf16.output);
  const std::vector<std::string> fp32_lines = lines_of(fp32.output);
  ASSERT_EQ(bf16_lines.size(), 3u) << bf16.output;
  for (size_t i = 0; i < 3; ++i) {
    std::vector<std::string> a = fields_of(bf16_lines[i]), b = fields_of(fp32_lines[i]);
    ASSERT_EQ(a.size(), 7u) << bf16_lines[i];
    for (size_t k = 2; k < 7; k += 2)
      EXPECT_NEAR(std::stod(a[k]), std::stod(b[k]), 0.02)
          << bf16_lines[i] << " / " << fp32_lines[i];
  }
  const Result fp16 = run("predict " + model + " --input " + texts + " --precision fp16");
  EXPECT_EQ(fp16.exit_code, 2);
  EXPECT_NE(fp16.output.find("--precision = \"fp16\" needs a CUDA build"), std::string::npos)
      << fp16.output;
}

TEST_F(InferenceCommands, PredictRejectsBadInputs) {
  const std::string resnet = resnet_export();
  const std::string gpt = exported(testing::small_spec(ModelKind::kGpt), "gpt");
  const std::string images =
      dir_.write("small.idx", data::idx_bytes(torch::zeros({2, 6, 6}, torch::kByte))).string();
  const std::string labels =
      dir_.write("labels.idx", data::idx_bytes(torch::zeros({2}, torch::kByte))).string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"predict " + gpt + " --input " + images,
       "bigbatch predict needs a classifier (resnet or bert); " + gpt +
           " holds a gpt language model (use bigbatch generate)"},
      {"predict " + resnet + " --input " + images + " --top 6",
       "--top must be in [1, 5] (the model's classes), got 6"},
      {"predict " + resnet + " --input " + images,
       images + ": images are 1x6x6, the model takes 3x8x8"},
      {"predict " + resnet + " --input " + labels,
       labels + ": holds an array of rank 1, expected images (N, H, W) or (N, C, H, W)"},
      {"predict " + resnet + " --input " + path("absent.idx"), path("absent.idx")},
      {"predict " + resnet, "--input is required"},
  };
  for (const auto& [arguments, message] : cases) {
    const Result result = run(arguments);
    EXPECT_EQ(result.exit_code, 2) << arguments << "\n" << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << arguments << "\n" << result.output;
  }
  const std::string bert = exported(testing::small_spec(ModelKind::kBert), "bert");
  const std::string empty = dir_.write("empty.txt", "%\n  \n%\n").string();
  const Result result = run("predict " + bert + " --input " + empty);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find(empty + ": no text to classify"), std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace bigbatch
