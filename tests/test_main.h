#pragma once
// Every test process starts as the CLI and the IDE do: the backends registered with the runtime
// (engine/backends/backends.h), then Qt Test's own main. Write TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestJit) where
// QTEST_GUILESS_MAIN(TestJit) would be (any of Qt's three main macros). Qt Test calls the test class's
// initMain() before it builds the application; the subclass here adds one that registers the backends.
#include <QtTest>

#include "engine/backends/backends.h"

#define TSR_TEST_MAIN(QtMain, TestObject)                               \
  struct TestObject##WithBackends : TestObject {                        \
    static void initMain() { tsr::registerBackends(); }                 \
  };                                                                    \
  QtMain(TestObject##WithBackends)
