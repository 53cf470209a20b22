// Which allocator serves malloc in this process. The bigbatch executable links mimalloc, which
// then serves every library's malloc (LibTorch's, oneDNN's, its own); a program that uses the
// bigbatch library keeps whatever allocator it has.
#pragma once

#include <optional>
#include <string>

namespace bigbatch {

/// The allocators bigbatch tells apart.
enum class MallocKind {
  kGlibc,     ///< the C library's own malloc
  kMimalloc,  ///< Microsoft's mimalloc (Debian's libmimalloc2.0), linked into the executable
  kJemalloc,  ///< jemalloc, usually through LD_PRELOAD
  kTcmalloc,  ///< gperftools' tcmalloc, usually through LD_PRELOAD
  kOther,     ///< something else defines malloc
};

/// "glibc", "mimalloc", "jemalloc", "tcmalloc" or "unknown allocator".
std::string to_string(MallocKind kind);

/// Which allocator a library file is, from its file name (libc.so.6, libmimalloc.so.2.0,
/// libjemalloc.so.2, libtcmalloc_minimal.so.4, ...).
MallocKind classify_malloc_path(const std::string& resolved_path);

/// The allocator whose malloc every library in the process calls.
MallocKind malloc_kind();

/// The allocator in use, with what can be learnt of it.
struct MallocLibrary {
  MallocKind kind = MallocKind::kGlibc;
  /// The file that defines malloc, as loaded and with links resolved; empty where none was found
  /// (a statically linked malloc).
  std::string path;
  std::string resolved;
  /// "2.36" (gnu_get_libc_version) or "2.0.9" (mi_version); empty for the others.
  std::string version;
  /// mimalloc only: whether a block LibTorch's own code allocates (c10::alloc_cpu in libc10)
  /// lies in mimalloc's heap, so that every library allocates and frees through one allocator.
  std::optional<bool> serves_libtorch;
};

/// Finds the allocator in use (dlsym + dladdr of malloc) and asks it what it is.
MallocLibrary loaded_malloc();

}  // namespace bigbatch
