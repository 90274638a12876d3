// The README's library example, built against the installed headers and library.
#include <meshcast/tasks/unit_task.h>
#include <meshcast/version.h>

#include <cstdio>

int main() {
  meshcast::Resharding p{
      .tensor = {{1024, 1024, 512}, meshcast::DType::int32},
      .src = {meshcast::Mesh::placed({2, 4}, 0, 4), meshcast::ShardingSpec::parse("RS0R")},
      .dst = {meshcast::Mesh::placed({2, 4}, 2, 4), meshcast::ShardingSpec::parse("RRS0")},
      .cluster = {.hosts = 4, .devices_per_host = 4}};
  auto tasks = meshcast::decompose(p);
  std::printf("meshcast %s: %zu unit tasks\n", meshcast::kVersion, tasks.size());
  return tasks.size() == 4 ? 0 : 1;
}
