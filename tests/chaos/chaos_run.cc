#include "tests/chaos/chaos_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/event_log.h"
#include "schema/transport.h"
#include "tests/util/jsonl.h"

namespace diloco::testing {
namespace {

constexpr absl::Duration kTick = absl::Milliseconds(200);
constexpr absl::Duration kStatsTimeout = absl::Milliseconds(400);
constexpr absl::Duration kBackWithin = absl::Seconds(30);  // "survived": back at work by then
constexpr absl::Duration kMinChecked = absl::Seconds(3);   // invariant 1: faults this long
// A slow recovery: the restarted shard's socket is bound, and read only this much later, beyond
// the workers' shard timeout (their default 3 s), so that they reconnect meanwhile.
constexpr double kSlowReadMin_s = 4, kSlowReadMax_s = 6;
// Invariant 1: an untouched worker's training thread spends at least this share of its own
// median time in steps during a fault (it does not wait on the fleet). Measured as time in
// steps (the progress events' busy_s), not as steps per second: on a loaded box a worker that
// never waits still steps slower when it gets less of the CPU (chaos_short beside a study at
// load 15-20 stepped at 0.15-0.19 of its median rate with 0.95 of its time in steps).
constexpr double kMinBusyRatio = 0.5;
constexpr int kEvalAttempts = 3;  // a midway evaluation, when a live store changes under it
constexpr absl::Duration kEvalRetry = absl::Seconds(2);

// Header flips take a small share, half the rate of payload corruption.
const FaultRates kBackground{.drop = 0.002,
                             .duplicate = 0.002,
                             .delay = 0.01,
                             .corrupt = 0.001,
                             .replay = 0.005,
                             .header_flip = 0.0005};
const FaultRates kBurst{.drop = 0.05,
                        .duplicate = 0.05,
                        .delay = 0.1,
                        .corrupt = 0.02,
                        .replay = 0.03,
                        .header_flip = 0.01};

// The complete lines appended to a file since the last call.
class TailReader {
 public:
  void Reset(std::filesystem::path p) {
    path_ = std::move(p);
    offset_ = 0;
    partial_.clear();
  }
  std::vector<std::string> Lines() {
    std::vector<std::string> out;
    std::ifstream in(path_, std::ios::binary);
    if (!in) return out;
    in.seekg(offset_);
    std::string chunk((std::istreambuf_iterator<char>(in)), {});
    offset_ += chunk.size();
    partial_ += chunk;
    size_t start = 0;
    for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
      out.push_back(partial_.substr(start, nl - start));
    partial_.erase(0, start);
    return out;
  }

 private:
  std::filesystem::path path_;
  std::streamoff offset_ = 0;
  std::string partial_;
};

struct Sample {
  absl::Time t;
  double value;
  int run;          // worker run or shard incarnation count: differences only within one
  double busy = 0;  // a worker's seconds in steps so far (its progress events' busy_s)
};

// The value at or before `t` (nullopt before the first sample).
std::optional<Sample> At(const std::vector<Sample>& s, absl::Time t) {
  auto it = std::upper_bound(s.begin(), s.end(), t,
                             [](absl::Time x, const Sample& y) { return x < y.t; });
  if (it == s.begin()) return std::nullopt;
  return *std::prev(it);
}

bool IsWorkerFault(const std::string& k) { return k == "worker_kill" || k == "worker_freeze"; }
bool IsShardProcessFault(const std::string& k) {
  return k == "shard_kill" || k == "shard_slow_restart" || k == "shard_freeze" ||
         k == "shard_restart" || k == "kill_unanswered";
}
// A fault that keeps its target from work while it lasts (a link burst does not).
bool TakesOut(const std::string& k) {
  return IsWorkerFault(k) || IsShardProcessFault(k) || k == "disk_full";
}
bool IsRestart(const std::string& k) {
  return k == "worker_kill" || k == "shard_kill" || k == "shard_slow_restart" ||
         k == "shard_restart" || k == "kill_unanswered";
}

// What diloco-ctl eval printed for stores on the synthetic held-out set.
struct EvalOutput {
  double loss = 0, floor = 0;
  std::string tokens, versions;
};
std::optional<EvalOutput> ParseEval(const std::string& out) {
  static const std::regex re(
      "fragment versions ([0-9,]+)\\) on the synthetic held-out set: loss ([0-9.]+) over "
      "([0-9]+) tokens \\(entropy floor ([0-9.]+)");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return std::nullopt;
  return EvalOutput{std::stod(m[2]), std::stod(m[4]), m[3], m[1]};
}

class Run {
 public:
  explicit Run(const ChaosOptions& o) : o_(o), c_(o.cluster), rng_(o.cluster.seed) {
    steps_.resize(o.cluster.workers);
    rounds_.resize(o.cluster.shards);
    tails_.resize(o.cluster.workers);
    applied_since_faults_.assign(o.cluster.workers, std::vector<bool>(o.cluster.fragments, false));
    shard_runs_.assign(o.cluster.shards, 0);
    midway_.resize(std::max(0, o.midway_evals));
  }

