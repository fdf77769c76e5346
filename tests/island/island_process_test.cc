// Islands of diloco-worker processes on 127.0.0.1: two ranks at batch B train as one worker at
// batch 2B; a rank killed with SIGKILL stops the other within the collective timeout, naming
// it; ranks with other flags are refused at the rendezvous, naming the setting, however late a
// rank reads the others' descriptions (rank 0's store outlives its refusal); a rendezvous
// that never completes ends within its bound, naming the rank that never came; an island
// in a fleet pushes as one learner and ends with identical ranks; and --device=cuda ranks that
// cannot train (--gpus other than 1, no GPU at the local rank's index) are refused at once,
// naming why. Two CUDA ranks training need a machine with two GPUs: docs/worker.md, "Islands".
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gloo/common/error.h"
#include "tests/integration/cluster.h"
#include "worker/island/island.h"
#include "worker/island/rendezvous_store.h"
#include "worker/resume_state.h"

namespace diloco::testing {
namespace {

// A port nobody listens on now (the kernel's pick for a socket bound and closed).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The args of rank `rank` of an island of `size` meeting at `port`.
std::vector<std::string> RankArgs(int rank, int size, int port,
                                  const std::vector<std::string>& servers,
                                  const std::filesystem::path& jsonl,
                                  const std::vector<std::string>& extra) {
  std::vector<std::string> argv = TinyWorkerArgs(0, servers, jsonl);
  argv.insert(argv.end(),
              {absl::StrCat("--island_rank=", rank), absl::StrCat("--island_size=", size),
               absl::StrCat("--island_master=127.0.0.1:", port)});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::map<int, double> LossByStep(const std::filesystem::path& jsonl) {
  std::map<int, double> out;
  for (const Event& e : ReadEvents(jsonl, "progress")) out[int(e.at("step"))] = e.at("loss");
  return out;
}

Event Done(const std::filesystem::path& jsonl) {
  const auto done = ReadEvents(jsonl, "done");
  return done.empty() ? Event{} : done.back();
}

TEST(IslandProcessTest, TwoRanksAtBatchBTrainAsOneWorkerAtBatch2B) {
  const auto dir = TestDir();
  const std::vector<std::string> common = {"--steps=20", "--progress_interval=0s", "--seed=5"};
  std::vector<std::string> lone_args = TinyWorkerArgs(0, {}, dir / "lone.jsonl");
  lone_args.insert(lone_args.end(), common.begin(), common.end());
  lone_args.insert(lone_args.end(), {"--batch=8", "--eval_batches=1"});
  Process lone(lone_args, (dir / "lone.log").string());
  ASSERT_EQ(lone.Wait(absl::Seconds(120)), std::optional<int>(0)) << ReadFile(dir / "lone.log");

  const int port = FreePort();
  std::vector<std::string> extra = common;
  // The island's held-out set is the lone worker's: 2 batches of 4 windows are its 1 of 8.
  extra.insert(extra.end(), {"--batch=4", "--eval_batches=2"});
  Process r0(RankArgs(0, 2, port, {}, dir / "island.jsonl", extra), (dir / "r0.log").string());
  Process r1(RankArgs(1, 2, port, {}, dir / "island.jsonl", extra), (dir / "r1.log").string());
  ASSERT_EQ(r0.Wait(absl::Seconds(120)), std::optional<int>(0)) << ReadFile(dir / "r0.log");
  ASSERT_EQ(r1.Wait(absl::Seconds(30)), std::optional<int>(0)) << ReadFile(dir / "r1.log");

  const auto a = LossByStep(dir / "lone.jsonl"), b = LossByStep(dir / "island.jsonl");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (const auto& [step, loss] : a) EXPECT_NEAR(b.at(step), loss, 1e-5 * loss) << "step " << step;
  const Event lone_done = Done(dir / "lone.jsonl"), d0 = Done(dir / "island.jsonl"),
              d1 = Done(dir / "island.jsonl.rank1");
  ASSERT_TRUE(d0.contains("params_checksum") && d1.contains("params_checksum"));
  EXPECT_EQ(d0.at("params_checksum"), d1.at("params_checksum")) << "the ranks ended apart";
  EXPECT_NEAR(d0.at("eval_local"), lone_done.at("eval_local"), 1e-5 * lone_done.at("eval_local"));
  EXPECT_LT(d0.at("eval_local"), d0.at("eval_initial")) << "the island did not train";
}

TEST(IslandProcessTest, AKilledRankStopsTheOtherWithinTheTimeoutNamingIt) {
  const auto dir = TestDir();
  for (int victim : {1, 0}) {
    SCOPED_TRACE(absl::StrCat("killed rank ", victim));
    const int port = FreePort();
    const std::vector<std::string> extra = {"--steps=1000000", "--island_timeout=10s"};
    const auto jsonl = dir / absl::StrCat("kill", victim, ".jsonl");
    Process r0(RankArgs(0, 2, port, {}, jsonl, extra), (dir / "k0.log").string());
    Process r1(RankArgs(1, 2, port, {}, jsonl, extra), (dir / "k1.log").string());
    // Both train: rank 1's events show steps.
    const auto rank1 = std::filesystem::path(jsonl.string() + ".rank1");
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline && ReadEvents(rank1, "progress").size() < 3)
      absl::SleepFor(absl::Milliseconds(100));
    ASSERT_GE(ReadEvents(rank1, "progress").size(), 3u) << ReadFile(dir / "k1.log");
    Process& killed = victim == 0 ? r0 : r1;
    Process& survivor = victim == 0 ? r1 : r0;
    const std::string survivor_log = (dir / (victim == 0 ? "k1.log" : "k0.log")).string();
    killed.Signal(SIGKILL);
    const absl::Time t0 = absl::Now();
    // A killed process's sockets close at once; the timeout (10 s) bounds a vanished node.
    const std::optional<int> rc = survivor.Wait(absl::Seconds(20));
    ASSERT_TRUE(rc.has_value()) << "the surviving rank still runs 20 s after the kill";
    EXPECT_EQ(*rc, 2);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(15));
    EXPECT_NE(ReadFile(survivor_log).find(absl::StrCat("lost rank ", victim)), std::string::npos)
        << ReadFile(survivor_log);
  }
}

TEST(IslandProcessTest, RanksWithOtherFlagsAreRefusedNamingTheSetting) {
  const auto dir = TestDir();
  const int port = FreePort();
  Process r0(RankArgs(0, 2, port, {}, dir / "a.jsonl", {"--steps=50", "--batch=4"}),
             (dir / "r0.log").string());
  Process r1(RankArgs(1, 2, port, {}, dir / "b.jsonl", {"--steps=50", "--batch=8"}),
             (dir / "r1.log").string());
  EXPECT_EQ(r0.Wait(absl::Seconds(60)), std::optional<int>(2));
  EXPECT_EQ(r1.Wait(absl::Seconds(60)), std::optional<int>(2));
  for (const char* log : {"r0.log", "r1.log"})
    EXPECT_NE(ReadFile(dir / log).find("rank 1 (host "), std::string::npos) << ReadFile(dir / log);
  EXPECT_NE(ReadFile(dir / "r1.log").find("batch 4 vs 8"), std::string::npos)
      << ReadFile(dir / "r1.log");
}

// Rank 1 played by the test through rank 0's store, slow to read: it reads the descriptions
// only after rank 0 has reached its verdict. Rank 0's process holds the store, so a rank 0 that
// left at once with its refusal left such a rank 1 asking a vanished store until its rendezvous
// timeout (2 min), killed by the test above at 60 s with an empty log (8 of 59 runs with both
// cores busy). Rank 0 must stay until rank 1 says it has read them, then refuse.
TEST(IslandProcessTest, ARefusingRank0KeepsItsStoreUntilEveryRankHasReadWhy) {
  const auto dir = TestDir();
  const int port = FreePort();
  const auto log = dir / "r0.log";
  Process r0(RankArgs(0, 2, port, {}, dir / "a.jsonl",
                      {"--steps=50", "--batch=4", "--island_rendezvous_timeout=60s"}),
             log.string());
  island::StoreClient store("127.0.0.1", port, absl::Seconds(30), std::nullopt);
  try {
    const std::vector<char> zero = store.get(island::RankKey(0));
    std::string me(zero.begin(), zero.end());
    const size_t batch = me.find(" batch=4 ");
    ASSERT_NE(batch, std::string::npos) << me;
    me.replace(batch, 9, " batch=8 ");
    store.set(island::RankKey(1), std::vector<char>(me.begin(), me.end()));
  } catch (const gloo::Exception& e) {
    FAIL() << e.what() << "\n" << ReadFile(log);
  }
  // Rank 0's verdict is its read key; it must still be there after it.
  island::StoreClient poll("127.0.0.1", port, absl::Seconds(1), std::nullopt);
  bool verdict = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!verdict && r0.Running() && absl::Now() < deadline) {
    try {
      verdict = poll.TryGet(island::ReadKey(0)).has_value();
    } catch (const gloo::Exception&) {
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_FALSE(r0.Wait(absl::Seconds(2)).has_value())
      << "rank 0 left with its store before rank 1 read why: " << ReadFile(log);
  ASSERT_TRUE(verdict) << "rank 0 never reached its verdict: " << ReadFile(log);
  try {
    EXPECT_TRUE(store.TryGet(island::RankKey(0)).has_value());
    store.set(island::ReadKey(1), {'1'});
  } catch (const gloo::Exception& e) {
    FAIL() << "rank 1 could not read rank 0's description: " << e.what();
  }
  EXPECT_EQ(r0.Wait(absl::Seconds(30)), std::optional<int>(2)) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("rank 1 (host "), std::string::npos) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("batch 4 vs 8"), std::string::npos) << ReadFile(log);
}

