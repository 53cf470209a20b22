// `bigbatch export` of a run of a pretrained model, and `generate` / `predict` on Hugging Face
// directories: the merged export continues a prompt exactly as the trained model did at the end
// of its run, the PEFT export holds only the adapters, and the classifier's export names the
// classes of its data.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bigbatch/io/safetensors.h"
#include "cli/cli_support.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kHf = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/";

std::string settings(const std::string& model) {
  return "-s model.kind=hf -s model.path=" + kHf + model +
         " -s hf.context=24 -s batch.global_batch=8 -s batch.micro_batch=4 -s train.threads=1 "
         "-s train.blas_threads=1 -s train.eval_samples=32 -s train.steps=3 ";
}

/// `per_class` texts "label label" in a folder per label under `dir`/texts; returns that path.
std::string write_class_folders(testing::TempDir& dir, const std::vector<std::string>& labels,
                                int per_class) {
  for (const std::string& label : labels) {
    for (int i = 0; i < per_class; ++i)
      dir.write("texts/" + label + "/" + std::to_string(i) + ".txt", label + " " + label);
  }
  return (dir.path() / "texts").string();
}

TEST(HfExportCommand, TheMergedExportGeneratesWhatTheTrainedModelSampled) {
  testing::TempDir dir;
  const std::string corpus = dir.write("corpus.txt", small_corpus()).string();
  const std::string run_dir = (dir.path() / "run").string();
  const Result train = run("train " + settings("tiny-gpt2") + "-s data.path=" + corpus +
                           " -s adapter.kind=lora -s adapter.base_dtype=bfloat16 "
                           "-s sample.prompt=the -s sample.bytes=12 --run-dir " +
                           run_dir);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const std::string merged = (dir.path() / "merged").string();
  const Result exported = run("export " + run_dir + " --out " + merged);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_THAT(exported.output, HasSubstr("config.json model.safetensors tokenizer.json"));
  // The final sample used the same seed, temperature and top-k as generate's defaults.
  const auto summary = nlohmann::json::parse(testing::read_file(run_dir + "/summary.json"));
  const Result generated = run("generate " + merged + " --prompt the --max-new-bytes 12");
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  EXPECT_EQ(generated.output, summary["sample"].get<std::string>() + "\n");
  // Without the KV cache every token is a forward of the whole window: the same text.
  const Result uncached =
      run("generate " + merged + " --prompt the --max-new-bytes 12 --no-kv-cache");
  ASSERT_EQ(uncached.exit_code, 0) << uncached.output;
  EXPECT_EQ(uncached.output, generated.output);

  const std::string adapter = (dir.path() / "adapter").string();
  const Result peft = run("export " + run_dir + " --out " + adapter + " --format peft");
  ASSERT_EQ(peft.exit_code, 0) << peft.output;
  EXPECT_TRUE(fs::exists(adapter + "/adapter_model.safetensors"));
  // The count it prints is what the adapter file holds.
  int64_t adapter_parameters = 0;
  for (const auto& [name, tensor] :
       io::read_safetensors(adapter + "/adapter_model.safetensors").tensors)
    adapter_parameters += tensor.numel();
  EXPECT_THAT(peft.output,
              HasSubstr("(" + std::to_string(adapter_parameters) + " adapter parameters of its "));
  const auto config = nlohmann::json::parse(testing::read_file(adapter + "/adapter_config.json"));
  EXPECT_EQ(config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(config["fan_in_fan_out"], true);
  // The adapter directory generates on its base (base_model_name_or_path) as the merged export.
  const Result from_adapter = run("generate " + adapter + " --prompt the --max-new-bytes 12");
  ASSERT_EQ(from_adapter.exit_code, 0) << from_adapter.output;
  EXPECT_EQ(from_adapter.output, generated.output);

  const Result again = run("export " + run_dir + " --out " + merged);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(again.output, HasSubstr("already holds files; choose another or set --overwrite"));
  EXPECT_EQ(run("export " + run_dir + " --out " + merged + " --overwrite").exit_code, 0);
  const Result classify = run("predict " + merged + " --input " + corpus);
  EXPECT_EQ(classify.exit_code, 2);
  EXPECT_THAT(classify.output, HasSubstr("holds a gpt2 language model (use bigbatch generate)"));
}

TEST(HfExportCommand, ALoraRunStartsFromAPeftAdapter) {
  testing::TempDir dir;
  const std::string corpus = dir.write("corpus.txt", small_corpus()).string();
  const std::string start = kHf + "peft-tiny-llama";  // saved by Python's PEFT: r 4, rsLoRA
  const std::string run_dir = (dir.path() / "run").string();
  // A learning rate too small to move a float32 weight: the adapters stay as loaded.
  const Result train = run("train " + settings("tiny-llama") + "-s data.path=" + corpus +
                           " -s adapter.kind=lora -s adapter.base_dtype=bfloat16 "
                           "-s adapter.init_from=" +
                           start + " -s optim.lr=1e-12 -s train.steps=1 --run-dir " + run_dir);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_THAT(train.output, HasSubstr("lora: rank 4, alpha 16, dropout 0 on 6 layers"));
  EXPECT_THAT(train.output, HasSubstr("; from " + start));
  const std::string adapter = (dir.path() / "adapter").string();
  ASSERT_EQ(run("export " + run_dir + " --out " + adapter + " --format peft").exit_code, 0);
  const io::Safetensors exported = io::read_safetensors(adapter + "/adapter_model.safetensors");
  const io::Safetensors source = io::read_safetensors(start + "/adapter_model.safetensors");
  ASSERT_EQ(exported.tensors.size(), source.tensors.size());
  for (const auto& [name, tensor] : source.tensors) {
    const torch::Tensor* found = exported.find(name);
    ASSERT_NE(found, nullptr) << name;
    EXPECT_TRUE(torch::equal(*found, tensor)) << name;
  }

  Result refused = run("train " + settings("tiny-llama") + "-s data.path=" + corpus +
                       " -s adapter.kind=lora -s adapter.init_from=" + start +
                       " -s adapter.rank=8 --run-dir " + (dir.path() / "r2").string());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.output,
              HasSubstr("adapter.rank = 8, but adapter.init_from's adapter has r 4"));
  refused = run("train " + settings("tiny-llama") + "-s data.path=" + corpus +
                " -s adapter.init_from=" + start + " --run-dir " + (dir.path() / "r3").string());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.output, HasSubstr("which need adapter.kind = \"lora\""));
  EXPECT_FALSE(fs::exists(dir.path() / "r2"));
  EXPECT_FALSE(fs::exists(dir.path() / "r3"));
}

