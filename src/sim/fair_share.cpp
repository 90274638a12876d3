#include "meshcast/sim/fair_share.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "meshcast/error.h"

namespace meshcast::sim {

FairShare::FairShare(std::vector<double> capacities, std::vector<LinkUse> uses,
                     std::vector<size_t> first, std::vector<double> limits)
    : capacity_(std::move(capacities)),
      uses_(std::move(uses)),
      slot_(uses_.size(), -1),
      first_(std::move(first)),
      limit_(std::move(limits)),
      rate_(limit_.size(), 0),
      link_flows_(capacity_.size()),
      link_mark_(capacity_.size(), 0),
      flow_mark_(limit_.size(), 0),
      frozen_(limit_.size(), 0),
      link_stamp_(capacity_.size(), 0),
      link_unfrozen_(capacity_.size(), 0),
      link_used_(capacity_.size(), 0),
      link_weight_(capacity_.size(), 0) {
  if (first_.size() != limit_.size() + 1 || first_.front() != 0 || first_.back() != uses_.size())
    throw InvalidArgument(fmt::format(
        "fair share: {} flows' first uses ({} of them, from {} to {}) over {} uses: expected {}, "
        "from 0 to {}",
        limit_.size(), first_.size(), first_.empty() ? 0 : first_.front(),
        first_.empty() ? 0 : first_.back(), uses_.size(), limit_.size() + 1, uses_.size()));
  for (size_t f = 0; f < limit_.size(); ++f)
    if (first_[f + 1] < first_[f])
      throw InvalidArgument(
          fmt::format("fair share: flow {}'s uses start at {}, the next's at {}: "
                      "expected a flow's uses before the next's",
                      f, first_[f], first_[f + 1]));
  for (size_t f = 0; f < limit_.size(); ++f) {
    for (size_t i = first_[f]; i < first_[f + 1]; ++i) {
      if (uses_[i].link < 0 || static_cast<size_t>(uses_[i].link) >= capacity_.size())
        throw InvalidArgument(fmt::format("fair share: link {} of flow {}: expected 0..{}",
                                          uses_[i].link, f, capacity_.size() - 1));
      if (i > first_[f] && uses_[i].link <= uses_[i - 1].link)
        throw InvalidArgument(fmt::format(
            "fair share: flow {} crosses link {} then {}: expected each once, in increasing order",
            f, uses_[i - 1].link, uses_[i].link));
    }
  }
}

std::span<const LinkUse> FairShare::uses(int flow) const {
  const auto f = static_cast<size_t>(flow);
  return {uses_.data() + first_[f], first_[f + 1] - first_[f]};
}

size_t FairShare::use_index(int flow, int link) const {
  const auto of = uses(flow);
  const auto it = std::lower_bound(of.begin(), of.end(), link,
                                   [](const LinkUse& u, int l) { return u.link < l; });
  return first_[static_cast<size_t>(flow)] + static_cast<size_t>(it - of.begin());
}

double FairShare::weight_on(int flow, int link) const {
  return uses_[use_index(flow, link)].weight;
}

void FairShare::start(int flow) {
  rate_[static_cast<size_t>(flow)] = 0;
  const auto f = static_cast<size_t>(flow);
  for (size_t i = first_[f]; i < first_[f + 1]; ++i) {
    auto& flows = link_flows_[static_cast<size_t>(uses_[i].link)];
    slot_[i] = static_cast<int>(flows.size());
    flows.push_back(flow);
    dirty_.push_back(uses_[i].link);
  }
}

void FairShare::end(int flow) {
  const auto f = static_cast<size_t>(flow);
  for (size_t i = first_[f]; i < first_[f + 1]; ++i) {
    const int link = uses_[i].link;
    auto& flows = link_flows_[static_cast<size_t>(link)];
    const int moved = flows.back();
    flows[static_cast<size_t>(slot_[i])] = moved;
    flows.pop_back();
    if (moved != flow) slot_[use_index(moved, link)] = slot_[i];
    slot_[i] = -1;
    dirty_.push_back(link);
  }
}

void FairShare::fill() {
  comp_links_.clear();
  frozen_order_.clear();
  if (dirty_.empty()) return;
  const auto visit_link = [&](int link) {
    if (link_mark_[static_cast<size_t>(link)] == mark_) return;
    link_mark_[static_cast<size_t>(link)] = mark_;
    comp_links_.push_back(link);
  };
  const auto push_level = [&](int link) {
    const auto l = static_cast<size_t>(link);
    ++link_stamp_[l];
    if (link_unfrozen_[l] == 0) return;
    const double level = std::max(0.0, capacity_[l] - link_used_[l]) / link_weight_[l];
    heap_.emplace_back(level, link, link_stamp_[l]);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  };
  const auto freeze = [&](int flow, double level) {
    frozen_[static_cast<size_t>(flow)] = freeze_mark_;
    rate_[static_cast<size_t>(flow)] = level;
    frozen_order_.push_back(flow);
    for (const LinkUse& u : uses(flow)) {
      const auto l = static_cast<size_t>(u.link);
      link_used_[l] += u.weight * level;
      link_weight_[l] -= u.weight;
      --link_unfrozen_[l];
      push_level(u.link);
    }
  };
  ++mark_;
  comp_flows_.clear();
  for (int l : dirty_) visit_link(l);
  dirty_.clear();
  for (size_t k = 0; k < comp_links_.size(); ++k)
    for (int f : link_flows_[static_cast<size_t>(comp_links_[k])]) {
      if (flow_mark_[static_cast<size_t>(f)] == mark_) continue;
      flow_mark_[static_cast<size_t>(f)] = mark_;
      comp_flows_.push_back(f);
      for (const LinkUse& u : uses(f)) visit_link(u.link);
    }

  heap_.clear();
  for (int l : comp_links_) {
    link_used_[static_cast<size_t>(l)] = 0;
    link_weight_[static_cast<size_t>(l)] = 0;
    link_unfrozen_[static_cast<size_t>(l)] = 0;
  }
  for (int f : comp_flows_)
    for (const LinkUse& u : uses(f)) {
      link_weight_[static_cast<size_t>(u.link)] += u.weight;
      ++link_unfrozen_[static_cast<size_t>(u.link)];
    }
  for (int l : comp_links_) push_level(l);
  // A flow with a limit of its own freezes at it unless a link freezes it lower first: an entry
  // -1 - flow in the heap.
  for (int f : comp_flows_)
    if (limit_[static_cast<size_t>(f)] < std::numeric_limits<double>::infinity()) {
      heap_.emplace_back(limit_[static_cast<size_t>(f)], -1 - f, 0);
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
    }
  ++freeze_mark_;
  double floor = 0;  // levels only grow; this keeps rounding from lowering one
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const auto [popped, l, stamp] = heap_.back();
    heap_.pop_back();
    if (l < 0) {
      if (frozen_[static_cast<size_t>(-1 - l)] == freeze_mark_) continue;
      floor = std::max(popped, floor);
      freeze(-1 - l, floor);
      continue;
    }
    if (stamp != link_stamp_[static_cast<size_t>(l)] || link_unfrozen_[static_cast<size_t>(l)] == 0)
      continue;
    const double level = std::max(popped, floor);
    floor = level;
    for (int f : link_flows_[static_cast<size_t>(l)])
      if (frozen_[static_cast<size_t>(f)] != freeze_mark_) freeze(f, level);
  }
}

}  // namespace meshcast::sim
