#include "source_tiles.h"

#include "meshcast/layout/layout.h"

namespace meshcast::detail {

const SourceTiles::Tiles& SourceTiles::tiles_of(int tensor) {
  auto& tiles = tiles_[tensor];
  if (!tiles) {
    const TensorResharding& t = batch_.tensors[tensor];
    std::vector<DeviceId> devices;
    for (int64_t i = 0; i < t.src.mesh.size(); ++i) devices.push_back(t.src.mesh.device_at(i));
    DenseIndex index(std::vector<int64_t>(devices.begin(), devices.end()));
    std::vector<Box> boxes(devices.size());
    const auto in_mesh_order = device_tiles(t.tensor, t.src);
    for (size_t i = 0; i < devices.size(); ++i)
      boxes[index.index_of(devices[i])] = in_mesh_order[i];
    tiles.emplace(Tiles{std::move(devices), std::move(index), std::move(boxes)});
  }
  return *tiles;
}

bool SourceTiles::holds(DeviceId device, int tensor, const Box& slice) {
  const Tiles& tiles = tiles_of(tensor);
  return tiles.index.contains(device) && tiles.boxes[tiles.index.index_of(device)].contains(slice);
}

std::vector<DeviceId> SourceTiles::holders(int tensor, const Box& slice) {
  const Tiles& tiles = tiles_of(tensor);
  std::vector<DeviceId> out;
  for (DeviceId d : tiles.devices)
    if (tiles.boxes[tiles.index.index_of(d)].contains(slice)) out.push_back(d);
  return out;
}

}  // namespace meshcast::detail
