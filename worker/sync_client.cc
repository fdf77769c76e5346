#include "worker/sync_client.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/optim.h"
#include "schema/transport.h"

namespace diloco::worker {

using wire::AckStatus;
using wire::MsgType;

namespace {

constexpr kernels::Codec kDownloadCodec{kernels::CodecKind::kFp32, 256};

double Ema(double old, double x, double a = 0.1) { return old == 0 ? x : (1 - a) * old + a * x; }

}  // namespace

// A push handed from the training thread to the I/O thread, and kept there until acked.
struct PushJob {
  uint32_t fragment = 0;
  uint64_t seq = 0, base_version = 0, tokens = 0;
  uint32_t steps = 0;
  std::shared_ptr<const wire::Bytes> encoded;  // set by the I/O thread
  absl::Time sent = absl::InfinitePast();
};

// What the I/O thread hands back to the training thread.
struct Arrival {
  // kDone: push finished without an update; kReset: the shard restarted, forget its versions.
  enum Kind { kUpdate, kDone, kReset } kind = kUpdate;
  uint32_t fragment = 0;
  uint64_t version = 0;
  bool answers_push = false;  // the Applied update of this worker's outstanding push
  std::optional<wire::Message> message;  // kUpdate: the FragmentUpdate (fp32 chunks)
};

struct ShardLink {
  uint32_t index = 0;
  std::string endpoint;
  std::unique_ptr<zmq::socket_t> socket;
  bool welcomed = false;
  uint64_t incarnation = 0;
  absl::Time last_heard, last_hello = absl::InfinitePast(), last_heartbeat = absl::InfinitePast();
  absl::Duration backoff = absl::Milliseconds(100);
  std::map<std::pair<uint32_t, uint64_t>, PushJob> unacked;  // (fragment, seq)
  std::vector<uint32_t> fragments;
};

struct FragmentSync {  // training-thread view of one fragment
  const Fragment* spec = nullptr;
  uint64_t version = 0;  // adopted global version
  int64_t steps = 0;     // inner steps since adoption (may start negative: staggering)
  uint64_t tokens = 0;
  uint64_t next_seq = 1;
  bool outstanding = false;
  uint64_t pushed_base = 0;
  std::vector<float> delta;  // owned by the I/O thread while outstanding
  std::vector<float> error;  // error feedback residual, I/O thread only
};

struct SyncClient::Impl {
  SyncOptions opt;
  Plan plan;
  uint64_t model_fp = 0;
  std::vector<float> anchor;  // flat: global values adopted last (== anchor of each fragment)
  std::vector<FragmentSync> frags;
  double step_time_us = 0;
  std::atomic<uint64_t> fleet_step_time_us{0};

  // Shared between threads.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<uint32_t> push_queue;   // fragments whose delta is ready
  std::deque<uint32_t> pull_queue;   // fragments to pull
  std::deque<Arrival> arrivals;
  SyncStats stats;
  bool joining = false;
  std::vector<bool> init_sent;
  std::span<const float> join_params;

  std::atomic<bool> stop{false};
  std::thread io;
  zmq::context_t ctx{1};
  std::vector<ShardLink> links;

