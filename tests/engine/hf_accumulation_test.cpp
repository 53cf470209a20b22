// The exact window rule on pretrained architectures: the tiny Hugging Face GPT-2, Llama, Qwen3,
// Gemma 3 and Gemma 2 (tests/hf), in float64, with right padding of different lengths, give the
// full-batch gradient for every split of the window; so do the encoder classifiers (BERT,
// RoBERTa, DistilBERT, ELECTRA, ModernBERT) on padded texts, their padding skipped as training
// skips it.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "accumulation_helpers.h"
#include "bigbatch/models/hf_bert.h"
#include "bigbatch/models/hf_gpt2.h"
#include "bigbatch/models/hf_llama.h"
#include "bigbatch/models/hf_modernbert.h"
#include "bigbatch/nn/lora.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

/// Six sequences of 12 token ids right-padded with id 0 after 12, 11, 9, 7, 4 and 2 real tokens;
/// targets are the next ids, -100 where the next position is padding.
data::Batch padded_batch(int64_t vocab) {
  torch::manual_seed(9);
  const torch::Tensor tokens = torch::randint(1, vocab, {6, 13}, torch::kLong);
  data::Batch batch{tokens.slice(1, 0, 12).clone(), tokens.slice(1, 1, 13).clone()};
  const std::vector<int64_t> real = {12, 11, 9, 7, 4, 2};
  for (int64_t row = 0; row < 6; ++row) {
    batch.inputs[row].slice(0, real[row], 12).fill_(0);
    batch.targets[row].slice(0, real[row], 12).fill_(-100);
  }
  return batch;
}

/// The window gradient of `parameters` over `batch` in one micro-batch equals that of every split
/// within 1e-10, and the gradient of `direct_loss()` (the mean loss computed directly) within
/// 1e-12.
void expect_splits_exact(const std::vector<torch::Tensor>& parameters, engine::Objective& objective,
                         const data::Batch& batch,
                         const std::function<torch::Tensor()>& direct_loss) {
  const torch::Tensor full = testing::window_gradient(parameters, objective, {batch});
  for (const auto& sizes : std::vector<std::vector<int64_t>>{{1, 5}, {2, 2, 2}, {5, 1}, {4, 2}}) {
    const torch::Tensor parts =
        testing::window_gradient(parameters, objective, testing::split(batch, sizes));
    EXPECT_LE(testing::relative_difference(parts, full), 1e-10) << sizes.size() << " parts";
  }
  for (const torch::Tensor& p : parameters)
    p.grad().zero_();
  direct_loss().backward();
  std::vector<torch::Tensor> reference;
  for (const torch::Tensor& p : parameters)
    reference.push_back(p.grad().flatten());
  EXPECT_LE(testing::relative_difference(full, torch::cat(reference)), 1e-12);
  EXPECT_GT(full.abs().max().item<double>(), 0.0);
}

