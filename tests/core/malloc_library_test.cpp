// Which allocator serves malloc, from the library that defines it.
#include "bigbatch/core/malloc_library.h"

#include <gnu/libc-version.h>
#include <gtest/gtest.h>

#include "bigbatch/core/loaded_library.h"

namespace bigbatch {
namespace {

TEST(MallocLibrary, ClassifiesAllocatorsByFileName) {
  EXPECT_EQ(classify_malloc_path("/usr/lib/x86_64-linux-gnu/libc.so.6"), MallocKind::kGlibc);
  EXPECT_EQ(classify_malloc_path("/lib64/libc-2.17.so"), MallocKind::kGlibc);
  EXPECT_EQ(classify_malloc_path("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2.0"),
            MallocKind::kMimalloc);
  EXPECT_EQ(classify_malloc_path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
            MallocKind::kJemalloc);
  EXPECT_EQ(classify_malloc_path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10"),
            MallocKind::kTcmalloc);
  EXPECT_EQ(classify_malloc_path("/opt/lib/libcrypto.so.3"), MallocKind::kOther);
  EXPECT_EQ(classify_malloc_path("/work/build/bigbatch"), MallocKind::kOther);
  EXPECT_EQ(to_string(MallocKind::kMimalloc), "mimalloc");
  EXPECT_EQ(to_string(MallocKind::kOther), "unknown allocator");
}

// The test executables do not link mimalloc (only the bigbatch executable does): glibc's malloc.
TEST(MallocLibrary, TheTestsRunOnGlibcsMalloc) {
  const MallocLibrary allocator = loaded_malloc();
  EXPECT_EQ(allocator.kind, MallocKind::kGlibc) << allocator.resolved;
  EXPECT_EQ(malloc_kind(), MallocKind::kGlibc);
  EXPECT_EQ(allocator.version, gnu_get_libc_version());
  EXPECT_EQ(allocator.resolved.find("libc.so"), allocator.resolved.rfind('/') + 1)
      << allocator.resolved;
  EXPECT_FALSE(allocator.serves_libtorch.has_value());  // asked of mimalloc only
}

TEST(LoadedLibrary, FindsTheObjectThatDefinesASymbol) {
  const std::optional<LoadedLibrary> libc = library_providing("gnu_get_libc_version");
  ASSERT_TRUE(libc.has_value());
  EXPECT_NE(libc->resolved.find("libc.so"), std::string::npos) << libc->resolved;
  EXPECT_EQ(libc->resolved.front(), '/');  // links resolved to a real file
  EXPECT_FALSE(library_providing("bigbatch_no_such_symbol_anywhere").has_value());
}

}  // namespace
}  // namespace bigbatch
