// Whether a sanitizer replaces malloc in this build (ASan, TSan): glibc's allocator settings
// (wire::TuneAllocatorForFrames) and trimming (wire::TrimFrameHeap) do not apply, and the tests
// of them skip.
#pragma once

namespace diloco::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerMalloc = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizerMalloc = true;
#else
inline constexpr bool kSanitizerMalloc = false;
#endif
#else
inline constexpr bool kSanitizerMalloc = false;
#endif

}  // namespace diloco::testing
