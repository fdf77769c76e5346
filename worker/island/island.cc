#include "worker/island/island.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "worker/island/rendezvous_store.h"

namespace diloco::island {
namespace {

// The local IPv4 address this host uses to reach `host`: the address gloo's pairs listen on,
// so that every rank can reach every other over the same network as rank 0.
absl::StatusOr<std::string> LocalAddressToward(const std::string& host, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("island rendezvous address ", host, ": ", gai_strerror(rc)));
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  const bool ok = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  if (!ok) return absl::UnavailableError(absl::StrCat("island: no route from this host to ", host));
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, ip, sizeof ip);
  return std::string(ip);
}

// Whether `host` resolves to a loopback address only (127.0.0.0/8).
bool IsLoopback(const std::string& host) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool loopback = true;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next)
    loopback &= (ntohl(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  freeaddrinfo(found);
  return loopback;
}

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// "host=H ip=I pid=P" then a newline and the config line.
struct Description {
  std::string host, ip, config;
  int64_t pid = 0;
};

Description Parse(const std::vector<char>& bytes) {
  Description d;
  const std::string text(bytes.begin(), bytes.end());
  const size_t nl = text.find('\n');
  d.config = nl == std::string::npos ? "" : text.substr(nl + 1);
  for (absl::string_view kv : absl::StrSplit(text.substr(0, nl), ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first == "host") d.host = p.second;
    if (p.first == "ip") d.ip = p.second;
    if (p.first == "pid") (void)absl::SimpleAtoi(p.second, &d.pid);
  }
  return d;
}

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

}  // namespace

std::string RankKey(int r) { return absl::StrCat("diloco/rank/", r); }
std::string ReadKey(int r) { return absl::StrCat("diloco/read/", r); }
std::string ShareKey(const std::string& key) { return absl::StrCat("diloco/share/", key); }

std::string FirstDifference(const std::string& mine, const std::string& theirs) {
  auto split = [](const std::string& s) {
    std::vector<std::pair<std::string, std::string>> out;
    for (absl::string_view kv : absl::StrSplit(s, ' ', absl::SkipEmpty()))
      out.push_back(absl::StrSplit(kv, absl::MaxSplits('=', 1)));
    return out;
  };
  const auto a = split(mine), b = split(theirs);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size() || i >= b.size() || a[i].first != b[i].first)
      return absl::StrCat("settings '", i < a.size() ? a[i].first : "(none)", "' vs '",
                          i < b.size() ? b[i].first : "(none)", "'");
    if (a[i].second != b[i].second)
      return absl::StrCat(a[i].first, " ", a[i].second, " vs ", b[i].second);
  }
  return "";
}

