// diloco-bench-kernels: CPU throughput of the fast kernels against the memcpy ceiling measured
// in the same run, on the same (pre-touched) buffers and the same thread pool.
//
// "Bytes touched" per op (n values, E = encoded bytes):
//   memcpy              4n read + 4n written                    = 8n
//   Encode              4n read (x) + E written                 = 4n + E
//   DecodeAccumulate    E read + 4n read (acc) + 4n written     = 8n + E
//   ErrorFeedbackEncode 8n read (delta, err) + 4n + E written   = 12n + E
//   Nesterov            12n read (theta, m, d) + 8n written     = 20n
//   AdamW               16n read (p, g, m, v) + 12n written     = 28n
// Encode and ErrorFeedbackEncode also make one read-only pre-pass (all-finite check, so that
// nothing is written on NaN/Inf); it is not counted above, so they show below their real traffic.
//
// The sparse top-k codecs (--topk, fractions with an optional block, "-" for none; each as topk,
// Elias-Fano indices, and as topk-packed, the first form) report the same three ops, then their
// bytes per parameter per push and what their fixed-size index form costs against delta coding
// of the same indices (topk_index_cost.h).
//
// Usage: diloco-bench-kernels [--n=67108864] [--threads=2] [--reps=5] [--block=256]
//                             [--topk=0.02,0.02:1024,0.05:256]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "benchmarks/kernels/topk_index_cost.h"
#include "kernels/codec.h"
#include "kernels/codec_table.h"
#include "kernels/optim.h"
#include "kernels/thread_pool.h"

namespace diloco::kernels {
namespace {

struct Options {
  size_t n = size_t{64} << 20;
  int threads = 2;
  int reps = 5;
  uint32_t block = 256;
  std::string topk = "0.02,0.02:1024,0.05:256";
};

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* key) -> const char* {
      const size_t k = std::strlen(key);
      return a.compare(0, k, key) == 0 ? a.c_str() + k : nullptr;
    };
    if (const char* v = value("--n=")) o.n = std::stoull(v);
    if (const char* v = value("--threads=")) o.threads = std::stoi(v);
    if (const char* v = value("--reps=")) o.reps = std::stoi(v);
    if (const char* v = value("--block=")) o.block = static_cast<uint32_t>(std::stoul(v));
    if (const char* v = value("--topk=")) o.topk = v;
  }
  return o;
}