TEST(IslandProcessTest, ARendezvousThatNeverCompletesEndsNamingTheMissingRank) {
  const auto dir = TestDir();
  Process r0(RankArgs(0, 3, FreePort(), {}, dir / "a.jsonl",
                      {"--steps=50", "--island_rendezvous_timeout=2s"}),
             (dir / "r0.log").string());
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(r0.Wait(absl::Seconds(30)), std::optional<int>(2));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(25));
  EXPECT_NE(ReadFile(dir / "r0.log").find("ranks never arrived: 1,2"), std::string::npos)
      << ReadFile(dir / "r0.log");
}

TEST(IslandProcessTest, AnIslandInAFleetPushesAsOneLearnerAndEndsIdentical) {
  LocalShards shards;
  shards.dir = TestDir();
  shards.StartShards(2);
  const auto& dir = shards.dir;
  const int port = FreePort();
  const std::vector<std::string> extra = {"--steps=60", "--state_dir=" + dir.string()};
  Process r0(RankArgs(0, 2, port, shards.endpoints, dir / "i.jsonl", extra),
             (dir / "r0.log").string());
  Process r1(RankArgs(1, 2, port, shards.endpoints, dir / "i.jsonl", extra),
             (dir / "r1.log").string());
  ASSERT_EQ(r0.Wait(absl::Seconds(120)), std::optional<int>(0)) << ReadFile(dir / "r0.log");
  ASSERT_EQ(r1.Wait(absl::Seconds(30)), std::optional<int>(0)) << ReadFile(dir / "r1.log");
  const Event d0 = Done(dir / "i.jsonl"), d1 = Done(dir / "i.jsonl.rank1");
  ASSERT_TRUE(d0.contains("applied")) << "rank 0 holds the sync client";
  EXPECT_GT(d0.at("applied"), 0);
  EXPECT_FALSE(d1.contains("applied")) << "rank 1 must not talk to the shards";
  EXPECT_EQ(d0.at("params_checksum"), d1.at("params_checksum"));
  EXPECT_GT(d1.at("island_floats_moved"), 0) << "no adoption reached rank 1";
  // One learner: the shards saw one worker.
  for (int s = 0; s < 2; ++s) EXPECT_LE(shards.Stat(s, "workers"), 1) << "shard " << s;
  auto point = worker::ReadResumePoint(dir.string(), 0);
  ASSERT_TRUE(point.ok() && point->has_value()) << "no step recorded in --state_dir";
  EXPECT_GT((*point)->step, 0);
  EXPECT_LE((*point)->step, 60);
}