absl::StatusOr<std::unique_ptr<Island>> Island::Join(const IslandSpec& spec,
                                                     const std::string& config) {
  std::unique_ptr<Island> is(new Island());
  is->spec_ = spec;
  const std::string where = absl::StrCat(spec.master_host, ":", spec.master_port);
  if (!spec.keys && !spec.insecure && !IsLoopback(spec.master_host))
    return absl::FailedPreconditionError(absl::StrCat(
        "island rendezvous at ", where,
        ": not a loopback address, and this learner has no "
        "CURVE keys for it (give --curve_secret_key_file and --curve_server_key, as for the "
        "shards, or --island_insecure on a network no stranger reaches)"));
  if (spec.rank == 0) {
    auto server = StoreServer::Start(spec.master_host, spec.master_port, spec.keys);
    if (!server.ok()) return server.status();
    is->server_ = *std::move(server);
  }
  absl::StatusOr<std::string> ip = LocalAddressToward(spec.master_host, spec.master_port);
  if (!ip.ok()) return ip.status();
  is->store_ = std::make_unique<StoreClient>(spec.master_host, spec.master_port,
                                             spec.rendezvous_timeout, spec.keys);
  std::vector<std::string> keys;
  for (int r = 0; r < spec.size; ++r) keys.push_back(RankKey(r));
  try {
    const std::string me =
        absl::StrCat("host=", HostName(), " ip=", *ip, " pid=", getpid(), "\n", config);
    is->store_->set(RankKey(spec.rank), std::vector<char>(me.begin(), me.end()));
    is->store_->wait(keys);
  } catch (const gloo::Exception& e) {
    // Name the ranks that never arrived.
    std::vector<int> missing;
    try {
      for (int r = 0; r < spec.size; ++r)
        if (!is->store_->TryGet(RankKey(r))) missing.push_back(r);
    } catch (const gloo::Exception&) {
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "island of ", spec.size, " (", spec.source, "): rank ", spec.rank,
        " could not meet the others at ", where, " within ",
        absl::FormatDuration(spec.rendezvous_timeout),
        missing.empty() ? "" : absl::StrCat("; ranks never arrived: ", absl::StrJoin(missing, ",")),
        " (", e.what(), ")"));
  }
  std::vector<Description> all;
  try {
    for (int r = 0; r < spec.size; ++r) all.push_back(Parse(is->store_->get(RankKey(r))));
  } catch (const gloo::Exception& e) {
    return absl::UnavailableError(absl::StrCat("island of ", spec.size, " (", spec.source,
                                               "): rank ", spec.rank, " lost rank 0's store at ",
                                               where, " while reading the ranks' descriptions (",
                                               e.what(), ")"));
  }
  for (const Description& d : all) is->peers_.push_back(Peer{d.host, d.ip, d.pid});
  std::vector<std::string> differ;
  for (int r = 1; r < spec.size; ++r)
    if (std::string diff = FirstDifference(all[0].config, all[r].config); !diff.empty())
      differ.push_back(absl::StrCat("rank ", r, " (host ", all[r].host,
                                    ") differs from rank 0 (host ", all[0].host, ") in ", diff));
  if (!differ.empty()) {
    // Every rank reaches this verdict from the same descriptions, but rank 0's store ends with
    // rank 0: it leaves only once every rank has read them (or the rendezvous timeout passed).
    try {
      is->store_->set(ReadKey(spec.rank), {'1'});
      if (spec.rank == 0) {
        std::vector<std::string> read;
        for (int r = 0; r < spec.size; ++r) read.push_back(ReadKey(r));
        is->store_->wait(read);
      }
    } catch (const gloo::Exception&) {
    }
    return absl::FailedPreconditionError(
        absl::StrCat("island refused at rendezvous: ", absl::StrJoin(differ, "; "),
                     " (every rank must run the same model and flags)"));
  }
  try {
    gloo::transport::tcp::attr attr(ip->c_str());
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(spec.rank, spec.size);
    ctx->setTimeout(Millis(spec.rendezvous_timeout));
    gloo::rendezvous::PrefixStore prefix("gloo", *is->store_);
    ctx->connectFullMesh(prefix, dev);
    ctx->setTimeout(Millis(spec.timeout));
    is->ctx_ = std::move(ctx);
  } catch (const std::exception& e) {
    return is->Lost("connecting the island's ranks", e);
  }
  return is;
}

Island::~Island() = default;

absl::Status Island::Lost(const char* what, const std::exception& e) const {
  // gloo names the peer's address ("[10.0.1.2]:40123"): the ranks on that address.
  const std::string msg = e.what();
  std::set<int> lost;
  static const std::regex kIp(R"((\d+\.\d+\.\d+\.\d+))");
  for (auto it = std::sregex_iterator(msg.begin(), msg.end(), kIp); it != std::sregex_iterator();
       ++it)
    for (int r = 0; r < int(peers_.size()); ++r)
      if (r != spec_.rank && peers_[r].ip == (*it)[1].str() &&
          peers_[r].ip != peers_[spec_.rank].ip)
        lost.insert(r);
  if (lost.empty() && spec_.size == 2) lost.insert(1 - spec_.rank);
  std::vector<std::string> names;
  for (int r : lost)
    names.push_back(absl::StrCat("rank ", r, " (host ", peers_[r].host, ", ", peers_[r].ip,
                                 ", pid ", peers_[r].pid, ")"));
  return absl::UnavailableError(absl::StrCat(
      "island: rank ", spec_.rank, " lost ",
      names.empty() ? "a rank (which one gloo's message below does not tell)"
                    : absl::StrJoin(names, ", "),
      " while ", what, " (collective timeout ", absl::FormatDuration(spec_.timeout), "): ", msg));
}

