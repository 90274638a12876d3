// Move a tensor sharded RS0R on a 2x4 mesh to RRS0 on another 2x4 mesh, in this process, and
// check every element that arrived.
#include <meshcast/meshcast.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace meshcast;
  const Resharding problem{.tensor = {{64, 64, 32}, DType::int32},
                           .src = {Mesh::placed({2, 4}, 0, 4), ShardingSpec::parse("RS0R")},
                           .dst = {Mesh::placed({2, 4}, 2, 4), ShardingSpec::parse("RRS0")},
                           .cluster = {.hosts = 4, .devices_per_host = 4}};
  const Plan plan = make_plan(problem, {.strategy = Strategy::broadcast});
  std::printf("%zu unit tasks, %zu ops, lower bound %.3g s\n", decompose(problem).size(),
              plan.ops.size(), plan.lower_bound_s);

  auto executor = make_local_executor();
  auto compiled = executor->compile(plan);
  // Each device's tiles; every source element holds its own global index.
  const auto& shape = problem.tensor.shape;
  const auto& devices = compiled->devices_here();
  std::vector<std::vector<int32_t>> src(devices.size()), dst(devices.size());
  std::vector<DeviceBuffers> buffers;
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceTiles tiles = tiles_of(problem, devices[i]);
    src[i].resize(tiles.src.volume());
    dst[i].resize(tiles.dst.volume());
    for_each_tile_element(tiles.src, shape,
                          [&](int64_t global, int64_t at) { src[i][at] = int32_t(global); });
    buffers.push_back(
        {devices[i], std::as_bytes(std::span(src[i])), std::as_writable_bytes(std::span(dst[i]))});
  }
  compiled->run(buffers);

  int64_t checked = 0, wrong = 0;
  for (size_t i = 0; i < devices.size(); ++i)
    for_each_tile_element(tiles_of(problem, devices[i]).dst, shape,
                          [&](int64_t global, int64_t at) {
                            ++checked;
                            wrong += dst[i][at] != int32_t(global);
                          });
  std::printf("meshcast %s: %lld elements checked, %lld wrong\n", kVersion,
              static_cast<long long>(checked), static_cast<long long>(wrong));
  return wrong == 0 && checked > 0 ? 0 : 1;
}
