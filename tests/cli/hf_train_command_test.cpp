// `bigbatch train` with model.kind = "hf" on the tiny checkpoints of tests/hf: classification of
// class folders, LoRA on frozen bf16 weights resumed bitwise, instruction tuning normalised by
// response tokens, and every bad model directory or setting refused with exit code 2 and
// nothing written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "bigbatch/io/safetensors.h"
#include "cli/checkpoint_tensors.h"
#include "cli/cli_support.h"
#include "cli/run_records.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kHf = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/";

/// One thread each, no final sample, small windows.
std::string hf_settings(const std::string& model) {
  return "-s model.kind=hf -s model.path=" + kHf + model +
         " -s hf.context=24 -s batch.global_batch=8 -s batch.micro_batch=4 -s train.threads=1 "
         "-s train.blas_threads=1 -s sample.bytes=0 -s train.eval_samples=64 ";
}

/// Writes `per_class` texts "<words> number <i>" into `dir`/texts/class<label>/ for each of
/// `words`; returns the texts directory.
std::string write_class_folders(testing::TempDir& dir, const std::vector<std::string>& words,
                                int per_class) {
  for (size_t label = 0; label < words.size(); ++label) {
    for (int i = 0; i < per_class; ++i) {
      dir.write("texts/class" + std::to_string(label) + "/" + std::to_string(i) + ".txt",
                words[label] + " number " + std::to_string(i));
    }
  }
  return (dir.path() / "texts").string();
}

/// The run in `run_dir` evaluated `count` times, each to a finite loss.
void expect_finite_eval_losses(const std::string& run_dir, size_t count) {
  const auto evals = records(run_dir, "eval");
  ASSERT_EQ(evals.size(), count);
  for (const auto& eval : evals)
    EXPECT_TRUE(std::isfinite(eval["loss"].get<double>())) << eval.dump();
}

TEST(HfTrainCommand, TheTinyBertClassifiesFoldersOfTextsWithAFreshHead) {
  testing::TempDir dir;
  // Four classes: the checkpoint's head has three, so a fresh one replaces it.
  const std::string texts =
      write_class_folders(dir, {"apple pie", "rain cloud", "goal kick", "train ride"}, 12);
  const std::string run_dir = (dir.path() / "run").string();
  const Result r = run("train " + hf_settings("tiny-bert") + "-s data.path=" + texts +
                       " -s data.min_per_class=5 -s train.steps=4 -s train.eval_every=2 "
                       "--run-dir " +
                       run_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("4 classes, context 24 tokens; fresh: classifier.weight, "
                                  "classifier.bias"));
  EXPECT_THAT(r.output, HasSubstr("48 texts of 4 classes in"));
  EXPECT_THAT(r.output, HasSubstr("WordPiece, 500 tokens (tokenizer.json)"));
  const auto evals = records(run_dir, "eval");
  ASSERT_EQ(evals.size(), 3u);
  EXPECT_EQ(evals.back()["samples"], 4);  // a tenth of the 48 texts, one from each class
}

TEST(HfTrainCommand, RobertaBasesTensorsTrainWithLoraAndAWholeFreshHead) {
  testing::TempDir dir;
  const std::string texts = write_class_folders(dir, {"apple pie", "rain cloud", "goal kick"}, 10);
  const std::string run_dir = (dir.path() / "run").string();
  const Result r = run("train " + hf_settings("tiny-roberta-mlm") + "-s data.path=" + texts +
                       " -s data.min_per_class=5 -s adapter.kind=lora -s adapter.rank=4 "
                       "-s train.steps=4 -s train.eval_every=2 --run-dir " +
                       run_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("roberta: 2 layers, width 32, 4 heads, vocabulary 425, 3 "
                                  "classes, context 24 tokens; fresh: classifier.dense.weight, "
                                  "classifier.dense.bias, classifier.out_proj.weight, "
                                  "classifier.out_proj.bias; unused: 7 tensors of the "
                                  "checkpoint's other heads (lm_head.bias, ...)"));
  EXPECT_THAT(r.output, HasSubstr("BPE, 425 tokens (tokenizer.json)"));
  EXPECT_THAT(r.output, HasSubstr("on 4 layers (query, value); trained in full: classifier"));
  expect_finite_eval_losses(run_dir, 3);
}

