// Decomposes paper case 7 through the installed headers and library.
#include <meshcast/tasks/paper_cases.h>
#include <meshcast/version.h>

#include <cstdio>

int main() {
  const auto tasks = meshcast::decompose(meshcast::paper_cases()[6].problem);
  std::printf("meshcast %s: case 7 has %zu unit tasks\n", meshcast::kVersion, tasks.size());
  return tasks.size() == 4 ? 0 : 1;
}
