// Open MPI as a transport of the one executor (meshcast/runtime/transport.h).
#include "meshcast/runtime/mpi/mpi_executor.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>

#include "meshcast/error.h"
#include "meshcast/runtime/transport.h"

namespace meshcast {
namespace {

// MPI counts are ints: larger messages go in pieces of this size.
constexpr int64_t kMaxMessage = int64_t{1} << 30;

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool mpi_alive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void ensure_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    std::atexit(finalize_mpi);
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  // start()/wait() run the plan on a worker thread while the caller's thread may call MPI
  // between runs.
  if (provided < MPI_THREAD_SERIALIZED)
    throw Error(
        fmt::format("the MPI library provides thread level {}, but the mpi backend needs "
                    "MPI_THREAD_SERIALIZED ({}) or better",
                    provided, MPI_THREAD_SERIALIZED));
}

class MpiTransport final : public Transport {
 public:
  MpiTransport() {
    ensure_mpi();
    MPI_Comm_dup(MPI_COMM_WORLD, &data_);
    MPI_Comm_dup(MPI_COMM_WORLD, &control_);
    MPI_Comm_rank(data_, &rank_);
    MPI_Comm_size(data_, &size_);
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
    tag_ub_ = found ? *tag_ub : 32767;  // the least the standard guarantees
  }
  ~MpiTransport() override {
    if (!mpi_alive()) return;
    for (MPI_Comm& comm : groups_by_handle_) MPI_Comm_free(&comm);
    MPI_Comm_free(&data_);
    MPI_Comm_free(&control_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Control collectives run on their own communicator: every tag up to MPI_TAG_UB is the plans'.
  int64_t max_tag() const override { return tag_ub_ + int64_t{1}; }
  int64_t max_message() const override { return kMaxMessage; }
  std::string machine() const override {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_Get_processor_name(name, &length);
    return std::string(name, length);
  }
  std::string name() const override { return "MPI"; }
  std::string launch_hint(int devices) const override {
    return fmt::format("launch with mpirun -np {}", devices);
  }
  void reserve(int64_t requests) override {
    // While a poll runs its completed requests stay beside the ones posted since the last.
    active_.reserve(2 * requests);
    cookies_.reserve(2 * requests);
    indices_.resize(std::max<size_t>(indices_.size(), 2 * requests));
  }

  void post_send(int peer, int tag, const std::byte* data, int64_t bytes, bool synchronous,
                 uint64_t cookie) override {
    MPI_Request request = MPI_REQUEST_NULL;
    (synchronous ? MPI_Issend : MPI_Isend)(data, static_cast<int>(bytes), MPI_BYTE, peer, tag,
                                           data_, &request);
    add(request, cookie);
  }
  void post_receive(int peer, int tag, std::byte* data, int64_t bytes, uint64_t cookie) override {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, data_, &request);
    add(request, cookie);
  }
  void poll(std::vector<uint64_t>& completed) override {
    if (active_.empty()) return;
    if (indices_.size() < active_.size()) indices_.resize(active_.size());
    int count = 0;
    MPI_Testsome(static_cast<int>(active_.size()), active_.data(), &count, indices_.data(),
                 MPI_STATUSES_IGNORE);
    if (count == MPI_UNDEFINED || count == 0) return;
    for (int c = 0; c < count; ++c) completed.push_back(cookies_[indices_[c]]);
    size_t kept = 0;
    for (size_t r = 0; r < active_.size(); ++r)
      if (active_[r] != MPI_REQUEST_NULL) {
        active_[kept] = active_[r];
        cookies_[kept++] = cookies_[r];
      }
    active_.resize(kept);
    cookies_.resize(kept);
  }

  bool has_group_collectives() const override { return true; }
  // A communicator of `members` (rank i = members[i]), created by exactly those ranks the first
  // time and cached: every member asked for it at the same op, so every member caches it.
  int make_group(const std::vector<int>& members, int tag) override {
    if (auto it = groups_.find(members); it != groups_.end()) return it->second;
    MPI_Group world = MPI_GROUP_NULL, subset = MPI_GROUP_NULL;
    MPI_Comm_group(control_, &world);
    MPI_Group_incl(world, static_cast<int>(members.size()), members.data(), &subset);
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_create_group(control_, subset, tag, &comm);
    MPI_Group_free(&subset);
    MPI_Group_free(&world);
    groups_by_handle_.push_back(comm);
    return groups_[members] = static_cast<int>(groups_by_handle_.size() - 1);
  }
  int post_group_broadcast(int group, std::byte* data, int64_t bytes, uint64_t cookie) override {
    int posted = 0;
    for (int64_t at = 0; at < bytes; at += kMaxMessage, ++posted) {
      MPI_Request request = MPI_REQUEST_NULL;
      MPI_Ibcast(data + at, static_cast<int>(std::min(kMaxMessage, bytes - at)), MPI_BYTE, 0,
                 groups_by_handle_[group], &request);
      add(request, cookie);
    }
    return posted;
  }
  int post_group_allgather(int group, std::byte* data, const std::vector<int64_t>& counts,
                           const std::vector<int64_t>& displs, uint64_t cookie) override {
    // The executor refused, at compile, allgathers of more than INT_MAX bytes.
    counts_.assign(counts.begin(), counts.end());
    displs_.assign(displs.begin(), displs.end());
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts_.data(), displs_.data(),
                    MPI_BYTE, groups_by_handle_[group], &request);
    add(request, cookie);
    return 1;
  }

