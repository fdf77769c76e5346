// Push alignment (worker/training_sync.h, "Alignment") on a fleet of TrainingSyncs and a
// scripted shard, in steps of a fake clock: every worker takes one inner step per tick, a round
// of the one fragment closes when every worker's push is in, and each push's Applied answer says
// how long the shard held it (held_us). Workers that start at different ticks push at different
// phases; aligned, the round's pushes leave within a step of each other after a round or two,
// and stay there; not aligned, they stay as far apart as they started.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/codec.h"
#include "tests/worker/recording_transport.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/training_sync.h"

namespace diloco::worker {
namespace {

constexpr uint32_t kH = 20;
constexpr uint64_t kStepUs = 1000;  // every worker's step time, as its sync client measured it

struct Worker {
  SyncOptions opt;
  std::unique_ptr<SyncShared> shared;
  std::unique_ptr<TrainingSync> train;
  std::vector<float> params;
  int start = 0;            // the tick of its first step
  uint64_t step_us = 0;     // its step time
  uint32_t h = kH;          // its inner steps per push
  std::vector<int> pushed;  // the tick of each push
};

class PushAlignmentTest : public ::testing::Test {
 protected:
  PushAlignmentTest()
      : manifest_(*GptManifest(GptConfig{16, 4, 1, 1, 4})),
        plan_(*Plan::Create(manifest_, /*num_fragments=*/1, /*num_shards=*/1)) {
    theta_.assign(plan_.fragment(0).numel, 0.5f);
  }

  // A worker that starts at `start` and takes a step every `step_every` ticks, H / step_every
  // steps per push (so that every worker's pushes are H ticks apart).
  void AddWorker(int start, bool align, int step_every = 1) {
    Worker w;
    w.opt.servers = {"tcp://127.0.0.1:9"};
    w.opt.num_fragments = 1;
    w.opt.codec = *kernels::ParseCodec("fp32");
    w.opt.inner_steps = kH;
    w.opt.stream = false;
    w.opt.align_pushes = align;
    w.shared = std::make_unique<SyncShared>(1, 1, 4096);
    w.start = start;
    w.step_us = kStepUs * step_every;
    w.h = kH / step_every;
    w.shared->set_step_time_us(w.step_us);
    w.params.assign(manifest_.total_elements(), 0.0f);
    workers_.push_back(std::move(w));
    workers_.back().train =
        std::make_unique<TrainingSync>(workers_.back().opt, plan_, *workers_.back().shared);
    Deliver(workers_.size() - 1, std::nullopt);  // the join: theta as it is
    ASSERT_TRUE(workers_.back().train->all_joined());
  }

  // The fragment's values at the current version to worker `i`: a pull's answer, or with `held`
  // the Applied answer of its push.
  void Deliver(size_t i, std::optional<absl::Duration> held) {
    wire::HeaderFields h = ShardHeader(wire::MsgType::FragmentUpdate, plan_, manifest_, {});
    h.fragment_id = 0;
    h.version = version_;
    if (held) {
      h.ack = wire::AckStatus::Applied;
      h.held_us = static_cast<uint64_t>(absl::ToInt64Microseconds(*held));
    }
    wire::SetPayloadLayout(h, wire::kFragmentCodec, theta_.size());
    auto bytes = std::make_shared<wire::Bytes>(theta_.size() * sizeof(float));
    std::memcpy(bytes->data(), theta_.data(), bytes->size());
    auto m = BuildMessage(h, std::move(bytes));
    ASSERT_TRUE(m.ok()) << m.status();
    Arrival a{Arrival::kUpdate, 0, version_, held.has_value(), std::move(*m)};
    Worker& w = workers_[i];
    w.train->Process(
        [&w](uint64_t o, uint64_t n) { return std::span<float>(w.params).subspan(o, n); }, a);
  }

