// Precision names and AutocastGuard: what runs in bf16, and that the previous state comes back.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "bigbatch/core/check.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::nn {
namespace {

bool cpu_autocast_on() {
  return compat::autocast_enabled(torch::kCPU);
}

TEST(Precision, ParsesAndPrintsEveryName) {
  for (const Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16})
    EXPECT_EQ(parse_precision(to_string(p), "model.precision"), p);
  try {
    parse_precision("half", "model.precision");
    FAIL() << "no error";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("model.precision"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("\"half\""), std::string::npos);
  }
  EXPECT_EQ(compute_dtype(Precision::kBf16), torch::kBFloat16);
  EXPECT_EQ(compute_dtype(Precision::kFp16), torch::kHalf);
  EXPECT_EQ(compute_dtype(Precision::kFp32), torch::kFloat);
}

TEST(AutocastGuard, Bf16RunsLinearInBf16AndTheLossInFp32) {
  torch::manual_seed(0);
  torch::nn::Linear linear(8, 4);
  const torch::Tensor x = torch::randn({3, 8});
  torch::Tensor logits;
  torch::Tensor loss;
  {
    AutocastGuard autocast(Precision::kBf16, torch::kCPU);
    EXPECT_TRUE(cpu_autocast_on());
    logits = linear->forward(x);
    loss = torch::nn::functional::cross_entropy(logits, torch::tensor({0, 1, 2}));
  }
  EXPECT_FALSE(cpu_autocast_on());
  EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(loss.scalar_type(), torch::kFloat);
  loss.backward();
  EXPECT_EQ(linear->weight.grad().scalar_type(), torch::kFloat);
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);  // off again
}

TEST(AutocastGuard, Fp32ChangesNothing) {
  const AutocastState before = AutocastState::capture();
  {
    AutocastGuard autocast(Precision::kFp32, torch::kCPU);
    EXPECT_FALSE(cpu_autocast_on());
    EXPECT_EQ(torch::ones({2, 2}).mm(torch::ones({2, 2})).scalar_type(), torch::kFloat);
  }
  EXPECT_EQ(AutocastState::capture().cpu_dtype, before.cpu_dtype);
}

TEST(AutocastGuard, NestedGuardsAndExceptionsRestoreTheStateExactly) {
  compat::set_autocast_dtype(torch::kCPU, torch::kBFloat16);
  try {
    AutocastGuard outer(Precision::kBf16, torch::kCPU);
    {
      AutocastState off;  // everything disabled
      AutocastGuard inner(off);
      EXPECT_FALSE(cpu_autocast_on());
      {
        AutocastGuard innermost(Precision::kBf16, torch::kCPU);
        EXPECT_TRUE(cpu_autocast_on());
        throw std::runtime_error("inside");
      }
    }
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(cpu_autocast_on());
  EXPECT_EQ(compat::autocast_dtype(torch::kCPU), torch::kBFloat16);
  // Nesting is back at zero: one more guard's exit reports depth 0 (it clears the cache).
  at::autocast::increment_nesting();
  EXPECT_EQ(at::autocast::decrement_nesting(), 0);

  // An inner guard leaves the outer one in effect.
  AutocastGuard outer(Precision::kBf16, torch::kCPU);
  { AutocastGuard inner(Precision::kBf16, torch::kCPU); }
  EXPECT_TRUE(cpu_autocast_on());
  EXPECT_EQ(torch::ones({2, 2}).mm(torch::ones({2, 2})).scalar_type(), torch::kBFloat16);
}

TEST(AutocastGuard, Fp16OnCpuIsAnInputErrorAndChangesNothing) {
  try {
    AutocastGuard autocast(Precision::kFp16, torch::kCPU);
    FAIL() << "no error";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("CUDA"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(cpu_autocast_on());
  EXPECT_THROW(check_precision_supported(Precision::kFp16, torch::kCPU, "model.precision"),
               InputError);
  EXPECT_NO_THROW(check_precision_supported(Precision::kBf16, torch::kCPU, "model.precision"));
}

}  // namespace
}  // namespace bigbatch::nn