TEST(IslandProcessTest, AnIslandThatLostARankRestartsWhereItsLastAppliedPushLeftIt) {
  LocalShards shards;
  shards.dir = TestDir();
  shards.StartShards(2);
  const auto& dir = shards.dir;
  const std::vector<std::string> extra = {"--steps=600", "--step_delay=2ms", "--state_every=20",
                                          "--state_dir=" + dir.string()};
  int port = FreePort();
  {
    Process r0(RankArgs(0, 2, port, shards.endpoints, dir / "a.jsonl", extra),
               (dir / "a0.log").string());
    Process r1(RankArgs(1, 2, port, shards.endpoints, dir / "a.jsonl", extra),
               (dir / "a1.log").string());
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    absl::StatusOr<std::optional<worker::ResumePoint>> point;
    while (absl::Now() < deadline) {
      point = worker::ReadResumePoint(dir.string(), 0);
      if (point.ok() && point->has_value() && (*point)->step >= 50) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_TRUE(point.ok() && point->has_value()) << ReadFile(dir / "a0.log");
    r1.Signal(SIGKILL);
    EXPECT_EQ(r0.Wait(absl::Seconds(40)), std::optional<int>(2)) << ReadFile(dir / "a0.log");
  }
  auto recorded = worker::ReadResumePoint(dir.string(), 0);
  ASSERT_TRUE(recorded.ok() && recorded->has_value());
  const int64_t resume = (*recorded)->step;
  ASSERT_LT(resume, 600) << "the island finished before the kill";
  port = FreePort();
  Process r0(RankArgs(0, 2, port, shards.endpoints, dir / "b.jsonl", extra),
             (dir / "b0.log").string());
  Process r1(RankArgs(1, 2, port, shards.endpoints, dir / "b.jsonl", extra),
             (dir / "b1.log").string());
  ASSERT_EQ(r0.Wait(absl::Seconds(120)), std::optional<int>(0)) << ReadFile(dir / "b0.log");
  ASSERT_EQ(r1.Wait(absl::Seconds(30)), std::optional<int>(0)) << ReadFile(dir / "b1.log");
  const Event d0 = Done(dir / "b.jsonl"), d1 = Done(dir / "b.jsonl.rank1");
  EXPECT_EQ(d0.at("start_step"), resume) << "rank 0 did not resume at the recorded step";
  EXPECT_EQ(d1.at("start_step"), resume) << "rank 1 did not resume with it";
  EXPECT_EQ(d0.at("steps"), 600 - resume);
  // Both ranks took the stream's position and rank 0's optimizer moments back.
  for (const char* log : {"b0.log", "b1.log"})
    EXPECT_NE(ReadFile(dir / log).find("with its data stream where it stood, its optimizer's "
                                       "moments of step"),
              std::string::npos)
        << ReadFile(dir / log);
  EXPECT_GT(d0.at("applied"), 0) << "the restarted island's pushes were not applied";
  EXPECT_EQ(d0.at("params_checksum"), d1.at("params_checksum"));
}

// The learner's CURVE keys (diloco-ctl keys) for the shards and the island's rendezvous.
std::vector<std::string> MakeKeys(const std::filesystem::path& dir, int workers) {
  const std::string ctl =
      (std::filesystem::path(WorkerBinary()).parent_path().parent_path() / "ctl/diloco-ctl")
          .string();
  const std::string cmd = absl::StrCat(ctl, " keys --out=", (dir / "keys").string(),
                                       " --workers=", workers, " > /dev/null 2>&1");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return {"--curve_secret_key_file=" + (dir / "keys/server.secret").string(),
          "--curve_authorized_keys=" + (dir / "keys/authorized_keys").string()};
}

std::vector<std::string> LearnerKeys(const std::filesystem::path& dir, int id) {
  return {
      "--curve_server_key=" + (dir / "keys/server.public").string(),
      absl::StrCat("--curve_secret_key_file=", (dir / "keys").string(), "/worker-", id, ".secret")};
}

TEST(IslandProcessTest, WithTheLearnersKeysTheRendezvousAdmitsOnlyItsRanks) {
  LocalShards shards;
  shards.dir = TestDir();
  const auto& dir = shards.dir;
  shards.StartShards(2, MakeKeys(dir, 2));
  int port = FreePort();
  std::vector<std::string> extra = LearnerKeys(dir, 0);
  extra.push_back("--steps=40");
  Process r0(RankArgs(0, 2, port, shards.endpoints, dir / "i.jsonl", extra),
             (dir / "r0.log").string());
  Process r1(RankArgs(1, 2, port, shards.endpoints, dir / "i.jsonl", extra),
             (dir / "r1.log").string());
  ASSERT_EQ(r0.Wait(absl::Seconds(120)), std::optional<int>(0)) << ReadFile(dir / "r0.log");
  ASSERT_EQ(r1.Wait(absl::Seconds(30)), std::optional<int>(0)) << ReadFile(dir / "r1.log");
  EXPECT_GT(Done(dir / "i.jsonl").at("applied"), 0);

  // A process with another learner's key cannot join learner 0's island: the store refuses
  // its handshake, and it ends at its rendezvous timeout, naming the store.
  port = FreePort();
  std::vector<std::string> own = LearnerKeys(dir, 0), other = LearnerKeys(dir, 1);
  for (auto* v : {&own, &other})
    v->insert(v->end(), {"--steps=40", "--island_rendezvous_timeout=3s"});
  Process a(RankArgs(0, 2, port, shards.endpoints, dir / "a.jsonl", own), (dir / "a.log").string());
  Process b(RankArgs(1, 2, port, shards.endpoints, dir / "b.jsonl", other),
            (dir / "b.log").string());
  EXPECT_EQ(b.Wait(absl::Seconds(60)), std::optional<int>(2));
  EXPECT_EQ(a.Wait(absl::Seconds(60)), std::optional<int>(2));
  EXPECT_NE(ReadFile(dir / "b.log").find("no answer from rank 0's store"), std::string::npos)
      << ReadFile(dir / "b.log");
  EXPECT_NE(ReadFile(dir / "a.log").find("ranks never arrived: 1"), std::string::npos)
      << ReadFile(dir / "a.log");
}

TEST(IslandProcessTest, APlaintextRendezvousOffLoopbackIsRefused) {
  const auto dir = TestDir();
  std::vector<std::string> argv = TinyWorkerArgs(0, {}, dir / "a.jsonl");
  argv.insert(argv.end(), {"--steps=5", "--island_rank=0", "--island_size=2",
                           "--island_master=10.255.255.1:29999"});
  Process p(argv, (dir / "a.log").string());
  EXPECT_EQ(p.Wait(absl::Seconds(30)), std::optional<int>(2));
  EXPECT_NE(ReadFile(dir / "a.log").find("not a loopback address"), std::string::npos)
      << ReadFile(dir / "a.log");
}

// A CPU rank and a CUDA rank never form an island: the device is in the rendezvous config. Rank 1
// is played by the test (a CUDA rank cannot start without a GPU), its description rank 0's with
// device=cuda.
TEST(IslandProcessTest, CpuAndCudaRanksAreRefusedAtTheRendezvous) {
  const auto dir = TestDir();
  const int port = FreePort();
  const auto log = dir / "r0.log";
  Process r0(RankArgs(0, 2, port, {}, dir / "a.jsonl", {"--steps=50"}), log.string());
  island::StoreClient store("127.0.0.1", port, absl::Seconds(30), std::nullopt);
  try {
    const std::vector<char> zero = store.get(island::RankKey(0));
    std::string me(zero.begin(), zero.end());
    const size_t device = me.find(" device=cpu gpus=1 ");
    ASSERT_NE(device, std::string::npos) << me;
    me.replace(device, 12, " device=cuda");
    store.set(island::RankKey(1), std::vector<char>(me.begin(), me.end()));
    store.set(island::ReadKey(1), {'1'});
  } catch (const gloo::Exception& e) {
    FAIL() << e.what() << "\n" << ReadFile(log);
  }
  EXPECT_EQ(r0.Wait(absl::Seconds(30)), std::optional<int>(2)) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("rank 1 (host "), std::string::npos) << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("in device cpu vs cuda"), std::string::npos) << ReadFile(log);
}

