// A process-wide setting changed for one test and put back when the test's scope ends.
#pragma once

#include <functional>
#include <utility>

namespace bigbatch::testing {

/// Calls `set(value)` now and `set(previous)` on destruction, `previous` being `get()` before.
/// Usage: `ScopedSetting<nn::Bf16Matmul> fp32(nn::bf16_matmul, nn::set_bf16_matmul, kFp32);`
template <typename Value>
class ScopedSetting {
 public:
  ScopedSetting(const std::function<Value()>& get, std::function<void(Value)> set, Value value)
      : set_(std::move(set)), previous_(get()) {
    set_(value);
  }
  ~ScopedSetting() { set_(previous_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  std::function<void(Value)> set_;
  Value previous_;
};

}  // namespace bigbatch::testing
