// Tests in which memory faults under uroce's fault guard (a copy from a
// region that vanished, the probe of a byte): ThreadSanitizer's signal
// interception does not hand such a fault to the guard's handler (the copy
// faults again and again), so the plain and ASan builds check them.
#pragma once

#include <gtest/gtest.h>

#if defined(__SANITIZE_THREAD__)
#define UROCE_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UROCE_TEST_UNDER_TSAN 1
#endif
#endif

#ifdef UROCE_TEST_UNDER_TSAN
#define SKIP_WHERE_FAULTS_ARE_NOT_GUARDED() GTEST_SKIP() << "fault recovery is not available under ThreadSanitizer"
#else
#define SKIP_WHERE_FAULTS_ARE_NOT_GUARDED() static_cast<void>(0)
#endif