TEST(HfTrainCommand, DistilBertsMaskedLmTrainsWithLoraAndBothHeadLayers) {
  testing::TempDir dir;
  const std::string texts = write_class_folders(dir, {"sunny day", "stormy night"}, 10);
  const std::string run_dir = (dir.path() / "run").string();
  const Result r = run("train " + hf_settings("tiny-distilbert-mlm") + "-s data.path=" + texts +
                       " -s data.min_per_class=5 -s adapter.kind=lora -s train.steps=2 "
                       "-s train.eval_every=2 --run-dir " +
                       run_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("distilbert: 2 layers, width 32, 4 heads, vocabulary 500, 2 "
                                  "classes, context 24 tokens; fresh: pre_classifier.weight, "
                                  "pre_classifier.bias, classifier.weight, classifier.bias; "
                                  "unused: 5 tensors of the checkpoint's other heads "
                                  "(vocab_layer_norm.bias, ...)"));
  EXPECT_THAT(r.output,
              HasSubstr("on 4 layers (q_lin, v_lin); trained in full: pre_classifier, classifier"));
  EXPECT_THAT(r.output, HasSubstr("dropout 0.1, attention_dropout 0.1, seq_classif_dropout 0.2"));
}

TEST(HfTrainCommand, ModernBertsMaskedLmTrainsWithLoraOnItsJointProjection) {
  testing::TempDir dir;
  const std::string texts = write_class_folders(dir, {"sunny day", "stormy night"}, 10);
  const std::string run_dir = (dir.path() / "run").string();
  const Result r = run("train " + hf_settings("tiny-modernbert-mlm") + "-s data.path=" + texts +
                       " -s data.min_per_class=5 -s adapter.kind=lora -s train.steps=2 "
                       "-s train.eval_every=2 --run-dir " +
                       run_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("modernbert: 3 layers (2 local over a window of 4 tokens), "
                                  "width 32, 4 heads, vocabulary 427, 2 classes, cls pooling, "
                                  "context 24 tokens; fresh: classifier.weight, classifier.bias; "
                                  "unused: 1 tensor of the checkpoint's other heads "
                                  "(decoder.bias)"));
  EXPECT_THAT(r.output, HasSubstr("BPE, 427 tokens (tokenizer.json)"));
  EXPECT_THAT(r.output, HasSubstr("on 3 layers (Wqkv); trained in full: classifier"));
  expect_finite_eval_losses(run_dir, 2);
}

TEST(HfTrainCommand, LoraOnFrozenBf16WeightsWithCheckpointingResumesBitwise) {
  testing::TempDir dir;
  const std::string corpus = dir.write("corpus.txt", small_corpus()).string();
  const std::string whole = (dir.path() / "whole").string();
  const std::string job = "train " + hf_settings("tiny-gpt2") + "-s data.path=" + corpus +
                          " -s adapter.kind=lora -s adapter.rank=4 -s adapter.base_dtype=bfloat16 "
                          "-s hf.checkpointing=blocks -s train.steps=6 -s train.eval_every=3 "
                          "-s checkpoint.every=2 -s checkpoint.keep=5 ";
  const Result first = run(job + "--run-dir " + whole);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_THAT(first.output, HasSubstr("lora: rank 4, alpha 16, dropout 0 on 2 layers (c_attn)"));
  EXPECT_THAT(first.output, HasSubstr("frozen weights   bfloat16"));
  // The same run resumed from its step-2 checkpoint ends on the same weights, bit for bit.
  const std::string again = (dir.path() / "again").string();
  fs::copy(whole, again, fs::copy_options::recursive);
  fs::remove(again + "/checkpoints/step-00000004.ckpt");
  fs::remove(again + "/checkpoints/step-00000006.ckpt");
  const Result resumed = run("train --resume " + again);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("step-00000002.ckpt"));
  const auto a = model_tensors(whole + "/checkpoints/step-00000006.ckpt");
  const auto b = model_tensors(again + "/checkpoints/step-00000006.ckpt");
  ASSERT_EQ(a.size(), b.size());
  int64_t bf16 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "model tensor " << i;
    bf16 += a[i].scalar_type() == torch::kBFloat16 ? 1 : 0;
  }
  EXPECT_EQ(bf16, 16);  // the weights and biases of the 4 linear layers of both blocks
}

