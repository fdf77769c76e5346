// Whole processes on 127.0.0.1: shards and workers train together, a SIGKILLed worker stalls
// nobody, a SIGKILLed shard restarts from its RocksDB store with the same versions, and a
// worker given the shards out of order is told so and exits 2 (it does not train unsynced).
#include "tests/integration/cluster.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace diloco::testing {
namespace {

struct Cluster : LocalShards {
  std::vector<std::unique_ptr<Process>> workers;

  std::filesystem::path Jsonl(int w) const { return dir / absl::StrCat("worker", w, ".jsonl"); }

  std::unique_ptr<Process> StartWorker(int w, int num_workers) {
    std::vector<std::string> argv = TinyWorkerArgs(w, endpoints, Jsonl(w));
    argv.push_back(absl::StrCat("--num_workers=", num_workers));
    argv.push_back("--duration=120s");  // a worker a failed test leaves behind stops by itself
    return std::make_unique<Process>(argv, (dir / absl::StrCat("worker", w, ".log")).string());
  }
};

// Latest progress event of a worker, waiting until `pred` holds.
std::optional<Event> WaitForEvent(const std::filesystem::path& jsonl,
                                  const std::function<bool(const Event&)>& pred,
                                  absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    auto ev = ReadEvents(jsonl, "progress");
    if (!ev.empty() && pred(ev.back())) return ev.back();
    absl::SleepFor(absl::Milliseconds(100));
  }
  return std::nullopt;
}

// Inner steps per second of a worker over `window`, from its progress events.
double StepRate(const std::filesystem::path& jsonl, absl::Duration window) {
  auto a = ReadEvents(jsonl, "progress");
  absl::SleepFor(window);
  auto b = ReadEvents(jsonl, "progress");
  if (a.empty() || b.empty()) return 0;
  const double dt = b.back()["elapsed_s"] - a.back()["elapsed_s"];
  return dt > 0 ? (b.back()["step"] - a.back()["step"]) / dt : 0;
}

TEST(ClusterTest, KilledWorkerStallsNeitherRoundsNorTheOtherWorker) {
  Cluster c;
  c.dir = TestDir();
  c.StartShards(2);
  c.workers.push_back(c.StartWorker(0, 2));
  c.workers.push_back(c.StartWorker(1, 2));
  for (int w = 0; w < 2; ++w) {
    auto ev = WaitForEvent(
        c.Jsonl(w), [](const Event& e) { return e.at("adoptions") >= 8; }, absl::Seconds(60));
    ASSERT_TRUE(ev.has_value()) << "worker " << w << " never adopted 8 fragments";
  }
  const double rate_before = StepRate(c.Jsonl(1), absl::Seconds(2));
  ASSERT_GT(rate_before, 0);
  const double rounds_before = c.Stat(0, "rounds") + c.Stat(1, "rounds");

  c.workers[0]->Signal(SIGKILL);
  ASSERT_TRUE(c.workers[0]->Wait(absl::Seconds(5)).has_value());
  const double rate_after = StepRate(c.Jsonl(1), absl::Seconds(4));
  const double rounds_after = c.Stat(0, "rounds") + c.Stat(1, "rounds");
  // The survivor keeps (at least most of) its pace; rounds keep closing without worker 0.
  EXPECT_GT(rate_after, 0.6 * rate_before) << rate_before << " -> " << rate_after;
  EXPECT_GE(rounds_after, rounds_before + 4) << rounds_before << " -> " << rounds_after;

  auto events = ReadEvents(c.Jsonl(1), "progress");
  ASSERT_GE(events.size(), 4u);
  EXPECT_LT(events.back()["loss"], events.front()["loss"] - 0.3) << "loss did not fall";

  c.workers[1]->Signal(SIGTERM);
  EXPECT_EQ(c.workers[1]->Wait(absl::Seconds(20)), std::optional<int>(0));
  for (auto& s : c.shards) {
    s->Signal(SIGTERM);
    EXPECT_EQ(s->Wait(absl::Seconds(10)), std::optional<int>(0));  // final checkpoint written
  }
}

TEST(ClusterTest, FrozenWorkerHoldsNoRoundBeyondTheGraceCap) {
  Cluster c;
  c.dir = TestDir();
  c.StartShards(2, {"--worker_timeout=60s"});  // only the grace cap can release a round
  c.workers.push_back(c.StartWorker(0, 2));
  c.workers.push_back(c.StartWorker(1, 2));
  for (int w = 0; w < 2; ++w)
    ASSERT_TRUE(
        WaitForEvent(
            c.Jsonl(w), [](const Event& e) { return e.at("adoptions") >= 8; }, absl::Seconds(60))
            .has_value());
  // Freeze worker 0 (SIGSTOP): its connections stay open and it counts as live for the whole
  // test (60 s liveness timeout), so every round waits for it, but never beyond the 1 s cap.
  c.workers[0]->Signal(SIGSTOP);
  const double adopted_before = ReadEvents(c.Jsonl(1), "progress").back()["adoptions"];
  absl::SleepFor(absl::Seconds(5));
  const auto after = ReadEvents(c.Jsonl(1), "progress").back();
  // H = 10 steps per fragment and 4 fragments: even one round per fragment per cap (1 s) gives
  // well over 8 adoptions in 5 s.
  EXPECT_GE(after.at("adoptions") - adopted_before, 8) << "rounds stalled behind a frozen worker";
  // Thawed, the frozen worker catches up: re-pulls if stale, and adopts again.
  c.workers[0]->Signal(SIGCONT);
  const double frozen_adoptions = ReadEvents(c.Jsonl(0), "progress").back()["adoptions"];
  ASSERT_TRUE(WaitForEvent(
                  c.Jsonl(0),
                  [&](const Event& e) { return e.at("adoptions") >= frozen_adoptions + 4; },
                  absl::Seconds(30))
                  .has_value())
      << "the thawed worker never adopted again";
}

