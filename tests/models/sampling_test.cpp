#include "bigbatch/models/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch::models {
namespace {

/// A small model whose weights are drawn wide (std 0.5), so its next-byte distributions are
/// peaked and far from uniform, unlike the GPT-2 initialisation.
Gpt peaked_model(uint64_t seed) {
  torch::manual_seed(seed);
  Gpt model(GptOptions().context(16).layers(2).heads(2).embed(32));
  torch::NoGradGuard no_grad;
  for (auto& parameter : model->parameters())
    parameter.normal_(0.0, 0.5);
  return model;
}

/// Byte ids of the last `context` bytes of `text` (or of "\n" when it is empty): (1, T).
torch::Tensor window_of(const std::string& text, int64_t context) {
  std::vector<int64_t> ids;
  for (const char c : text)
    ids.push_back(static_cast<unsigned char>(c));
  if (ids.empty())
    ids.push_back('\n');
  const auto start = ids.size() > static_cast<size_t>(context) ? ids.size() - context : 0;
  return torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end()), torch::kLong)
      .unsqueeze(0);
}

/// Logits for the byte after `text`: (vocab).
torch::Tensor next_logits(Gpt& model, const std::string& text) {
  torch::NoGradGuard no_grad;
  return model->forward(window_of(text, model->options().context()))[0][-1];
}

TEST(GenerateText, ReturnsPromptPlusExactlyMaxNewBytes) {
  Gpt model = peaked_model(0);
  const std::string prompt = "\xff\x80 raw bytes and a prompt longer than the context";
  const std::string text = generate_text(model, prompt, SampleOptions().max_new_bytes(37));
  ASSERT_EQ(text.size(), prompt.size() + 37);
  EXPECT_EQ(text.substr(0, prompt.size()), prompt);
  EXPECT_EQ(generate_text(model, "", SampleOptions().max_new_bytes(5)).size(), 5u);
  EXPECT_EQ(generate_text(model, "abc", SampleOptions().max_new_bytes(0)), "abc");
}

TEST(GenerateText, IsDeterministicGivenTheSeed) {
  Gpt model = peaked_model(1);
  const auto options = SampleOptions().max_new_bytes(64).temperature(1.0).top_k(0);
  const std::string first = generate_text(model, "hello", SampleOptions(options).seed(7));
  const std::string again = generate_text(model, "hello", SampleOptions(options).seed(7));
  const std::string other = generate_text(model, "hello", SampleOptions(options).seed(8));
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

TEST(GenerateText, DefaultInitialisedModelAlsoDependsOnSeed) {
  torch::manual_seed(2);
  Gpt model(GptOptions().context(16).layers(1).heads(2).embed(16));
  const auto options = SampleOptions().max_new_bytes(32);
  EXPECT_EQ(generate_text(model, "x", SampleOptions(options).seed(3)),
            generate_text(model, "x", SampleOptions(options).seed(3)));
  EXPECT_NE(generate_text(model, "x", SampleOptions(options).seed(3)),
            generate_text(model, "x", SampleOptions(options).seed(4)));
}

TEST(GenerateText, LeavesTrainModeAndGlobalRngAlone) {
  Gpt model = peaked_model(3);
  model->train();
  torch::manual_seed(123);
  const torch::Tensor expected = torch::randn({8});
  torch::manual_seed(123);
  generate_text(model, "abc", SampleOptions().max_new_bytes(20));
  EXPECT_TRUE(torch::equal(torch::randn({8}), expected));
  EXPECT_TRUE(model->is_training());
  for (const auto& child : model->modules())
    EXPECT_TRUE(child->is_training());
  EXPECT_TRUE(torch::GradMode::is_enabled());

  model->eval();
  generate_text(model, "abc", SampleOptions().max_new_bytes(3));
  EXPECT_FALSE(model->is_training());
}

TEST(GenerateText, TopKOneIsGreedyArgmaxDecoding) {
  Gpt model = peaked_model(4);
  std::string expected = "greedy";
  for (int i = 0; i < 40; ++i) {
    expected.push_back(static_cast<char>(next_logits(model, expected).argmax().item<int64_t>()));
  }
  const auto options = SampleOptions().max_new_bytes(40).top_k(1).temperature(1.3);
  EXPECT_EQ(generate_text(model, "greedy", SampleOptions(options).seed(1)), expected);
  EXPECT_EQ(generate_text(model, "greedy", SampleOptions(options).seed(99)), expected);
}

TEST(GenerateText, DrawsOnlyFromTheTopK) {
  Gpt model = peaked_model(5);
  const std::string prompt = "k";
  const std::string text =
      generate_text(model, prompt, SampleOptions().max_new_bytes(30).top_k(3).temperature(5.0));
  for (size_t i = prompt.size(); i < text.size(); ++i) {
    const auto top = std::get<1>(torch::topk(next_logits(model, text.substr(0, i)), 3));
    const int64_t drawn = static_cast<unsigned char>(text[i]);
    EXPECT_TRUE((top == drawn).any().item<bool>()) << "byte " << i << " = " << drawn;
  }
}

TEST(GenerateText, RejectsNonPositiveTemperature) {
  Gpt model = peaked_model(6);
  for (const double temperature : {0.0, -0.5}) {
    try {
      generate_text(model, "a", SampleOptions().temperature(temperature));
      ADD_FAILURE() << "expected bigbatch::InputError";
    } catch (const InputError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("temperature"), std::string::npos) << message;
      EXPECT_NE(message.find(temperature == 0.0 ? "got 0" : "-0.5"), std::string::npos) << message;
    }
  }
}

