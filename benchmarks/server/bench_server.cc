// diloco-bench-server: how fast a shard merges pushes, against the memory bandwidth of this
// machine measured in the same run.
//   1. ceiling: memcpy of pre-touched buffers (bytes read + written per second);
//   2. apply: a transport-free Shard handling int8 and int4 pushes from 1..8 workers (header
//      checks, checksums, payload checks, fused dequantize-accumulate, one Nesterov step per
//      round); reported as pushes/s, parameters/s, and the bytes of memory the apply path must
//      touch per second over memcpy's. Bytes touched, per push: the payload twice (checksum,
//      decode) + 8 per parameter (accumulator read and write); per round: 28 per parameter
//      (Nesterov reads acc and reads+writes theta and momentum: 20; the published snapshot
//      copy: 8) + 8 when the round merged several pushes (normalisation);
//      The same with --merge_order=worker against arrival order, 2 apply threads: rounds/s and
//      the time the closing Tick takes per round (the held pushes are decoded there);
//   3. loopback: real diloco-server processes (1..4 shards) fed over ZeroMQ by 1..8 pushing
//      threads; pushes applied/s and parameters/s end to end;
//   4. --at_size=1 (alone): 124M and 1B-parameter shards with a store in each durability mode:
//      rounds/s, wire bytes per parameter, checkpoint MB/s against a synced write, resident
//      bytes per parameter (at_size.cc).
// Usage: diloco-bench-server [--model=SPEC] [--fragments=P] [--seconds=S] [--loopback=0|1]
//                            [--apply=0|1] [--codecs=UP/DOWN,...] [--shards=1,2,4]
//                            [--workers=1,4,8] [--at_size=1]
//   --model: any --model value (a GPT preset or spec, hf:DIR, safetensors:PATH, manifest:PATH).
//   --codecs, --shards, --workers pick the loopback rows (default: int8:256/int8:256,
//   int8:256/fp32, int4:256/int4:256 x 1,2,4 shards x 1,4,8 workers); --apply=0 skips part 2.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "benchmarks/server/loopback.h"
#include "common/model_source.h"
#include "kernels/codec.h"
#include "schema/transport.h"
#include "server/shard.h"

int AtSize(double seconds);

namespace {

using namespace diloco;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double MemcpyGBps() {
  const size_t n = size_t{256} << 20;
  std::vector<uint8_t> a(n, 1), b(n, 2);
  std::memcpy(b.data(), a.data(), n);  // touch
  const auto t0 = Clock::now();
  int reps = 0;
  while (Seconds(t0, Clock::now()) < 1.0) {
    std::memcpy(b.data(), a.data(), n);
    ++reps;
  }
  return 2.0 * n * reps / Seconds(t0, Clock::now()) / 1e9;
}

std::vector<float> RandomDelta(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1e-3f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The encoded chunks of a fragment delta, as the wire carries them.
std::vector<std::vector<uint8_t>> EncodeChunks(kernels::Codec c, const std::vector<float>& v) {
  std::vector<std::vector<uint8_t>> out;
  for (const wire::PayloadChunk& k : wire::PayloadLayout(c, v.size())) {
    out.emplace_back(k.bytes);
    (void)kernels::Encode(c, std::span<const float>(v.data() + k.offset, k.count), out.back());
  }
  return out;
}

struct Setup {
  std::string model = "L=4,H=8,C=512,T=128,V=256";
  uint32_t fragments = 8;
  double seconds = 2.0;
  bool loopback = true;
  bool apply = true;
  bool at_size = false;
  LoopbackOptions rows;
};

// "1,2,4" as numbers; false on anything else.
bool ParseList(std::string_view text, std::vector<uint32_t>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    uint32_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v == 0) return false;
    out->push_back(v);
  }
  return !out->empty();
}

// "int8:256/int8:256,int8:256/fp32" as codec pairs; false on a name ParseCodec refuses.
bool ParseCodecPairs(std::string_view text, std::vector<std::pair<std::string, std::string>>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    std::vector<std::string> ud = absl::StrSplit(part, '/');
    if (ud.size() != 2 || !kernels::ParseCodec(ud[0]).ok() || !kernels::ParseCodec(ud[1]).ok())
      return false;
    out->emplace_back(ud[0], ud[1]);
  }
  return !out->empty();
}

