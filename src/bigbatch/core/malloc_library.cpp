#include "bigbatch/core/malloc_library.h"

#include <c10/core/impl/alloc_cpu.h>
#include <gnu/libc-version.h>

#include <filesystem>

#include "bigbatch/core/loaded_library.h"
#include "bigbatch/core/strings.h"

namespace bigbatch {

namespace {

/// "2.0.9" from mimalloc's version number 209 (major, minor and patch, a digit each).
std::string mimalloc_version(int number) {
  return std::to_string(number / 100) + "." + std::to_string(number / 10 % 10) + "." +
         std::to_string(number % 10);
}

}  // namespace

std::string to_string(MallocKind kind) {
  switch (kind) {
    case MallocKind::kGlibc:
      return "glibc";
    case MallocKind::kMimalloc:
      return "mimalloc";
    case MallocKind::kJemalloc:
      return "jemalloc";
    case MallocKind::kTcmalloc:
      return "tcmalloc";
    case MallocKind::kOther:
      break;
  }
  return "unknown allocator";
}

MallocKind classify_malloc_path(const std::string& resolved_path) {
  const std::string name = std::filesystem::path(resolved_path).filename().string();
  if (starts_with(name, "libc.so") || starts_with(name, "libc-"))
    return MallocKind::kGlibc;
  if (starts_with(name, "libmimalloc"))
    return MallocKind::kMimalloc;
  if (starts_with(name, "libjemalloc"))
    return MallocKind::kJemalloc;
  if (starts_with(name, "libtcmalloc"))
    return MallocKind::kTcmalloc;
  return MallocKind::kOther;
}

MallocKind malloc_kind() {
  const std::optional<LoadedLibrary> library = library_providing("malloc");
  return library ? classify_malloc_path(library->resolved) : MallocKind::kOther;
}

MallocLibrary loaded_malloc() {
  MallocLibrary allocator;
  const std::optional<LoadedLibrary> library = library_providing("malloc");
  if (!library) {
    allocator.kind = MallocKind::kOther;
    return allocator;
  }
  allocator.path = library->path;
  allocator.resolved = library->resolved;
  allocator.kind = classify_malloc_path(library->resolved);
  if (allocator.kind == MallocKind::kGlibc)
    allocator.version = gnu_get_libc_version();
  if (allocator.kind != MallocKind::kMimalloc)
    return allocator;
  using Version = int (*)();
  using InHeap = bool (*)(const void*);
  if (const auto version = loaded_function<Version>("mi_version"))
    allocator.version = mimalloc_version(version());
  if (const auto in_heap = loaded_function<InHeap>("mi_is_in_heap_region")) {
    void* block = c10::alloc_cpu(64);
    allocator.serves_libtorch = in_heap(block);
    c10::free_cpu(block);
  }
  return allocator;
}

}  // namespace bigbatch
