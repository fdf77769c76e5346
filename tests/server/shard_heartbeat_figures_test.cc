// Learner figures on heartbeats (LearnerFigures, docs/protocol.md "Learner figures"): a
// heartbeat without them (an older worker's) stays valid, one with them is kept as the worker's
// last figures and shown on /metrics and in Stats, NaN, negative, absurd and hostile values are
// shown as sent without harm, and a worker that goes silent drops out of the views.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "server/metrics.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::MsgType;

class ShardHeartbeatFiguresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    h_ = std::make_unique<ShardHarness>(TinyOptions());
    h_->Hello("a", 1);
  }
  std::vector<Outgoing> Heartbeat(std::optional<wire::LearnerFiguresFields> f) {
    auto hf = h_->Base(MsgType::Heartbeat, 1);
    hf.figures = std::move(f);
    return h_->Send("a", hf);
  }
  nlohmann::json Learners() { return nlohmann::json::parse(h_->shard().StatsJson())["learners"]; }
  std::unique_ptr<ShardHarness> h_;
};

TEST_F(ShardHeartbeatFiguresTest, HeartbeatWithoutFiguresIsAnsweredAndShowsTheWorker) {
  ASSERT_NE(Only(Heartbeat(std::nullopt), MsgType::Heartbeat), nullptr);
  const auto rows = h_->shard().learners();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id, 1u);
  EXPECT_FALSE(rows[0].figures.step.has_value());
  const auto j = Learners();
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["worker"], 1);
  EXPECT_TRUE(j[0]["step"].is_null());
  const std::string text = PrometheusText(h_->shard());
  EXPECT_NE(text.find("diloco_learner_info{shard=\"0\",worker=\"1\",generation=\"1\""),
            std::string::npos);
  EXPECT_EQ(text.find("diloco_learner_step{"), std::string::npos);
}

