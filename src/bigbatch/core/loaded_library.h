// Which loaded shared object provides a symbol to this process, as the dynamic loader resolves it.
#pragma once

#include <optional>
#include <string>

namespace bigbatch {

/// A shared object loaded into this process.
struct LoadedLibrary {
  std::string path;      ///< as loaded (dladdr's dli_fname)
  std::string resolved;  ///< that path with symbolic links resolved (the path where that fails)
};

/// The object whose definition of `symbol` every library in the process calls: the first in the
/// loader's global search order (dlsym(RTLD_DEFAULT) + dladdr). nullopt where none defines it.
std::optional<LoadedLibrary> library_providing(const char* symbol);

/// The address of `symbol` in the process, as every library resolves it (dlsym(RTLD_DEFAULT));
/// nullptr where no loaded object defines it.
void* loaded_symbol(const char* symbol);

/// The function `symbol` of a library that is not always there (OpenBLAS, MKL, OpenMP, mimalloc),
/// looked up at run time instead of linked, as a `Function` pointer (the caller gives its C
/// signature); nullptr where no loaded object defines it.
template <typename Function>
Function loaded_function(const char* symbol) {
  return reinterpret_cast<Function>(loaded_symbol(symbol));
}

}  // namespace bigbatch
