#include "tests/chaos/fault_proxy.h"

#include <map>
#include <random>
#include <vector>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "schema/transport.h"
#include "schema/wire.h"

namespace diloco::testing {
namespace {

using Frames = std::vector<zmq::message_t>;
enum Dir { kUp = 0, kDown = 1 };  // worker -> shard, shard -> worker

Frames Copy(const Frames& f) {
  Frames c;
  c.reserve(f.size());
  for (const auto& m : f) c.emplace_back(m.data(), m.size());
  return c;
}

// The message type of a header frame, Invalid when it does not verify.
wire::MsgType TypeOf(const zmq::message_t& header) {
  zmq::message_t copy(header.data(), header.size());
  auto h = wire::VerifyHeaderFrame(copy);
  return h.ok() ? (*h)->type() : wire::MsgType::Invalid;
}

void SendAll(zmq::socket_t& s, Frames frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto flags = zmq::send_flags::dontwait |
                       (i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (!s.send(frames[i], flags)) return;  // a full or gone peer: the message is lost
  }
}

}  // namespace

struct FaultProxy::Loop {
  struct Held {
    Dir dir;
    std::string rid;
    Frames frames;
  };

  zmq::context_t ctx{1};
  zmq::socket_t front{ctx, zmq::socket_type::router};
  zmq::socket_t replay{ctx, zmq::socket_type::dealer};
  std::string upstream;
  // One DEALER to the shard per worker connection, in creation order for polling.
  absl::flat_hash_map<std::string, size_t> index;
  std::vector<std::pair<std::string, std::unique_ptr<zmq::socket_t>>> ups;
  std::multimap<absl::Time, Held> held;  // delayed messages by release time
  std::optional<Frames> last_push;       // a copy of the latest state-changing worker message
  std::mt19937_64 rng;

  double Uniform() { return std::uniform_real_distribution<double>(0, 1)(rng); }

  zmq::socket_t& Up(const std::string& rid, FaultCounts* counts) {
    auto it = index.find(rid);
    if (it != index.end()) return *ups[it->second].second;
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    wire::ConfigureSocket(*s);
    s->set(zmq::sockopt::linger, 0);
    s->connect(upstream);
    index[rid] = ups.size();
    ups.emplace_back(rid, std::move(s));
    ++counts->connections;
    return *ups.back().second;
  }

  void Deliver(Held h, FaultCounts* counts) {
    ++counts->forwarded;
    if (h.dir == kUp) {
      SendAll(Up(h.rid, counts), std::move(h.frames));
      return;
    }
    Frames out;
    out.reserve(h.frames.size() + 1);
    out.emplace_back(h.rid.data(), h.rid.size());
    for (auto& f : h.frames) out.push_back(std::move(f));
    SendAll(front, std::move(out));
  }

