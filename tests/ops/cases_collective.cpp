// Collective cases, outside an SPMD run: the program is device 0 of a one-device mesh, so each collective over
// a group of one is the identity, a permute that does not target device 0 gives zeros, and device_table gives
// entry 0. (Groups of several devices run on 8 in-process devices in test_collective_ops.)
#include <fmt/format.h>

#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

Reference identity() {
  return [](const std::vector<HostTensor>& in) { return std::vector<HostTensor>{in[0]}; };
}

OpCase collectiveCase(std::string label, ir::OpCode op, ir::Attrs attrs, HostTensor x, Reference ref) {
  OpCase c;
  c.label = fmt::format("{} {}", label, x.aval.toString());
  c.op = op;
  c.attrs = std::move(attrs);
  c.inputs = {std::move(x)};
  c.reference = std::move(ref);
  return c;
}

}  // namespace

void addCollectiveCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  // Groups of one on a 4-device mesh: device 0's group is [0].
  const ir::Ints singles = {0, 1, 2, 3};
  for (DType t : allDTypes()) {
    const bool summable = t != DType::Bool;
    for (const Shape& s : {Shape{}, Shape{2, 3}}) {
      if (summable)
        cases.push_back(collectiveCase("all_reduce", ir::OpCode::AllReduce, ir::AllReduceAttrs{singles, 1},
                                       randomTensor(Aval{s, t}, rng), identity()));
      cases.push_back(collectiveCase("collective_permute to itself", ir::OpCode::CollectivePermute,
                                     ir::CollectivePermuteAttrs{{0, 0, 1, 2}}, randomTensor(Aval{s, t}, rng),
                                     identity()));
      cases.push_back(collectiveCase("collective_permute not to device 0", ir::OpCode::CollectivePermute,
                                     ir::CollectivePermuteAttrs{{1, 2, 2, 1}}, randomTensor(Aval{s, t}, rng),
                                     [](const std::vector<HostTensor>& in) {
                                       return std::vector<HostTensor>{HostTensor::zeros(in[0].aval)};
                                     }));
    }
    for (int64_t dim : {0, 1}) {
      const Aval a{Shape{2, 3}, t};
      cases.push_back(collectiveCase(fmt::format("all_gather dim {}", dim), ir::OpCode::AllGather,
                                     ir::AllGatherAttrs{singles, 1, dim}, randomTensor(a, rng), identity()));
      if (summable)
        cases.push_back(collectiveCase(fmt::format("reduce_scatter dim {}", dim), ir::OpCode::ReduceScatter,
                                       ir::AllGatherAttrs{singles, 1, dim}, randomTensor(a, rng), identity()));
      cases.push_back(collectiveCase(fmt::format("all_to_all split {} concat {}", dim, 1 - dim), ir::OpCode::AllToAll,
                                     ir::AllToAllAttrs{singles, 1, dim, 1 - dim}, randomTensor(a, rng), identity()));
    }
    if (summable) {
      OpCase c;
      c.label = fmt::format("device_table {}", dtypeName(t));
      c.op = ir::OpCode::DeviceTable;
      c.attrs = ir::DeviceTableAttrs{{5, 9, 13}, t};
      c.reference = [t](const std::vector<HostTensor>&) {
        return std::vector<HostTensor>{HostTensor::fromValues(Aval{Shape{}, t}, {5.0})};
      };
      cases.push_back(std::move(c));
    }
  }
}

}  // namespace tsr::test
