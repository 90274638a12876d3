#include "meshcast/runtime/transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "meshcast/duration.h"

namespace meshcast {
namespace {

constexpr auto kLongestBackoff = std::chrono::microseconds(50);

}  // namespace

Deadline::Deadline(std::string_view phase, int number, double timeout_s)
    : phase_(phase),
      number_(number),
      timeout_s_(timeout_s),
      at_(Clock::now() + seconds_to_duration(timeout_s)) {}

std::string Deadline::phase() const {
  return number_ > 0 ? fmt::format("{} {}", phase_, number_) : std::string(phase_);
}

void Deadline::check(int device, std::string_view waiting_for) const {
  if (passed())
    throw Timeout(fmt::format(
        "{} did not finish within the timeout of {:g} s (device {} waiting for {}): expected "
        "every process to keep up; a peer process may have died or hung",
        phase(), timeout_s_, device, waiting_for));
}

void Backoff::idle() {
  if (pause_.count() == 0) {
    pause_ = std::chrono::microseconds(1);
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, kLongestBackoff);
  }
}

int Transport::make_group(const std::vector<int>&, int) {
  throw InvalidArgument("this transport has no group collectives: expected chains");
}
int Transport::post_group_broadcast(int, std::byte*, int64_t, uint64_t) {
  throw InvalidArgument("this transport has no group collectives: expected chains");
}
int Transport::post_group_allgather(int, std::byte*, const std::vector<int64_t>&,
                                    const std::vector<int64_t>&, uint64_t) {
  throw InvalidArgument("this transport has no group collectives: expected point to point");
}

std::byte* Transport::allocate(int64_t bytes) {
  return new std::byte[std::max<int64_t>(bytes, 1)];
}
void Transport::release(std::byte* memory) {
  delete[] memory;
}
void Transport::copy(const StridedCopy& copy, const std::byte* from, std::byte* to) {
  run_strided_copy(copy, from, to);
}

void Transport::wait_for(int pending, uint64_t cookie, int peer, const Deadline& deadline) {
  std::vector<uint64_t> completed;
  Backoff backoff;
  while (pending > 0) {
    completed.clear();
    try {
      poll(completed);
    } catch (const Timeout&) {
      throw;
    } catch (const Error& e) {  // a peer's connection closed
      throw Error(fmt::format("{} failed on device {}: {}", deadline.phase(), rank(), e.what()));
    }
    const auto done = std::count(completed.begin(), completed.end(), cookie);
    pending -= static_cast<int>(done);
    if (done > 0) {
      backoff.progressed();
      continue;
    }
    deadline.check(rank(), peer >= 0 ? fmt::format("device {}", peer) : "the other devices");
    backoff.idle();
  }
}

// Gathered on device 0, which sends the whole to every other device.
std::vector<std::string> Transport::allgather(const std::string& mine, const Deadline& deadline) {
  const int n = size();
  const auto bytes = static_cast<int64_t>(mine.size());
  std::string all(static_cast<size_t>(bytes) * n, '\0');
  std::memcpy(all.data() + static_cast<size_t>(bytes) * rank(), mine.data(), mine.size());
  auto* at = reinterpret_cast<std::byte*>(all.data());
  const int tag = static_cast<int>(max_tag());
  if (rank() == 0) {
    for (int d = 1; d < n; ++d) post_receive(d, tag, at + bytes * d, bytes, kControlCookie);
    wait_for(n - 1, kControlCookie, -1, deadline);
    for (int d = 1; d < n; ++d) post_send(d, tag, at, bytes * n, false, kControlCookie);
    wait_for(n - 1, kControlCookie, -1, deadline);
  } else {
    post_send(0, tag, at + bytes * rank(), bytes, false, kControlCookie);
    post_receive(0, tag, at, bytes * n, kControlCookie);
    wait_for(2, kControlCookie, 0, deadline);
  }
  std::vector<std::string> out;
  for (int d = 0; d < n; ++d) out.push_back(all.substr(static_cast<size_t>(bytes) * d, bytes));
  return out;
}

std::string Transport::broadcast(std::string text, const Deadline& deadline) {
  // The size first (every device sends and receives the same bytes in allgather), then the text.
  const auto bytes =
      static_cast<int64_t>(std::stoll(allgather(fmt::format("{:20}", text.size()), deadline)[0]));
  text.resize(bytes);
  if (bytes == 0) return text;
  auto* at = reinterpret_cast<std::byte*>(text.data());
  const int tag = static_cast<int>(max_tag());
  if (rank() == 0) {
    for (int d = 1; d < size(); ++d) post_send(d, tag, at, bytes, false, kControlCookie);
    wait_for(size() - 1, kControlCookie, -1, deadline);
  } else {
    post_receive(0, tag, at, bytes, kControlCookie);
    wait_for(1, kControlCookie, 0, deadline);
  }
  return text;
}

}  // namespace meshcast
