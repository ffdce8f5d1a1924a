#pragma once
// Shorthands shared by the sharding tests: unwrap a Result (a test failure otherwise) and build shardings from
// their text forms.
#include "tests/check.h"

#include "engine/sharding/sharding.h"

namespace tsr::test {

template <class T>
T must(Result<T> r) {
  if (!r.ok()) TSR_FATAL(r.error().message);
  return std::move(r).value();
}

inline sharding::NamedSharding named(const sharding::Mesh& m, const std::string& text) {
  return must(sharding::NamedSharding::create(m, must(sharding::PartitionSpec::parse(text))));
}

}  // namespace tsr::test
