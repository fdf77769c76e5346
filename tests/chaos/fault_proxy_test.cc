// FaultProxy against a fake shard (a ROUTER that echoes every message, or refuses each with an
// Error): every fault does what it says, and with no faults every message passes unchanged.
#include "tests/chaos/fault_proxy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "absl/time/clock.h"
#include "schema/transport.h"
#include "schema/wire.h"

namespace diloco::testing {
namespace {

// A ROUTER on a free port answering each message on the connection it came from: the message
// itself, or an Error header when `refuse`.
class FakeShard {
 public:
  explicit FakeShard(bool refuse) : refuse_(refuse) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.bind("tcp://127.0.0.1:*");
    endpoint_ = sock_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] {
      while (!stop_) {
        zmq::pollitem_t item{static_cast<void*>(sock_), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(10));
        while (auto f = wire::TryRecvMultipart(sock_)) {
          std::string rid(static_cast<const char*>((*f)[0].data()), (*f)[0].size());
          {
            std::lock_guard<std::mutex> l(mu_);
            rids_.insert(rid);
          }
          if (refuse_) {
            wire::HeaderFields h;
            h.type = wire::MsgType::Error;
            (void)wire::Send(sock_, h, {}, &rid);
          } else {
            for (size_t i = 0; i < f->size(); ++i)
              sock_.send((*f)[i],
                         i + 1 < f->size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
          }
        }
      }
    });
  }
  ~FakeShard() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  size_t connections() {
    std::lock_guard<std::mutex> l(mu_);
    return rids_.size();
  }

 private:
  const bool refuse_;
  zmq::context_t ctx_{1};
  zmq::socket_t sock_{ctx_, zmq::socket_type::router};
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::set<std::string> rids_;
  std::thread thread_;
};

// A worker-side DEALER through the proxy, sending Push messages with one payload frame.
struct Client {
  explicit Client(const std::string& endpoint) {
    sock.set(zmq::sockopt::linger, 0);
    sock.connect(endpoint);
  }
  void Push(uint64_t seq, const std::vector<uint8_t>& payload) {
    wire::HeaderFields h;
    h.type = wire::MsgType::Push;
    h.seq = seq;
    std::vector<zmq::message_t> frames;
    frames.emplace_back(payload.data(), payload.size());
    ASSERT_TRUE(wire::Send(sock, h, std::move(frames), nullptr, false).ok());
  }
  // Every message that arrives within `wait`.
  std::vector<std::vector<zmq::message_t>> Drain(absl::Duration wait) {
    std::vector<std::vector<zmq::message_t>> got;
    const absl::Time end = absl::Now() + wait;
    while (absl::Now() < end) {
      zmq::pollitem_t item{static_cast<void*>(sock), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(10));
      while (auto f = wire::TryRecvMultipart(sock)) got.push_back(std::move(*f));
    }
    return got;
  }
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::dealer};
};

uint64_t SeqOf(std::vector<zmq::message_t>& m) {
  auto h = wire::VerifyHeaderFrame(m[0]);
  return h.ok() ? (*h)->seq() : ~uint64_t{0};
}

constexpr int kMessages = 50;
const std::vector<uint8_t> kPayload(1000, 0x5a);

TEST(FaultProxyTest, WithoutFaultsEveryMessagePassesUnchanged) {
  FakeShard shard(false);
  auto proxy = FaultProxy::Start(shard.endpoint(), 1);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  Client c((*proxy)->endpoint());
  for (int i = 0; i < kMessages; ++i) c.Push(i, kPayload);
  auto got = c.Drain(absl::Seconds(2));
  ASSERT_EQ(got.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ(SeqOf(got[i]), static_cast<uint64_t>(i));  // in order
    ASSERT_EQ(got[i].size(), 2u);
    EXPECT_EQ(std::vector<uint8_t>(got[i][1].data<uint8_t>(),
                                   got[i][1].data<uint8_t>() + got[i][1].size()),
              kPayload);
  }
  const auto n = (*proxy)->counts();
  EXPECT_EQ(n.forwarded, 2u * kMessages);  // there and back
  EXPECT_EQ(n.faults(), 0u);
  EXPECT_EQ(n.connections, 1u);
}

