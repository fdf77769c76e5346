// Shard, a fragment's whole values (server/shard_internal.h): theta(0) taken from a worker
// (InitFragment) and a fragment sent whole (Pull).
#include <algorithm>
#include <cstring>

#include "schema/payload_check.h"
#include "server/shard.h"
#include "server/shard_internal.h"

namespace diloco::server {

void Shard::OnInit(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kData); !s.ok()) return Refuse(rid, s, &h, out);
  FragmentState* fp = OwnedFragment(rid, h, out);
  if (!fp) return;
  FragmentState& f = *fp;
  Outgoing ack{rid, Reply(MsgType::PushAck), {}};
  ack.header.worker_id = h.worker_id();
  ack.header.fragment_id = f.spec->id;
  ack.header.seq = h.seq();
  if (f.version > 0) {
    ack.header.ack = AckStatus::AlreadyInitialized;
    ack.header.version = f.published;
    if (f.published == 0) {  // theta(0) is being made durable: answered with the first
      f.init_acks.push_back(std::move(ack));
      return;
    }
    out->push_back(std::move(ack));
    return;
  }
  if (h.codec() != static_cast<uint8_t>(wire::kFragmentCodec.kind) ||
      h.block() != wire::kFragmentCodec.block || h.topk() != 0)
    return Refuse(rid, WireError(ErrorCode::BadCodec, "InitFragment must be fp32:256"), &h, out);
  if (auto s = wire::CheckEncodedPayload(m, wire::kFragmentCodec, f.spec->numel); !s.ok())
    return Refuse(rid, s, &h, out);
  for (const wire::PayloadChunk& c : wire::PayloadLayout(wire::kFragmentCodec, f.spec->numel))
    std::memcpy(f.theta().data() + c.offset, m.payload(c.index).data(), c.bytes);
  std::fill(f.momentum.begin(), f.momentum.end(), 0.0f);
  if (f.downloads) f.downloads->Reset();
  f.version = 1;
  dirty_ = true;
  ack.header.ack = AckStatus::Initialized;
  if (!store_) {
    Publish(f, out);
    ack.header.version = f.published;
    out->push_back(std::move(ack));
    return;
  }
  // theta(0) is durable before anyone can pull it, in every durability mode: the answer waits
  // for the synced checkpoint holding it (retried after a failed write, never refused).
  f.init_acks.push_back(std::move(ack));
  MaybeStartCheckpoint(clock_->Now());
  PublishReady(out);
}

void Shard::OnPull(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kData); !s.ok()) return Refuse(rid, s, &h, out);
  FragmentState* fp = OwnedFragment(rid, h, out);
  if (!fp) return;
  FragmentState& f = *fp;
  if (f.published == 0)
    return Refuse(rid, WireError(ErrorCode::NotInitialized, "fragment has no theta(0) yet"), &h,
                  out);
  Outgoing o{rid, Reply(MsgType::FragmentUpdate), {}};
  FillUpdate(f, h.worker_id(), /*base=*/0, /*keyframe=*/0, &o);  // a pull is answered whole
  o.header.worker_id = h.worker_id();
  out->push_back(std::move(o));
}

}  // namespace diloco::server
