// The bf16-into-float32 add against ATen's cast and add: bitwise, into a fresh buffer, in place
// and beside a separate base, for counts that leave a partial vector and span several tasks.
#include "bigbatch/nn/bf16_add_kernels.h"

#include <gtest/gtest.h>

#include <vector>

namespace bigbatch::nn::kernels {
namespace {

using torch::Tensor;

TEST(Bf16AddKernels, WidenAndAddBitwiseAsATensorCastAndAdd) {
  for (const int64_t count : {int64_t(1), int64_t(17), int64_t(100003)}) {
    torch::manual_seed(count);
    const Tensor src = torch::randn({count}).to(torch::kBFloat16);
    const Tensor base = torch::randn({count}) * 1e3;
    const at::BFloat16* values = src.data_ptr<at::BFloat16>();

    Tensor widened = torch::full({count}, 7.0);
    add_bf16_to_float(values, nullptr, widened.data_ptr<float>(), count);
    EXPECT_TRUE(torch::equal(widened, src.to(torch::kFloat))) << count;

    Tensor beside = torch::full({count}, 7.0);
    add_bf16_to_float(values, base.data_ptr<float>(), beside.data_ptr<float>(), count);
    EXPECT_TRUE(torch::equal(beside, at::add(base, src))) << count;

    Tensor in_place = base.clone();
    add_bf16_to_float(values, in_place.data_ptr<float>(), in_place.data_ptr<float>(), count);
    EXPECT_TRUE(torch::equal(in_place, base + src.to(torch::kFloat))) << count;
  }
}

TEST(Bf16AddKernels, SumsPartsInTheirOrderBitwiseAsCastsAndAdds) {
  for (const int64_t count : {int64_t(1), int64_t(4097), int64_t(100003)}) {
    torch::manual_seed(count);
    // Magnitudes far apart, so that the order of the float32 adds shows in the result.
    const std::vector<Tensor> parts = {(torch::randn({count}) * 1e4).to(torch::kBFloat16),
                                       torch::randn({count}).to(torch::kBFloat16),
                                       (torch::randn({count}) * 1e-3).to(torch::kBFloat16)};
    for (size_t used = 1; used <= parts.size(); ++used) {
      std::vector<const c10::BFloat16*> pointers;
      Tensor expected = parts[0].to(torch::kFloat);
      pointers.push_back(parts[0].data_ptr<at::BFloat16>());
      for (size_t p = 1; p < used; ++p) {
        expected = expected + parts[p].to(torch::kFloat);
        pointers.push_back(parts[p].data_ptr<at::BFloat16>());
      }
      Tensor sum = torch::full({count}, 7.0);
      sum_bf16_to_float(pointers, sum.data_ptr<float>(), count);
      EXPECT_TRUE(torch::equal(sum, expected)) << count << " values, " << used << " parts";
    }
  }
}

}  // namespace
}  // namespace bigbatch::nn::kernels