  void IoLoop();
  void Connect(ShardLink& l);
  void SendHello(ShardLink& l);
  void OnMessage(ShardLink& l, wire::Message m);
  void SendPush(ShardLink& l, PushJob& job);
  void SendPull(ShardLink& l, uint32_t fragment);
  void SendInit(ShardLink& l, uint32_t fragment);
  void EncodePush(PushJob& job);
  wire::HeaderFields Header(MsgType t) const;
  void Deliver(Arrival a) {
    std::lock_guard<std::mutex> g(mu);
    arrivals.push_back(std::move(a));
    cv.notify_all();
  }
  void Adopt(std::span<float> params, Arrival& a);
};

SyncClient::SyncClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SyncClient::~SyncClient() {
  impl_->stop = true;
  if (impl_->io.joinable()) impl_->io.join();
}

absl::StatusOr<std::unique_ptr<SyncClient>> SyncClient::Create(const SyncOptions& o,
                                                               const Manifest& manifest) {
  if (o.servers.empty()) return absl::InvalidArgumentError("sync: no servers given");
  if (o.inner_steps == 0) return absl::InvalidArgumentError("sync: inner steps must be positive");
  if (auto s = kernels::ValidateCodec(o.codec); !s.ok()) return s;
  auto plan = Plan::Create(manifest, o.num_fragments, static_cast<uint32_t>(o.servers.size()));
  if (!plan.ok()) return plan.status();
  auto impl = std::make_unique<Impl>();
  impl->opt = o;
  if (impl->opt.generation == 0)
    impl->opt.generation = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  impl->plan = std::move(*plan);
  impl->model_fp = manifest.fingerprint();
  impl->anchor.assign(manifest.total_elements(), 0.0f);
  impl->frags.resize(o.num_fragments);
  impl->stats.versions.assign(o.num_fragments, 0);
  for (uint32_t i = 0; i < o.num_fragments; ++i) {
    auto& f = impl->frags[i];
    f.spec = &impl->plan.fragment(i);
    f.delta.assign(f.spec->numel, 0.0f);
    f.error.assign(f.spec->numel, 0.0f);
    // Streaming: fragment i first pushes after (1 + i/P) * H steps, so pushes spread evenly.
    if (o.stream) f.steps = -static_cast<int64_t>(i) * o.inner_steps / o.num_fragments;
  }
  impl->links.resize(o.servers.size());
  for (uint32_t s = 0; s < o.servers.size(); ++s) {
    impl->links[s].index = s;
    impl->links[s].endpoint = o.servers[s];
    impl->links[s].fragments = impl->plan.FragmentsOfShard(s);
  }
  impl->init_sent.assign(o.num_fragments, false);
  return std::unique_ptr<SyncClient>(new SyncClient(std::move(impl)));
}

uint64_t SyncClient::plan_fingerprint() const { return impl_->plan.fingerprint(); }
std::span<const float> SyncClient::global_params() const { return impl_->anchor; }

SyncStats SyncClient::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->stats;
}

absl::Status SyncClient::Join(std::span<float> params, absl::Duration deadline) {
  Impl& im = *impl_;
  if (params.size() != im.plan.total_elements())
    return absl::InvalidArgumentError("sync: parameter buffer does not match the manifest");
  {
    std::lock_guard<std::mutex> g(im.mu);
    im.joining = true;
    im.join_params = params;
  }
  im.io = std::thread([&im] { im.IoLoop(); });
  const absl::Time end = absl::Now() + deadline;
  std::vector<bool> have(im.frags.size(), false);
  size_t got = 0;
  std::unique_lock<std::mutex> lk(im.mu);
  while (got < have.size()) {
    if (absl::Now() >= end) {
      im.joining = false;
      return absl::DeadlineExceededError(
          absl::StrCat("sync: joined ", got, " of ", have.size(),
                       " fragments before the deadline; are all shards up (",
                       absl::StrJoin(im.opt.servers, ","), ")?"));
    }
    im.cv.wait_for(lk, std::chrono::milliseconds(50));
    while (!im.arrivals.empty()) {
      Arrival a = std::move(im.arrivals.front());
      im.arrivals.pop_front();
      if (a.kind != Arrival::kUpdate) continue;
      lk.unlock();
      im.Adopt(params, a);
      lk.lock();
      if (!have[a.fragment]) {
        have[a.fragment] = true;
        ++got;
      }
    }
  }
  im.joining = false;
  return absl::OkStatus();
}