// Median wall time of `reps` runs after one warm-up run.
template <typename F>
double MedianSeconds(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void Check(const absl::Status& st) {
  if (!st.ok()) {
    std::fprintf(stderr, "kernel failed: %s\n", st.ToString().c_str());
    std::exit(1);
  }
}

double g_ceiling = 0.0;

const char* FormName(TopKForm f) {
  switch (f) {
    case TopKForm::kPacked:
      return "packed";
    case TopKForm::kEliasFano:
      return "EF";
    case TopKForm::kBitmap:
      break;
  }
  return "bitmap";
}

void Report(const char* op, const std::string& codec, double bytes, double seconds) {
  const double gbs = bytes / seconds / 1e9;
  std::printf("%-22s %-19s %10.2f ms %9.2f GB/s  %5.2f x memcpy\n", op, codec.c_str(),
              seconds * 1e3, gbs, g_ceiling > 0 ? gbs / g_ceiling : 1.0);
}

int Main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  SetKernelThreads(o.threads);
  const size_t n = o.n;
  std::printf(
      "diloco-bench-kernels: n=%zu floats (%.0f MiB per buffer), threads=%d, reps=%d "
      "(median), block=%u\n",
      n, n * 4.0 / (1 << 20), KernelThreads(), o.reps, o.block);

  // Random, never-zero data; every buffer is written once here (pre-touched).
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n), y(n), z(n), w(n), u(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = normal(rng);
    y[i] = 0.5f * x[i] + 0.1f;
    z[i] = 0.25f * x[i];
    w[i] = 1e-3f;
    u[i] = 0.0f;
  }
  const double fn = static_cast<double>(n);

  const double copy_s = MedianSeconds(o.reps, [&] {
    ParallelFor(n, 1 << 16, [&](size_t lo, size_t hi) {
      std::memcpy(y.data() + lo, x.data() + lo, (hi - lo) * sizeof(float));
    });
  });
  g_ceiling = 8 * fn / copy_s / 1e9;
  Report("memcpy (ceiling)", "-", 8 * fn, copy_s);

  std::vector<Codec> codecs;
  for (const CodecEntry& e : AllCodecs())
    if (!e.sparse) codecs.push_back(Codec{e.kind, o.block});
  std::vector<Codec> sparse;
  for (absl::string_view spec : absl::StrSplit(o.topk, ',', absl::SkipEmpty())) {
    if (spec == "-") continue;
    for (const CodecEntry& e : AllCodecs()) {  // topk (Elias-Fano indices), then topk-packed
      if (!e.sparse) continue;
      auto c = ParseCodec(absl::StrCat(e.name, ":", spec));
      Check(c.status());
      sparse.push_back(*c);
    }
  }
  codecs.insert(codecs.end(), sparse.begin(), sparse.end());
  for (const Codec& c : codecs) {
    const std::string name = CodecName(c);
    const double e = static_cast<double>(EncodedSize(c, n));
    std::vector<uint8_t> enc(EncodedSize(c, n), 1);
    Report("Encode", name, 4 * fn + e, MedianSeconds(o.reps, [&] { Check(Encode(c, x, enc)); }));
    Report("DecodeAccumulate", name, 8 * fn + e,
           MedianSeconds(o.reps, [&] { Check(DecodeAccumulate(c, enc, 1e-3f, y)); }));
    std::fill(u.begin(), u.end(), 0.0f);
    Report("ErrorFeedbackEncode", name, 12 * fn + e,
           MedianSeconds(o.reps, [&] { Check(ErrorFeedbackEncode(c, z, u, enc)); }));
  }

  // Bytes per parameter per push, and the index form against delta coding, on the encoding of
  // the last ErrorFeedbackEncode's kind of input (Gaussian).
  if (!sparse.empty()) {
    std::printf("\n%-20s %6s %6s %11s %12s %12s %10s %14s\n", "codec", "k", "form", "bytes/param",
                "idx B/block", "rice B/block", "bound B", "rice bytes/param");
    const Codec int4{CodecKind::kInt4, o.block};
    std::printf("%-20s %6s %6s %11.4f\n", CodecName(int4).c_str(), "-", "-",
                static_cast<double>(EncodedSize(int4, n)) / fn);
  }
  for (const Codec& c : sparse) {
    std::vector<uint8_t> enc(EncodedSize(c, n));
    Check(Encode(c, x, enc));
    Check(Decode(c, enc, y));
    const IndexCost ic = MeasureIndexCost(c, y);
    const double per_block = static_cast<double>(EncodedSize(c, c.block));
    const double rice_total = (per_block - ic.fixed_bytes + ic.rice_bytes) / c.block;
    std::printf("%-20s %6u %6s %11.4f %12.1f %9.2f r=%-2u %10.1f %14.4f\n", CodecName(c).c_str(),
                c.k, FormName(TopKIndexForm(c)), static_cast<double>(enc.size()) / fn,
                ic.fixed_bytes, ic.rice_bytes, ic.rice_param, ic.bound_bytes, rice_total);
  }

  const NesterovParams np{.lr = 1e-3f, .mu = 0.9f};
  Report("NesterovStep", "fp32", 20 * fn,
         MedianSeconds(o.reps, [&] { NesterovStep(np, y, u, z); }));
  int64_t step = 0;
  Report("AdamWStep", "fp32", 28 * fn,
         MedianSeconds(o.reps, [&] { AdamWStep(AdamWParams{}, ++step, y, z, u, w); }));
  Report("Delta", "fp32", 12 * fn, MedianSeconds(o.reps, [&] { Delta(x, z, u); }));
  Report("LerpAdopt", "fp32", 12 * fn, MedianSeconds(o.reps, [&] { LerpAdopt(x, y, 0.5f); }));
  return 0;
}

}  // namespace
}  // namespace diloco::kernels

int main(int argc, char** argv) { return diloco::kernels::Main(argc, argv); }
