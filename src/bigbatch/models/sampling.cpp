#include "bigbatch/models/sampling.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/mode_guard.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch::models {
namespace {

/// logits (V) -> logits (V) with everything but the top_k largest set to -inf.
torch::Tensor keep_top_k(const torch::Tensor& logits, int64_t top_k) {
  if (top_k <= 0 || top_k >= logits.size(0))
    return logits;
  const auto top = torch::topk(logits, top_k);  // values (k), indices (k)
  return torch::full_like(logits, -std::numeric_limits<double>::infinity())
      .scatter(/*dim=*/0, std::get<1>(top), std::get<0>(top));
}

/// Throws InputError unless temperature > 0 and max_new_bytes >= 0.
void check_sample_options(const SampleOptions& options) {
  BB_CHECK_INPUT(options.temperature() > 0.0, "SampleOptions.temperature must be > 0, got ",
                 options.temperature());
  BB_CHECK_INPUT(options.max_new_bytes() >= 0, "SampleOptions.max_new_bytes must be >= 0, got ",
                 options.max_new_bytes());
}

}  // namespace

std::vector<int64_t> generate_ids(const CausalLm& model, std::vector<int64_t> tokens,
                                  int64_t context, const SampleOptions& options,
                                  std::optional<int64_t> stop, torch::Device device) {
  check_sample_options(options);
  BB_CHECK_INPUT(!tokens.empty(), "generate_ids needs at least one prompt token");
  BB_CHECK_INPUT(context >= 1, "generate_ids needs a context of at least 1, got ", context);
  torch::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed());
  const auto window_size = static_cast<size_t>(context);
  // The weights do not change while generating: the compute-dtype copies are made once, not once
  // per token (nn/weight_copies.h).
  const nn::WeightCopyScope weight_copies;
  KvCache cache;
  std::vector<int64_t> generated;
  for (int64_t step = 0; step < options.max_new_bytes(); ++step) {
    const bool cached = model.forward_cached && tokens.size() <= window_size;
    if (!cached && cache.length() > 0)
      cache.clear();  // the window slides from here on: positions shift, keys and values with them
    // Cached: the ids the cache lacks (the prompt, then the id drawn last); else the window.
    const size_t start = cached ? static_cast<size_t>(cache.length())
                                : (tokens.size() > window_size ? tokens.size() - window_size : 0);
    const std::vector<int64_t> fed(tokens.begin() + static_cast<std::ptrdiff_t>(start),
                                   tokens.end());
    const torch::Tensor inputs =
        torch::tensor(fed, torch::kLong).unsqueeze(0).to(device);  // (1, T)
    const torch::Tensor all_logits =
        cached ? model.forward_cached(inputs, cache) : model.forward(inputs);  // (1, T, vocab)
    torch::Tensor logits = all_logits[0][-1].to(torch::kCPU, torch::kFloat);   // (vocab)
    if (options.drawable_ids() > 0 && options.drawable_ids() < logits.size(0))
      logits = logits.slice(0, 0, options.drawable_ids());  // (drawable_ids)
    logits = keep_top_k(logits / options.temperature(), options.top_k());
    const torch::Tensor probs = torch::softmax(logits, /*dim=*/-1);  // (vocab)
    const int64_t next =
        torch::multinomial(probs, /*num_samples=*/1, /*replacement=*/false, generator)
            .item<int64_t>();
    tokens.push_back(next);
    generated.push_back(next);
    if (stop && next == *stop)
      break;
  }
  return generated;
}

std::vector<int64_t> generate_ids(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                  std::vector<int64_t> tokens, int64_t context,
                                  const SampleOptions& options, std::optional<int64_t> stop,
                                  torch::Device device) {
  return generate_ids(CausalLm{forward, nullptr}, std::move(tokens), context, options, stop,
                      device);
}

std::string generate_text(Gpt& model, const std::string& prompt, const SampleOptions& options) {
  check_sample_options(options);
  BB_CHECK_INPUT(model->options().vocab() <= 256,
                 "generate_text needs a byte-level model (GptOptions.vocab <= 256), got vocab ",
                 model->options().vocab());
  torch::NoGradGuard no_grad;
  nn::ModeGuard eval_mode(*model, /*train=*/false);
  std::vector<int64_t> tokens;
  for (const char c : prompt)
    tokens.push_back(static_cast<unsigned char>(c));
  if (tokens.empty())
    tokens.push_back('\n');
  std::string text = prompt;
  for (const int64_t byte : generate_ids(
           [&model](const torch::Tensor& ids) { return model->forward(ids); }, tokens,
           model->options().context(), options, std::nullopt, model->tok_embed->weight.device()))
    text.push_back(static_cast<char>(static_cast<unsigned char>(byte)));
  return text;
}

}  // namespace bigbatch::models