TEST(HfTrainCommand, InstructionTuningCountsResponseTokensOnly) {
  testing::TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 40; ++i) {
    jsonl += "{\"prompt\": \"Say " + std::to_string(i) + " twice, please.\", \"response\": \"" +
             std::to_string(i) + " " + std::to_string(i) + (i % 3 == 0 ? " and once more" : "") +
             "\"}\n";
  }
  const std::string data = dir.write("tasks.jsonl", jsonl).string();
  const std::string run_dir = (dir.path() / "run").string();
  const Result r =
      run("train " + hf_settings("tiny-llama") + "-s data.path=" + data +
          " -s adapter.kind=lora -s train.steps=2 -s train.eval_every=2 --run-dir " + run_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The validation split's response tokens, as the plan reports them, are what evaluation
  // counts: prompts and padding are not.
  std::smatch match;
  ASSERT_TRUE(std::regex_search(r.output, match,
                                std::regex("validation +4 samples, up to \\d+ "
                                           "tokens \\((\\d+) response tokens\\)")))
      << r.output;
  const auto evals = records(run_dir, "eval");
  ASSERT_FALSE(evals.empty());
  EXPECT_EQ(evals.back()["tokens"].get<int64_t>(), std::stoll(match[1].str()));
  EXPECT_LT(std::stoll(match[1].str()), 4 * 24);
}

TEST(HfTrainCommand, ALlamaWithoutDropoutRunsTwoMicroBatchesAtOnceToTheSameLosses) {
  testing::TempDir dir;
  const std::string corpus = dir.write("corpus.txt", small_corpus()).string();
  std::vector<double> losses[2];
  for (int passes = 1; passes <= 2; ++passes) {
    const std::string run_dir = (dir.path() / ("run" + std::to_string(passes))).string();
    const Result r = run("train " + hf_settings("tiny-llama") + "-s data.path=" + corpus +
                         " -s train.steps=3 -s train.eval_every=0 -s "
                         "train.concurrent_micro_batches=" +
                         std::to_string(passes) + " --run-dir " + run_dir);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    losses[passes - 1] = window_losses(run_dir);
  }
  ASSERT_EQ(losses[0].size(), 3u);
  EXPECT_EQ(losses[0], losses[1]);  // bitwise: one thread per pass either way
}

TEST(HfTrainCommand, ALlamaRunsItsElementwiseStepsFusedToTheCompositeLosses) {
  testing::TempDir dir;
  const std::string corpus = dir.write("corpus.txt", small_corpus()).string();
  std::vector<double> losses[2];
  const std::string kernels[2] = {"auto", "composite"};
  const std::regex rows[2] = {std::regex("\nelementwise +fused +RMSNorm, rotary"),
                              std::regex("\nelementwise +composite +one operation per step")};
  for (int i = 0; i < 2; ++i) {
    const std::string run_dir = (dir.path() / kernels[i]).string();
    const Result r =
        run("train " + hf_settings("tiny-llama") + "-s data.path=" + corpus +
            " -s train.steps=4 -s train.eval_every=0 -s model.block_kernel=" + kernels[i] +
            " --run-dir " + run_dir);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(std::regex_search(r.output, rows[i])) << r.output;
    losses[i] = window_losses(run_dir);
  }
  ASSERT_EQ(losses[0].size(), 4u);
  ASSERT_EQ(losses[1].size(), 4u);
  for (size_t step = 0; step < 4; ++step)
    EXPECT_NEAR(losses[0][step], losses[1][step], 1e-5 * std::abs(losses[1][step])) << step;
}

/// Chat records: `count` conversations of one or two user/assistant exchanges, the first with a
/// system message.
std::string chat_records(int count) {
  std::string jsonl;
  for (int i = 0; i < count; ++i) {
    const std::string n = std::to_string(i);
    nlohmann::json messages = nlohmann::json::array();
    if (i == 0)
      messages.push_back({{"role", "system"}, {"content", "Answer with digits."}});
    messages.push_back({{"role", "user"}, {"content", "Say " + n + " twice."}});
    messages.push_back({{"role", "assistant"}, {"content", n + " " + n}});
    if (i % 2 == 1) {
      messages.push_back({{"role", "user"}, {"content", "Once more?"}});
      messages.push_back({{"role", "assistant"}, {"content", n}});
    }
    jsonl += nlohmann::json{{"messages", messages}}.dump() + "\n";
  }
  return jsonl;
}

