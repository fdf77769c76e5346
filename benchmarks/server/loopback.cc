// Part 3 of diloco-bench-server: real diloco-server processes on 127.0.0.1 fed by pushing
// threads, one DEALER per (thread, shard). Each thread pushes encoded deltas of every fragment
// and waits for the Applied update of each before pushing that fragment again: int8 pushes with
// int8 downloads (the default), with fp32 downloads, then int4 both ways.
//
// Its peer, measured in the same run for each row: a raw ZeroMQ echo with the same sockets,
// threads and frames (ROUTER threads that answer each push with a preallocated frame of the
// download's size, zero-copy, no checks, no math). Its parameters/s is what moving these bytes
// through ZeroMQ and the loopback TCP stack allows on this machine; the ratio against it is
// what the shard's work (checksums, merge, outer step, download quantization) leaves of that.
// The memcpy column is wire bytes per second (pushes sent, updates received) over memcpy's
// bandwidth: every one of those bytes is copied at least once on the loopback path.
#include "benchmarks/server/loopback.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "benchmarks/server/spawn.h"
#include "common/model_source.h"
#include "common/plan.h"
#include "kernels/codec.h"
#include "schema/transport.h"

namespace {

using namespace diloco;

std::string WaitEndpoint(const std::filesystem::path& p) {
  for (int i = 0; i < 400; ++i) {
    std::ifstream in(p);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;
    absl::SleepFor(absl::Milliseconds(25));
  }
  return "";
}

// The encoded payload of every fragment, shared by every pusher (read-only, sent zero-copy).
std::vector<std::shared_ptr<const wire::Bytes>> EncodePushes(const Plan& plan,
                                                             kernels::Codec codec) {
  std::vector<std::shared_ptr<const wire::Bytes>> enc(plan.fragments().size());
  for (const auto& f : plan.fragments()) {
    std::mt19937 rng(f.id);
    std::normal_distribution<float> d(0.0f, 1e-3f);
    std::vector<float> v(f.numel);
    for (auto& x : v) x = d(rng);
    const wire::PayloadLayout layout(codec, f.numel);
    auto b = std::make_shared<wire::Bytes>(layout.bytes());
    for (const wire::PayloadChunk& c : layout)
      (void)kernels::Encode(codec, std::span<const float>(v.data() + c.offset, c.count),
                            std::span<uint8_t>(b->data() + c.byte_offset, c.bytes));
    enc[f.id] = std::move(b);
  }
  return enc;
}

struct Rate {
  double pushes_s = 0, params_s = 0, wire_gbps = 0;
};

// The raw ZeroMQ peer of one row: `shards` ROUTER threads (their own context, one I/O thread
// each, as each diloco-server process has) answering every push of fragment f with a frame of
// the download's bytes; `workers` DEALER threads pushing every fragment and awaiting every answer,
// as the loopback pushers do.
Rate RawEcho(const Plan& plan, const std::vector<std::shared_ptr<const wire::Bytes>>& enc,
             kernels::Codec codec, kernels::Codec down, uint32_t shards, uint32_t workers,
             double seconds) {
  const uint32_t fragments = static_cast<uint32_t>(plan.fragments().size());
  std::vector<std::shared_ptr<const wire::Bytes>> answers(fragments);
  for (const auto& f : plan.fragments())
    answers[f.id] = std::make_shared<wire::Bytes>(wire::PayloadLayout(down, f.numel).bytes(), 1);
  std::atomic<bool> stop{false}, stop_servers{false};
  std::vector<std::unique_ptr<zmq::context_t>> server_ctx;
  std::vector<std::string> eps;
  std::vector<std::thread> servers;
  std::atomic<uint32_t> bound{0};
  eps.resize(shards);
  for (uint32_t s = 0; s < shards; ++s) {
    server_ctx.push_back(std::make_unique<zmq::context_t>(1));
    servers.emplace_back([&, s, ctx = server_ctx.back().get()] {
      zmq::socket_t router(*ctx, zmq::socket_type::router);
      router.set(zmq::sockopt::linger, 0);
      router.bind("tcp://127.0.0.1:*");
      eps[s] = router.get(zmq::sockopt::last_endpoint);
      ++bound;
      while (!stop_servers) {
        zmq::pollitem_t item{static_cast<void*>(router), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(20));
        auto frames = wire::TryRecvMultipart(router);
        if (!frames || frames->size() < 2) continue;
        uint32_t id = 0;
        std::memcpy(&id, (*frames)[1].data(), sizeof(id));
        const auto& a = answers[id];
        (void)router.send(std::move((*frames)[0]), zmq::send_flags::sndmore);
        (void)router.send(zmq::message_t(&id, sizeof(id)), zmq::send_flags::sndmore);
        (void)router.send(wire::BorrowedFrame(a->data(), a->size()), zmq::send_flags::none);
      }
    });
  }
  while (bound < shards) absl::SleepFor(absl::Milliseconds(1));
  std::atomic<uint64_t> pushes{0}, params{0}, wire_bytes{0};
  std::atomic<uint32_t> ready{0};
  zmq::context_t ctx(2);
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      std::vector<std::unique_ptr<zmq::socket_t>> socks;
      for (const auto& ep : eps) {
        socks.push_back(std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer));
        socks.back()->set(zmq::sockopt::linger, 0);
        socks.back()->connect(ep);
      }
      ++ready;
      while (!stop) {
        for (const auto& f : plan.fragments()) {
          uint32_t id = f.id;
          auto& s = *socks[f.shard];
          (void)s.send(zmq::message_t(&id, sizeof(id)), zmq::send_flags::sndmore);
          auto frames = wire::PayloadFrames(enc[f.id], codec, f.numel);
          for (size_t i = 0; i < frames.size(); ++i)
            (void)s.send(std::move(frames[i]),
                         i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
        }
        // Every answer is awaited, stop or not: a socket closed with part of a multipart answer
        // in its pipe trips an assertion in libzmq 4.3 (zeromq/libzmq#3442).
        const absl::Time deadline = absl::Now() + absl::Seconds(30);
        for (const auto& f : plan.fragments()) {
          std::optional<std::vector<zmq::message_t>> got;
          while (!got && absl::Now() < deadline) {
            zmq::pollitem_t item{static_cast<void*>(*socks[f.shard]), 0, ZMQ_POLLIN, 0};
            zmq::poll(&item, 1, std::chrono::milliseconds(20));
            got = wire::TryRecvMultipart(*socks[f.shard]);
          }
          if (!got) break;
          ++pushes;
          params += f.numel;
          wire_bytes += enc[f.id]->size() + got->back().size();
        }
      }
    });
  }
  while (ready < workers) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(200));  // connections up, first answers back
  const uint64_t a0 = pushes, p0 = params, w0 = wire_bytes;
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(seconds));
  const double dt = absl::ToDoubleSeconds(absl::Now() - t0);
  Rate r{(pushes - a0) / dt, (params - p0) / dt, (wire_bytes - w0) / dt / 1e9};
  stop = true;
  for (auto& t : threads) t.join();  // every answer received: nothing in flight
  stop_servers = true;
  for (auto& t : servers) t.join();
  return r;
}

}  // namespace