  ChaosReport Go() {
    if (auto s = c_.Start(); !s.ok()) {
      Violate(4, absl::StrCat("the cluster did not start: ", s.message()));
      return r_;
    }
    r_.facts["tmpfs"] = c_.has_tmpfs() ? "shard 1's store on an 8 MiB tmpfs"
                                       : "no tmpfs (" + c_.tmpfs_error() + "): no disk_full";
    for (int w = 0; w < o_.cluster.workers; ++w) FollowWorker(w);
    for (int s = 0; s < o_.cluster.shards; ++s) c_.proxy(s).set_rates(kBackground);
    const absl::Time start = absl::Now(), end = start + o_.duration;
    start_ = start;
    for (size_t i = 0; i < midway_.size(); ++i)
      midway_[i].due = start + o_.duration * static_cast<double>(i + 1) /
                                   static_cast<double>(midway_.size() + 1);
    absl::Time next_fault = start + absl::Seconds(10);  // the fleet joins first
    absl::Time next_stats = start;
    while (absl::Now() < end && !Interrupted()) {
      absl::SleepFor(kTick);
      SampleWorkers();
      if (absl::Now() >= next_stats) {
        SampleShards();
        next_stats = absl::Now() + absl::Seconds(1);
      }
      EndDueFaults();
      WatchProcesses();
      PollMidway();
      if (absl::Now() >= next_fault) {
        InjectOne();
        next_fault = absl::Now() + absl::Seconds(std::exponential_distribution<double>(
                                       1.0 / absl::ToDoubleSeconds(o_.mean_fault_interval))(rng_));
      }
    }
    const absl::Time fault_loop_end = absl::Now();
    EndAllFaults();
    FinishMidway();
    SampleWorkers();              // what came before the faults' end
    faults_ended_ = absl::Now();  // invariant 9 counts Applied answers from here
    r_.facts["fault_seconds"] = absl::StrCat(absl::ToDoubleSeconds(o_.duration));
    // At least 5 s, and until every fault's target is back at work (at most kBackWithin after
    // the last fault's end), so that whether each fault was survived is seen whole.
    // And until every worker has had a push of every fragment applied (invariant 9), at most
    // kBackWithin after the faults' end.
    const absl::Time settle_min = absl::Now() + absl::Seconds(5);
    absl::Time settle_max = std::max(settle_min, faults_ended_ + kBackWithin);
    for (const auto& f : r_.faults) settle_max = std::max(settle_max, f.end + kBackWithin);
    while (absl::Now() < settle_max && !Interrupted()) {
      absl::SleepFor(kTick);
      SampleWorkers();
      if (absl::Now() >= next_stats) {
        SampleShards();
        next_stats = absl::Now() + absl::Seconds(1);
      }
      if (absl::Now() >= settle_min && AllBack() && AllCaughtUp()) break;
    }
    settled_ = absl::Now();
    r_.facts["settle_seconds"] =
        absl::StrFormat("%.1f", absl::ToDoubleSeconds(absl::Now() - settle_min) + 5);
    SampleShards();
    Stop();
    if (Interrupted()) {
      Violate(0, absl::StrFormat("interrupted %.0f s into the fault period: the invariants "
                                 "were not checked",
                                 absl::ToDoubleSeconds(fault_loop_end - start)));
      return r_;
    }
    Check();
    return r_;
  }

 private:
  bool Interrupted() const { return o_.interrupted && o_.interrupted->load(); }

  void Violate(int invariant, std::string what) {
    std::fprintf(stderr, "diloco-chaos: VIOLATION of invariant %d: %s\n", invariant, what.c_str());
    r_.violations.push_back({invariant, std::move(what)});
  }

  bool Active(const std::string& kind_prefix, int target) const {
    for (const auto* f : active_)
      if (f->target == target && f->kind.rfind(kind_prefix, 0) == 0) return true;
    return false;
  }
  int ActiveCount(bool (*pred)(const std::string&)) const {
    int n = 0;
    for (const auto* f : active_) n += pred(f->kind);
    return n;
  }

  // --- sampling ---------------------------------------------------------------------------
  // Reads worker w's events from its newest run on.
  void FollowWorker(int w) { tails_[w].Reset(c_.worker_events(w, c_.worker_runs(w) - 1)); }

  void SampleWorkers() {
    for (int w = 0; w < o_.cluster.workers; ++w) {
      for (const auto& line : tails_[w].Lines()) {
        const auto event = ParseJsonLine(line);
        if (!event) continue;
        const std::string name = EventName(*event);
        if (name == "applied" && absl::Now() > faults_ended_) {
          const int f = static_cast<int>(NumberAt(*event, "fragment").value_or(-1));
          if (f >= 0 && f < o_.cluster.fragments && !applied_since_faults_[w][f]) {
            applied_since_faults_[w][f] = true;
            slowest_catch_up_ = std::max(slowest_catch_up_, absl::Now() - faults_ended_);
          }
        }
        if (name != "progress") continue;
        // The event's own time, not when this loop read it (it reads late when starved).
        const auto wall = NumberAt(*event, "wall_time");
        const absl::Time t =
            wall ? absl::FromUnixMicros(static_cast<int64_t>(*wall * 1e6)) : absl::Now();
        if (const auto step = NumberAt(*event, "step"))
          steps_[w].push_back(
              {t, *step, c_.worker_runs(w), NumberAt(*event, "busy_s").value_or(0)});
      }
    }
  }

  // Invariant 9's condition: every worker has had a push of every fragment applied since the
  // faults ended.
  bool AllCaughtUp() const {
    for (const auto& w : applied_since_faults_)
      if (std::find(w.begin(), w.end(), false) != w.end()) return false;
    return true;
  }

  void SampleShards() {
    for (int s = 0; s < o_.cluster.shards; ++s) {
      if (Active("shard_", s) || Active("kill_", s)) continue;  // down or frozen
      auto stats = wire::RequestStats(c_.shard_endpoint(s), kStatsTimeout);
      if (!stats.ok()) continue;
      if (auto v = JsonNumber(*stats, "rounds"))
        rounds_[s].push_back({absl::Now(), *v, shard_runs_[s]});
      // The shard's push-weight guards (invariant 8's second line of defence), per incarnation.
      if (const auto j = ParseJsonLine(*stats)) {
        const auto numbers = NumbersOf(*j);
        for (const char* k : {"pushes_weight_capped", "pushes_norm_clipped"})
          if (const auto it = numbers.find(k); it != numbers.end())
            guards_[k][{s, shard_runs_[s]}] = it->second;
      }
    }
  }

