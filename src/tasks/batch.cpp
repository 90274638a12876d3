#include "meshcast/tasks/batch.h"

#include <fmt/format.h>

#include <unordered_map>

#include "meshcast/error.h"
#include "unit_task_internal.h"

namespace meshcast {

std::string tensor_label(const Batch& batch, size_t index) {
  return fmt::format("tensors[{}] '{}'", index, batch.tensors[index].name);
}

void Batch::validate() const {
  try {
    cluster.validate();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("cluster: {}", e.what()));
  }
  if (tensors.empty()) throw InvalidArgument("batch has no tensors: expected at least one");
  std::unordered_map<std::string_view, size_t> first_of_name;
  first_of_name.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorResharding& t = tensors[i];
    if (t.name.empty())
      throw InvalidArgument(fmt::format("tensors[{}]: empty name, expected a unique name", i));
    if (const auto [it, fresh] = first_of_name.emplace(t.name, i); !fresh)
      throw InvalidArgument(fmt::format("{}: duplicate name, also the name of tensors[{}]",
                                        tensor_label(*this, i), it->second));
    try {
      validate_tensor_layouts(t.tensor, t.src, t.dst, cluster);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("{}: {}", tensor_label(*this, i), e.what()));
    }
  }
}

int64_t Batch::bytes() const {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.tensor.bytes();
  return total;
}

Resharding Batch::resharding(size_t index) const {
  const TensorResharding& t = tensors.at(index);
  return Resharding{t.tensor, t.src, t.dst, cluster};
}

Batch Batch::of_one(const Resharding& problem, std::string name) {
  return Batch{problem.cluster,
               {TensorResharding{std::move(name), problem.tensor, problem.src, problem.dst}}};
}

std::vector<std::vector<UnitTask>> decompose(const Batch& batch) {
  batch.validate();
  std::vector<std::vector<UnitTask>> tasks;
  tasks.reserve(batch.tensors.size());
  for (const auto& t : batch.tensors) tasks.push_back(decompose_valid(t.tensor, t.src, t.dst));
  return tasks;
}

}  // namespace meshcast