int Loopback(const LoopbackOptions& o) {
  std::printf(
      "\n== loopback (diloco-server processes, Applied acks awaited; peer: raw ZeroMQ echo)\n");
  std::printf("%-9s %-9s %6s %8s %10s %11s %9s %11s %7s %7s\n", "up", "down", "shards", "workers",
              "pushes/s", "params/s", "wire GB/s", "raw par/s", "of raw", "memcpy");
  const Manifest manifest = LoadModelSource(o.model)->manifest;  // checked by main()
  std::vector<double> of_raw;
  for (const auto& [codec_name, down_name] : o.codecs) {
    const kernels::Codec codec = *kernels::ParseCodec(codec_name);
    const kernels::Codec down = *kernels::ParseCodec(down_name);
    const auto dir =
        std::filesystem::temp_directory_path() / absl::StrCat("diloco-bench-server-", ::getpid());
    for (uint32_t shards : o.shards) {
      const Plan plan = *Plan::Create(manifest, o.fragments, shards);
      const auto enc = EncodePushes(plan, codec);
      for (uint32_t workers : o.workers) {
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
        std::vector<pid_t> pids;
        std::vector<std::string> eps;
        for (uint32_t s = 0; s < shards; ++s)
          pids.push_back(
              bench::Spawn({DILOCO_SERVER_BINARY, "--bind=tcp://127.0.0.1:*",
                            absl::StrCat("--port_file=", (dir / absl::StrCat("p", s)).string()),
                            absl::StrCat("--shard=", s), absl::StrCat("--shards=", shards),
                            absl::StrCat("--fragments=", o.fragments), "--model=" + o.model,
                            absl::StrCat("--quorum=", workers), "--progress_interval=1000s",
                            absl::StrCat("--download_codec=", down_name)},
                           (dir / "server.log").string()));
        for (uint32_t s = 0; s < shards; ++s)
          eps.push_back(WaitEndpoint(dir / absl::StrCat("p", s)));
        std::atomic<uint64_t> applied{0}, params{0}, wire_bytes{0};
        std::atomic<bool> stop{false}, init_done{false};
        std::atomic<uint32_t> ready{0};
        auto header = [&](wire::MsgType t, uint32_t w) {
          wire::HeaderFields h;
          h.type = t;
          h.plan_fingerprint = plan.fingerprint();
          h.model_fingerprint = manifest.fingerprint();
          h.worker_id = w;
          h.generation = 1;
          return h;
        };
        zmq::context_t ctx(2);
        std::vector<std::thread> threads;
        for (uint32_t w = 0; w < workers; ++w) {
          threads.emplace_back([&, w] {
            std::vector<std::unique_ptr<zmq::socket_t>> socks;
            for (const auto& ep : eps) {
              socks.push_back(std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer));
              socks.back()->set(zmq::sockopt::linger, 0);
              socks.back()->connect(ep);
              (void)wire::Send(*socks.back(), header(wire::MsgType::Hello, w), {}, nullptr, false);
            }
            std::map<zmq::socket_t*, wire::TrainAssembler> trains;  // FragmentUpdate trains
            auto recv_until = [&](zmq::socket_t& s, auto pred) {
              while (!stop) {
                zmq::pollitem_t item{static_cast<void*>(s), 0, ZMQ_POLLIN, 0};
                zmq::poll(&item, 1, std::chrono::milliseconds(20));
                auto m = wire::TryRecvMessage(s, trains[&s]);
                if (m.ok() && m->has_value() && pred(**m)) return std::move(*m);
              }
              return std::optional<wire::Message>();
            };
            for (auto& s : socks)
              recv_until(*s,
                         [](const wire::Message& m) { return m.type() == wire::MsgType::Welcome; });
            if (w == 0) {  // theta(0)
              const kernels::Codec fp32 = wire::kFragmentCodec;
              for (const auto& f : plan.fragments()) {
                auto b = std::make_shared<wire::Bytes>(f.numel * 4, 0);
                auto h = header(wire::MsgType::InitFragment, w);
                h.fragment_id = f.id;
                wire::SetPayloadLayout(h, fp32, f.numel);
                (void)wire::Send(*socks[f.shard], h, wire::PayloadFrames(b, fp32, f.numel), nullptr,
                                 false);
                recv_until(*socks[f.shard], [](const wire::Message& m) {
                  return m.type() == wire::MsgType::PushAck;
                });
              }
              init_done = true;
            }
            while (!init_done) absl::SleepFor(absl::Milliseconds(5));
            ++ready;
            while (ready < workers) absl::SleepFor(absl::Milliseconds(1));
            std::vector<uint64_t> base(o.fragments, 1), seq(o.fragments, 0);
            while (!stop) {
              for (const auto& f : plan.fragments()) {  // one push per fragment in flight
                auto h = header(wire::MsgType::Push, w);
                h.fragment_id = f.id;
                h.seq = ++seq[f.id];
                h.base_version = base[f.id];
                h.tokens = 1000;
                h.steps = 10;
                wire::SetPayloadLayout(h, codec, f.numel);
                (void)wire::Send(*socks[f.shard], h, wire::PayloadFrames(enc[f.id], codec, f.numel),
                                 nullptr, false);
              }
              for (const auto& f : plan.fragments()) {
                auto m = recv_until(*socks[f.shard], [&](const wire::Message& m) {
                  const auto& x = m.header();
                  return x.fragment_id() == f.id && x.seq() == seq[f.id] &&
                         ((m.type() == wire::MsgType::FragmentUpdate &&
                           x.ack() == wire::AckStatus::Applied) ||
                          (m.type() == wire::MsgType::PushAck &&
                           x.ack() == wire::AckStatus::Stale));
                });
                if (!m) break;
                base[f.id] = m->header().version();
                if (m->type() == wire::MsgType::FragmentUpdate) {
                  ++applied;
                  params += f.numel;
                  wire_bytes += enc[f.id]->size() + m->payload_bytes();
                }
              }
            }
          });
        }
        while (ready < workers) absl::SleepFor(absl::Milliseconds(5));
        const uint64_t a0 = applied, p0 = params, w0 = wire_bytes;
        const absl::Time t0 = absl::Now();
        absl::SleepFor(absl::Seconds(o.seconds));
        const double dt = absl::ToDoubleSeconds(absl::Now() - t0);
        const uint64_t a1 = applied, p1 = params, w1 = wire_bytes;
        stop = true;
        for (auto& t : threads) t.join();
        for (pid_t p : pids) {
          ::kill(p, SIGTERM);
          ::waitpid(p, nullptr, 0);
        }
        const Rate ours{(a1 - a0) / dt, (p1 - p0) / dt, (w1 - w0) / dt / 1e9};
        const Rate raw = RawEcho(plan, enc, codec, down, shards, workers, o.seconds);
        of_raw.push_back(ours.params_s / raw.params_s);
        std::printf("%-9s %-9s %6u %8u %10.1f %11.3e %9.2f %11.3e %7.2f %7.3f\n",
                    codec_name.c_str(), down_name.c_str(), shards, workers, ours.pushes_s,
                    ours.params_s, ours.wire_gbps, raw.params_s, of_raw.back(),
                    ours.wire_gbps / o.memcpy_gbps);
      }
    }
    std::filesystem::remove_all(dir);
  }
  if (!of_raw.empty()) {
    std::sort(of_raw.begin(), of_raw.end());
    std::printf("loopback over raw ZeroMQ echo: median %.2f, min %.2f, max %.2f over %zu rows\n",
                of_raw[of_raw.size() / 2], of_raw.front(), of_raw.back(), of_raw.size());
  }
  return 0;
}