TEST(HfExportCommand, AClassifierRunStartsFromAPeftAdapterWithItsSavedHead) {
  testing::TempDir dir;
  const std::string texts = write_class_folders(dir, {"cats", "dogs", "owls"}, 8);
  // Saved by Python's PEFT for 3 classes; its modules_to_save also names "score", which BERT
  // has not (PEFT sets both for any classifier).
  const Result train =
      run("train " + settings("tiny-bert") + "-s data.path=" + texts +
          " -s data.min_per_class=4 -s adapter.kind=lora -s adapter.init_from=" + kHf +
          "peft-tiny-bert --run-dir " + (dir.path() / "run").string());
  ASSERT_EQ(train.exit_code, 0) << train.output;
  // target_modules are saved from a Python set: in either order.
  EXPECT_THAT(train.output, HasSubstr("lora: rank 2, alpha 4, dropout 0 on 4 layers ("));
  EXPECT_THAT(train.output,
              HasSubstr("); trained in full: classifier; from " + kHf + "peft-tiny-bert"));
}

/// The probabilities of predict's output lines, in order (the class names left out).
std::vector<std::string> probabilities(const std::string& output) {
  std::vector<std::string> values;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string field;
    for (int i = 0; std::getline(fields, field, '\t'); ++i) {
      if (i > 0 && i % 2 == 0)
        values.push_back(field);
    }
  }
  return values;
}