TEST(FaultProxyTest, DropDuplicateAndDelayDoWhatTheySay) {
  FakeShard shard(false);
  auto proxy = FaultProxy::Start(shard.endpoint(), 2);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  Client c((*proxy)->endpoint());

  (*proxy)->set_rates({.drop = 1});
  for (int i = 0; i < kMessages; ++i) c.Push(i, kPayload);
  EXPECT_TRUE(c.Drain(absl::Milliseconds(500)).empty());
  EXPECT_EQ((*proxy)->counts().dropped, static_cast<uint64_t>(kMessages));

  // Duplicated both ways: each push reaches the shard twice and each of its two echoes twice.
  (*proxy)->set_rates({.duplicate = 1});
  for (int i = 0; i < kMessages; ++i) c.Push(i, kPayload);
  EXPECT_EQ(c.Drain(absl::Seconds(2)).size(), 4u * kMessages);

  // Delayed: every message arrives, not all in the order sent.
  (*proxy)->set_rates({.delay = 1, .max_delay = absl::Milliseconds(200)});
  for (int i = 0; i < kMessages; ++i) c.Push(i, kPayload);
  auto got = c.Drain(absl::Seconds(2));
  ASSERT_EQ(got.size(), static_cast<size_t>(kMessages));
  std::set<uint64_t> seqs;
  bool reordered = false;
  for (size_t i = 0; i < got.size(); ++i) {
    seqs.insert(SeqOf(got[i]));
    reordered |= i > 0 && SeqOf(got[i]) < SeqOf(got[i - 1]);
  }
  EXPECT_EQ(seqs.size(), static_cast<size_t>(kMessages));
  EXPECT_TRUE(reordered);
  EXPECT_EQ((*proxy)->counts().delayed, 2u * kMessages);
}

TEST(FaultProxyTest, CorruptionIsWhatTheReceiverChecksCatch) {
  FakeShard shard(false);
  auto proxy = FaultProxy::Start(shard.endpoint(), 3);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  Client c((*proxy)->endpoint());
  (*proxy)->set_rates({.corrupt = 1});  // both ways: a push and its echo
  for (int i = 0; i < kMessages; ++i) c.Push(i, kPayload);
  auto got = c.Drain(absl::Seconds(2));
  ASSERT_EQ(got.size(), static_cast<size_t>(kMessages));
  for (auto& m : got) {
    auto parsed = wire::ParseMessage(std::move(m));
    EXPECT_FALSE(parsed.ok()) << "a corrupted message parsed as sound";
  }
  EXPECT_EQ((*proxy)->counts().corrupted, 2u * kMessages);
}

// A header flip may hit any byte of the header frame, trailer included: the header checksum
// refuses every one as BadChecksum, never as another message or another protocol version. The
// fake shard answers each push with an Error of its own, so each answer carries one flip.
TEST(FaultProxyTest, HeaderFlipsAreWhatTheHeaderChecksumCatches) {
  FakeShard shard(true);
  auto proxy = FaultProxy::Start(shard.endpoint(), 5);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  Client c((*proxy)->endpoint());
  (*proxy)->set_rates({.header_flip = 1});  // both ways: the push's and the answer's
  for (int i = 0; i < kMessages; ++i) c.Push(i, kPayload);
  auto got = c.Drain(absl::Seconds(2));
  ASSERT_EQ(got.size(), static_cast<size_t>(kMessages));
  for (auto& m : got) {
    auto parsed = wire::ParseMessage(std::move(m));
    EXPECT_EQ(wire::ErrorCodeOf(parsed.status()), wire::ErrorCode::BadChecksum) << parsed.status();
  }
  EXPECT_EQ((*proxy)->counts().header_flipped, 2u * kMessages);
  EXPECT_EQ((*proxy)->counts().corrupted, 0u);
}

TEST(FaultProxyTest, ReplaysGoOnAConnectionOfTheirOwnAndTheirAnswersAreCounted) {
  for (bool refuse : {false, true}) {
    FakeShard shard(refuse);
    auto proxy = FaultProxy::Start(shard.endpoint(), 4);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    Client c((*proxy)->endpoint());
    (*proxy)->set_rates({.replay = 1});
    for (int i = 0; i < kMessages; ++i) c.Push(i, kPayload);
    EXPECT_EQ(c.Drain(absl::Seconds(2)).size(), static_cast<size_t>(kMessages));
    const auto n = (*proxy)->counts();
    EXPECT_EQ(n.replayed, static_cast<uint64_t>(kMessages));
    EXPECT_EQ(shard.connections(), 2u);  // the client's and the replays'
    EXPECT_EQ(refuse ? n.replay_refused : n.replay_answered, static_cast<uint64_t>(kMessages));
    EXPECT_EQ(refuse ? n.replay_answered : n.replay_refused, 0u);
  }
}

}  // namespace
}  // namespace diloco::testing