// Takes the arrived global fragment: anchor = global; local = lerp(global, local, alpha).
void SyncClient::Impl::Adopt(std::span<float> params, Arrival& a) {
  FragmentSync& f = frags[a.fragment];
  if (a.answers_push) f.outstanding = false;
  if (a.version <= f.version) return;  // older than what we have: nothing to take
  const wire::Message& m = *a.message;
  const uint64_t chunk = m.header().chunk_elements();
  uint64_t pos = 0;  // element index within the fragment
  size_t piece = 0;
  uint64_t in_piece = 0;
  for (size_t c = 0; c < m.num_payloads(); ++c) {
    auto p = m.payload(c);
    const float* src = reinterpret_cast<const float*>(p.data());
    uint64_t n = p.size() / 4;
    (void)chunk;
    while (n > 0) {
      const Piece& pc = f.spec->pieces[piece];
      const uint64_t take = std::min(n, pc.length - in_piece);
      float* dst_anchor = anchor.data() + pc.flat_offset + in_piece;
      std::memcpy(dst_anchor, src, take * 4);
      std::span<float> local(params.data() + pc.flat_offset + in_piece, take);
      kernels::LerpAdopt(std::span<const float>(dst_anchor, take), local, opt.adopt_alpha);
      src += take;
      n -= take;
      pos += take;
      in_piece += take;
      if (in_piece == pc.length) {
        ++piece;
        in_piece = 0;
      }
    }
  }
  std::lock_guard<std::mutex> g(mu);
  if (a.answers_push) {  // rounds other workers closed between our base and our round
    const uint64_t ideal = f.pushed_base + 1;
    stats.mean_staleness =
        Ema(stats.mean_staleness, static_cast<double>(a.version > ideal ? a.version - ideal : 0));
  }
  f.version = a.version;
  f.steps = 0;
  f.tokens = 0;
  stats.versions[a.fragment] = a.version;
  ++stats.adoptions;
}

void SyncClient::AfterStep(std::span<float> params, uint64_t tokens, absl::Duration step_time) {
  Impl& im = *impl_;
  im.step_time_us = Ema(im.step_time_us, absl::ToDoubleMicroseconds(step_time));
  std::deque<Arrival> arrived;
  {
    std::lock_guard<std::mutex> g(im.mu);
    arrived.swap(im.arrivals);
  }
  for (auto& a : arrived) {
    if (a.kind == Arrival::kDone) {
      im.frags[a.fragment].outstanding = false;
      continue;
    }
    if (a.kind == Arrival::kReset) {
      im.frags[a.fragment].version = 0;  // adopt whatever the restarted shard sends next
      continue;
    }
    im.Adopt(params, a);
  }
  // Dynamic Local Updates: a slower worker takes fewer inner steps per push.
  uint32_t h = im.opt.inner_steps;
  const uint64_t fleet = im.fleet_step_time_us.load();
  if (im.opt.dylu && fleet > 0 && im.step_time_us > 0)
    h = std::max<uint32_t>(1, static_cast<uint32_t>(im.opt.inner_steps *
                                                    std::min(1.0, fleet / im.step_time_us)));
  std::vector<uint32_t> due;
  for (auto& f : im.frags) {
    ++f.steps;
    f.tokens += tokens;
    if (f.outstanding || f.version == 0 || f.steps < static_cast<int64_t>(h)) continue;
    // delta = anchor - local, gathered into the fragment's own order.
    float* d = f.delta.data();
    for (const Piece& p : f.spec->pieces) {
      kernels::Delta(std::span<const float>(im.anchor.data() + p.flat_offset, p.length),
                     std::span<const float>(params.data() + p.flat_offset, p.length),
                     std::span<float>(d, p.length));
      d += p.length;
    }
    f.outstanding = true;
    f.pushed_base = f.version;
    due.push_back(f.spec->id);
  }
  std::lock_guard<std::mutex> g(im.mu);
  im.stats.inner_steps_now = h;
  for (uint32_t id : due) im.push_queue.push_back(id);
}

// ---- I/O thread -------------------------------------------------------------------------