TEST(HfExportCommand, ALoraClassifiersAdapterPredictsAsItsMergedExport) {
  testing::TempDir dir;
  const std::string texts = write_class_folders(dir, {"cats", "dogs", "owls"}, 8);
  const std::string run_dir = (dir.path() / "run").string();
  const Result train = run("train " + settings("tiny-bert") + "-s data.path=" + texts +
                           " -s data.min_per_class=4 -s adapter.kind=lora --run-dir " + run_dir);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const std::string merged = (dir.path() / "merged").string();
  const std::string adapter = (dir.path() / "adapter").string();
  ASSERT_EQ(run("export " + run_dir + " --out " + merged).exit_code, 0);
  ASSERT_EQ(run("export " + run_dir + " --out " + adapter + " --format peft").exit_code, 0);
  const std::string inputs = dir.write("inputs.txt", "cats cats\n%\nowls\n").string();
  const Result from_merged = run("predict " + merged + " --input " + inputs + " --top 3");
  ASSERT_EQ(from_merged.exit_code, 0) << from_merged.output;
  // The base is named with --base here; the adapter's classifier brings the three classes.
  const Result from_adapter =
      run("predict " + adapter + " --base " + kHf + "tiny-bert --input " + inputs + " --top 3");
  ASSERT_EQ(from_adapter.exit_code, 0) << from_adapter.output;
  EXPECT_EQ(probabilities(from_adapter.output), probabilities(from_merged.output));
  EXPECT_EQ(probabilities(from_adapter.output).size(), 6u);
  const Result wrong = run("predict " + merged + " --base " + kHf + "tiny-bert --input " + inputs);
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_THAT(wrong.output, HasSubstr("--base is for a PEFT adapter directory"));
}

TEST(HfExportCommand, TheClassifiersExportPredictsTheClassesOfItsData) {
  testing::TempDir dir;
  const std::string texts = write_class_folders(dir, {"cats", "dogs", "owls", "bees"}, 10);
  const std::string run_dir = (dir.path() / "run").string();
  const Result train = run("train " + settings("tiny-bert") + "-s data.path=" + texts +
                           " -s data.min_per_class=5 --run-dir " + run_dir);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const std::string merged = (dir.path() / "merged").string();
  ASSERT_EQ(run("export " + run_dir + " --out " + merged).exit_code, 0);
  const auto config = nlohmann::json::parse(testing::read_file(merged + "/config.json"));
  EXPECT_EQ(config["id2label"]["0"], "bees");  // classes in sorted folder order
  EXPECT_EQ(config["id2label"]["3"], "owls");
  const std::string inputs = dir.write("inputs.txt", "cats cats\n%\nbees\n%\nowls owls\n").string();
  const Result predicted = run("predict " + merged + " --input " + inputs + " --top 4");
  ASSERT_EQ(predicted.exit_code, 0) << predicted.output;
  // Three lines: index, then all four classes with probabilities summing to 1.
  std::istringstream lines(predicted.output);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    EXPECT_THAT(line, ::testing::StartsWith(std::to_string(count) + "\t"));
    for (const std::string label : {"cats", "dogs", "owls", "bees"})
      EXPECT_THAT(line, HasSubstr("\t" + label + "\t"));
    ++count;
  }
  EXPECT_EQ(count, 3);
  const Result peft =
      run("export " + run_dir + " --out " + (dir.path() / "a").string() + " --format peft");
  EXPECT_EQ(peft.exit_code, 2);
  EXPECT_THAT(peft.output, HasSubstr("has no LoRA adapters"));
  EXPECT_THAT(peft.output, HasSubstr("export it with --format hf"));
}

}  // namespace
}  // namespace bigbatch