  // --- midway evaluations of the global model (invariant 7) ------------------------------
  // diloco-ctl eval reads the live stores read-only (RocksDB's read-only open takes no lock
  // and writes nothing), one evaluation at a time, in the background of the fault loop.
  struct MidwayEval {
    absl::Time due = absl::InfiniteFuture(), launched;
    int attempts = 0;
    std::unique_ptr<Process> process;
    std::optional<EvalOutput> result;
    double at_s = 0, seconds = 0;  // into the fault period when launched; how long it took
    std::string error;             // the last failed attempt's
  };

  std::vector<std::string> EvalArgv() const {
    std::vector<std::string> argv = {o_.cluster.ctl_binary,
                                     "eval",
                                     "--model=" + o_.cluster.model,
                                     "--data=synthetic",
                                     "--eval_batches=64",
                                     absl::StrCat("--fragments=", o_.cluster.fragments),
                                     absl::StrCat("--shards=", o_.cluster.shards)};
    for (int s = 0; s < o_.cluster.shards; ++s) argv.push_back(c_.store(s).string());
    return argv;
  }

  void PollMidway() {
    for (size_t i = 0; i < midway_.size(); ++i) {
      auto& m = midway_[i];
      if (!m.process) continue;
      if (m.process->Running()) return;  // one at a time
      const int st = m.process->Wait(absl::ZeroDuration()).value_or(-1);
      m.process.reset();
      std::ifstream in(c_.log(absl::StrCat("eval_mid", i, ".", m.attempts)));
      const std::string out((std::istreambuf_iterator<char>(in)), {});
      m.result = st == 0 ? ParseEval(out) : std::nullopt;
      if (m.result) {
        m.seconds = absl::ToDoubleSeconds(absl::Now() - m.launched);
        std::fprintf(stderr, "diloco-chaos: global model at %.0f s: loss %.4f (%.1f s)\n", m.at_s,
                     m.result->loss, m.seconds);
      } else {
        m.error = absl::StrCat("status ", st, ": ", out.substr(0, 300));
        m.due = m.attempts < kEvalAttempts ? absl::Now() + kEvalRetry : absl::InfiniteFuture();
      }
    }
    for (size_t i = 0; i < midway_.size(); ++i) {
      auto& m = midway_[i];
      if (m.result || absl::Now() < m.due) continue;
      m.due = absl::InfiniteFuture();
      m.launched = absl::Now();
      m.at_s = absl::ToDoubleSeconds(m.launched - start_);
      const auto log = c_.log(absl::StrCat("eval_mid", i, ".", ++m.attempts));
      std::filesystem::remove(log);
      m.process = std::make_unique<Process>(EvalArgv(), log.string());
      return;
    }
  }

  // At the end of the fault period: the evaluation under way is waited for; none is started.
  void FinishMidway() {
    for (auto& m : midway_) {
      if (m.process) (void)m.process->Wait(absl::Minutes(5));
      m.due = absl::InfiniteFuture();
    }
    PollMidway();
  }

  // --- faults -----------------------------------------------------------------------------
  FaultWindow& Open(const std::string& kind, int target, absl::Duration length) {
    r_.faults.push_back({kind, target, absl::Now(), absl::Now() + length});
    std::fprintf(stderr, "diloco-chaos: %s %d for %s\n", kind.c_str(), target,
                 absl::FormatDuration(length).c_str());
    active_.push_back(&r_.faults.back());
    return r_.faults.back();
  }

  absl::Duration Uniform(double lo_s, double hi_s) {
    return absl::Seconds(std::uniform_real_distribution<double>(lo_s, hi_s)(rng_));
  }

  int Pick(int n, const char* prefix) {
    std::vector<int> free;
    for (int i = 0; i < n; ++i)
      if (!Active(prefix, i)) free.push_back(i);
    if (free.empty()) return -1;
    return free[rng_() % free.size()];
  }

  void RestartShard(int s, const std::vector<std::string>& extra = {}) {
    ++shard_runs_[s];
    if (auto st = c_.StartShard(s, extra); !st.ok())
      Violate(4, absl::StrCat("shard ", s, " did not come back from its store: ", st.message()));
  }

  void InjectOne() {
    static const std::vector<std::pair<std::string, double>> kWeights = {
        {"worker_kill", 2},        {"worker_freeze", 2},  {"shard_kill", 1.5},
        {"shard_slow_restart", 1}, {"shard_freeze", 1.5}, {"shard_restart", 1},
        {"kill_unanswered", 1},    {"link_burst", 3},     {"disk_full", 1}};
    // Every kind once first, in a seeded order, so that a short run covers them all; then
    // at random by weight. A kind whose target is busy is tried again later.
    if (!started_kinds_) {
      started_kinds_ = true;
      for (const auto& [k, _] : kWeights) first_kinds_.push_back(k);
      std::shuffle(first_kinds_.begin(), first_kinds_.end(), rng_);
    }
    std::string kind;
    const bool owed = !first_kinds_.empty();
    if (owed) {
      kind = first_kinds_.front();
      first_kinds_.pop_front();
    } else {
      double total = 0;
      for (const auto& [_, w] : kWeights) total += w;
      double x = std::uniform_real_distribution<double>(0, total)(rng_);
      for (const auto& [k, w] : kWeights)
        if ((x -= w) < 0 && kind.empty()) kind = k;
      if (kind.empty()) kind = kWeights.back().first;
    }
    const size_t before = r_.faults.size();
    Inject(kind);
    const bool possible = kind != "disk_full" || c_.has_tmpfs();
    if (owed && r_.faults.size() == before && possible) first_kinds_.push_back(kind);  // busy
  }