wire::HeaderFields SyncClient::Impl::Header(MsgType t) const {
  wire::HeaderFields h;
  h.type = t;
  h.plan_fingerprint = plan.fingerprint();
  h.model_fingerprint = model_fp;
  h.worker_id = opt.worker_id;
  h.generation = opt.generation;
  h.step_time_us = static_cast<uint64_t>(step_time_us);
  return h;
}

void SyncClient::Impl::Connect(ShardLink& l) {
  l.socket = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
  wire::ConfigureSocket(*l.socket);
  l.socket->set(zmq::sockopt::linger, 0);
  l.socket->set(zmq::sockopt::reconnect_ivl, 100);
  l.socket->set(zmq::sockopt::reconnect_ivl_max, 2000);
  l.socket->connect(l.endpoint);
  l.welcomed = false;
  l.last_heard = absl::Now();
  l.last_hello = absl::InfinitePast();
}

void SyncClient::Impl::SendHello(ShardLink& l) {
  (void)wire::Send(*l.socket, Header(MsgType::Hello), {});
  l.last_hello = absl::Now();
}

void SyncClient::Impl::SendPull(ShardLink& l, uint32_t fragment) {
  auto h = Header(MsgType::Pull);
  h.fragment_id = fragment;
  (void)wire::Send(*l.socket, h, {});
}

void SyncClient::Impl::SendInit(ShardLink& l, uint32_t fragment) {
  const Fragment& f = plan.fragment(fragment);
  auto bytes = std::make_shared<wire::Bytes>(f.numel * 4);
  plan.Gather(f, join_params.data(), reinterpret_cast<float*>(bytes->data()));
  auto h = Header(MsgType::InitFragment);
  h.fragment_id = fragment;
  h.codec = static_cast<uint8_t>(kDownloadCodec.kind);
  h.block = kDownloadCodec.block;
  h.num_elements = f.numel;
  h.chunk_elements = wire::ChunkElements(kDownloadCodec.block);
  std::vector<zmq::message_t> frames;
  for (uint64_t off = 0; off < f.numel; off += h.chunk_elements)
    frames.push_back(wire::SharedFrame(bytes, off * 4, std::min(h.chunk_elements, f.numel - off) * 4));
  (void)wire::Send(*l.socket, h, std::move(frames));
}

void SyncClient::Impl::EncodePush(PushJob& job) {
  FragmentSync& f = frags[job.fragment];
  const uint64_t chunk = wire::ChunkElements(opt.codec.block);
  size_t total = 0;
  for (uint64_t off = 0; off < f.spec->numel; off += chunk)
    total += kernels::EncodedSize(opt.codec, std::min(chunk, f.spec->numel - off));
  auto bytes = std::make_shared<wire::Bytes>(total);
  size_t pos = 0;
  for (uint64_t off = 0; off < f.spec->numel; off += chunk) {
    const uint64_t n = std::min(chunk, f.spec->numel - off);
    const size_t sz = kernels::EncodedSize(opt.codec, n);
    auto s = kernels::ErrorFeedbackEncode(opt.codec, std::span<const float>(f.delta.data() + off, n),
                                          std::span<float>(f.error.data() + off, n),
                                          std::span<uint8_t>(bytes->data() + pos, sz));
    if (!s.ok()) {  // a non-finite delta: the model diverged; do not poison the shard
      std::fill(f.error.begin() + off, f.error.begin() + off + n, 0.0f);
      std::memset(bytes->data() + pos, 0, sz);
      std::lock_guard<std::mutex> g(mu);
      ++stats.errors;
    }
    pos += sz;
  }
  job.encoded = std::move(bytes);
}