// --island_rendezvous_alone: an island of one rank that meets and runs its collectives (the GPU
// check's way to take the NCCL path on one GPU, benchmarks/gpu/island_check.sh) trains as the
// lone worker does, step for step.
TEST(IslandProcessTest, AnIslandOfOneThatMeetsTrainsAsTheLoneWorker) {
  const auto dir = TestDir();
  const std::vector<std::string> common = {"--steps=10", "--progress_interval=0s", "--seed=5"};
  std::vector<std::string> lone_args = TinyWorkerArgs(0, {}, dir / "lone.jsonl");
  lone_args.insert(lone_args.end(), common.begin(), common.end());
  Process lone(lone_args, (dir / "lone.log").string());
  ASSERT_EQ(lone.Wait(absl::Seconds(60)), std::optional<int>(0)) << ReadFile(dir / "lone.log");
  std::vector<std::string> extra = common;
  extra.push_back("--island_rendezvous_alone");
  Process r0(RankArgs(0, 1, FreePort(), {}, dir / "island.jsonl", extra),
             (dir / "r0.log").string());
  ASSERT_EQ(r0.Wait(absl::Seconds(60)), std::optional<int>(0)) << ReadFile(dir / "r0.log");
  EXPECT_NE(ReadFile(dir / "r0.log").find("island rank 0 of 1 (flags)"), std::string::npos)
      << ReadFile(dir / "r0.log");
  const auto a = LossByStep(dir / "lone.jsonl"), b = LossByStep(dir / "island.jsonl");
  ASSERT_EQ(a.size(), 10u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(Done(dir / "island.jsonl").at("island_size"), 1);
}

// A refused rank: exits 2 within `bound` (before any rendezvous), its log returned.
std::string Refused(const std::vector<std::string>& argv, const std::filesystem::path& log,
                    absl::Duration bound = absl::Seconds(20)) {
  Process p(argv, log.string());
  const absl::Time t0 = absl::Now();
  const std::optional<int> rc = p.Wait(bound);
  EXPECT_TRUE(rc.has_value()) << "still running after " << bound << ": " << ReadFile(log);
  EXPECT_EQ(rc.value_or(-1), 2) << ReadFile(log);
  EXPECT_LT(absl::Now() - t0, bound);
  return ReadFile(log);
}

std::vector<std::string> WithEnv(const std::string& var, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/env", var});
  return argv;
}

TEST(IslandProcessTest, CudaRanksThatCannotTrainAreRefusedAtOnceNamingWhy) {
  const auto dir = TestDir();
  const int port = FreePort();
  std::string log =
      Refused(RankArgs(1, 2, port, {}, dir / "a.jsonl", {"--device=cuda", "--gpus=2", "--steps=5"}),
              dir / "gpus.log");
  EXPECT_NE(log.find("island rank 1 of 2 (flags): --device=cuda --gpus=2: an island's GPU rank "
                     "trains on one GPU"),
            std::string::npos)
      << log;
  log = Refused(RankArgs(1, 2, port, {}, dir / "a.jsonl", {"--device=synthetic", "--steps=5"}),
                dir / "synthetic.log");
  EXPECT_NE(log.find("--device=synthetic cannot train as an island's rank"), std::string::npos)
      << log;
  log = Refused(WithEnv("LOCAL_RANK=99",
                        RankArgs(1, 2, port, {}, dir / "a.jsonl", {"--device=cuda", "--steps=5"})),
                dir / "local_rank.log");
  if (log.find("no CUDA backend") != std::string::npos) GTEST_SKIP() << "a build without CUDA";
  EXPECT_NE(log.find("rank 1: LOCAL_RANK=99 but this node has "), std::string::npos) << log;
  log = Refused(WithEnv("SLURM_LOCALID=98",
                        RankArgs(0, 2, port, {}, dir / "a.jsonl", {"--device=cuda", "--steps=5"})),
                dir / "slurm_localid.log");
  EXPECT_NE(log.find("rank 0: SLURM_LOCALID=98 but this node has "), std::string::npos) << log;
}

// Without a GPU a CUDA rank ends with CUDA's own words for it; with one, rank 0 trains as far
// as the rendezvous, where rank 1 never comes.
TEST(IslandProcessTest, ACudaRankWithoutAGpuEndsWithCudasErrorNamed) {
  const auto dir = TestDir();
  const std::string log =
      Refused(RankArgs(0, 2, FreePort(), {}, dir / "a.jsonl",
                       {"--device=cuda", "--steps=5", "--island_rendezvous_timeout=5s"}),
              dir / "r0.log", absl::Seconds(30));
  if (log.find("no CUDA backend") != std::string::npos) GTEST_SKIP() << "a build without CUDA";
  if (log.find("this node has 0 GPUs") == std::string::npos) {
    EXPECT_NE(log.find("ranks never arrived: 1"), std::string::npos) << log;
    GTEST_SKIP() << "this machine has a GPU";
  }
  EXPECT_NE(log.find("rank 0: local rank (no LOCAL_RANK or SLURM_LOCALID) 0 but this node has 0 "
                     "GPUs (CUDA: "),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace diloco::testing