struct ApplyRun {
  double seconds = 0;  // the whole run
  double close_s = 0;  // in the Ticks that closed the rounds
  uint64_t pushes = 0, params = 0, rounds = 0;
  double touched = 0;  // bytes the apply path must move (the file's header)
};

// Every worker pushes every fragment, then one Tick closes all rounds, for `seconds`.
ApplyRun RunApply(const Setup& s, kernels::Codec codec, uint32_t workers, server::MergeOrder order,
                  int apply_threads) {
  server::ShardOptions o;
  const ModelSource source = *LoadModelSource(s.model);  // checked by main()
  o.manifest = source.manifest;
  o.model_spec = s.model;
  o.num_fragments = s.fragments;
  o.round.quorum = workers;
  o.merge_order = order;
  o.apply_threads = apply_threads;
  SystemClock clock;
  auto shard = std::move(*server::Shard::Create(o, &clock));
  const auto& plan = shard->plan();
  const Manifest* manifest = &source.manifest;
  std::vector<server::Outgoing> out;
  auto base = [&](wire::MsgType t, uint32_t w) {
    wire::HeaderFields h;
    h.type = t;
    h.plan_fingerprint = plan.fingerprint();
    h.model_fingerprint = manifest->fingerprint();
    h.worker_id = w;
    h.generation = 1;
    return h;
  };
  auto send = [&](const std::string& rid, const wire::HeaderFields& h,
                  const std::vector<std::vector<uint8_t>>& chunks) {
    std::vector<zmq::message_t> p;
    for (const auto& c : chunks) p.push_back(wire::BorrowedFrame(c.data(), c.size()));
    std::vector<zmq::message_t> f;
    f.push_back(wire::BuildHeader(h, p));
    for (auto& m : p) f.push_back(std::move(m));
    shard->Handle(rid, std::move(f), &out);
  };
  // Join and initialise every fragment, then pre-encode one delta per (worker, fragment).
  for (uint32_t w = 0; w < workers; ++w)
    send(absl::StrCat("w", w), base(wire::MsgType::Hello, w), {});
  std::vector<std::vector<std::vector<std::vector<uint8_t>>>> payload(workers);
  uint64_t numel_total = 0;
  for (const auto& f : plan.fragments()) {
    auto h = base(wire::MsgType::InitFragment, 0);
    h.fragment_id = f.id;
    wire::SetPayloadLayout(h, wire::kFragmentCodec, f.numel);
    send("w0", h, EncodeChunks(wire::kFragmentCodec, std::vector<float>(f.numel, 0.1f)));
    numel_total += f.numel;
    for (uint32_t w = 0; w < workers; ++w)
      payload[w].push_back(EncodeChunks(codec, RandomDelta(f.numel, w * 100 + f.id)));
  }
  shard->Tick(&out);
  out.clear();
  ApplyRun r;
  uint64_t seq = 0, payload_bytes = 0;
  for (const auto& chunks : payload[0])
    for (const auto& c : chunks) payload_bytes += c.size();
  const auto t0 = Clock::now();
  while (Seconds(t0, Clock::now()) < s.seconds) {
    ++seq;
    for (const auto& f : plan.fragments()) {
      for (uint32_t w = 0; w < workers; ++w) {
        auto h = base(wire::MsgType::Push, w);
        h.fragment_id = f.id;
        h.seq = seq;
        h.base_version = shard->published_version(f.id);
        h.tokens = 1000;
        h.steps = 10;
        wire::SetPayloadLayout(h, codec, f.numel);
        send(absl::StrCat("w", w), h, payload[w][f.id]);
        ++r.pushes;
        r.params += f.numel;
      }
    }
    const auto c0 = Clock::now();
    shard->Tick(&out);  // every worker pushed every fragment: all rounds close
    r.close_s += Seconds(c0, Clock::now());
    r.rounds += plan.fragments().size();
    out.clear();
    r.touched += workers * (2.0 * payload_bytes + 8.0 * numel_total) +
                 (28.0 + (workers > 1 ? 8.0 : 0.0)) * numel_total;
  }
  r.seconds = Seconds(t0, Clock::now());
  return r;
}