  void Inject(const std::string& kind) {
    const int W = o_.cluster.workers, S = o_.cluster.shards;
    if (IsWorkerFault(kind)) {
      if (ActiveCount(IsWorkerFault) >= 2) return;
      const int w = Pick(W, "worker_");
      if (w < 0) return;
      if (kind == "worker_kill") {
        c_.worker(w).Signal(SIGKILL);
        Open(kind, w, Uniform(1, 3));
      } else {
        c_.worker(w).Signal(SIGSTOP);
        Open(kind, w, Uniform(2, 6));
      }
    } else if (IsShardProcessFault(kind)) {
      if (ActiveCount(IsShardProcessFault) >= 1) return;
      const int s = Pick(S, "shard_");
      if (s < 0 || Active("kill_", s) || Active("disk_full", s)) return;
      if (kind == "shard_kill") {
        c_.shard(s).Signal(SIGKILL);
        (void)c_.shard(s).Wait(absl::Seconds(10));
        auto& f = Open(kind, s, absl::Seconds(3));
        RestartShard(s);
        f.note = "restarted on its store";
      } else if (kind == "shard_slow_restart") {
        // A recovery that keeps the port bound and unread past the workers' shard timeout, as
        // a large store's does: they reconnect meanwhile, and what they left queued on the
        // connections they closed is read only after it. The driver does not wait for it.
        c_.shard(s).Signal(SIGKILL);
        (void)c_.shard(s).Wait(absl::Seconds(10));
        const absl::Duration read_delay = Uniform(kSlowReadMin_s, kSlowReadMax_s);
        Open(kind, s, read_delay + absl::Seconds(2)).note =
            absl::StrFormat("read after %.1f s", absl::ToDoubleSeconds(read_delay));
        ++shard_runs_[s];
        c_.LaunchShard(
            s, {absl::StrCat("--test_read_delay=", absl::ToInt64Milliseconds(read_delay), "ms")});
      } else if (kind == "shard_freeze") {
        c_.shard(s).Signal(SIGSTOP);
        Open(kind, s, Uniform(1, 5));
      } else if (kind == "shard_restart") {
        c_.shard(s).Signal(SIGTERM);
        const auto st = c_.shard(s).Wait(absl::Seconds(30));
        if (st != 0)
          Violate(0,
                  absl::StrCat("shard ", s, " did not stop cleanly on SIGTERM: status ",
                               st.value_or(-1), ": ", c_.Tail(c_.log(absl::StrCat("shard", s)))));
        auto& f = Open(kind, s, absl::Seconds(3));
        RestartShard(s);
        f.note = "SIGTERM, restarted";
      } else {
        c_.shard(s).Signal(SIGKILL);
        (void)c_.shard(s).Wait(absl::Seconds(10));
        const int k = 1 + static_cast<int>(rng_() % 6);
        // Ends when the shard has killed itself and is back (WatchProcesses), or after 30 s.
        Open(kind, s, absl::Seconds(30)).note = absl::StrCat("armed after ", k, " answers");
        RestartShard(s, {absl::StrCat("--test_kill_after_applied=", k)});
      }
    } else if (kind == "link_burst") {
      const int s = Pick(S, "link_");
      if (s < 0) return;
      c_.proxy(s).set_rates(kBurst);
      Open(kind, s, Uniform(3, 8));
    } else if (kind == "disk_full") {
      const int s = c_.tmpfs_shard();
      if (!c_.has_tmpfs() || Active("disk_", s) || Active("shard_", s) || Active("kill_", s))
        return;
      Open(kind, s, Uniform(3, 6)).note = FillDisk();
    }
  }

  std::string FillDisk() {
    const auto filler = c_.tmpfs_dir() / "filler";
    const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return "could not create the filler";
    std::vector<char> block(64 << 10, 'x');
    uint64_t written = 0;
    for (;;) {
      const ssize_t n = ::write(fd, block.data(), block.size());
      if (n <= 0) break;  // ENOSPC
      written += n;
    }
    ::close(fd);
    return absl::StrCat("filled with ", written >> 10, " KiB");
  }

  void End(FaultWindow& f) {
    const int t = f.target;
    if (f.kind == "worker_kill") {
      (void)c_.worker(t).Wait(absl::Seconds(5));
      c_.StartWorker(t);
      FollowWorker(t);
    } else if (f.kind == "worker_freeze") {
      c_.worker(t).Signal(SIGCONT);
    } else if (f.kind == "shard_freeze") {
      c_.shard(t).Signal(SIGCONT);
    } else if (f.kind == "shard_slow_restart") {
      if (auto st = c_.AwaitShard(t); !st.ok())
        Violate(4, absl::StrCat("shard ", t, " did not come back from its store: ", st.message()));
    } else if (f.kind == "kill_unanswered") {
      if (c_.shard(t).Running()) {  // not triggered in time: no push reached it
        f.note += ", not triggered";
        c_.shard(t).Signal(SIGKILL);
        (void)c_.shard(t).Wait(absl::Seconds(10));
      }
      RestartShard(t);
    } else if (f.kind == "link_burst") {
      c_.proxy(t).set_rates(kBackground);
    } else if (f.kind == "disk_full") {
      std::filesystem::remove(c_.tmpfs_dir() / "filler");
    }
    f.end = absl::Now();
  }