TEST(HfTrainCommand, ChatRecordsTrainOnTheAssistantTurnsOfTheChatTemplate) {
  testing::TempDir dir;
  const std::string data = dir.write("chat.jsonl", chat_records(40)).string();
  const std::string run_dir = (dir.path() / "run").string();
  const Result r =
      run("train " + hf_settings("tiny-qwen2") + "-s hf.context=64 -s data.path=" + data +
          " -s train.steps=2 -s train.eval_every=2 --run-dir " + run_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("40 chat conversations in " + data));
  EXPECT_THAT(r.output, HasSubstr("the loss counts response tokens only (the assistant turns)"));
  // Evaluation counts exactly the assistant tokens the plan reports for the validation split.
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      r.output, match,
      std::regex("validation +4 samples, up to \\d+ tokens \\((\\d+) response tokens\\)")))
      << r.output;
  const auto evals = records(run_dir, "eval");
  ASSERT_FALSE(evals.empty());
  EXPECT_EQ(evals.back()["tokens"].get<int64_t>(), std::stoll(match[1].str()));
  EXPECT_GT(std::stoll(match[1].str()), 0);
}

TEST(HfTrainCommand, ChatRecordsWithoutAChatTemplateExitWith2) {
  testing::TempDir dir;
  const std::string data = dir.write("chat.jsonl", chat_records(4)).string();
  const std::string run_dir = (dir.path() / "run").string();
  const Result r = run("train " + hf_settings("tiny-gpt2") + "-s data.path=" + data +
                       " -s train.steps=1 --run-dir " + run_dir);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("holds chat \"messages\" records, but the tokenizer of"));
  EXPECT_THAT(r.output, HasSubstr("has no chat template"));
  EXPECT_FALSE(fs::exists(run_dir));
}

/// A copy of the tiny model `name` in a temporary directory, edited by `edit`.
std::string edited_model(testing::TempDir& dir, const std::string& name,
                         const std::function<void(const fs::path&)>& edit) {
  const fs::path copy = dir.path() / name;
  fs::copy(kHf + name, copy, fs::copy_options::recursive);
  edit(copy);
  return copy.string();
}

/// Rewrites the JSON file at `path` with `edit` applied.
void edit_json(const fs::path& path, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json json = nlohmann::json::parse(testing::read_file(path.string()));
  edit(json);
  std::ofstream(path) << json.dump(1);
}