  std::vector<std::string> allgather(const std::string& mine, const Deadline& deadline) override {
    std::string all(mine.size() * size_, '\0');
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(),
                   static_cast<int>(mine.size()), MPI_CHAR, control_, &request);
    wait_idly(request, deadline);
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.push_back(all.substr(mine.size() * r, mine.size()));
    return out;
  }
  std::string broadcast(std::string text, const Deadline& deadline) override {
    int64_t size = static_cast<int64_t>(text.size());
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Ibcast(&size, 1, MPI_INT64_T, 0, control_, &request);
    wait_idly(request, deadline);
    text.resize(size);
    for (int64_t at = 0; at < size; at += kMaxMessage) {
      MPI_Ibcast(text.data() + at, static_cast<int>(std::min(kMaxMessage, size - at)), MPI_CHAR, 0,
                 control_, &request);
      wait_idly(request, deadline);
    }
    return text;
  }

 private:
  void add(MPI_Request request, uint64_t cookie) {
    active_.push_back(request);
    cookies_.push_back(cookie);
  }
  // MPI_Wait without spinning a core: a rank that waits for the slowest one at a control
  // collective leaves the CPU to the ranks still moving bytes.
  void wait_idly(MPI_Request& request, const Deadline& deadline) const {
    Backoff backoff;
    int done = 0;
    while (MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done) {
      deadline.check(rank_, "the other ranks in a control collective");
      backoff.idle();
    }
  }

  MPI_Comm data_ = MPI_COMM_NULL;     // messages of the plans
  MPI_Comm control_ = MPI_COMM_NULL;  // group creation and the control collectives
  int rank_ = 0;
  int size_ = 0;
  int64_t tag_ub_ = 0;
  std::map<std::vector<int>, int> groups_;  // members -> handle
  std::vector<MPI_Comm> groups_by_handle_;
  std::vector<MPI_Request> active_;
  std::vector<uint64_t> cookies_;  // of active_
  std::vector<int> indices_;       // MPI_Testsome's
  std::vector<int> counts_, displs_;
};

}  // namespace

std::unique_ptr<Executor> make_mpi_executor(const MpiOptions& options) {
  return make_transport_executor(std::make_shared<MpiTransport>(),
                                 {.group_broadcast = options.broadcast == MpiBroadcast::mpi_bcast,
                                  .max_staging_bytes = options.max_staging_bytes,
                                  .timeout_s = options.timeout_s,
                                  .backend = "mpi"});
}

}  // namespace meshcast
