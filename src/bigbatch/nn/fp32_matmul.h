// float32 matrix products on oneDNN's kernels instead of the BLAS LibTorch calls them on.
//
// LibTorch runs a float32 product on its BLAS (MKL in the PyPI wheel). On an AMD CPU with AVX-512
// the wheel's MKL took 1.1-1.55x as long as oneDNN's float32 kernels, which the wheel carries for
// its bf16 products (docs/BENCHMARKS.md, "float32 products on oneDNN"). Both compute in float32
// with fused multiply-adds; only the order of the sums differs. The Linears of every built-in
// model (nn::linear) and the fused GPT block's products take the kernels this module chooses.
#pragma once

#include <torch/torch.h>

#include <set>
#include <string>

namespace bigbatch::nn {

/// Which kernels compute float32 matrix products on the CPU.
enum class Fp32Matmul {
  kAuto,    ///< kOneDnn where onednn_fp32_available() on an AMD CPU with MKL, kBlas elsewhere
  kBlas,    ///< LibTorch's own choice (its BLAS: MKL or OpenBLAS)
  kOneDnn,  ///< oneDNN's float32 matmul (LibTorch 2.x on x86-64 with AVX-512 only)
};

/// Reads "auto" | "blas" | "onednn"; anything else throws InputError naming `field` and `text`.
Fp32Matmul parse_fp32_matmul(const std::string& text, const std::string& field);
/// The config spelling: "auto", "blas" or "onednn".
std::string to_string(Fp32Matmul mode);

/// What kAuto is decided on.
struct Fp32MatmulFacts {
  bool onednn_available = false;  ///< onednn_fp32_available()
  bool blas_is_mkl = false;       ///< LibTorch's BLAS is MKL
  std::string cpu_vendor;         ///< /proc/cpuinfo's vendor_id ("AuthenticAMD", ...)
};
/// `mode` with kAuto decided from `facts`: kOneDnn with oneDNN available, MKL and an AMD CPU (where
/// MKL's float32 kernels were measured slower), kBlas otherwise. kBlas and kOneDnn are returned as
/// they are.
Fp32Matmul resolve_fp32_matmul(Fp32Matmul mode, const Fp32MatmulFacts& facts);
/// This process's facts: the LibTorch it runs on and /proc/cpuinfo.
Fp32MatmulFacts this_fp32_matmul_facts();

/// Whether this LibTorch and CPU can run float32 products on oneDNN: LibTorch 2.x built with
/// oneDNN (and not turned off) on x86-64, and a CPU with avx512bw, avx512vl and avx512dq or with
/// avx_ne_convert (oneDNN's condition for these kernels in LibTorch).
bool onednn_fp32_available();

/// What oneDNN's float32 kernels need and what of it this process lacks (LibTorch's version,
/// oneDNN); for the errors and doctor's note where onednn_fp32_available() is false.
std::string onednn_fp32_requirement();

/// Throws InputError, "`field` = \"onednn\" needs ...", where `mode` is kOneDnn and
/// onednn_fp32_available() is false; nothing otherwise.
void check_fp32_matmul_usable(Fp32Matmul mode, const std::string& field);

/// Sets the process-wide choice (default kAuto). kOneDnn where onednn_fp32_available() is false
/// throws InputError naming `field`. Safe from any thread; takes effect for the next product.
void set_fp32_matmul(Fp32Matmul mode, const std::string& field = "nn::set_fp32_matmul");
/// The process-wide choice, resolved: kBlas or kOneDnn.
Fp32Matmul fp32_matmul();

/// a @ b on oneDNN's float32 kernels whatever fp32_matmul() says (doctor's measurement). Throws
/// InputError where onednn_fp32_available() is false or a or b is not a 2-D float32 CPU tensor.
/// a (n, k), b (k, m) -> (n, m)
torch::Tensor onednn_mm(const torch::Tensor& a, const torch::Tensor& b);

/// Whether a product of these operands runs on oneDNN: fp32_matmul() is kOneDnn, CPU autocast is
/// off, and every defined operand is a non-empty float32 CPU tensor.
bool fp32_products_on_onednn(std::initializer_list<const torch::Tensor*> operands);

/// `result` = a @ b, or `result` + a @ b when `accumulate`: on oneDNN where
/// fp32_products_on_onednn({a, b, result}), at::mm_out / Tensor::addmm_ otherwise. No autograd.
/// a (n, k), b (k, m), result (n, m)
void gemm_into(const torch::Tensor& result, const torch::Tensor& a, const torch::Tensor& b,
               bool accumulate = false);
/// a @ b: on oneDNN where fp32_products_on_onednn({a, b}), at::mm otherwise. No autograd.
/// a (n, k), b (k, m) -> (n, m)
torch::Tensor gemm(const torch::Tensor& a, const torch::Tensor& b);
/// bias + a @ b, the bias broadcast over the rows (undefined: none): on oneDNN where
/// fp32_products_on_onednn({bias, a, b}); for bf16 CPU operands (a and the bias contiguous, b a
/// contiguous weight transposed) on oneDNN's linear, which adds the bias inside the product, where
/// LibTorch has it (2.x); at::addmm otherwise. No autograd.
/// bias (m), a (n, k), b (k, m) -> (n, m)
torch::Tensor gemm_bias(const torch::Tensor& bias, const torch::Tensor& a, const torch::Tensor& b);

/// input W^T + bias with forward and backward on oneDNN's float32 products: the gradients of the
/// input (grad W), the weight (grad^T input) and the bias (the column sums of grad), each only
/// when wanted. Call it where fp32_products_on_onednn({input, weight, bias}); nn::linear does.
/// A backward with create_graph throws (no second derivative).
/// input (..., in), weight (out, in), bias (out) or undefined -> (..., out)
torch::Tensor onednn_linear(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias);

}  // namespace bigbatch::nn
