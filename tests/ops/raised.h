#pragma once
// The error message an engine call raises, for tests of the errors a user can cause.
#include <functional>
#include <initializer_list>
#include <string>

#include "engine/transform/array.h"

namespace tsr::test {

// What f raised (tsr::Exception's message); "" when it returned.
inline std::string raised(const std::function<void()>& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.what();
  }
  return "";
}

// Whether msg is an error that names every one of words.
inline bool mentions(const std::string& msg, std::initializer_list<const char*> words) {
  if (msg.empty()) return false;
  for (const char* w : words)
    if (msg.find(w) == std::string::npos) return false;
  return true;
}

}  // namespace tsr::test
