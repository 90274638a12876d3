// Max-min fair rates of flows that share links, filled again only where a flow started or ended.
#pragma once

#include <cstddef>
#include <limits>
#include <span>
#include <tuple>
#include <vector>

namespace meshcast::sim {

// A link a flow crosses, `weight` times (a chain through the same link twice moves its data twice).
struct LinkUse {
  int link = 0;
  double weight = 1;
};

// The rates of the simulator's flows (docs/simulator.md), and of the planner's plays that guess
// them: progressive filling, where every unfrozen flow's rate rises together until a link is full
// (its flows freeze at that level) or a flow reaches its own limit (it freezes there), and the
// rest rise on with what those leave. fill() rates again only the flows linked, through the links
// they share (transitively), to a link on which a flow started or ended since the last fill(): the
// others' rates are what filling all would give them (up to rounding), as the links of one group
// never meet another's.
class FairShare {
 public:
  // `capacities`: bytes per second of each link, indexed by LinkUse::link. Flow f crosses
  // uses[first[f]] .. uses[first[f + 1] - 1] (each link once, in increasing order) and never goes
  // faster than limits[f]: flat arrays, so that thousands of flows cost no allocation each.
  FairShare(std::vector<double> capacities, std::vector<LinkUse> uses, std::vector<size_t> first,
            std::vector<double> limits);
  FairShare() = default;  // no links, no flows

  void start(int flow);  // its rate is 0 until the next fill()
  void end(int flow);

  // Rates again the flows a start or end since the last call reaches.
  void fill();

  double rate(int flow) const { return rate_[static_cast<size_t>(flow)]; }
  // The flows the last fill() rated, in the order it froze them, and the links they cross.
  const std::vector<int>& filled() const { return frozen_order_; }
  const std::vector<int>& filled_links() const { return comp_links_; }
  const std::vector<int>& flows_on(int link) const {
    return link_flows_[static_cast<size_t>(link)];
  }
  std::span<const LinkUse> uses(int flow) const;
  size_t first_use(int flow) const { return first_[static_cast<size_t>(flow)]; }
  double weight_on(int flow, int link) const;

 private:
  size_t use_index(int flow, int link) const;  // of `link` among the flow's uses

  std::vector<double> capacity_;
  std::vector<LinkUse> uses_;     // every flow's, flow after flow
  std::vector<int> slot_;         // per use: the flow's position in the link's list while active
  std::vector<size_t> first_{0};  // per flow, its first use; one more at the end
  std::vector<double> limit_, rate_;
  std::vector<std::vector<int>> link_flows_;  // the active flows on each link
  std::vector<int> dirty_;                    // links a flow started or ended on since fill()

  // Scratch of fill(), kept to avoid allocating per call.
  int mark_ = 0, freeze_mark_ = 0;
  std::vector<int> link_mark_, flow_mark_, frozen_;
  std::vector<int> comp_links_, comp_flows_, frozen_order_;
  std::vector<int> link_stamp_, link_unfrozen_;
  std::vector<double> link_used_, link_weight_;
  std::vector<std::tuple<double, int, int>> heap_;  // (level, link or -1 - flow, stamp)
};

}  // namespace meshcast::sim
