#include "bigbatch/nn/packed_tokens.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "bigbatch/core/check.h"

namespace bigbatch::nn {

torch::Tensor PackedTokens::pack(const torch::Tensor& x) const {
  return x.flatten(0, 1).index_select(0, real);  // (N + F, ...)
}

torch::Tensor PackedTokens::to_rows(const torch::Tensor& x) const {
  BB_CHECK(x.size(0) == slots.size(0) + fillers, "to_rows: ", x.size(0), " rows for ",
           slots.size(0), " tokens and ", fillers, " fillers");
  return torch::zeros({batch * longest, x.size(1)}, x.options())
      .index_copy(0, slots, fillers == 0 ? x : x.narrow(0, 0, slots.size(0)))
      .view({batch, longest, x.size(1)});  // (B, L, C)
}

torch::Tensor PackedTokens::from_rows(const torch::Tensor& rows) const {
  const torch::Tensor tokens =
      rows.reshape({batch * longest, rows.size(2)}).index_select(0, slots);  // (N, C)
  return fillers == 0 ? tokens : torch::cat({tokens, tokens.new_zeros({fillers, tokens.size(1)})});
}

torch::Tensor scatter_rows(const torch::Tensor& rows, const torch::Tensor& slots,
                           int64_t positions) {
  BB_CHECK(rows.dim() == 2 && slots.dim() == 1 && slots.scalar_type() == torch::kLong &&
               rows.size(0) >= slots.size(0),
           "scatter_rows: rows ", rows.sizes(), " and int64 slots ", slots.sizes(), " (",
           slots.scalar_type(), ") must be (>= N, W) and (N)");
  if (!rows.device().is_cpu() || !rows.is_contiguous())
    return torch::zeros({positions, rows.size(1)}, rows.options())
        .index_copy_(0, slots, rows.narrow(0, 0, slots.size(0)));
  const torch::Tensor places = slots.contiguous();
  const int64_t* place = places.data_ptr<int64_t>();
  std::vector<int64_t> source(static_cast<size_t>(positions), -1);  // each position's row
  for (int64_t row = 0; row < places.size(0); ++row) {
    BB_CHECK(place[row] >= 0 && place[row] < positions, "scatter_rows: slot ", place[row],
             " of row ", row, " is outside [0, ", positions, ")");
    source[static_cast<size_t>(place[row])] = row;
  }
  torch::Tensor out = at::empty({positions, rows.size(1)}, rows.options());  // (positions, W)
  const int64_t row_bytes = rows.size(1) * static_cast<int64_t>(rows.element_size());
  const auto* from = static_cast<const char*>(rows.data_ptr());
  auto* into = static_cast<char*>(out.data_ptr());
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, row_bytes));
  at::parallel_for(0, positions, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t row = source[static_cast<size_t>(p)];
      if (row >= 0)
        std::memcpy(into + p * row_bytes, from + row * row_bytes, static_cast<size_t>(row_bytes));
      else
        std::memset(into + p * row_bytes, 0, static_cast<size_t>(row_bytes));
    }
  });
  return out;
}

PackedTokens pack_tokens(const torch::Tensor& attention_mask, int64_t row_multiple) {
  BB_CHECK_INPUT(attention_mask.dim() == 2, "pack_tokens: the attention mask must be (B, T), got ",
                 attention_mask.sizes());
  BB_CHECK_INPUT(row_multiple >= 1, "pack_tokens: row_multiple = ", row_multiple, " must be >= 1");
  PackedTokens p;
  p.batch = attention_mask.size(0);
  p.time = attention_mask.size(1);
  const torch::Tensor is_real = attention_mask.ne(0);                 // (B, T)
  const torch::Tensor lengths = is_real.sum(1, false, torch::kLong);  // (B)
  const int64_t shortest = p.batch == 0 ? 1 : lengths.min().item<int64_t>();
  BB_CHECK_INPUT(shortest >= 1, "pack_tokens: every row of the attention mask needs a real token, ",
                 "got a row of padding only (lengths ", lengths, ")");
  p.longest = p.batch == 0 ? 0 : lengths.max().item<int64_t>();
  const torch::Tensor real = is_real.flatten().nonzero().squeeze(1);  // (N)
  const int64_t count = real.size(0);
  const int64_t rows =
      std::min((count + row_multiple - 1) / row_multiple * row_multiple, p.batch * p.time);
  p.fillers = rows - count;
  p.real = p.fillers == 0
               ? real
               : torch::cat({real, is_real.logical_not().flatten().nonzero().squeeze(1).narrow(
                                       0, 0, p.fillers)});  // (N + F)
  p.positions = p.real.remainder(p.time);
  const torch::Tensor place = is_real.cumsum(1, torch::kLong).flatten().index_select(0, real) - 1;
  p.slots = real.div(p.time, "floor") * p.longest + place;
  p.padding = torch::arange(p.longest, lengths.options()).unsqueeze(0) >= lengths.unsqueeze(1);
  p.first = lengths.cumsum(0) - lengths;
  return p;
}

}  // namespace bigbatch::nn