TEST(HfTrainCommand, AnXlmRobertaWithItsUnigramTokenizerClassifies) {
  testing::TempDir dir;
  // tiny-roberta's weights as an XLM-RoBERTa with XLM-RoBERTa's tokenizer (402 ids of its 425).
  const std::string model = edited_model(dir, "tiny-roberta", [](const fs::path& d) {
    edit_json(d / "config.json", [](nlohmann::json& c) { c["model_type"] = "xlm-roberta"; });
    for (const char* file : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
      fs::copy_file(kHf + "tokenizers/xlmr-unigram/" + file, d / file,
                    fs::copy_options::overwrite_existing);
  });
  const std::string texts = write_class_folders(dir, {"Größe café", "Привет мир"}, 10);
  const Result r = run("train " + hf_settings("tiny-roberta") + "-s model.path=" + model +
                       " -s data.path=" + texts +
                       " -s data.min_per_class=5 -s train.steps=2 -s train.eval_every=2 "
                       "--run-dir " +
                       (dir.path() / "run").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("xlm-roberta: 2 layers, width 32, 4 heads, vocabulary 425, 2 "
                                  "classes, context 24 tokens; fresh: classifier.out_proj.weight"));
  EXPECT_THAT(r.output, HasSubstr("Unigram, 402 tokens (tokenizer.json)"));
}

/// Writes two classes of 12 texts of 1 to 12 words (most rows of a micro-batch are padded) and a
/// copy of tiny-bert without dropout into `dir`; returns the train command for them, up to its
/// further settings: "train <model and data settings> ".
std::string tiny_bert_job_without_dropout(testing::TempDir& dir) {
  for (int label = 0; label < 2; ++label) {
    for (int i = 0; i < 12; ++i) {
      std::string text = label == 0 ? "sun" : "moon";
      for (int word = 0; word < i; ++word)
        text += " word" + std::to_string(word);
      dir.write("texts/class" + std::to_string(label) + "/" + std::to_string(i) + ".txt", text);
    }
  }
  const std::string model = edited_model(dir, "tiny-bert", [](const fs::path& d) {
    edit_json(d / "config.json", [](nlohmann::json& c) {
      c["hidden_dropout_prob"] = 0.0;
      c["attention_probs_dropout_prob"] = 0.0;
    });
  });
  return "train " + hf_settings("tiny-bert") + "-s model.path=" + model +
         " -s data.path=" + (dir.path() / "texts").string() +
         " -s data.min_per_class=5 -s train.eval_every=0 ";
}

TEST(HfTrainCommand, TheTinyBertSkipsItsPaddingToTheLossesOfComputingIt) {
  testing::TempDir dir;
  const std::string job = tiny_bert_job_without_dropout(dir);
  std::vector<double> losses[2];
  for (int skip = 0; skip <= 1; ++skip) {
    const std::string run_dir = (dir.path() / ("run" + std::to_string(skip))).string();
    const Result r =
        run(job + "-s train.steps=4 -s hf.skip_padding=" + (skip == 1 ? "true" : "false") +
            " --run-dir " + run_dir);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr(skip == 1 ? "hf.skip_padding: the encoder computes only the real"
                                    : "hf.skip_padding = false: every padded position"));
    losses[skip] = window_losses(run_dir);
  }
  ASSERT_EQ(losses[0].size(), 4u);
  ASSERT_EQ(losses[1].size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5 * std::abs(losses[0][i])) << "window " << i;
}

TEST(HfTrainCommand, TheTinyBertRunsItsLayersFusedToTheCompositeLosses) {
  testing::TempDir dir;
  const std::string job = tiny_bert_job_without_dropout(dir);
  std::vector<double> losses[2];
  const std::string kernels[2] = {"auto", "composite"};
  const std::regex rows[2] = {std::regex("\nblocks +fused +one autograd node per block"),
                              std::regex("\nblocks +composite +one operation per step")};
  for (int i = 0; i < 2; ++i) {
    const std::string run_dir = (dir.path() / kernels[i]).string();
    const Result r =
        run(job + "-s train.steps=4 -s model.block_kernel=" + kernels[i] + " --run-dir " + run_dir);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(std::regex_search(r.output, rows[i])) << r.output;
    losses[i] = window_losses(run_dir);
  }
  ASSERT_EQ(losses[0].size(), 4u);
  ASSERT_EQ(losses[1].size(), 4u);
  for (size_t step = 0; step < 4; ++step)
    EXPECT_NEAR(losses[0][step], losses[1][step], 1e-5 * std::abs(losses[1][step])) << step;
  // Adapters on the layers' products keep them composite, and the plan says so.
  const Result adapted = run(job + "-s train.steps=1 -s adapter.kind=lora --run-dir " +
                             (dir.path() / "lora").string());
  ASSERT_EQ(adapted.exit_code, 0) << adapted.output;
  EXPECT_TRUE(std::regex_search(
      adapted.output, std::regex("\nblocks +composite +adapters on the blocks' products")))
      << adapted.output;
}