  void EndDueFaults() {
    for (auto it = active_.begin(); it != active_.end();) {
      if (absl::Now() >= (*it)->end) {
        End(**it);
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void EndAllFaults() {
    for (auto* f : active_) End(*f);
    active_.clear();
    for (int s = 0; s < o_.cluster.shards; ++s) c_.proxy(s).set_rates({});
  }

  // A process that exited on its own: the armed shard's suicide (expected), or a failure.
  void WatchProcesses() {
    for (int s = 0; s < o_.cluster.shards; ++s) {
      if (c_.shard(s).Running()) continue;
      const int status = c_.shard(s).Wait(absl::ZeroDuration()).value_or(-1);
      FaultWindow* armed = nullptr;
      for (auto* f : active_)
        if (f->kind == "kill_unanswered" && f->target == s) armed = f;
      if (armed && status == 128 + SIGKILL) {
        armed->note += ", killed itself with answers unsent";
        armed->end = absl::Now();  // End() restarts it on the next pass
        continue;
      }
      if (Active("shard_", s)) continue;  // being restarted by the fault itself
      Violate(0, absl::StrCat("shard ", s, " exited by itself with status ", status, ": ",
                              c_.Tail(c_.log(absl::StrCat("shard", s)))));
      RestartShard(s);
    }
    for (int w = 0; w < o_.cluster.workers; ++w) {
      if (c_.worker(w).Running() || Active("worker_kill", w)) continue;
      const int status = c_.worker(w).Wait(absl::ZeroDuration()).value_or(-1);
      Violate(0, absl::StrCat("worker ", w, " exited by itself with status ", status, ": ",
                              c_.Tail(c_.log(absl::StrCat("worker", w)))));
      c_.StartWorker(w);
      FollowWorker(w);
    }
  }

  // --- the end ----------------------------------------------------------------------------
  void Stop() {
    for (int s = 0; s < o_.cluster.shards; ++s) r_.messages += c_.proxy(s).counts();
    // Workers first (they drain into the shards), then the shards (a final checkpoint each).
    StopAll("worker", o_.cluster.workers, [&](int w) -> Process& { return c_.worker(w); });
    StopAll("shard", o_.cluster.shards, [&](int s) -> Process& { return c_.shard(s); });
  }

  // SIGTERM to each, then each must exit with status 0 within a minute.
  void StopAll(const std::string& role, int n, const std::function<Process&(int)>& process) {
    for (int i = 0; i < n; ++i) process(i).Signal(SIGTERM);
    for (int i = 0; i < n; ++i) {
      const auto st = process(i).Wait(absl::Seconds(60));
      if (st != 0)
        Violate(0, absl::StrCat(role, " ", i, " did not stop cleanly on SIGTERM: status ",
                                st.value_or(-1), ": ", c_.Tail(c_.log(absl::StrCat(role, i)))));
    }
  }

  // Runs a command to its end; returns its exit status and output.
  std::pair<int, std::string> Command(const std::vector<std::string>& argv,
                                      const std::string& name) {
    const auto log = c_.log(name);
    std::filesystem::remove(log);
    Process p(argv, log.string());
    const int st = p.Wait(absl::Minutes(5)).value_or(-1);
    std::ifstream in(log);
    return {st, std::string((std::istreambuf_iterator<char>(in)), {})};
  }

  void Check() {
    CheckNobodyWaits();
    CheckTrails();
    CheckStores();
    CheckProgress();
    CheckCaughtUp();
  }

  // Invariant 9: nobody is left behind. After the faults, every worker (its last run) has a
  // push of every fragment applied within kBackWithin: a worker that lost track of a fragment
  // (an ask for it that a restart, a refusal or a lost connection took, never made again) no
  // longer trains it with the fleet, though it steps on and every shard closes rounds.
  void CheckCaughtUp() {
    for (int w = 0; w < o_.cluster.workers; ++w) {
      std::vector<std::string> behind;
      for (int f = 0; f < o_.cluster.fragments; ++f)
        if (!applied_since_faults_[w][f]) behind.push_back(absl::StrCat(f));
      if (!behind.empty())
        Violate(9, absl::StrFormat("worker %d: no push of fragment %s applied in the %.0f s "
                                   "after the faults ended",
                                   w, absl::StrJoin(behind, ", "),
                                   absl::ToDoubleSeconds(settled_ - faults_ended_)));
    }
    r_.facts["slowest_catch_up_after_faults"] =
        absl::StrFormat("%.1f s", absl::ToDoubleSeconds(slowest_catch_up_));
  }

  // Invariant 1.
  void CheckNobodyWaits() {
    const int W = o_.cluster.workers, S = o_.cluster.shards;
    // Each worker's median step rate and median share of time in steps, over its intervals.
    std::vector<double> typical(W, 0), typical_busy(W, 0);
    auto median = [](std::vector<double> v) {
      if (v.empty()) return 0.0;
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2];
    };
    for (int w = 0; w < W; ++w) {
      std::vector<double> rates, busy;
      for (size_t i = 1; i < steps_[w].size(); ++i) {
        const Sample &a = steps_[w][i - 1], &b = steps_[w][i];
        if (b.run != a.run || b.t <= a.t) continue;
        const double dt = absl::ToDoubleSeconds(b.t - a.t);
        rates.push_back((b.value - a.value) / dt);
        busy.push_back((b.busy - a.busy) / dt);
      }
      typical[w] = median(std::move(rates));
      typical_busy[w] = median(std::move(busy));
    }
    uint64_t checked = 0;
    for (const auto& f : r_.faults) {
      const bool worker_fault = IsWorkerFault(f.kind);
      if (!worker_fault && !IsShardProcessFault(f.kind)) continue;
      if (f.end - f.start < kMinChecked) continue;
      auto touched = [&](const char* prefix, int target) {  // by a fault of its own meanwhile
        for (const auto& g : r_.faults)
          if (&g != &f && g.target == target && g.kind.rfind(prefix, 0) == 0 &&
              g.start < f.end + absl::Seconds(1) && g.end > f.start - absl::Seconds(1))
            return true;
        return false;
      };
      for (int w = 0; w < W; ++w) {
        if ((worker_fault && w == f.target) || touched("worker_", w) || typical[w] <= 0 ||
            typical_busy[w] <= 0)
          continue;
        const auto a = At(steps_[w], f.start), b = At(steps_[w], f.end);
        if (!a || !b || a->run != b->run || b->t <= a->t) continue;
        const double dt = absl::ToDoubleSeconds(b->t - a->t);
        const double rate = (b->value - a->value) / dt / typical[w];
        const double busy = (b->busy - a->busy) / dt / typical_busy[w];
        r_.min_step_ratio = std::min(r_.min_step_ratio, rate);
        r_.min_busy_ratio = std::min(r_.min_busy_ratio, busy);
        ++checked;
        if (b->value <= a->value || busy < kMinBusyRatio)
          Violate(1, absl::StrFormat("worker %d spent %.2f of its median share of time in steps "
                                     "(%.0f steps, %.2f of its median rate) during %s of %d "
                                     "(%.1f s)",
                                     w, busy, b->value - a->value, rate, f.kind, f.target,
                                     absl::ToDoubleSeconds(f.end - f.start)));
      }
      if (!worker_fault) continue;
      for (int s = 0; s < S; ++s) {
        if (touched("shard_", s) || touched("kill_", s) || touched("disk_", s)) continue;
        const auto a = At(rounds_[s], f.start), b = At(rounds_[s], f.end);
        if (!a || !b || a->run != b->run || b->t - a->t < absl::Seconds(2)) continue;
        ++checked;
        if (b->value <= a->value)
          Violate(1, absl::StrFormat("shard %d closed no round in %.1f s while worker %d was "
                                     "down (%s)",
                                     s, absl::ToDoubleSeconds(b->t - a->t), f.target, f.kind));
      }
    }
    r_.facts["nobody_waits_checks"] = absl::StrCat(checked);
    if (checked == 0)
      Violate(1, "no worker or shard was checked during any fault of >= 3 s: nothing was checked");
    int triggered = 0, armed = 0, filled = 0;
    for (const auto& f : r_.faults) {
      armed += f.kind == "kill_unanswered";
      triggered += f.note.find("killed itself") != std::string::npos;
      filled += f.kind == "disk_full" && f.note.rfind("filled", 0) == 0;
    }
    r_.facts["kill_unanswered_triggered"] = absl::StrCat(triggered, " of ", armed);
    r_.facts["disk_full_filled"] = absl::StrCat(filled);
    if (c_.has_tmpfs())  // what the full disk did: checkpoints refused, then resumed
      r_.facts["disk_full_checkpoint_failures"] = absl::StrCat(
          ReadEvents(c_.config().dir / absl::StrCat("shard", c_.tmpfs_shard(), ".jsonl"),
                     "checkpoint_failed")
              .size());
    // Survived: the target was back at work within kBackWithin of the fault's end.
    ComputeSurvived();
    int cut = 0;
    for (const auto& f : r_.faults) {
      cut += f.cut_short;
      if (f.survived || f.cut_short) continue;
      Violate(IsRestart(f.kind) ? 4 : 0,
              absl::StrFormat("%s %d %s: not back at work within %.0f s of the fault's end (%s)",
                              IsWorkerFault(f.kind) ? "worker" : "shard", f.target,
                              IsRestart(f.kind) ? "restarted" : "after its fault",
                              absl::ToDoubleSeconds(kBackWithin), f.kind));
    }
    r_.facts["faults_cut_short_by_another"] = absl::StrCat(cut);
  }

  // Each fault's `survived`: its target back at work (a worker's step, a shard's round closed,
  // or its restart seen) after the fault's end, within kBackWithin and before another fault
  // took the same target out (else `cut_short`, when that came first: that fault's own
  // survival is checked instead).
  void ComputeSurvived() {
    for (auto& f : r_.faults) {
      const bool worker = IsWorkerFault(f.kind);
      absl::Time by = f.end + kBackWithin;
      for (const auto& g : r_.faults)
        if (&g != &f && IsWorkerFault(g.kind) == worker && g.target == f.target && g.end > f.end &&
            TakesOut(g.kind))  // still under way at f's end, or after it
          by = std::min(by, std::max(g.start, f.end));
      if (worker) {
        const auto& s = steps_[f.target];
        f.survived = std::any_of(s.begin(), s.end(),
                                 [&](const Sample& x) { return x.t > f.end && x.t <= by; });
      } else {
        const auto& s = rounds_[f.target];
        const auto before = At(s, f.start);
        f.survived = std::any_of(s.begin(), s.end(), [&](const Sample& x) {
          return x.t > f.end && x.t <= by &&
                 (!before || x.value > before->value || x.run != before->run);
        });
      }
      f.cut_short = !f.survived && by < f.end + kBackWithin;
    }
  }

  bool AllBack() {
    ComputeSurvived();
    return std::all_of(r_.faults.begin(), r_.faults.end(),
                       [](const FaultWindow& f) { return f.survived || f.cut_short; });
  }

  // Invariants 2, 3, 6, 8 and 5.
  void CheckTrails() {
    uint64_t applied = 0, rolled_back = 0, incarnations = 0;
    std::vector<bool> per_round;
    for (int s = 0; s < o_.cluster.shards; ++s) per_round.push_back(c_.per_round(s));
    std::vector<PushClaim> applied_claims, sent_claims;  // invariant 8
    for (int s = 0; s < o_.cluster.shards; ++s) {
      AuditSummary sum;
      const auto lines = ReadAudit(c_.audit(s));
      for (auto& v : CheckShardAudit(lines, c_.per_round(s), &sum))
        Violate(v.invariant, absl::StrCat("shard ", s, ": ", v.what));
      for (auto& c : AppliedClaims(absl::StrCat("shard ", s), lines))
        applied_claims.push_back(std::move(c));
      applied += sum.applied;
      rolled_back += sum.rolled_back;
      incarnations += sum.incarnations;
    }
    uint64_t duplicates = 0, restarts_seen = 0, reanchors = 0, reanchored_steps = 0;
    for (int w = 0; w < o_.cluster.workers; ++w) {
      for (int run = 0; run < c_.worker_runs(w); ++run) {
        const auto file = c_.worker_events(w, run);
        for (auto& c : ReadPushClaims(file, absl::StrCat("worker ", w, " run ", run)))
          sent_claims.push_back(std::move(c));
        for (const auto& e : ReadEvents(file, "reanchor")) {
          ++reanchors;
          if (const auto it = e.find("steps"); it != e.end())
            reanchored_steps += static_cast<uint64_t>(it->second);
        }
        std::vector<WorkerApplied> seen;
        for (const auto& e : ReadEvents(file, "applied"))
          seen.push_back({static_cast<uint64_t>(e.at("shard")),
                          static_cast<uint64_t>(e.at("fragment")),
                          static_cast<uint64_t>(e.at("version"))});
        for (auto& v :
             CheckWorkerVersions(absl::StrCat("worker ", w, " run ", run), seen, per_round))
          Violate(v.invariant, v.what);
        duplicates += ReadEvents(file, "duplicate").size();
        restarts_seen += ReadEvents(file, "shard_restart").size();
      }
    }
    r_.facts["applied_pushes_audited"] = absl::StrCat(applied);
    r_.facts["applied_rolled_back_periodic"] = absl::StrCat(rolled_back);
    r_.facts["shard_incarnations"] = absl::StrCat(incarnations);
    r_.facts["duplicate_answers_to_workers"] = absl::StrCat(duplicates);
    r_.facts["shard_restarts_seen_by_workers"] = absl::StrCat(restarts_seen);
    CheckPushSteps(applied_claims, sent_claims);
    r_.facts["push_reanchors"] =
        absl::StrCat(reanchors, " (", reanchored_steps, " steps of drift dropped)");
    if (r_.messages.replay_answered > 0)
      Violate(5, absl::StrCat(r_.messages.replay_answered,
                              " replayed messages were answered other than with an Error"));
  }

  // Invariant 8, and what the shards' guards did.
  void CheckPushSteps(const std::vector<PushClaim>& applied, const std::vector<PushClaim>& sent) {
    const auto& cc = c_.config();
    const uint64_t bound = cc.max_push_steps();
    r_.facts["push_steps_bound"] =
        absl::StrCat(bound, " (carry_max ", cc.carry_max, " x H ", cc.inner_steps, ")");
    auto check = [&](const std::string& what, const std::vector<PushClaim>& claims,
                     const std::string& fact) {
      ClaimSummary sum;
      for (auto& v : CheckPushClaims(what, claims, bound, &sum)) Violate(v.invariant, v.what);
      r_.facts[fact] = sum.with_steps == 0
                           ? absl::StrCat("unknown (none of ", sum.pushes, " said)")
                           : absl::StrCat(sum.max_steps, " steps, ", sum.max_tokens, " tokens (",
                                          sum.with_steps, " of ", sum.pushes, " said)");
    };
    check("pushes applied in the shards' audit trails", applied, "push_claim_max_applied");
    check("pushes in the workers' sync events", sent, "push_claim_max_sent");
    for (const char* k : {"pushes_weight_capped", "pushes_norm_clipped"}) {
      const auto it = guards_.find(k);
      if (it == guards_.end()) {
        r_.facts[k] = "not in the shards' stats";
        continue;
      }
      double n = 0;  // the last value seen of each incarnation
      for (const auto& [_, v] : it->second) n += v;
      r_.facts[k] = absl::StrCat(static_cast<uint64_t>(n));
    }
  }

  // Invariant 4.
  void CheckStores() {
    for (int s = 0; s < o_.cluster.shards; ++s) {
      auto [st, out] = Command({o_.cluster.ctl_binary, "show", "--store=" + c_.store(s).string()},
                               absl::StrCat("show", s));
      if (st != 0)
        Violate(4, absl::StrCat("store of shard ", s, " fails vetting (status ", st, "): ", out));
    }
  }

  // Invariant 7.
  void CheckProgress() {
    const auto theta0 = c_.config().dir / "theta0.jsonl";
    auto [st0, out0] =
        Command({o_.cluster.worker_binary, "--model=" + o_.cluster.model, "--init_seed=1234",
                 "--steps=1", "--eval_batches=64", "--metrics_jsonl=" + theta0.string()},
                "theta0");
    const auto done = ReadEvents(theta0, "done");
    const absl::Time t0 = absl::Now();
    auto [st, out] = Command(EvalArgv(), "eval");
    const double final_seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    const auto e = st == 0 ? ParseEval(out) : std::nullopt;
    if (st0 != 0 || done.empty() || !done[0].count("eval_initial") || !e) {
      Violate(7, absl::StrCat("could not evaluate: theta(0) status ", st0, ", eval status ", st,
                              ": ", out));
      return;
    }
    ProgressFigures f;
    f.initial = done[0].at("eval_initial");
    f.floor = e->floor;
    f.final = e->loss;
    std::string midway, failures;
    double midway_seconds = 0;
    for (const auto& m : midway_) {
      f.midway.push_back(m.result ? std::optional<double>(m.result->loss) : std::nullopt);
      if (m.result) {
        absl::StrAppendFormat(&midway, "%s%.4f at %.0f s (%.1f s to evaluate)",
                              midway.empty() ? "" : ", ", m.result->loss, m.at_s, m.seconds);
        midway_seconds += m.seconds;
      } else {
        absl::StrAppend(&midway, midway.empty() ? "" : ", ", "failed after ", m.attempts,
                        " attempts");
      }
      if (m.attempts > 1 || !m.result)
        absl::StrAppend(&failures, failures.empty() ? "" : "; ", m.attempts - !!m.result,
                        " failed, the last: ", m.error);
    }
    const double closed = (f.initial - f.final) / (f.initial - f.floor);
    r_.facts["loss_theta0"] = absl::StrFormat("%.4f", f.initial);
    r_.facts["loss_final"] = absl::StrFormat("%.4f", f.final);
    r_.facts["loss_final_eval_seconds"] = absl::StrFormat("%.1f", final_seconds);
    if (!midway_.empty()) {
      r_.facts["loss_midway"] = midway;
      r_.facts["loss_midway_eval_seconds"] = absl::StrFormat("%.1f", midway_seconds);
      r_.facts["loss_regression_allowed"] = absl::StrFormat("%.2f", kMaxLossRegression);
      if (!failures.empty()) r_.facts["loss_midway_failures"] = failures;
    }
    r_.facts["entropy_floor"] = absl::StrFormat("%.4f", f.floor);
    r_.facts["eval_tokens"] = e->tokens;
    r_.facts["gap_closed"] = absl::StrFormat("%.3f", closed);
    for (auto& v : testing::CheckProgress(f)) Violate(v.invariant, v.what);
  }

  const ChaosOptions& o_;
  ChaosCluster c_;
  std::mt19937_64 rng_;
  ChaosReport r_;
  std::vector<FaultWindow*> active_;
  bool started_kinds_ = false;
  std::deque<std::string> first_kinds_;  // kinds not yet injected once
  std::vector<std::vector<Sample>> steps_, rounds_;
  std::vector<TailReader> tails_;
  // Invariant 9: per worker and fragment, whether a push of it was applied since faults_ended_.
  std::vector<std::vector<bool>> applied_since_faults_;
  absl::Time faults_ended_ = absl::InfiniteFuture(), settled_;
  absl::Duration slowest_catch_up_;
  std::vector<int> shard_runs_;
  absl::Time start_;  // of the fault period
  std::vector<MidwayEval> midway_;
  // Per counter, per (shard, incarnation): the last value seen.
  std::map<std::string, std::map<std::pair<int, int>, double>> guards_;
};

}  // namespace

ChaosReport RunChaos(const ChaosOptions& o) {
  Run run(o);
  return run.Go();
}

std::string ChaosReport::Text() const {
  std::map<std::string, std::pair<int, int>> by_kind;  // injected, survived
  for (const auto& f : faults) {
    auto& k = by_kind[f.kind];
    ++k.first;
    k.second += f.survived;
  }
  std::string t = "fault                 injected  survived\n";
  int total = 0, survived = 0;
  for (const auto& [k, n] : by_kind) {
    absl::StrAppendFormat(&t, "%-20s %9d %9d\n", k, n.first, n.second);
    total += n.first;
    survived += n.second;
  }
  absl::StrAppendFormat(&t, "%-20s %9d %9d\n", "processes and disk", total, survived);
  const auto& m = messages;
  absl::StrAppendFormat(&t,
                        "messages: %d forwarded, %d dropped, %d duplicated, %d delayed, %d "
                        "corrupted, %d header-flipped, %d replayed (%d refused, %d answered)\n",
                        m.forwarded, m.dropped, m.duplicated, m.delayed, m.corrupted,
                        m.header_flipped, m.replayed, m.replay_refused, m.replay_answered);
  absl::StrAppendFormat(&t, "faults in all: %d\n", total + static_cast<int>(m.faults()));
  for (const auto& [k, v] : facts) absl::StrAppend(&t, k, ": ", v, "\n");
  if (min_busy_ratio < 1e9)
    absl::StrAppendFormat(&t,
                          "tightest share of time in steps during a fault: %.2f of the median "
                          "(bound %.2f); tightest step rate %.2f of the median (not bounded: "
                          "it follows the CPU share)\n",
                          min_busy_ratio, kMinBusyRatio, min_step_ratio);
  absl::StrAppendFormat(&t, "violations: %d\n", violations.size());
  for (const auto& v : violations)
    absl::StrAppend(&t, "  invariant ", v.invariant, ": ", v.what, "\n");
  return t;
}

std::string ChaosReport::Json() const {
  using J = nlohmann::ordered_json;
  std::map<std::string, std::pair<int, int>> counts;  // kind -> injected, survived
  for (const auto& f : faults) {
    ++counts[f.kind].first;
    counts[f.kind].second += f.survived;
  }
  J by_kind = J::object();
  for (const auto& [kind, n] : counts)
    by_kind[kind] = {{"injected", n.first}, {"survived", n.second}};
  J fault_list = J::array();
  for (const auto& f : faults)  // an open fault's seconds are infinite: null
    fault_list.push_back({{"kind", f.kind},
                          {"target", f.target},
                          {"seconds", absl::ToDoubleSeconds(f.end - f.start)},
                          {"survived", f.survived},
                          {"cut_short", f.cut_short},
                          {"note", f.note}});
  J found = J::array();
  for (const auto& v : violations) found.push_back({{"invariant", v.invariant}, {"what", v.what}});
  const J report = {{"faults", by_kind},
                    {"messages",
                     {{"forwarded", messages.forwarded},
                      {"dropped", messages.dropped},
                      {"duplicated", messages.duplicated},
                      {"delayed", messages.delayed},
                      {"corrupted", messages.corrupted},
                      {"header_flipped", messages.header_flipped},
                      {"replayed", messages.replayed},
                      {"replay_answered", messages.replay_answered}}},
                    {"facts", facts},
                    {"fault_list", fault_list},
                    {"violations", found}};
  return JsonDump(report);
}

}  // namespace diloco::testing