/// The window gradient of `model`'s trainable parameters over the batch in one micro-batch equals
/// that of every split, and the mean cross-entropy over the real tokens computed directly.
template <typename Model>
void expect_exact_windows(Model model) {
  const int64_t vocab = model->config().vocab_size();
  model->to(torch::kFloat64);
  model->eval();  // no dropout: the same function in every split
  engine::CrossEntropyObjective objective(engine::forward_of(model), engine::LossUnit::kToken);
  const data::Batch batch = padded_batch(vocab);
  std::vector<torch::Tensor> parameters;
  for (const torch::Tensor& p : model->parameters()) {
    if (p.requires_grad())
      parameters.push_back(p);
  }
  expect_splits_exact(parameters, objective, batch, [&] {
    return torch::nn::functional::cross_entropy(
        model->forward(batch.inputs).reshape({-1, vocab}), batch.targets.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  });
}

/// The window gradient of the classifier `model` (float64, eval) over six texts of 12 ids, the
/// first a class token, right-padded with `pad` after 12, 11, 9, 7, 4 and 2 tokens, one class
/// each, in one micro-batch equals that of every split and the mean cross-entropy computed
/// directly. The mask is `inputs != pad`, as the training job gives it. `Model` is models::HfBert
/// or models::HfModernBert.
template <typename Model>
void expect_exact_classifier_windows(Model model, int64_t pad) {
  model->to(torch::kFloat64);
  model->eval();
  torch::manual_seed(10);
  const torch::Tensor ids =
      torch::randint(0, model->config().vocab_size() - 1, {6, 12}, torch::kLong);
  data::Batch batch{ids + ids.ge(pad).to(torch::kLong),  // any id but the pad id
                    torch::randint(0, model->config().num_labels(), {6}, torch::kLong)};
  const std::vector<int64_t> real = {12, 11, 9, 7, 4, 2};
  for (int64_t row = 0; row < 6; ++row)
    batch.inputs[row].slice(0, real[row], 12).fill_(pad);
  const auto forward = [model, pad](const torch::Tensor& inputs) {
    return model.ptr()->forward(inputs, inputs.ne(pad));  // (B, classes)
  };
  engine::CrossEntropyObjective objective(forward, engine::LossUnit::kSample);
  expect_splits_exact(model->parameters(), objective, batch, [&] {
    return torch::nn::functional::cross_entropy(forward(batch.inputs), batch.targets);
  });
}

const std::string kHf = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/";

TEST(HfAccumulation, EncoderClassifierWindowsWithPaddingAreExactForEverySplit) {
  for (const char* name : {"tiny-bert", "tiny-roberta", "tiny-distilbert", "tiny-electra"}) {
    SCOPED_TRACE(name);
    const models::HfBert model = models::load_hf_bert(kHf + name).model;
    expect_exact_classifier_windows(
        model, model->config().is_roberta() ? model->config().pad_token_id() : 0);
  }
  // ModernBERT: rotary positions, local windows shorter than the texts, mean pooling too; its
  // [PAD] is the fixture's id 425.
  for (const char* pooling : {"cls", "mean"}) {
    SCOPED_TRACE(pooling);
    models::HfModernBert model = models::load_hf_modernbert(kHf + "tiny-modernbert").model;
    models::HfModernBertConfig config = model->config();
    config.classifier_pooling(std::string(pooling) == "cls" ? models::ModernBertPooling::kCls
                                                            : models::ModernBertPooling::kMean);
    models::HfModernBert pooled(config);
    {
      const torch::NoGradGuard no_grad;
      const auto from = model->named_parameters();
      for (auto& item : pooled->named_parameters())
        item.value().copy_(from[item.key()]);
    }
    expect_exact_classifier_windows(pooled, 425);
  }
}

TEST(HfAccumulation, Gpt2WindowsWithPaddingAreExactForEverySplit) {
  expect_exact_windows(models::load_hf_gpt2(kHf + "tiny-gpt2"));
}

TEST(HfAccumulation, LlamaWindowsWithPaddingAreExactForEverySplit) {
  expect_exact_windows(models::load_hf_llama(kHf + "tiny-llama"));
}

TEST(HfAccumulation, Qwen3AndGemmaWindowsPastTheirSlidingWindowsAreExactForEverySplit) {
  expect_exact_windows(models::load_hf_llama(kHf + "tiny-qwen3"));   // 12 tokens, window 8
  expect_exact_windows(models::load_hf_llama(kHf + "tiny-gemma3"));  // and sandwich norms
  expect_exact_windows(models::load_hf_llama(kHf + "tiny-gemma2"));  // and capped scores
}

TEST(HfAccumulation, LlamaWithLoraWindowsAreExactAndOnlyTheAdaptersGetGradients) {
  models::HfLlama model = models::load_hf_llama(kHf + "tiny-llama");
  model->to(torch::kFloat64);
  nn::apply_lora(*model, nn::LoraOptions().rank(4).alpha(8).targets({"q_proj", "v_proj"}));
  {
    torch::NoGradGuard no_grad;  // B away from zero, so the adapters change the function
    for (auto& item : model->named_parameters()) {
      if (item.key().find("lora_B") != std::string::npos)
        item.value().normal_(0.0, 0.1);
    }
  }
  expect_exact_windows(model);
  int64_t adapters = 0;
  for (const auto& item : model->named_parameters()) {
    const bool adapter = item.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(item.value().requires_grad(), adapter) << item.key();
    EXPECT_EQ(item.value().grad().defined(), adapter) << item.key();
    adapters += adapter;
  }
  EXPECT_EQ(adapters, 2 * 2 * 2);  // 2 layers x (q, v) x (A, B)
}

}  // namespace
}  // namespace bigbatch