absl::Status Island::AllReduceMean(std::span<float> v) {
  const absl::Time t0 = absl::Now();
  try {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(v.data(), v.size());
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  } catch (const std::exception& e) {
    return Lost("averaging gradients", e);
  }
  const float inv = 1.0f / float(spec_.size);
  for (float& x : v) x *= inv;
  reduce_time_ += absl::Now() - t0;
  ++reduces_;
  return absl::OkStatus();
}

namespace {
template <typename T>
void BroadcastFrom0(const std::shared_ptr<gloo::Context>& ctx, std::span<T> v,
                    absl::Duration timeout) {
  gloo::BroadcastOptions opts(ctx);
  opts.setOutput(v.data(), v.size());
  opts.setRoot(0);
  if (timeout > absl::ZeroDuration()) opts.setTimeout(Millis(timeout));
  gloo::broadcast(opts);
}
}  // namespace

absl::Status Island::Broadcast(std::span<float> v, absl::Duration timeout) {
  try {
    BroadcastFrom0(ctx_, v, timeout);
  } catch (const std::exception& e) {
    return Lost("receiving rank 0's parameters", e);
  }
  return absl::OkStatus();
}

absl::Status Island::Broadcast(std::span<int64_t> v, absl::Duration timeout) {
  try {
    BroadcastFrom0(ctx_, v, timeout);
  } catch (const std::exception& e) {
    return Lost("receiving rank 0's orders", e);
  }
  return absl::OkStatus();
}

absl::Status Island::CheckSame(uint64_t checksum, int64_t step) {
  std::vector<uint64_t> all(spec_.size);
  try {
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(&checksum, 1);
    opts.setOutput(all.data(), all.size());
    gloo::allgather(opts);
  } catch (const std::exception& e) {
    return Lost("comparing parameter checksums", e);
  }
  std::vector<std::string> differ;
  for (int r = 1; r < spec_.size; ++r)
    if (all[r] != all[0])
      differ.push_back(absl::StrCat("rank ", r, " (host ", peers_[r].host, ") holds ",
                                    absl::Hex(all[r], absl::kZeroPad16)));
  if (differ.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "island: the ranks' parameters diverged at step ", step, ": rank 0 (host ", peers_[0].host,
      ") holds ", absl::Hex(all[0], absl::kZeroPad16), ", ", absl::StrJoin(differ, ", ")));
}

absl::StatusOr<std::string> Island::ShareFromRank0(const std::string& key,
                                                   const std::string& bytes) {
  try {
    if (spec_.rank == 0) {
      store_->set(ShareKey(key), std::vector<char>(bytes.begin(), bytes.end()));
      return bytes;
    }
    store_->wait({ShareKey(key)}, Millis(spec_.timeout));
    const std::vector<char> got = store_->get(ShareKey(key));
    return std::string(got.begin(), got.end());
  } catch (const gloo::Exception& e) {
    return absl::DeadlineExceededError(
        absl::StrCat("island: rank ", spec_.rank, " of ", spec_.size, ": rank 0's ", key,
                     " did not arrive within ", absl::FormatDuration(spec_.timeout),
                     " (rank 0 died, hangs or failed before sending it): ", e.what()));
  }
}

}  // namespace diloco::island