  // One message through the faults: at most one of them, by the rates of this moment.
  void Forward(Held h, const FaultRates& r, FaultCounts* counts) {
    if (h.dir == kUp && !h.frames.empty()) {
      const auto t = TypeOf(h.frames[0]);
      if (t == wire::MsgType::Push || t == wire::MsgType::InitFragment || t == wire::MsgType::Pull)
        last_push = Copy(h.frames);
    }
    double x = Uniform();
    if ((x -= r.drop) < 0) {
      ++counts->dropped;
      return;
    }
    if ((x -= r.duplicate) < 0) {
      ++counts->duplicated;
      Deliver(Held{h.dir, h.rid, Copy(h.frames)}, counts);
      Deliver(std::move(h), counts);
      return;
    }
    if ((x -= r.delay) < 0) {
      ++counts->delayed;
      const auto d = r.max_delay * std::max(Uniform(), 1e-3);
      held.emplace(absl::Now() + d, std::move(h));
      return;
    }
    if ((x -= r.corrupt) < 0 && !h.frames.empty()) {
      ++counts->corrupted;
      if (h.frames.size() > 1) {  // a payload frame: one bit flipped
        auto& f = h.frames[1 + rng() % (h.frames.size() - 1)];
        if (f.size() > 0)
          static_cast<uint8_t*>(f.data())[rng() % f.size()] ^= uint8_t{1} << (rng() % 8);
      } else {  // the header alone: cut in half
        h.frames[0] = zmq::message_t(h.frames[0].data(), h.frames[0].size() / 2);
      }
      Deliver(std::move(h), counts);
      return;
    }
    if ((x -= r.header_flip) < 0 && !h.frames.empty() && h.frames[0].size() > 0) {
      ++counts->header_flipped;
      auto& f = h.frames[0];
      static_cast<uint8_t*>(f.data())[rng() % f.size()] ^= uint8_t{1} << (rng() % 8);
      Deliver(std::move(h), counts);
      return;
    }
    if (h.dir == kUp && (x -= r.replay) < 0 && last_push) {
      ++counts->replayed;
      SendAll(replay, Copy(*last_push));
    }
    Deliver(std::move(h), counts);
  }
};

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& upstream,
                                                              uint64_t seed) {
  std::unique_ptr<FaultProxy> p(new FaultProxy());
  p->loop_ = std::make_unique<Loop>();
  Loop& l = *p->loop_;
  l.upstream = upstream;
  l.rng.seed(seed);
  try {
    wire::ConfigureSocket(l.front);
    l.front.set(zmq::sockopt::linger, 0);
    l.front.bind("tcp://127.0.0.1:*");
    p->endpoint_ = l.front.get(zmq::sockopt::last_endpoint);
    wire::ConfigureSocket(l.replay);
    l.replay.set(zmq::sockopt::linger, 0);
    l.replay.connect(upstream);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("fault proxy to ", upstream, ": ", e.what()));
  }
  FaultProxy* self = p.get();
  p->thread_ = std::thread([self] {
    Loop& l = *self->loop_;
    std::vector<zmq::pollitem_t> items;
    while (!self->stop_.load()) {
      items.clear();
      items.push_back({static_cast<void*>(l.front), 0, ZMQ_POLLIN, 0});
      items.push_back({static_cast<void*>(l.replay), 0, ZMQ_POLLIN, 0});
      for (auto& [rid, s] : l.ups) items.push_back({static_cast<void*>(*s), 0, ZMQ_POLLIN, 0});
      absl::Duration wait = absl::Milliseconds(10);
      if (!l.held.empty())
        wait = std::clamp(l.held.begin()->first - absl::Now(), absl::ZeroDuration(), wait);
      zmq::poll(items.data(), items.size(),
                std::chrono::milliseconds(absl::ToInt64Milliseconds(wait)));
      FaultRates rates;
      {
        MutexLock lock(&self->mu_);
        rates = self->rates_;
      }
      FaultCounts c;  // this pass's counts, added under the lock below
      for (int budget = 0; budget < 256; ++budget) {
        auto f = wire::TryRecvMultipart(l.front);
        if (!f) break;
        if (f->size() < 2) continue;
        std::string rid(static_cast<const char*>((*f)[0].data()), (*f)[0].size());
        f->erase(f->begin());
        l.Forward(Loop::Held{kUp, std::move(rid), std::move(*f)}, rates, &c);
      }
      // Only the sockets polled above: Forward may have added one to l.ups.
      for (size_t i = 2; i < items.size(); ++i) {
        for (int budget = 0; budget < 256; ++budget) {
          auto f = wire::TryRecvMultipart(*l.ups[i - 2].second);
          if (!f) break;
          l.Forward(Loop::Held{kDown, l.ups[i - 2].first, std::move(*f)}, rates, &c);
        }
      }
      while (auto f = wire::TryRecvMultipart(l.replay)) {
        if (!f->empty() && TypeOf((*f)[0]) == wire::MsgType::Error)
          ++c.replay_refused;
        else
          ++c.replay_answered;
      }
      while (!l.held.empty() && l.held.begin()->first <= absl::Now()) {
        auto node = l.held.extract(l.held.begin());
        l.Deliver(std::move(node.mapped()), &c);
      }
      MutexLock lock(&self->mu_);
      self->counts_ += c;
    }
  });
  return p;
}

FaultProxy::~FaultProxy() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void FaultProxy::set_rates(const FaultRates& r) {
  MutexLock lock(&mu_);
  rates_ = r;
}

FaultCounts FaultProxy::counts() const {
  MutexLock lock(&mu_);
  return counts_;
}

}  // namespace diloco::testing