  // Ticks until `rounds` rounds have closed. `answer_delay` ticks pass between a round's close
  // and its answers' arrival (their download), which is not the shard's hold.
  void Run(int rounds, int answer_delay = 0) {
    struct Pending {
      size_t worker;
      int arrived;
    };
    std::vector<Pending> in_round;
    struct Answer {
      size_t worker;
      int due;
      absl::Duration held;
    };
    std::vector<Answer> answers;
    for (int t = 0; closed_.size() < static_cast<size_t>(rounds); ++t) {
      ASSERT_LT(t, 100000) << "the rounds stopped closing";
      for (size_t i = 0; i < workers_.size(); ++i) {
        Worker& w = workers_[i];
        if (t < w.start || (t - w.start) % (w.step_us / kStepUs) != 0) continue;
        for (auto it = answers.begin(); it != answers.end();) {  // arrivals, then the step
          if (it->worker == i && it->due <= t) {
            Deliver(i, it->held);
            it = answers.erase(it);
          } else {
            ++it;
          }
        }
        auto params = [&w](uint64_t o, uint64_t n) {
          return std::span<float>(w.params).subspan(o, n);
        };
        for (float& p : w.params) p -= 1e-3f;
        for (const PushJob& job : w.train->Step(params, 10, w.h, w.opt.codec, false)) {
          ASSERT_EQ(job.fragment, 0u);
          w.pushed.push_back(t);
          in_round.push_back({i, t});
        }
      }
      if (in_round.size() < workers_.size()) continue;
      ++version_;  // the round closes: every push in it is answered with how long it was held
      std::vector<int> left;
      for (const Pending& p : in_round) {
        answers.push_back(
            {p.worker, t + answer_delay, (t - p.arrived) * absl::Microseconds(kStepUs)});
        left.push_back(p.arrived);
      }
      closed_.push_back(left);
      in_round.clear();
    }
  }

  // The ticks between a round's first and last push.
  int Spread(size_t round) const {
    const auto [lo, hi] = std::minmax_element(closed_[round].begin(), closed_[round].end());
    return *hi - *lo;
  }

  Manifest manifest_;
  Plan plan_;
  std::vector<float> theta_;
  uint64_t version_ = 1;
  std::deque<Worker> workers_;            // TrainingSync keeps a reference to each one's options
  std::vector<std::vector<int>> closed_;  // per closed round, the ticks its pushes left
};

TEST_F(PushAlignmentTest, FourWorkersStartedApartPushTogetherAfterTwoRounds) {
  for (int start : {0, 4, 9, 16}) AddWorker(start, /*align=*/true);
  Run(12);
  // Round 0 waits on the last starter; the others move their next push later by their wait
  // (16 is more than H / 2: it takes two rounds).
  EXPECT_EQ(Spread(0), 16);
  for (size_t r = 2; r < closed_.size(); ++r) EXPECT_LE(Spread(r), 1) << "round " << r;
  // Aligned, every push is H steps after the one before: the rounds keep their length.
  for (const Worker& w : workers_)
    for (size_t k = 3; k < w.pushed.size(); ++k) EXPECT_EQ(w.pushed[k] - w.pushed[k - 1], kH);
  uint64_t aligned = 0;
  for (const Worker& w : workers_) aligned += w.shared->stats().aligned_pushes;
  EXPECT_GT(aligned, 0u);
}

TEST_F(PushAlignmentTest, NotAlignedTheyStayAsFarApartAsTheyStarted) {
  for (int start : {0, 4, 9, 16}) AddWorker(start, /*align=*/false);
  Run(12);
  for (size_t r = 0; r < closed_.size(); ++r) EXPECT_EQ(Spread(r), 16) << "round " << r;
  for (const Worker& w : workers_) EXPECT_EQ(w.shared->stats().aligned_pushes, 0u);
}

TEST_F(PushAlignmentTest, AnswersThatTakeLongToArriveDoNotMoveThePushes) {
  // Each answer takes 7 steps to come down (a slow link): that is no hold, and aligned workers
  // that already push together keep pushing every H steps.
  AddWorker(0, true);
  AddWorker(0, true);
  Run(8, /*answer_delay=*/7);
  for (size_t r = 0; r < closed_.size(); ++r) EXPECT_EQ(Spread(r), 0) << "round " << r;
  for (const Worker& w : workers_)
    for (size_t k = 1; k < w.pushed.size(); ++k) EXPECT_EQ(w.pushed[k] - w.pushed[k - 1], kH);
}

TEST_F(PushAlignmentTest, TheHoldIsCountedInTheWorkersOwnSteps) {
  // The second worker's steps take two ticks (and it pushes every H / 2 of them): its own hold
  // in ticks is twice its hold in steps. Started apart, the two end within one of its steps (2
  // ticks) of each other.
  AddWorker(0, true);
  AddWorker(6, true, /*step_every=*/2);
  Run(10);
  for (size_t r = 3; r < closed_.size(); ++r) EXPECT_LE(Spread(r), 2) << "round " << r;
}

}  // namespace
}  // namespace diloco::worker