TEST_F(ShardHeartbeatFiguresTest, FiguresAreKeptAndExported) {
  wire::LearnerFiguresFields f;
  f.step = 42;
  f.loss = 2.5f;
  f.tokens_per_s = 1000;
  f.utilization = 0.75f;
  f.device = "cpu";
  f.codec = "int8";
  f.inner_steps = 20;
  f.bytes_sent = 123456;
  f.bytes_received = 654321;
  f.mean_staleness = 0.5f;
  f.host = "node-7";
  ASSERT_NE(Only(Heartbeat(f), MsgType::Heartbeat), nullptr);
  const auto j = Learners();
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["step"], 42);
  EXPECT_EQ(j[0]["loss"], 2.5);
  EXPECT_EQ(j[0]["host"], "node-7");
  EXPECT_EQ(j[0]["codec"], "int8");
  EXPECT_EQ(j[0]["inner_steps"], 20);
  EXPECT_EQ(j[0]["bytes_received"], 654321);
  const std::string text = PrometheusText(h_->shard());
  for (const char* line :
       {"diloco_learner_step{shard=\"0\",worker=\"1\"} 42\n",
        "diloco_learner_loss{shard=\"0\",worker=\"1\"} 2.5\n",
        "diloco_learner_utilization{shard=\"0\",worker=\"1\"} 0.75\n",
        "diloco_learner_sent_bytes{shard=\"0\",worker=\"1\"} 123456\n",
        "diloco_learner_info{shard=\"0\",worker=\"1\",generation=\"1\",host=\"node-7\","
        "device=\"cpu\",codec=\"int8\"} 1\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  // A later heartbeat without figures keeps the last ones.
  Heartbeat(std::nullopt);
  EXPECT_EQ(Learners()[0]["step"], 42);
}

TEST_F(ShardHeartbeatFiguresTest, AbsurdFiguresAreShownAsSentAndHarmNothing) {
  wire::LearnerFiguresFields f;
  f.step = std::numeric_limits<uint64_t>::max();
  f.loss = std::nanf("");
  f.tokens_per_s = -5;
  f.utilization = std::numeric_limits<float>::infinity();
  f.mean_staleness = -std::numeric_limits<float>::infinity();
  f.host = "evil\"host\\\nname" + std::string(500, 'x');
  ASSERT_NE(Only(Heartbeat(f), MsgType::Heartbeat), nullptr);
  const std::string text = PrometheusText(h_->shard());
  EXPECT_NE(text.find("diloco_learner_loss{shard=\"0\",worker=\"1\"} NaN\n"), std::string::npos);
  EXPECT_NE(text.find("diloco_learner_tokens_per_second{shard=\"0\",worker=\"1\"} -5\n"),
            std::string::npos);
  EXPECT_NE(text.find("diloco_learner_utilization{shard=\"0\",worker=\"1\"} +Inf\n"),
            std::string::npos);
  EXPECT_NE(text.find("host=\"evil\\\"host\\\\\\nname"), std::string::npos) << text;
  const auto j = Learners();  // still JSON: no NaN in it
  EXPECT_EQ(j[0]["loss"], "NaN");
  EXPECT_EQ(j[0]["utilization"], "+Inf");
  EXPECT_EQ(j[0]["host"].get<std::string>().size(), wire::kMaxFigureText);
  // The shard goes on serving.
  EXPECT_NE(Only(Heartbeat(std::nullopt), MsgType::Heartbeat), nullptr);
  EXPECT_EQ(h_->shard().live_workers(), 1u);
}

// The views say how long ago a learner's push arrived and how long ago a round applied one:
// an arrived push that no round applied yet has the first and not the second.
TEST_F(ShardHeartbeatFiguresTest, TheAgeOfTheLastAppliedPushCountsFromTheRoundThatAppliedIt) {
  const uint64_t n = h_->fragment(0).numel;
  ASSERT_NE(Only(h_->Init("a", 1, 0, std::vector<float>(n, 1.0f)), MsgType::PushAck), nullptr);
  EXPECT_FALSE(h_->shard().learners()[0].applied_age_s.has_value());
  h_->Push("a", 1, 0, 1, 1, std::vector<float>(n, 0.2f));
  h_->clock().Advance(absl::Seconds(1));
  auto rows = h_->shard().learners();
  ASSERT_TRUE(rows[0].push_age_s.has_value());
  EXPECT_DOUBLE_EQ(*rows[0].push_age_s, 1.0);
  EXPECT_FALSE(rows[0].applied_age_s.has_value()) << "no round has applied it yet";
  ASSERT_EQ(h_->Tick().size(), 1u);  // the lone worker's push closes the round
  h_->clock().Advance(absl::Seconds(3));
  rows = h_->shard().learners();
  ASSERT_TRUE(rows[0].applied_age_s.has_value());
  EXPECT_DOUBLE_EQ(*rows[0].applied_age_s, 3.0);
  EXPECT_DOUBLE_EQ(Learners()[0]["applied_age_s"].get<double>(), 3.0);
  EXPECT_NE(PrometheusText(h_->shard())
                .find("diloco_learner_applied_age_seconds{shard=\"0\",worker=\"1\"} 3"),
            std::string::npos)
      << PrometheusText(h_->shard());
}

TEST_F(ShardHeartbeatFiguresTest, SilentWorkerDropsOutAndNewGenerationStartsClean) {
  wire::LearnerFiguresFields f;
  f.step = 7;
  Heartbeat(f);
  h_->Hello("a2", 1, 2);  // the worker restarted
  ASSERT_EQ(h_->shard().learners().size(), 1u);
  EXPECT_FALSE(h_->shard().learners()[0].figures.step.has_value());
  h_->clock().Advance(absl::Seconds(11));  // past the worker timeout (10 s)
  EXPECT_TRUE(h_->shard().learners().empty());
  EXPECT_TRUE(Learners().empty());
  EXPECT_EQ(PrometheusText(h_->shard()).find("diloco_learner_info{shard"), std::string::npos);
}

}  // namespace
}  // namespace diloco::server::testing