TEST(HfTrainCommand, GemmaTwoTrainsOnTheCompositeAttentionAndThePlanSaysWhy) {
  testing::TempDir dir;
  const std::string corpus = dir.write("corpus.txt", small_corpus()).string();
  const Result r =
      run("train " + hf_settings("tiny-gemma2") + "-s data.path=" + corpus +
          " -s model.attention=fused -s train.steps=2 --run-dir " + (dir.path() / "run").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Its scores are soft-capped, which LibTorch's fused kernel cannot do.
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\nattention +composite +product, soft-cap")))
      << r.output;
  EXPECT_THAT(r.output, HasSubstr("a sliding window of 8 tokens on 1 of the 2 layers"));
}

TEST(HfTrainCommand, BadModelDirectoriesAndSettingsExitWith2AndWriteNothing) {
  testing::TempDir dir;
  const auto expect_refused = [&](const std::string& settings, const std::string& message) {
    const std::string run_dir = (dir.path() / "run").string();
    const Result r = run("train -s train.steps=1 " + settings + " --run-dir " + run_dir);
    EXPECT_EQ(r.exit_code, 2) << settings << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << settings;
    EXPECT_FALSE(fs::exists(run_dir)) << settings;
  };
  const auto model = [](const std::string& path) {
    return "-s model.kind=hf -s model.path=" + path + " ";
  };
  expect_refused(model(edited_model(dir, "tiny-llama",
                                    [](const fs::path& d) {
                                      edit_json(d / "config.json",
                                                [](nlohmann::json& c) { c["foo_scale"] = 2; });
                                    })),
                 "unsupported field(s) for the Llama family (llama): \"foo_scale\" = 2");
  expect_refused(model(edited_model(dir, "tiny-qwen2",
                                    [](const fs::path& d) {
                                      // Shard 1 holds every tensor but model.norm.weight,
                                      // which the index puts in a shard that is not there.
                                      const io::Safetensors all =
                                          io::read_safetensors((d / "model.safetensors").string());
                                      std::vector<io::NamedTensor> first;
                                      nlohmann::json map;
                                      for (const auto& [name, tensor] : all.tensors) {
                                        const bool second = name == "model.norm.weight";
                                        if (!second)
                                          first.emplace_back(name, tensor);
                                        map[name] = second ? "model-00002-of-00002.safetensors"
                                                           : "model-00001-of-00002.safetensors";
                                      }
                                      fs::remove(d / "model.safetensors");
                                      io::write_safetensors(
                                          (d / "model-00001-of-00002.safetensors").string(), first);
                                      std::ofstream(d / "model.safetensors.index.json")
                                          << nlohmann::json{{"weight_map", map}}.dump();
                                    })),
                 "model-00002-of-00002.safetensors");
  expect_refused(model(edited_model(dir, "tiny-gpt2",
                                    [](const fs::path& d) {
                                      edit_json(d / "config.json",
                                                [](nlohmann::json& c) { c["n_inner"] = 48; });
                                    })),
                 "has shape [32, 128] but the model's \"transformer.h.0.mlp.c_fc.weight\" has "
                 "shape [32, 48]");
  expect_refused(model(edited_model(dir, "tiny-bert",
                                    [](const fs::path& d) {
                                      edit_json(d / "tokenizer.json", [](nlohmann::json& t) {
                                        t["model"]["type"] = "WordLevel";
                                      });
                                    })),
                 "model type \"WordLevel\" is not supported");
  expect_refused(model(kHf + "tiny-gpt2") + "-s train.concurrent_micro_batches=2",
                 "train.concurrent_micro_batches = 2 needs a model without dropout: " + kHf +
                     "tiny-gpt2/config.json has embd_pdrop 0.1, attn_pdrop 0.1, resid_pdrop 0.1");
  expect_refused("-s model.kind=hf", "model.kind = \"hf\" needs model.path");
  expect_refused(model(kHf + "tiny-gpt2") + "-s model.init_from=/elsewhere/model.safetensors",
                 "model.init_from is for the built-in models; model.kind = \"hf\" starts from "
                 "the weights in model.path");
  expect_refused(model((dir.path() / "nowhere").string()), "nowhere");
  expect_refused(model(kHf + "tiny-gpt2") + "-s adapter.base_dtype=bfloat16",
                 "adapter.base_dtype = \"bfloat16\" stores frozen weights, which only "
                 "adapter.kind = \"lora\" has");
  expect_refused(model(kHf + "tiny-gpt2") + "-s adapter.kind=lora -s adapter.targets=q_prj",
                 "adapter.targets: \"q_prj\" names no module of the model");
  expect_refused(model(kHf + "tiny-gpt2") + "-s hf.context=64",
                 "hf.context = 64 exceeds the model's 32 positions");
}

}  // namespace
}  // namespace bigbatch
