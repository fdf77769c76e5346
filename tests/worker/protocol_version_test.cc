// A shard of another protocol version: the worker cannot read the fields of its answers, but it
// can read their version (field 0 of every version's header, checksum trailer or not), and a
// retry changes nothing. So the join stops at the shard's first answer with the shard named and
// both versions, instead of retrying until its deadline with the answers counted as damage.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/codec.h"
#include "schema/wire.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/sync_client.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"  // recv_multipart

namespace diloco::testing {
namespace {

// What a shard of protocol `version` answers a Hello it refuses: an Error header, sealed with
// the trailer (a version 2 shard would send none; both are read for their version).
zmq::message_t ErrorHeaderOfVersion(uint16_t version, bool sealed) {
  flatbuffers::FlatBufferBuilder fbb;
  const uint64_t none[1] = {};
  auto lv = fbb.CreateVector(none, 0), cv = fbb.CreateVector(none, 0);
  auto text = fbb.CreateString("a message this worker cannot read");
  wire::HeaderBuilder b(fbb);
  b.add_protocol_version(version);
  b.add_type(wire::MsgType::Error);
  b.add_error_code(wire::ErrorCode::BadProtocolVersion);
  b.add_refused_type(wire::MsgType::Hello);
  b.add_message(text);
  b.add_frame_lengths(lv);
  b.add_frame_checksums(cv);
  fbb.Finish(b.Finish());
  if (sealed) return wire::SealHeader(fbb.GetBufferPointer(), fbb.GetSize());
  return zmq::message_t(fbb.GetBufferPointer(), fbb.GetSize());
}

// A ROUTER on 127.0.0.1 that answers every message it receives with `answer()`, on a thread.
class FakeShard {
 public:
  explicit FakeShard(std::function<zmq::message_t()> answer)
      : router_(ctx_, zmq::socket_type::router), answer_(std::move(answer)) {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeShard() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  int received() const { return received_; }

 private:
  void Serve() {
    while (!stop_) {
      zmq::pollitem_t item{static_cast<void*>(router_), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(20)) == 0) continue;
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(router_, std::back_inserter(frames))) continue;
      ++received_;
      router_.send(frames[0], zmq::send_flags::sndmore);
      router_.send(answer_(), zmq::send_flags::none);
    }
  }

  zmq::context_t ctx_{1};
  zmq::socket_t router_;
  std::function<zmq::message_t()> answer_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> received_{0};
  std::thread thread_;
};

absl::Status JoinAgainst(const std::string& endpoint, absl::Duration deadline) {
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  if (!manifest.ok()) return manifest.status();
  worker::SyncOptions o;
  o.servers = {endpoint};
  o.worker_id = 0;
  o.num_fragments = 4;
  o.codec = *kernels::ParseCodec("int8:256");
  o.inner_steps = 8;
  auto client = worker::SyncClient::Create(o, *manifest);
  if (!client.ok()) return client.status();
  std::vector<float> params(manifest->total_elements(), 0.01f);
  return (*client)->Join(params, deadline);
}

TEST(ProtocolVersionTest, AShardOfANewerVersionStopsTheJoinNamingItAndBothVersions) {
  const uint16_t newer = wire::kProtocolVersion + 1;
  FakeShard shard([&] { return ErrorHeaderOfVersion(newer, /*sealed=*/true); });
  const absl::Time start = absl::Now();
  const absl::Status s = JoinAgainst(shard.endpoint(), absl::Seconds(60));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(shard.endpoint()), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find(
                absl::StrCat("protocol version ", newer, ", expected ", wire::kProtocolVersion)),
            absl::string_view::npos)
      << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "the join waited for its deadline";
  EXPECT_GE(shard.received(), 1);
}

TEST(ProtocolVersionTest, AShardOfAnOlderUnsealedVersionStopsTheJoinToo) {
  const uint16_t older = wire::kProtocolVersion - 1;
  FakeShard shard([&] { return ErrorHeaderOfVersion(older, /*sealed=*/false); });
  const absl::Status s = JoinAgainst(shard.endpoint(), absl::Seconds(60));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(absl::StrCat("protocol version ", older)), absl::string_view::npos)
      << s;
}

// Damage is not another version: answers that do not parse for another reason (here a header
// of this version without its trailer) are counted and the join goes on to its deadline.
TEST(ProtocolVersionTest, AnUnreadableAnswerOfThisVersionIsNotTakenForAnotherVersion) {
  FakeShard shard([] { return ErrorHeaderOfVersion(wire::kProtocolVersion, /*sealed=*/false); });
  const absl::Status s = JoinAgainst(shard.endpoint(), absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(shard.received(), 1);
}

}  // namespace
}  // namespace diloco::testing
