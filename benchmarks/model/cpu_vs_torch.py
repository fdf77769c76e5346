#!/usr/bin/env python3
"""The CPU learner against PyTorch eager, interleaved in one sitting, with the sgemm ceiling.

For each round, model (tiny, small) and thread count it runs model_cpu_bench (the worker's
training step; it also measures OpenBLAS sgemm 1024^3 GFLOP/s with the same threads) and then
torch_gpt2.py --device cpu (the same GPT-2 step in PyTorch eager, /usr/bin/python3 by default,
OMP_WAIT_POLICY=PASSIVE) back to back, so both see the same machine load. Prints the median
tokens/s of each, their ratio (diloco / PyTorch) and the median ceiling. PyTorch is skipped when
`import torch` fails.
  cpu_vs_torch.py BUILD_DIR [--rounds 3] [--steps 20] [--threads 1,2] [--models tiny,small]
                  [--python /usr/bin/python3]
Run it with `nice -n 19` on a shared machine: both sides are slowed alike.
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def results(text):
    """The RESULT lines of a run: {('diloco', model, threads) or ('sgemm', threads): value}."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if f[:1] == ["RESULT"]:
            out[tuple(f[1:-1])] = float(f[-1])
    return out


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="tiny,small")
    ap.add_argument("--python", default="/usr/bin/python3")
    args = ap.parse_args()
    bench = os.path.join(args.build_dir, "benchmarks/model/model_cpu_bench")
    has_torch = os.path.exists(args.python) and subprocess.run(
        [args.python, "-c", "import torch"], capture_output=True).returncode == 0
    if not has_torch:
        print(f"PyTorch not importable from {args.python}: measuring diloco only")
    threads = [int(t) for t in args.threads.split(",")]
    models = args.models.split(",")
    ours, torch, ceiling = {}, {}, {}
    for r in range(args.rounds):
        for m in models:
            for t in threads:
                res = results(run([bench, f"model={m}", f"threads={t}", f"steps={args.steps}"]))
                ours.setdefault((m, t), []).append(res[("diloco", m, str(t))])
                ceiling.setdefault(t, []).append(res[("sgemm", str(t))])
                if has_torch:
                    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(t))
                    out = run([args.python, os.path.join(HERE, "torch_gpt2.py"), "--device", "cpu",
                               "--model", m, "--threads", str(t), "--steps", str(args.steps)],
                              env)
                    # torch_gpt2.py prints "RESULT name tokens_per_s tflops".
                    tps = [float(l.split()[2]) for l in out.splitlines() if l.startswith("RESULT")]
                    torch.setdefault((m, t), []).append(tps[0])
                print(f"round {r + 1}: {m} threads {t}: diloco {ours[(m, t)][-1]:.0f} tok/s"
                      + (f", PyTorch {torch[(m, t)][-1]:.0f} tok/s" if has_torch else ""),
                      flush=True)
    print(f"\nmedians over {args.rounds} interleaved rounds, batch 8 x context, {args.steps} steps:")
    for m in models:
        for t in threads:
            o = statistics.median(ours[(m, t)])
            line = f"{m:6s} threads {t}: diloco {o:8.0f} tok/s"
            if has_torch:
                p = statistics.median(torch[(m, t)])
                ratios = [a / b for a, b in zip(ours[(m, t)], torch[(m, t)])]
                line += (f"  PyTorch {p:8.0f} tok/s  ratio {o / p:.2f}"
                         f" (per round {', '.join(f'{x:.2f}' for x in ratios)})")
            print(line)
    for t in threads:
        print(f"ceiling threads {t}: OpenBLAS sgemm 1024^3 "
              f"{statistics.median(ceiling[t]):.1f} GFLOP/s")


if __name__ == "__main__":
    main()
