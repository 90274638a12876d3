// `meshcast calibrate`: under mpirun, measures the NIC, intra-host and latency figures of the
// cluster the ranks run on and writes them as a cluster JSON that the simulator reads.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_common.h"
#include "cli_errors.h"
#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/version.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

struct CalibrateOptions {
  int64_t bytes = 16 << 20;  // per host (NIC) and per pair (intra-host), per repeat
  int repeats = 5;
  int pings = 200;
  int nics = 1;        // NICs per host, device i of a host on NIC i mod nics; each measured alone
  std::string output;  // cluster JSON file; empty: none
  bool json = false;   // print the document instead of the text summary
};

// MPI_Init/MPI_Finalize around the verb, so that an exception thrown on every rank still ends MPI
// cleanly and mpirun sees ordinary exits.
struct MpiSession {
  MpiSession() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) MPI_Init(nullptr, nullptr);
  }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

// Which host each rank runs on, from the hostnames MPI reports. Ranks must be host-major with the
// same count per host, so that rank = host * G + local is the device id of docs/concepts.md.
struct Placement {
  std::vector<std::string> host_names;  // in order of first rank
  int per_host = 0;
  int rank = 0;

  int hosts() const { return static_cast<int>(host_names.size()); }
  int host() const { return rank / per_host; }
  int local() const { return rank % per_host; }
  int rank_of(int host, int local) const { return host * per_host + local; }
};

Placement discover_placement() {
  int rank = 0, size = 0, length = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  MPI_Get_processor_name(name, &length);
  std::vector<char> all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, MPI_COMM_WORLD);

  Placement p;
  p.rank = rank;
  std::vector<int> host_of_rank;
  std::map<std::string, int> index;
  for (int r = 0; r < size; ++r) {
    const std::string host(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
    auto [it, inserted] = index.try_emplace(host, p.hosts());
    if (inserted) p.host_names.push_back(host);
    host_of_rank.push_back(it->second);
  }
  if (size % p.hosts() != 0)
    throw InvalidArgument(
        fmt::format("calibrate: {} ranks on {} hosts: expected the same number of "
                    "ranks on every host",
                    size, p.hosts()));
  p.per_host = size / p.hosts();
  for (int r = 0; r < size; ++r)
    if (host_of_rank[r] != r / p.per_host)
      throw InvalidArgument(fmt::format(
          "calibrate: rank {} runs on {}, expected {} (ranks must fill hosts in order, {} per "
          "host: mpirun's default --map-by slot with a hostfile of slots={})",
          r, p.host_names[host_of_rank[r]], p.host_names[r / p.per_host], p.per_host, p.per_host));
  return p;
}

// Seconds from a common start (barrier) until the last rank finished `body`.
template <typename Body>
double timed(Body&& body) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  body();
  const double mine = MPI_Wtime() - start;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Each sample runs once unmeasured first: it opens the TCP connections and maps the shared memory.
template <typename Body>
std::vector<double> samples(int repeats, Body&& body) {
  timed(body);
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) seconds.push_back(timed(body));
  return seconds;
}

// The message sizes of a rate: a quarter of `bytes` and `bytes`.
int64_t small_bytes(const CalibrateOptions& o) {
  return o.bytes / 4;
}

// Seconds of `repeats` samples of each of the two sizes, and the rate fitted through them: the
// slope (large - small bytes) / (median large - median small seconds). The simulator charges a
// message latency + bytes / rate; the fixed costs of a sample (its start after the barrier, the
// MPI rendezvous, TCP's ramp, a token bucket's burst) fall into the intercept instead of
// lowering the rate.
struct FittedRate {
  std::vector<double> small_seconds, large_seconds;
  double bytes_per_s = 0;
};

template <typename Body>
FittedRate fitted_rate(const CalibrateOptions& o, std::string_view what, Body&& body) {
  FittedRate f;
  f.small_seconds = samples(o.repeats, [&] { body(small_bytes(o)); });
  f.large_seconds = samples(o.repeats, [&] { body(o.bytes); });
  const double seconds = median(f.large_seconds) - median(f.small_seconds);
  if (!(seconds > 0))
    throw std::runtime_error(fmt::format(
        "calibrate: {}: {} took no longer than {} (medians {:.6f} s and {:.6f} s): the samples are "
        "too noisy to fit a rate; rerun on a quieter machine or with a larger --message-bytes",
        what, human_bytes(static_cast<double>(o.bytes)),
        human_bytes(static_cast<double>(small_bytes(o))), median(f.large_seconds),
        median(f.small_seconds)));
  f.bytes_per_s = static_cast<double>(o.bytes - small_bytes(o)) / seconds;
  return f;
}

