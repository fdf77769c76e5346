// The sync client in-process against a real diloco-server: AfterStep with a ParamsFn fetches
// the parameters only on steps that adopt, push or snapshot, which is what lets a GPU trainer
// skip the device-to-host copy on every other step.
#include "worker/sync_client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/faults.h"
#include "common/plan.h"
#include "kernels/codec.h"
#include "tests/integration/cluster.h"
#include "worker/model/gpt/gpt_config.h"

namespace diloco::testing {
namespace {

// One shard of the tiny model (4 fragments) and a client's options for it: int8 pushes, every
// fragment due on the same step once every `inner_steps`.
worker::SyncOptions OneShardOptions(LocalShards& shards, uint32_t inner_steps,
                                    const std::vector<std::string>& server_flags = {}) {
  shards.dir = TestDir();
  shards.StartShards(1, server_flags);
  worker::SyncOptions o;
  o.servers = shards.endpoints;
  o.worker_id = 0;
  o.num_fragments = 4;
  o.codec = *kernels::ParseCodec("int8:256");
  o.inner_steps = inner_steps;
  o.stream = false;
  return o;
}

// A tiny-GPT sync client for `o` with every parameter at `init`, joined.
struct JoinedClient {
  std::vector<float> params;
  std::unique_ptr<worker::SyncClient> client;
};
void JoinTiny(const worker::SyncOptions& o, float init, JoinedClient* out) {
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  out->params.assign(manifest->total_elements(), init);
  auto client = worker::SyncClient::Create(o, *manifest);
  ASSERT_TRUE(client.ok()) << client.status();
  out->client = std::move(*client);
  ASSERT_TRUE(out->client->Join(out->params, absl::Seconds(20)).ok());
}

// AfterStep reaches the parameters only on steps that adopt or push, and then only the pieces
// of the fragments concerned: each range asked for lies inside one piece of the plan, a step
// reaches a fragment at most three times (its adoption written, its push's delta read and the
// push's extrapolation written; twice without extrapolation), and over the
// run a fragment is reached on no more steps than it was pushed, adopted or re-anchored; so a
// GPU trainer never copies the whole model for a push. Which steps those are depends on when
// answers arrive (under load several adoptions can land on one step), so the bounds count
// events, not steps: each step's adoptions are read from the versions the client adopted, the
// pushes from its events.
TEST(SyncClientTest, AfterStepReachesOnlyThePiecesItAdoptsOrPushes) {
  LocalShards shards;
  worker::SyncOptions o = OneShardOptions(shards, 20);
  o.stream = true;
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto plan = Plan::Create(*manifest, o.num_fragments, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The fragment whose piece holds [offset, offset + n), or -1 when no single piece does.
  auto fragment_of = [&](uint64_t offset, uint64_t n) -> int {
    for (const Fragment& f : plan->fragments())
      for (const Piece& p : f.pieces)
        if (offset >= p.flat_offset && offset + n <= p.flat_offset + p.length)
          return static_cast<int>(f.id);
    return -1;
  };
  const size_t nf = plan->fragments().size();
  const uint64_t per_push = worker::PushExtrapolation(o) != 1.0f ? 2 : 1;  // the default: 2
  std::vector<float> params(manifest->total_elements(), 0.01f);
  auto client = worker::SyncClient::Create(o, *manifest);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Join(params, absl::Seconds(20)).ok());

  constexpr int kSteps = 200;
  int steps_reaching = 0;
  std::vector<uint64_t> steps_reached(nf, 0), adoptions(nf, 0);
  std::vector<uint64_t> versions = (*client)->stats().versions;
  for (int s = 0; s < kSteps; ++s) {
    for (float& p : params) p -= 1e-4f;  // what training would do between steps
    std::vector<uint64_t> reached(nf, 0);
    (*client)->AfterStep(
        [&](uint64_t offset, uint64_t n) {
          const int f = fragment_of(offset, n);
          EXPECT_GE(f, 0) << offset << " + " << n << " lies inside no piece";
          if (f >= 0) reached[f] += n;
          return std::span<float>(params).subspan(offset, n);
        },
        64, absl::Milliseconds(5));
    const std::vector<uint64_t> now = (*client)->stats().versions;  // adopted on this thread
    bool any = false;
    for (size_t f = 0; f < nf; ++f) {
      if (now[f] != versions[f]) ++adoptions[f];
      if (reached[f] == 0) continue;
      any = true;
      ++steps_reached[f];
      EXPECT_LE(reached[f], (1 + per_push) * plan->fragment(f).numel)
          << "step " << s << " reached fragment " << f << " more than a push and an adoption";
    }
    versions = now;
    steps_reaching += any;
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE((*client)->Drain(params, absl::Seconds(20)).ok());
  const worker::SyncStats st = (*client)->stats();
  std::vector<uint64_t> pushes(nf, 0), reanchors(nf, 0);
  for (const worker::SyncEvent& e : (*client)->TakeEvents()) {
    if (e.kind == worker::SyncEvent::kPush) ++pushes[e.fragment];
    if (e.kind == worker::SyncEvent::kReanchor) ++reanchors[e.fragment];
  }
  // 200 steps at H = 20: up to 10 pushes of each fragment.
  EXPECT_GE(st.pushes, 4u * 5);
  EXPECT_EQ(st.applied, st.pushes) << "pushes made from ranges were valid";
  for (size_t f = 0; f < nf; ++f) {
    EXPECT_GT(steps_reached[f], 0u) << "fragment " << f;
    EXPECT_LE(steps_reached[f], pushes[f] + adoptions[f] + reanchors[f])
        << "fragment " << f << " was reached on steps that neither pushed nor adopted it";
  }
  EXPECT_GE(steps_reaching, static_cast<int>(st.pushes / 4));
  EXPECT_LE(steps_reaching, kSteps / 2) << "reached on " << steps_reaching << " of " << kSteps;
}

// A push damaged on the way (one flipped payload byte under the true checksums) is refused
// BadChecksum naming it; the worker sends the same push once more. Damaged twice, it is given
// up (refused) and the worker pulls and goes on; the other pushes are unaffected.
class DamagedPushTest : public ::testing::TestWithParam<uint32_t> {};

// A tiny-GPT sync client with options `o` (one of `OneShardOptions`' shards): joined, stepped
// until it has sent at least two push steps of 4 pushes each (bounded: answers may be slow under
// load), drained. Its stats and events go to `stats` and `events`.
void PushTwoRounds(const worker::SyncOptions& o, worker::SyncStats* stats,
                   std::vector<worker::SyncEvent>* events) {
  JoinedClient c;
  ASSERT_NO_FATAL_FAILURE(JoinTiny(o, 0.01f, &c));
  for (int s = 0; s < 1000 && (s < 30 || c.client->stats().pushes < 8); ++s) {
    for (float& p : c.params) p -= 1e-4f;
    c.client->AfterStep(c.params, 64, absl::Milliseconds(5));
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(c.client->Drain(c.params, absl::Seconds(20)).ok());
  *stats = c.client->stats();
  *events = c.client->TakeEvents();
}

TEST_P(DamagedPushTest, IsSentAgainOnceThenGivenUp) {
  const uint32_t damaged_sends = GetParam();
  LocalShards shards;
  worker::SyncOptions o = OneShardOptions(shards, 10);
  auto faults = std::make_shared<TestFaults>();
  faults->corrupt_push_sends = FaultCount(damaged_sends);
  o.faults = faults;
  worker::SyncStats st;
  std::vector<worker::SyncEvent> events, refused;
  ASSERT_NO_FATAL_FAILURE(PushTwoRounds(o, &st, &events));
  for (auto& e : events)
    if (e.kind == worker::SyncEvent::kRefused) refused.push_back(e);
  EXPECT_EQ(shards.Stat(0, "refused_by_reason.BadChecksum"), damaged_sends);
  EXPECT_GE(st.resends, 1u);
  EXPECT_GE(st.pushes, 8u);
  if (damaged_sends == 1) {
    EXPECT_EQ(st.applied, st.pushes) << "the resent push was not applied";
    EXPECT_TRUE(refused.empty());
  } else {
    EXPECT_EQ(st.refused, 1u);
    EXPECT_EQ(st.applied, st.pushes - 1);
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_EQ(refused[0].fragment, 0u);
    EXPECT_EQ(refused[0].seq, 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(Sends, DamagedPushTest, ::testing::Values(1u, 2u));

// A push whose header is damaged on the way (a bit of its seq flipped under the header's
// checksum) is refused BadChecksum naming no message: nothing in it can be trusted, so the
// worker cannot tell which push it was. It was never acked Queued, so the lost-push resend
// sends it again, and it is applied exactly once: every push applied, none refused, and the
// shard counts one damaged header and no duplicate.
TEST(DamagedPushHeaderTest, IsRecoveredByTheLostPushResend) {
  LocalShards shards;
  worker::SyncOptions o = OneShardOptions(shards, 10);
  auto faults = std::make_shared<TestFaults>();
  faults->corrupt_push_header_sends = FaultCount(1);
  o.faults = faults;
  o.resend_after = absl::Milliseconds(500);  // the lost-push wait, short for the test
  worker::SyncStats st;
  std::vector<worker::SyncEvent> events;
  ASSERT_NO_FATAL_FAILURE(PushTwoRounds(o, &st, &events));
  EXPECT_EQ(shards.Stat(0, "refused_by_reason.BadChecksum"), 1u);
  EXPECT_EQ(shards.Stat(0, "pushes.duplicate"), 0u) << "a push was applied under another seq";
  EXPECT_GE(st.resends, 1u);
  EXPECT_GE(st.pushes, 8u);
  EXPECT_EQ(st.applied, st.pushes) << "the damaged push was not applied after its resend";
  EXPECT_EQ(st.refused, 0u);
  EXPECT_EQ(st.duplicates, 0u);
}

// Lockstep with a fixed overlap: each push is adopted exactly `lockstep_overlap` steps after it
// left, never earlier, even when its answer is already in (the pause after each push step makes
// sure it is), so that a study of what overlap costs repeats exactly. H = 5, overlap 3, all four
// fragments due together: pushes at steps 5, 10, 15, 20, adoptions at 8, 13, 18 and the last
// one at Drain.
TEST(SyncClientTest, ALockstepOverlapAdoptsEachAnswerItsStepsAfterThePush) {
  LocalShards shards;
  worker::SyncOptions o = OneShardOptions(shards, 5);
  o.lockstep = true;
  o.lockstep_overlap = 3;
  JoinedClient c;
  ASSERT_NO_FATAL_FAILURE(JoinTiny(o, 1.0f, &c));
  const uint64_t joined = c.client->stats().adoptions;
  std::vector<int> adopted_at;
  for (int step = 1; step <= 20; ++step) {
    for (float& p : c.params) p -= 1e-4f;
    const uint64_t before = c.client->stats().adoptions;
    c.client->AfterStep(c.params, 64, absl::Milliseconds(1));
    const worker::SyncStats st = c.client->stats();
    if (st.adoptions != before) {
      adopted_at.push_back(step);
      EXPECT_EQ(st.adoptions - before, 4u) << "step " << step;
    }
    if (step % 5 == 0) {
      absl::SleepFor(absl::Milliseconds(300));  // the answers arrive before the next step
      EXPECT_EQ(c.client->stats().pushes, static_cast<uint64_t>(step / 5 * 4)) << "step " << step;
    }
  }
  EXPECT_EQ(adopted_at, (std::vector<int>{8, 13, 18}));
  ASSERT_TRUE(c.client->Drain(c.params, absl::Seconds(20)).ok());
  const worker::SyncStats st = c.client->stats();
  EXPECT_EQ(st.applied, 16u);
  EXPECT_EQ(st.adoptions, joined + 16);
}

// An applied push whose Applied answer was lost (the shard killed between making it durable and
// sending it, then restarted on its store) is answered Duplicate after the resend; the update
// the worker then pulls is that push's answer, and adoption takes its delta out exactly once.
// Same setting as above (one worker, fp32, outer lr 1, no momentum, lockstep): had the pulled
// update not been taken as the push's answer, the pushed work would be counted twice.
TEST(SyncClientTest, APushWhoseAppliedAnswerWasLostIsAdoptedOnce) {
  LocalShards shards;
  const std::vector<std::string> flags = {"--durability=per-round", "--outer_lr=1",
                                          "--outer_momentum=0"};
  std::vector<std::string> first = flags;
  first.push_back("--test_kill_after_applied=6");  // the second push step's answers die unsent
  worker::SyncOptions o = OneShardOptions(shards, 5, first);
  o.codec = *kernels::ParseCodec("fp32");
  o.lockstep = true;
  o.shard_timeout = absl::Milliseconds(500);
  o.heartbeat = absl::Milliseconds(200);  // shorter than the timeout, as Validate asks
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  // The shard kills itself; it comes back on the same address and store.
  std::thread restarter([&] {
    if (shards.shards[0]->Wait(absl::Seconds(60)).has_value())
      shards.shards[0] = shards.StartShard(0, 1, shards.endpoints[0], flags);
  });
  std::vector<float> params(manifest->total_elements(), 1.0f);
  std::vector<float> alone(params.size(), 1.0f);  // the same training without sync
  auto client = worker::SyncClient::Create(o, *manifest);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Join(params, absl::Seconds(20)).ok());
  constexpr int kSteps = 40;
  for (int s = 0; s < kSteps; ++s) {
    for (float& p : params) p -= 1e-4f;
    for (float& p : alone) p -= 1e-4f;
    (*client)->AfterStep(params, 64, absl::Milliseconds(1));
  }
  ASSERT_TRUE((*client)->Drain(params, absl::Seconds(20)).ok());
  restarter.join();
  const worker::SyncStats st = (*client)->stats();
  EXPECT_EQ(st.shard_restarts, 1u);
  EXPECT_GE(st.duplicates, 1u) << "no Applied answer was lost: the case is not exercised";
  EXPECT_EQ(st.applied + st.duplicates, st.pushes);
  for (size_t i = 0; i < params.size(); ++i)
    ASSERT_NEAR(params[i], alone[i], 2e-5f) << "element " << i << " counted a push twice";
  // Every push applied once: the global values are the local ones (the run ends on a push).
  const std::span<const float> global = (*client)->global_params();
  EXPECT_NEAR(global[0], params[0], 2e-5f);
}

// A lockstep step waits for its round; a round that cannot close (quorum 2, the other worker
// live but not pushing) would hold it for lockstep_timeout. SyncOptions::interrupted (the
// worker's signal flag) ends the wait at once: the step returns with its pushes unanswered.
TEST(SyncClientTest, AnInterruptedLockstepStepStopsWaitingForItsRound) {
  LocalShards shards;
  worker::SyncOptions o = OneShardOptions(shards, 2, {"--quorum=2", "--grace_cap=600s"});
  o.lockstep = true;
  o.lockstep_timeout = absl::Seconds(300);
  std::atomic<bool> stop{false};
  o.interrupted = [&stop] { return stop.load(); };
  JoinedClient c, idle;
  ASSERT_NO_FATAL_FAILURE(JoinTiny(o, 1.0f, &c));
  worker::SyncOptions idle_options = o;  // joined and heartbeating, never stepping
  idle_options.worker_id = 1;
  ASSERT_NO_FATAL_FAILURE(JoinTiny(idle_options, 1.0f, &idle));
  c.client->AfterStep(c.params, 64, absl::Milliseconds(1));  // step 1: nothing due
  std::thread signal([&] {
    absl::SleepFor(absl::Seconds(1));
    stop = true;
  });
  const absl::Time t0 = absl::Now();
  c.client->AfterStep(c.params, 64, absl::Milliseconds(1));  // step 2: every fragment pushed
  const absl::Duration waited = absl::Now() - t0;
  signal.join();
  EXPECT_GE(waited, absl::Milliseconds(900)) << "the step did not wait for its round";
  EXPECT_LT(waited, absl::Seconds(120)) << "the interrupted step waited for lockstep_timeout";
  EXPECT_EQ(c.client->stats().pushes, 4u);
  EXPECT_EQ(c.client->stats().applied, 0u);
}

// The most an element of `fragment` moved between two views of the global model.
float MaxMove(const Plan& plan, uint32_t fragment, std::span<const float> before,
              std::span<const float> after) {
  float most = 0;
  for (const Piece& p : plan.fragment(fragment).pieces)
    for (uint64_t i = p.flat_offset; i < p.flat_offset + p.length; ++i)
      most = std::max(most, std::fabs(after[i] - before[i]));
  return most;
}

// A late answer must not let a push carry a pile of local steps (docs/worker.md, "Adoption"):
// worker A's first push of fragment 0 is lost on the way; it is noticed and resent about
// resend_after later, by which time worker B's pushes have moved the fragment past the shard's
// max_staleness, so it is answered Stale. A trained on meanwhile (a step every few ms: far more
// than carry_max x H steps in that time, however loaded the machine); its next pushes carry at
// most the bound, and the global fragment (outer lr 1, no momentum; B's deltas are zero) moves
// by at most that much per push: the bound x the step's move.
TEST(SyncClientTest, ALostPushAnsweredStaleLateCarriesAtMostTheBound) {
  LocalShards shards;
  worker::SyncOptions a = OneShardOptions(
      shards, 5, {"--outer_lr=1", "--outer_momentum=0", "--max_staleness=2", "--grace_cap=100ms"});
  a.codec = *kernels::ParseCodec("fp32");
  a.carry_max = 4;
  auto faults = std::make_shared<TestFaults>();
  faults->lose_push_sends = FaultCount(1);
  a.faults = faults;
  a.resend_after = absl::Seconds(2);
  worker::SyncOptions b = a;
  b.worker_id = 1;
  b.inner_steps = 1;
  b.faults = nullptr;
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto plan = Plan::Create(*manifest, a.num_fragments, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<float> pa(manifest->total_elements(), 0.01f), pb = pa;
  auto ca = worker::SyncClient::Create(a, *manifest);
  auto cb = worker::SyncClient::Create(b, *manifest);
  ASSERT_TRUE(ca.ok() && cb.ok());
  ASSERT_TRUE((*ca)->Join(pa, absl::Seconds(20)).ok());
  ASSERT_TRUE((*cb)->Join(pb, absl::Seconds(20)).ok());
  constexpr float kMove = 1e-4f;
  const int64_t bound = int64_t{a.carry_max} * a.inner_steps;
  std::vector<float> seen((*ca)->global_params().begin(), (*ca)->global_params().end());
  float most = 0;
  std::vector<worker::SyncEvent> events;
  // Until well after the resend's answer (bounded in steps: a loaded box only slows this).
  for (int s = 0;
       s < 3000 && (s < 100 || (*ca)->stats().reanchors == 0 || (*ca)->stats().applied < 12); ++s) {
    for (float& p : pa) p -= kMove;
    (*ca)->AfterStep(pa, 64, absl::Milliseconds(5));
    (*cb)->AfterStep(pb, 64, absl::Milliseconds(5));
    for (auto& e : (*ca)->TakeEvents()) events.push_back(std::move(e));
    const std::span<const float> now = (*ca)->global_params();
    most = std::max(most, MaxMove(*plan, 0, seen, now));
    seen.assign(now.begin(), now.end());
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE((*ca)->Drain(pa, absl::Seconds(20)).ok());
  ASSERT_TRUE((*cb)->Drain(pb, absl::Seconds(20)).ok());
  for (auto& e : (*ca)->TakeEvents()) events.push_back(std::move(e));
  const worker::SyncStats st = (*ca)->stats();
  ASSERT_GE(st.stale, 1u) << "the resent push was not answered Stale: the case is not exercised";
  EXPECT_GE(st.resends, 1u);
  EXPECT_GE(st.reanchors, 1u);
  EXPECT_GT(st.reanchored_steps, static_cast<uint64_t>(bound));
  int pushes = 0;
  for (const worker::SyncEvent& e : events)
    if (e.kind == worker::SyncEvent::kPush) {
      ++pushes;
      EXPECT_LE(e.steps, static_cast<uint64_t>(bound))
          << "fragment " << e.fragment << " seq " << e.seq;
      EXPECT_EQ(e.tokens, e.steps * 64);
    }
  EXPECT_GE(pushes, 12);
  EXPECT_LE(most, bound * kMove * 1.01f)
      << "one adoption moved fragment 0 by " << most / kMove << " steps' worth";
}

// The same through a lost Applied answer: the shard kills itself with the answers to the
// second push step durable but unsent, and comes back a second later while the worker trains
// on. The resends are answered Duplicate, their answers pulled, and every fragment's local
// steps since its push (far past the bound by then) are dropped, not pushed.
TEST(SyncClientTest, APushAnsweredDuplicateAfterALateRestartCarriesAtMostTheBound) {
  LocalShards shards;
  const std::vector<std::string> flags = {"--durability=per-round", "--outer_lr=1",
                                          "--outer_momentum=0"};
  std::vector<std::string> first = flags;
  first.push_back("--test_kill_after_applied=6");
  worker::SyncOptions o = OneShardOptions(shards, 5, first);
  o.codec = *kernels::ParseCodec("fp32");
  o.carry_max = 4;
  o.shard_timeout = absl::Milliseconds(500);
  o.heartbeat = absl::Milliseconds(200);  // shorter than the timeout, as Validate asks
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto plan = Plan::Create(*manifest, o.num_fragments, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::thread restarter([&] {
    if (shards.shards[0]->Wait(absl::Seconds(60)).has_value()) {
      absl::SleepFor(absl::Seconds(1));
      shards.shards[0] = shards.StartShard(0, 1, shards.endpoints[0], flags);
    }
  });
  std::vector<float> params(manifest->total_elements(), 1.0f);
  auto client = worker::SyncClient::Create(o, *manifest);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Join(params, absl::Seconds(20)).ok());
  constexpr float kMove = 1e-4f;
  const int64_t bound = int64_t{o.carry_max} * o.inner_steps;
  std::vector<float> seen((*client)->global_params().begin(), (*client)->global_params().end());
  float most = 0;
  std::vector<worker::SyncEvent> events;
  for (int s = 0;
       s < 4000 && (s < 100 || (*client)->stats().reanchors < 4 || (*client)->stats().applied < 16);
       ++s) {
    for (float& p : params) p -= kMove;
    (*client)->AfterStep(params, 64, absl::Milliseconds(5));
    for (auto& e : (*client)->TakeEvents()) events.push_back(std::move(e));
    const std::span<const float> now = (*client)->global_params();
    for (uint32_t f = 0; f < o.num_fragments; ++f)
      most = std::max(most, MaxMove(*plan, f, seen, now));
    seen.assign(now.begin(), now.end());
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE((*client)->Drain(params, absl::Seconds(20)).ok());
  restarter.join();
  for (auto& e : (*client)->TakeEvents()) events.push_back(std::move(e));
  const worker::SyncStats st = (*client)->stats();
  EXPECT_EQ(st.shard_restarts, 1u);
  ASSERT_GE(st.duplicates, 1u) << "no Applied answer was lost: the case is not exercised";
  EXPECT_GE(st.reanchors, 4u);
  for (const worker::SyncEvent& e : events)
    if (e.kind == worker::SyncEvent::kPush) {
      EXPECT_LE(e.steps, static_cast<uint64_t>(bound))
          << "fragment " << e.fragment << " seq " << e.seq;
    }
  EXPECT_LE(most, bound * kMove * 1.01f)
      << "one adoption moved a fragment by " << most / kMove << " steps' worth";
}

}  // namespace
}  // namespace diloco::testing