TEST(GenerateIds, FeedsTheLastContextIdsAndStopsAfterTheStopId) {
  std::vector<int64_t> seen_lengths;
  // Logits (1, T, 5) favouring id (T + 1) % 5: the next id depends on the window fed.
  const auto forward = [&seen_lengths](const torch::Tensor& ids) {
    const int64_t time = ids.size(1);
    seen_lengths.push_back(time);
    torch::Tensor logits = torch::zeros({1, time, 5});
    logits[0][time - 1][(time + 1) % 5] = 10.0;
    return logits;
  };
  const SampleOptions greedy = SampleOptions().top_k(1).max_new_bytes(6);
  EXPECT_EQ(generate_ids(forward, {7}, /*context=*/3, greedy),
            (std::vector<int64_t>{2, 3, 4, 4, 4, 4}));
  EXPECT_EQ(seen_lengths, (std::vector<int64_t>{1, 2, 3, 3, 3, 3}));
  EXPECT_EQ(generate_ids(forward, {7}, 3, greedy, /*stop=*/3), (std::vector<int64_t>{2, 3}));
  EXPECT_THROW(generate_ids(forward, {}, 3, greedy), InputError);
}

TEST(GenerateIds, FeedsThePromptThenEachNewIdToACachedModelUntilTheWindowSlides) {
  std::vector<int64_t> cached_lengths, whole_lengths;
  // Logits (1, T, 5) favouring id (position + 1) % 5, position counted from the window's start.
  const auto logits = [](int64_t position, int64_t time) {
    torch::Tensor out = torch::zeros({1, time, 5});
    out[0][time - 1][(position + 1) % 5] = 10.0;
    return out;
  };
  CausalLm model;
  model.forward = [&](const torch::Tensor& ids) {
    whole_lengths.push_back(ids.size(1));
    return logits(ids.size(1), ids.size(1));
  };
  model.forward_cached = [&](const torch::Tensor& ids, KvCache& cache) {
    cached_lengths.push_back(ids.size(1));
    const torch::Tensor kv = torch::zeros({1, 1, ids.size(1), 2});  // (B, KV, T, D)
    cache.extend(0, kv, kv);
    cache.advance(ids.size(1));
    return logits(cache.length(), ids.size(1));
  };
  const SampleOptions greedy = SampleOptions().top_k(1).max_new_bytes(6);
  // Windows of 2, 3, 4, then 4 ids as it slides: the ids a whole forward each time gives.
  EXPECT_EQ(generate_ids(model, {7, 7}, /*context=*/4, greedy),
            (std::vector<int64_t>{3, 4, 0, 0, 0, 0}));
  EXPECT_EQ(cached_lengths, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(whole_lengths, (std::vector<int64_t>{4, 4, 4}));
}

TEST(GenerateIds, NeverDrawsAnIdAtOrAboveDrawableIds) {
  // Logits (1, T, 8) that favour ids 6 and 7 (a padded vocabulary's rows) over everything else.
  const auto forward = [](const torch::Tensor& ids) {
    torch::Tensor logits = torch::zeros({1, ids.size(1), 8});
    logits.select(2, 6).fill_(30.0);
    logits.select(2, 7).fill_(30.0);
    logits.select(2, 2).fill_(1.0);
    return logits;
  };
  const SampleOptions options = SampleOptions().top_k(0).max_new_bytes(50).temperature(1.0);
  const std::vector<int64_t> padded = generate_ids(forward, {0}, 4, options);
  EXPECT_GE(*std::min_element(padded.begin(), padded.end()), 6);  // the padding wins unlimited
  const std::vector<int64_t> drawn =
      generate_ids(forward, {0}, 4, SampleOptions(options).drawable_ids(6));
  EXPECT_LT(*std::max_element(drawn.begin(), drawn.end()), 6);
  EXPECT_NE(std::count(drawn.begin(), drawn.end(), 2), 0);
  // Greedy as well: the best drawable id, not a padded one.
  EXPECT_EQ(
      generate_ids(forward, {0}, 4, SampleOptions().top_k(1).max_new_bytes(2).drawable_ids(6)),
      (std::vector<int64_t>{2, 2}));
}

TEST(GenerateIds, CastsEachWeightOnceForAllTheSteps) {
  const torch::Tensor weight = torch::full({5}, 0.25).requires_grad_();  // a parameter
  std::vector<torch::Tensor> copies;  // held, so that no later copy can take an earlier's place
  const auto forward = [&](const torch::Tensor& ids) {
    copies.push_back(nn::weight_in_dtype(weight, torch::kBFloat16));
    return copies.back().to(torch::kFloat).expand({1, ids.size(1), 5});  // (1, T, 5)
  };
  const torch::NoGradGuard no_grad;
  generate_ids(forward, {1}, /*context=*/4, SampleOptions().max_new_bytes(3));
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_TRUE(copies[1].is_same(copies[0]));
  EXPECT_TRUE(copies[2].is_same(copies[0]));
  EXPECT_FALSE(nn::weight_copies_kept());
}

}  // namespace
}  // namespace bigbatch::models