// One NIC, one way: host 0 sends `bytes` to host 1, spread over the ranks on NIC `nic` (local l
// to local l, for every l with l mod nics == nic), while the other NICs and hosts are idle. This is
// the figure the simulator's NIC is, one direction of one NIC. Loading every host both ways at once
// would measure more than the NIC where the hosts share a machine (an emulated cluster): there the
// ranks' copies and the kernel's packet processing of all hosts compete for the same cores, and a
// rank that sends and receives at once progresses both more slowly
// (docs/testbed.md#calibration-meshcast-calibrate).
FittedRate nic_rate(const Placement& p, const CalibrateOptions& o, int nic) {
  const int on_nic = (p.per_host - nic + o.nics - 1) / o.nics;  // ranks of a host on this NIC
  std::vector<char> buffer((o.bytes + on_nic - 1) / on_nic, 1);
  return fitted_rate(o, fmt::format("NIC {}", nic), [&](int64_t bytes) {
    const int per_rank = static_cast<int>((bytes + on_nic - 1) / on_nic);
    if (p.local() % o.nics != nic) return;
    if (p.host() == 0)
      MPI_Send(buffer.data(), per_rank, MPI_BYTE, p.rank_of(1, p.local()), 0, MPI_COMM_WORLD);
    else if (p.host() == 1)
      MPI_Recv(buffer.data(), per_rank, MPI_BYTE, p.rank_of(0, p.local()), 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  });
}

// Local device 0 sends `bytes` to local device 1 of host 0 while the rest is idle: one device
// link's rate, bytes / median seconds. Not fitted like the NIC: a shared-memory copy has no
// start cost worth the name, and a quarter of the message may fit in a cache the whole does not.
std::vector<double> device_samples(const Placement& p, const CalibrateOptions& o) {
  std::vector<char> buffer(o.bytes, 1);
  const int from = p.rank_of(0, 0), to = p.rank_of(0, 1);
  return samples(o.repeats, [&] {
    if (p.rank == from)
      MPI_Send(buffer.data(), static_cast<int>(o.bytes), MPI_BYTE, to, 1, MPI_COMM_WORLD);
    else if (p.rank == to)
      MPI_Recv(buffer.data(), static_cast<int>(o.bytes), MPI_BYTE, from, 1, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  });
}

// Half the round trip of a 1-byte ping-pong between local device 0 of hosts 0 and 1, averaged
// over `pings` round trips.
double latency_seconds(const Placement& p, const CalibrateOptions& o) {
  const int a = p.rank_of(0, 0), b = p.rank_of(1, 0);
  char byte = 0;
  const auto round_trips = [&] {
    for (int i = 0; i < o.pings; ++i) {
      if (p.rank == a) {
        MPI_Send(&byte, 1, MPI_BYTE, b, 2, MPI_COMM_WORLD);
        MPI_Recv(&byte, 1, MPI_BYTE, b, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (p.rank == b) {
        MPI_Recv(&byte, 1, MPI_BYTE, a, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&byte, 1, MPI_BYTE, a, 2, MPI_COMM_WORLD);
      }
    }
  };
  return median(samples(o.repeats, round_trips)) / o.pings / 2;
}

void validate(const CalibrateOptions& o) {
  if (o.bytes < 4096 || o.bytes > (int64_t{1} << 30))
    throw InvalidArgument(
        fmt::format("bad --message-bytes {}: expected 4096..{}", o.bytes, 1 << 30));
  if (o.repeats < 1)
    throw InvalidArgument(fmt::format("bad --repeats {}: expected >= 1", o.repeats));
  if (o.pings < 1) throw InvalidArgument(fmt::format("bad --pings {}: expected >= 1", o.pings));
}

void calibrate(const CalibrateOptions& o) {
  validate(o);
  MpiSession session;
  const Placement p = discover_placement();
  if (p.hosts() < 2)
    throw InvalidArgument(fmt::format(
        "calibrate: all {} ranks run on one host ({}): expected ranks on at least 2 hosts "
        "(run it with scripts/emucluster mpirun -np H*G)",
        p.per_host, p.host_names[0]));

  if (o.nics > p.per_host)
    throw InvalidArgument(fmt::format(
        "calibrate: bad --nics-per-host {}: expected at most the {} ranks of a host (each NIC "
        "is measured through the ranks on it)",
        o.nics, p.per_host));

  Cluster cluster;
  cluster.hosts = p.hosts();
  cluster.devices_per_host = p.per_host;
  cluster.nics_per_host = o.nics;
  std::vector<FittedRate> nics;
  std::vector<double> rates;
  for (int nic = 0; nic < o.nics; ++nic) {
    nics.push_back(nic_rate(p, o, nic));
    rates.push_back(nics.back().bytes_per_s);
  }
  // The simulator has one rate per NIC: the median NIC's (every NIC's own is in the document).
  cluster.nic_bandwidth = median(rates);
  std::vector<double> dev;
  if (p.per_host >= 2) {
    dev = device_samples(p, o);
    cluster.device_bandwidth = static_cast<double>(o.bytes) / median(dev);
  }
  cluster.latency = latency_seconds(p, o);
  if (p.rank != 0) return;

  nlohmann::json doc = {{"meshcast_version", kVersion}};
  doc.update(cluster_to_json(cluster));
  doc["calibration"] = {{"host_names", p.host_names},
                        {"bytes", {small_bytes(o), o.bytes}},
                        {"repeats", o.repeats},
                        {"nic_seconds", {nics[0].small_seconds, nics[0].large_seconds}},
                        {"nics", nlohmann::json::array()},
                        {"dev_seconds", dev},
                        {"dev_measured", !dev.empty()},
                        {"pings", o.pings}};
  for (const FittedRate& nic : nics)
    doc["calibration"]["nics"].push_back(
        {{"gbps", nic.bytes_per_s * 8 / 1e9}, {"seconds", {nic.small_seconds, nic.large_seconds}}});
  if (!o.output.empty()) write_text_file(o.output, doc.dump(2) + "\n");
  if (o.json) {
    std::cout << doc.dump() << '\n';
    return;
  }
  fmt::print("calibrated {} hosts x {} ranks ({})\n", p.hosts(), p.per_host,
             fmt::join(p.host_names, ", "));
  const auto sizes = fmt::format("{} and {}", human_bytes(static_cast<double>(small_bytes(o))),
                                 human_bytes(static_cast<double>(o.bytes)));
  for (int nic = 0; nic < o.nics; ++nic)
    fmt::print(
        "  NIC{}        {:.4f} GB/s ({:.0f} Mbit/s)  slope of {} from host {} to {}, one way, "
        "medians of {}\n",
        o.nics > 1 ? std::to_string(nic) : std::string(" "), rates[nic] / 1e9, rates[nic] * 8 / 1e6,
        sizes, p.host_names[0], p.host_names[1], o.repeats);
  if (o.nics > 1)
    fmt::print(
        "  NICs        {} per host, device i on NIC i mod {}; kept the median, {:.0f} Mbit/s\n",
        o.nics, o.nics, cluster.nic_bandwidth * 8 / 1e6);
  if (dev.empty())
    fmt::print("  intra-host  not measured (1 rank per host); kept {:.3f} GB/s\n",
               cluster.device_bandwidth / 1e9);
  else
    fmt::print("  intra-host  {:.3f} GB/s  median of {}, {} from local 0 to 1 on {}\n",
               cluster.device_bandwidth / 1e9, o.repeats, human_bytes(static_cast<double>(o.bytes)),
               p.host_names[0]);
  fmt::print("  latency     {:.1f} us  half round trip of a 1-byte ping-pong, {} <-> {}\n",
             cluster.latency * 1e6, p.host_names[0], p.host_names[1]);
  if (!o.output.empty()) fmt::print("wrote {}\n", o.output);
}

}  // namespace

void add_calibrate_verb(CLI::App& app) {
  auto options = std::make_shared<CalibrateOptions>();
  auto* verb = app.add_subcommand(
      "calibrate",
      "Under mpirun (one rank per device, hosts filled in order): measure NIC, intra-host and "
      "latency figures and write a cluster JSON for the simulator (docs/testbed.md)");
  verb->add_option("--message-bytes", options->bytes,
                   "Bytes per host (NIC; its rate is fitted through this and a quarter of it) and "
                   "per pair (intra-host)")
      ->capture_default_str()
      ->check(in_range(1));
  verb->add_option("--repeats", options->repeats, "Timed repeats; the median is kept")
      ->capture_default_str()
      ->check(in_range(1));
  verb->add_option("--pings", options->pings, "Round trips per latency sample")
      ->capture_default_str()
      ->check(in_range(1));
  verb->add_option("--nics-per-host", options->nics,
                   "NICs per host, device i of a host on NIC i mod this: each NIC is measured "
                   "alone and the median NIC's rate kept")
      ->capture_default_str()
      ->check(in_range(1));
  verb->add_option("-o,--output", options->output, "Write the cluster JSON to this file");
  verb->add_flag("--json", options->json, "Print the cluster JSON instead of the summary");
  verb->callback([options] { calibrate(*options); });
}

}  // namespace meshcast::cli
