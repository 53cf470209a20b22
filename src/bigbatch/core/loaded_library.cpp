#include "bigbatch/core/loaded_library.h"

#include <dlfcn.h>

#include <filesystem>

namespace bigbatch {

void* loaded_symbol(const char* symbol) {
  return dlsym(RTLD_DEFAULT, symbol);
}

std::optional<LoadedLibrary> library_providing(const char* symbol) {
  void* address = loaded_symbol(symbol);
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr)
    return std::nullopt;
  LoadedLibrary library;
  library.path = info.dli_fname;
  std::error_code error;
  const std::filesystem::path resolved = std::filesystem::canonical(library.path, error);
  library.resolved = error ? library.path : resolved.string();
  return library;
}

}  // namespace bigbatch
