// Whether this build runs under a sanitizer that stands in for the C
// library's memory functions (AddressSanitizer, ThreadSanitizer): code that
// would go around them (a copy instruction of its own, glibc's malloc
// settings) stays off there.
#pragma once

namespace rdv {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

}  // namespace rdv
