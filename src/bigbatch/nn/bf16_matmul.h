// Matrix products that CPU autocast computes in bfloat16, on CPUs without bf16 instructions:
// the same bf16 results from fp32 kernels, faster there than oneDNN's emulation of bf16.
//
// Under bf16 autocast a Linear rounds its input, weight and bias to bf16 and multiplies them with
// fp32 accumulation, rounding the result to bf16 (and likewise every product of backward). A
// bf16 value is exact in fp32 and so is the product of two, so an fp32 kernel fed the rounded
// operands computes the same sums; only their order differs. On a CPU without avx512_bf16 or
// amx_bf16, oneDNN's bf16 kernels emulate the arithmetic, slower than fp32; this module lets the
// models use the fp32 kernels there. Measured in docs/BENCHMARKS.md, "What changed on 2026-12-01
// (afternoon)", 3, and docs/PRECISION.md.
#pragma once

#include <torch/torch.h>

#include <set>
#include <string>

namespace bigbatch::nn {

/// Which kernels compute the matrix products that CPU autocast puts in bfloat16.
enum class Bf16Matmul {
  kAuto,    ///< kFp32 on a CPU without avx512_bf16 and amx_bf16, kNative on one with them
  kNative,  ///< LibTorch's bf16 kernels (oneDNN), exactly as autocast dispatches them
  kFp32,    ///< operands rounded to bf16, fp32 kernels, results rounded to bf16
};

/// Reads "auto" | "native" | "fp32"; anything else throws InputError naming `field` and `text`.
Bf16Matmul parse_bf16_matmul(const std::string& text, const std::string& field);
/// The config spelling: "auto", "native" or "fp32".
std::string to_string(Bf16Matmul mode);
/// `mode` with kAuto decided for a CPU with `cpu_flags` (/proc/cpuinfo's): kNative when it has
/// avx512_bf16 or amx_bf16, kFp32 otherwise. kNative and kFp32 are returned as they are.
Bf16Matmul resolve_bf16_matmul(Bf16Matmul mode, const std::set<std::string>& cpu_flags);

/// Sets the process-wide choice for linear() and matmul() (default kAuto; /proc/cpuinfo is read
/// once, on first use). Safe to call from any thread; takes effect for the next product.
void set_bf16_matmul(Bf16Matmul mode);
/// The process-wide choice, resolved: kNative or kFp32.
Bf16Matmul bf16_matmul();

/// input W^T + bias, as ATen's linear (bias may be undefined): one fused addmm for a 2-D input or
/// a contiguous 3-D one with a bias, as Python's torch.nn.functional.linear computes it (the C++
/// frontend's functional::linear and Linear::forward multiply, then add the bias in a second
/// operation: under bf16 autocast that rounds to bf16 twice). Where CPU autocast
/// to bf16 is on, bf16_matmul() is kFp32 and the operands are CPU float32/bfloat16 tensors, it
/// runs forward and backward on fp32 kernels with autocast's bf16 rounding: output bf16, saved
/// for backward are the bf16 input and weight (as autocast saves them), each gradient is rounded
/// to bf16 and returned in its operand's dtype. Where it is kNative instead, it is
/// nn::native_bf16_linear (nn/bf16_linear.h: autocast's products with each weight cast once a
/// window) unless block_kernel() is kComposite. Without autocast, on float32 CPU operands where
/// fp32_matmul() is kOneDnn, it is nn::onednn_linear (nn/fp32_matmul.h). Elsewhere it is ATen's
/// linear, autocast and all.
/// input (..., in), weight (out, in), bias (out) -> (..., out)
torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight,
                     const torch::Tensor& bias = {});
/// linear() with a Linear module's weight and bias, in place of `layer->forward(input)`.
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& input);

/// a @ b, as torch::matmul, with linear()'s fp32 kernels under CPU bf16 autocast when both have
/// the same rank >= 2 and the same batch dimensions (no broadcasting); torch::matmul otherwise.
/// a (..., n, k), b (..., k, m) -> (..., n, m)
torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b);

/// bias + alpha * (a @ b), as torch::baddbmm with beta 1 (a scaled product with a mask added in
/// the same kernel), with linear()'s fp32 kernels under CPU bf16 autocast unless the bias
/// requires a gradient (that case, like every other, is torch::baddbmm's).
/// bias broadcastable to (N, n, m), a (N, n, k), b (N, k, m) -> (N, n, m)
torch::Tensor baddbmm(const torch::Tensor& bias, const torch::Tensor& a, const torch::Tensor& b,
                      double alpha);

}  // namespace bigbatch::nn