void SyncClient::Impl::SendPush(ShardLink& l, PushJob& job) {
  const Fragment& f = plan.fragment(job.fragment);
  auto h = Header(MsgType::Push);
  h.fragment_id = job.fragment;
  h.seq = job.seq;
  h.base_version = job.base_version;
  h.tokens = job.tokens;
  h.steps = job.steps;
  h.codec = static_cast<uint8_t>(opt.codec.kind);
  h.block = opt.codec.block;
  h.num_elements = f.numel;
  h.chunk_elements = wire::ChunkElements(opt.codec.block);
  std::vector<zmq::message_t> frames;
  size_t pos = 0;
  for (uint64_t off = 0; off < f.numel; off += h.chunk_elements) {
    const size_t sz = kernels::EncodedSize(opt.codec, std::min(h.chunk_elements, f.numel - off));
    frames.push_back(wire::SharedFrame(job.encoded, pos, sz));
    pos += sz;
  }
  if (wire::Send(*l.socket, h, std::move(frames)).ok()) {
    std::lock_guard<std::mutex> g(mu);
    stats.bytes_sent += pos;
  }
  job.sent = absl::Now();
}

void SyncClient::Impl::OnMessage(ShardLink& l, wire::Message m) {
  const auto& h = m.header();
  l.last_heard = absl::Now();
  if (h.plan_fingerprint() != plan.fingerprint()) {
    std::lock_guard<std::mutex> g(mu);
    ++stats.errors;
    return;
  }
  {
    std::lock_guard<std::mutex> g(mu);
    stats.bytes_received += m.payload_bytes();
  }
  switch (h.type()) {
    case MsgType::Welcome: {
      const bool restarted = l.incarnation != 0 && l.incarnation != h.incarnation();
      l.incarnation = h.incarnation();
      l.welcomed = true;
      l.backoff = absl::Milliseconds(100);
      if (h.fleet_step_time_us() > 0) fleet_step_time_us = h.fleet_step_time_us();
      // Everything not yet acked goes again, same sequence numbers: the shard's dedup table
      // keeps it exactly-once.
      for (auto& [_, job] : l.unacked) SendPush(l, job);
      if (restarted) {
        std::lock_guard<std::mutex> g(mu);
        ++stats.reconnects;
      }
      bool join_now;
      {
        std::lock_guard<std::mutex> g(mu);
        join_now = joining;
      }
      if (join_now && h.versions()) {
        for (const auto* fv : *h.versions()) {
          if (fv->id() >= frags.size()) continue;
          if (fv->version() == 0) {
            SendInit(l, fv->id());
          } else {
            SendPull(l, fv->id());
          }
        }
      } else if (restarted) {
        // The shard may have gone back to an older checkpoint: take its versions as they are.
        for (uint32_t id : l.fragments) {
          Deliver({Arrival::kReset, id, 0, false, std::nullopt});
          SendPull(l, id);
        }
      }
      return;
    }
    case MsgType::PushAck: {
      const auto key = std::make_pair(h.fragment_id(), h.seq());
      switch (h.ack()) {
        case AckStatus::Queued:  // keep it until Applied: a crash before then means resend
          if (auto it = l.unacked.find(key); it != l.unacked.end()) it->second.sent = absl::Now();
          return;
        case AckStatus::Initialized:
        case AckStatus::AlreadyInitialized:
          SendPull(l, h.fragment_id());
          return;
        case AckStatus::Duplicate:
        case AckStatus::Stale: {
          if (l.unacked.erase(key) == 0) return;
          {
            std::lock_guard<std::mutex> g(mu);
            if (h.ack() == AckStatus::Stale) ++stats.stale;
            else ++stats.duplicates;
          }
          Deliver({Arrival::kDone, h.fragment_id(), 0, true, std::nullopt});
          SendPull(l, h.fragment_id());
          return;
        }
        default:
          return;
      }
    }
    case MsgType::FragmentUpdate: {
      if (h.fragment_id() >= frags.size()) return;
      if (h.codec() != static_cast<uint8_t>(kDownloadCodec.kind) ||
          h.num_elements() != plan.fragment(h.fragment_id()).numel ||
          m.payload_bytes() != h.num_elements() * 4) {
        std::lock_guard<std::mutex> g(mu);
        ++stats.errors;
        return;
      }
      bool answers = false;
      if (h.ack() == AckStatus::Applied && h.worker_id() == opt.worker_id)
        answers = l.unacked.erase({h.fragment_id(), h.seq()}) > 0;
      Deliver({Arrival::kUpdate, h.fragment_id(), h.version(), answers, std::move(m)});
      return;
    }
    case MsgType::Heartbeat:
      return;  // liveness only: last_heard is updated above
    case MsgType::Error: {
      std::lock_guard<std::mutex> g(mu);
      ++stats.errors;
      if (h.error_code() == wire::ErrorCode::BadIdentity) l.welcomed = false;  // re-Hello
      if (h.error_code() == wire::ErrorCode::NotInitialized) pull_queue.push_back(h.fragment_id());
      return;
    }
    default:
      return;
  }
}