TEST(ClusterTest, KilledShardRestartsFromItsStoreWithTheSameVersions) {
  Cluster c;
  c.dir = TestDir();
  c.StartShards(2, {"--durability=per-round"});
  c.workers.push_back(c.StartWorker(0, 1));
  ASSERT_TRUE(
      WaitForEvent(
          c.Jsonl(0), [](const Event& e) { return e.at("adoptions") >= 12; }, absl::Seconds(60))
          .has_value());
  c.workers[0]->Signal(SIGKILL);
  ASSERT_TRUE(c.workers[0]->Wait(absl::Seconds(5)).has_value());
  absl::SleepFor(absl::Seconds(1.5));  // open rounds close within the 1 s cap
  const std::string before = *ShardStats(c.endpoints[0], absl::Seconds(5));
  const double rounds = *JsonNumber(before, "rounds");
  ASSERT_GT(rounds, 0);

  c.shards[0]->Signal(SIGKILL);
  ASSERT_TRUE(c.shards[0]->Wait(absl::Seconds(5)).has_value());
  c.shards[0] = c.StartShard(0, 2, c.endpoints[0], {"--durability=per-round"});
  auto after = ShardStats(c.endpoints[0], absl::Seconds(20));
  ASSERT_TRUE(after.has_value()) << "restarted shard does not answer";
  EXPECT_EQ(*JsonNumber(*after, "rounds"), rounds);
  for (int f = 0; f < 4; ++f) {
    auto v0 = JsonNumber(before, absl::StrCat("versions.", f));
    if (!v0) continue;  // fragment on the other shard
    EXPECT_EQ(JsonNumber(*after, absl::StrCat("versions.", f)), v0) << "fragment " << f;
  }
  EXPECT_NE(*JsonNumber(*after, "incarnation"), *JsonNumber(before, "incarnation"));

  // A new worker generation joins the restarted shard and training goes on from there.
  std::filesystem::remove(c.Jsonl(0));
  c.workers[0] = c.StartWorker(0, 1);
  ASSERT_TRUE(
      WaitForEvent(
          c.Jsonl(0), [](const Event& e) { return e.at("adoptions") >= 8; }, absl::Seconds(60))
          .has_value());
  EXPECT_GT(c.Stat(0, "rounds"), rounds);
}

// Launchers wait for --port_file and may signal at once: Slurm's srun forwards SIGINT to a
// shard it is asked to stop (deploy/slurm/diloco.sbatch). The shard must by then handle the
// signal and stop with its final checkpoint, not die of it.
TEST(ClusterTest, ShardSignalledAsSoonAsItListensStopsCleanly) {
  LocalShards c;
  c.dir = TestDir();
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto port = c.dir / "port0";
    const auto jsonl = c.dir / absl::StrCat("shard", attempt, ".jsonl");
    auto shard =
        c.StartShard(0, 1, "tcp://127.0.0.1:*",
                     {"--metrics_address=127.0.0.1:0", "--metrics_jsonl=" + jsonl.string()});
    const absl::Time end = absl::Now() + absl::Seconds(20);
    while (!std::filesystem::exists(port) && absl::Now() < end)
      absl::SleepFor(absl::Microseconds(50));
    ASSERT_TRUE(std::filesystem::exists(port)) << "shard did not start";
    shard->Signal(SIGINT);
    ASSERT_EQ(shard->Wait(absl::Seconds(20)), std::optional<int>(0)) << "attempt " << attempt;
    std::ifstream in(jsonl);
    const std::string events((std::istreambuf_iterator<char>(in)), {});
    ASSERT_NE(events.find(R"("event":"shutdown","final_checkpoint":"written")"), std::string::npos)
        << "attempt " << attempt << ": " << events;
  }
}

TEST(ClusterTest, ShardsListedOutOfOrderStopTheWorkerWithTheReason) {
  Cluster c;
  c.dir = TestDir();
  c.StartShards(2);
  std::swap(c.endpoints[0], c.endpoints[1]);
  auto w = c.StartWorker(0, 1);
  ASSERT_EQ(w->Wait(absl::Seconds(30)), std::optional<int>(2)) << "see " << c.dir;
  std::ifstream in(c.dir / "worker0.log");
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(log.find("but --servers lists it as shard"), std::string::npos) << log;
  EXPECT_NE(log.find("list the shards' endpoints in shard order"), std::string::npos) << log;
  EXPECT_EQ(log.find("training unsynced"), std::string::npos) << log;
}

}  // namespace
}  // namespace diloco::testing
