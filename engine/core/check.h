#pragma once
// TSR_CHECK: internal invariants only. Errors a user can cause return Result instead.
#include <cstdio>
#include <cstdlib>

#define TSR_CHECK(cond)                                                                   \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: internal check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

#define TSR_CHECK_MSG(cond, msg)                                                                    \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      std::fprintf(stderr, "%s:%d: internal check failed: %s (%s)\n", __FILE__, __LINE__, #cond, msg); \
      std::abort();                                                                                 \
    }                                                                                               \
  } while (0)