void SyncClient::Impl::IoLoop() {
  for (auto& l : links) Connect(l);
  std::vector<zmq::pollitem_t> items(links.size());
  absl::Time last_pull_retry = absl::Now();
  while (!stop) {
    for (size_t i = 0; i < links.size(); ++i)
      items[i] = {static_cast<void*>(*links[i].socket), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(5));
    } catch (const zmq::error_t&) {
      continue;
    }
    for (size_t i = 0; i < links.size(); ++i) {
      for (int budget = 0; budget < 64; ++budget) {
        auto frames = wire::TryRecvMultipart(*links[i].socket);
        if (!frames) break;
        auto m = wire::ParseMessage(std::move(*frames));
        if (!m.ok()) {
          std::lock_guard<std::mutex> g(mu);
          ++stats.errors;
          continue;
        }
        OnMessage(links[i], std::move(*m));
      }
    }
    // New pushes from the training thread.
    std::deque<uint32_t> pushes, pulls;
    {
      std::lock_guard<std::mutex> g(mu);
      pushes.swap(push_queue);
      if (absl::Now() - last_pull_retry > absl::Milliseconds(200)) {
        pulls.swap(pull_queue);
        last_pull_retry = absl::Now();
      }
    }
    for (uint32_t id : pushes) {
      FragmentSync& f = frags[id];
      ShardLink& l = links[f.spec->shard];
      PushJob job;
      job.fragment = id;
      job.seq = f.next_seq++;
      job.base_version = f.pushed_base;
      job.tokens = std::max<uint64_t>(f.tokens, 1);
      job.steps = static_cast<uint32_t>(std::max<int64_t>(f.steps, 1));
      EncodePush(job);
      if (l.unacked.size() >= opt.max_unacked_pushes) l.unacked.erase(l.unacked.begin());
      auto& kept = l.unacked[{id, job.seq}] = std::move(job);
      if (l.welcomed) SendPush(l, kept);
      std::lock_guard<std::mutex> g(mu);
      ++stats.pushes;
    }
    for (uint32_t id : pulls) SendPull(links[plan.fragment(id).shard], id);
    // Liveness, heartbeats, resends.
    const absl::Time now = absl::Now();
    for (auto& l : links) {
      if (now - l.last_heard > opt.shard_timeout) {
        // Silent shard: new socket, back off exponentially. Training goes on meanwhile.
        Connect(l);
        l.backoff = std::min(l.backoff * 2, opt.backoff_max);
        l.last_heard = now + l.backoff;  // give the reconnect time before judging again
        std::lock_guard<std::mutex> g(mu);
        ++stats.reconnects;
      }
      if (!l.welcomed && now - l.last_hello > l.backoff) SendHello(l);
      if (l.welcomed && now - l.last_heartbeat > opt.heartbeat) {
        (void)wire::Send(*l.socket, Header(MsgType::Heartbeat), {});
        l.last_heartbeat = now;
      }
      if (l.welcomed) {
        for (auto& [_, job] : l.unacked) {
          if (now - job.sent > opt.resend_after) {
            SendPush(l, job);
            std::lock_guard<std::mutex> g(mu);
            ++stats.resends;
          }
        }
      }
    }
  }
}

}  // namespace diloco::worker
