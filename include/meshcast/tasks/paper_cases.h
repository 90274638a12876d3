// The microbenchmark cases of the paper (docs/paper-cases.md), as reshardings on the paper's
// cluster.
#pragma once

#include <string>
#include <vector>

#include "meshcast/tasks/unit_task.h"

namespace meshcast {

struct PaperCase {
  int number = 0;  // 1..8 as in docs/paper-cases.md
  std::string description;
  Resharding problem;
};

// Cases 1-8: int32 1024x1024x512 (case 6: 3072x1024x170), meshes (hosts, 4 devices), the
// destination on the hosts after the source, 10 Gbps NICs and NVLink-class device links.
// `scale` divides the first tensor dimension (for small machines); it must divide it evenly.
std::vector<PaperCase> paper_cases(int scale = 1);

// The paper's cluster model: 4 devices per host, 10 Gbps NIC, 100 Gbps device links, 5 us.
Cluster paper_cluster(int hosts);

}  // namespace meshcast