void InProcess(const Setup& s, double memcpy_gbps) {
  std::printf("\n== apply (transport-free Shard, 1 shard, %u fragments)\n", s.fragments);
  std::printf("%-9s %8s %12s %14s %16s %8s\n", "codec", "workers", "pushes/s", "params/s",
              "touched GB/s", "ratio");
  for (const char* codec_name : {"int8:256", "int4:256"}) {
    const auto codec = *kernels::ParseCodec(codec_name);
    for (uint32_t workers : {1u, 2u, 4u, 8u}) {
      const ApplyRun r = RunApply(s, codec, workers, server::MergeOrder::kArrival, 0);
      const double gbps = r.touched / r.seconds / 1e9;
      std::printf("%-9s %8u %12.1f %14.3e %16.2f %8.2f\n", codec_name, workers,
                  r.pushes / r.seconds, r.params / r.seconds, gbps, gbps / memcpy_gbps);
    }
  }
}

// --merge_order=worker against the default arrival order (server/round_merge.h), with the
// shard's default 2 apply threads: arrival decodes each push while the I/O thread takes the
// next; worker order holds them and decodes them all in the Tick that closes the round.
void MergeOrders(const Setup& s) {
  std::printf(
      "\n== merge order (transport-free Shard, apply_threads 2, int8:256; peer: arrival)\n");
  std::printf("%8s %16s %16s %10s %18s %18s\n", "workers", "rounds/s arrival", "rounds/s worker",
              "ratio", "close ms arrival", "close ms worker");
  const auto codec = *kernels::ParseCodec("int8:256");
  for (uint32_t workers : {2u, 4u, 8u}) {
    const ApplyRun a = RunApply(s, codec, workers, server::MergeOrder::kArrival, 2);
    const ApplyRun w = RunApply(s, codec, workers, server::MergeOrder::kWorker, 2);
    const double ra = a.rounds / a.seconds, rw = w.rounds / w.seconds;
    std::printf("%8u %16.1f %16.1f %10.2f %18.3f %18.3f\n", workers, ra, rw, rw / ra,
                1e3 * a.close_s / a.rounds, 1e3 * w.close_s / w.rounds);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.starts_with("--model="))
      s.model = a.substr(8);
    else if (a.starts_with("--fragments="))
      (void)absl::SimpleAtoi(a.substr(12), &s.fragments);
    else if (a.starts_with("--seconds="))
      (void)absl::SimpleAtod(a.substr(10), &s.seconds);
    else if (a.starts_with("--loopback="))
      s.loopback = a.substr(11) != "0";
    else if (a.starts_with("--apply="))
      s.apply = a.substr(8) != "0";
    else if (a == "--at_size=1")
      s.at_size = true;
    else if (!(a.starts_with("--codecs=") && ParseCodecPairs(a.substr(9), &s.rows.codecs)) &&
             !(a.starts_with("--shards=") && ParseList(a.substr(9), &s.rows.shards)) &&
             !(a.starts_with("--workers=") && ParseList(a.substr(10), &s.rows.workers))) {
      std::fprintf(stderr,
                   "diloco-bench-server: bad argument %s\n"
                   "usage: diloco-bench-server [--model=SPEC] [--fragments=P] [--seconds=S] "
                   "[--loopback=0|1] [--apply=0|1] [--codecs=UP/DOWN,...] [--shards=N,...] "
                   "[--workers=N,...] [--at_size=1]\n",
                   a.c_str());
      return 2;
    }
  }
  if (s.at_size) return AtSize(s.seconds);
  auto source = LoadModelSource(s.model);
  if (!source.ok()) {
    std::fprintf(stderr, "diloco-bench-server: --model=%s: %s\n", s.model.c_str(),
                 std::string(source.status().message()).c_str());
    return 2;
  }
  const Manifest* manifest = &source->manifest;
  std::printf("diloco-bench-server: model %s, %lu parameters, %u fragments\n", s.model.c_str(),
              static_cast<unsigned long>(manifest->total_elements()), s.fragments);
  const double mc = MemcpyGBps();
  std::printf("ceiling: memcpy %.2f GB/s (bytes read + written, 256 MiB pre-touched)\n", mc);
  if (s.apply) {
    InProcess(s, mc);
    MergeOrders(s);
  }
  if (s.loopback) {
    s.rows.model = s.model;
    s.rows.fragments = s.fragments;
    s.rows.seconds = s.seconds;
    s.rows.memcpy_gbps = mc;
    return Loopback(s.rows);
  }
  return 0;
}
