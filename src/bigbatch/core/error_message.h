// The message of an exception as a user should read it.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace bigbatch {

/// `error.what()`, except for LibTorch's own errors (c10::Error), whose what() carries a C++
/// backtrace that says nothing to a user: their message alone.
inline std::string message_of(const std::exception& error) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error))
    return torch_error->what_without_backtrace();
  return error.what();
}

}  // namespace bigbatch
