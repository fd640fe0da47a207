// For tests whose child, forked while uroce's threads run, goes on working
// (opens a device of its own, allocates).  Two sanitizers cannot run such a
// child reliably, so those tests skip there and run in every other build:
//  - ThreadSanitizer ends a child of a multi-threaded fork that starts
//    threads (die_after_fork);
//  - GCC 12's AddressSanitizer takes none of its allocator's locks around
//    fork(), so a child forked while another thread was inside the
//    allocator waits for that thread's lock forever.  A reproduction (two
//    threads allocating, 200 forks whose children allocate) hung 2 children
//    under ASan and none without; a CI run of the XRC tests hung that way.
// Tests that only need a second process fork before opening anything.
#pragma once

#include <gtest/gtest.h>

#if defined(__SANITIZE_THREAD__)
#define UROCE_SKIP_WORKING_CHILD_OF_THREADED_FORK() \
  GTEST_SKIP() << "ThreadSanitizer ends a child of a multi-threaded fork that starts threads (die_after_fork)"
#elif defined(__SANITIZE_ADDRESS__)
#define UROCE_SKIP_WORKING_CHILD_OF_THREADED_FORK() \
  GTEST_SKIP() << "AddressSanitizer holds no allocator lock across fork(): the child may wait forever"
#else
#define UROCE_SKIP_WORKING_CHILD_OF_THREADED_FORK() static_cast<void>(0)
#endif
