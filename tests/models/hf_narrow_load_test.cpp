// Loading a Hugging Face model under nn::LinearStorageScope: the linear weights arrive narrow
// and hold half the bytes, the tensor memory never reaches what the float32 model holds, and the
// values are those of loading in float32 and narrowing afterwards.
#include <gtest/gtest.h>

#include <string>

#include "bigbatch/models/hf_model.h"
#include "bigbatch/nn/lora.h"
#include "memory/tracker_fixture.h"

namespace bigbatch::models {
namespace {

class HfNarrowLoad : public testing::TrackerTest {};

TEST_F(HfNarrowLoad, LinearWeightsArriveNarrowAndTheFloat32ModelIsNeverWhole) {
  const std::string directory = std::string(BIGBATCH_TEST_DATA_DIR) + "/hf/tiny-llama";
  tracker().reset_peak();
  const HfModel wide = load_hf_model(directory);
  const int64_t wide_bytes = tracker().current_bytes() - baseline_;
  int64_t linear_bytes = 0;  // of the AdaptedLinears' weights and biases, in float32
  for (const auto& item : wide.module()->named_modules()) {
    if (const auto* layer = item.value()->as<nn::AdaptedLinear>()) {
      for (const torch::Tensor* t : {&layer->weight, &layer->bias})
        linear_bytes += t->defined() ? t->numel() * 4 : 0;
    }
  }
  ASSERT_GT(linear_bytes, wide_bytes / 4);  // enough of the model to tell the two apart

  const int64_t before = tracker().current_bytes();
  tracker().reset_peak();
  HfModel narrow;
  {
    const nn::LinearStorageScope scope(torch::kBFloat16);
    narrow = load_hf_model(directory);
  }
  const int64_t narrow_peak = tracker().peak_bytes() - before;
  EXPECT_EQ(tracker().current_bytes() - before, wide_bytes - linear_bytes / 2);
  EXPECT_LT(narrow_peak, wide_bytes);

  for (torch::Tensor& p : wide.module()->parameters())
    p.requires_grad_(false);  // store_frozen_weights narrows frozen weights only
  nn::store_frozen_weights(*wide.module(), torch::kBFloat16);
  const auto expected = wide.module()->named_parameters();
  for (const auto& item : narrow.module()->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), expected[item.key()].scalar_type()) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
  }
  EXPECT_EQ(narrow.llama->layers->ptr(0)->as<HfLlamaLayer>()->mlp->up_proj->weight.scalar_type(),
            torch::kBFloat16);
}

}  // namespace
}  // namespace bigbatch::models
