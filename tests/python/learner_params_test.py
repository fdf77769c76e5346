#!/usr/bin/env python3
"""The Python learner's copies between parameters that stay where they are and its fp32 host
buffer, against one shard on 127.0.0.1 serving the manifest diloco_ps.write_manifest wrote.

The model has float32, bfloat16 and float16 parameters (nn.Parameter, none a view of another
buffer) on the CPU, and again on CUDA when torch.cuda.is_available() (skipped otherwise, said
so). It checks:
  - write_manifest: the file has the tensors' names, shapes and dtypes in order and the
    fingerprint the learner presents; the shard serving it (--model=manifest:PATH) takes the
    learner's join;
  - bad input raises naming the cause, and changes no parameter: a non-float parameter, an
    empty one, a name given twice, one tensor under two names, a model the shard does not serve
    (the refusal names the first differing tensor);
  - a lockstep learner with streaming (H = 8, 4 fragments: fragment i is due at step 8 + 2i,
    then every 8 steps): a step with nothing due makes no torch call at all (counted by a
    TorchFunctionMode) and changes no parameter's version; a due step copies down exactly the
    fragment due, pushes it (applied), adopts the answer, writes exactly that fragment's ranges
    (last_written() == fragments()[i]) as the adopted fp32 values rounded once to each
    parameter's dtype, and leaves every other range as it was; parameters keep their data_ptr;
  - a second learner joining gets the fleet's values in its own parameters; without lockstep
    its push step copies the model down and up again, moved on to anchor + extrapolate x (local
    - anchor) (the default extrapolate=1.25), and the step after the answers arrived copies it
    down and up: global values + the drift since the push.
Prints after_step's cost on the steps with nothing due.

  /usr/bin/python3 learner_params_test.py --build=BUILD_DIR --python_dir=BUILD_DIR/python
Exit status 0 pass, 1 fail, 77 skip (no torch for this interpreter).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import torch
    from torch.overrides import TorchFunctionMode
except ImportError:
    print("SKIP: torch is not installed for", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import Shard, import_diloco_ps, verdict  # noqa: E402

# name, shape, dtype: 12,960 values; at 4 fragments the plan splits embed.weight into pieces.
LAYOUT = [("embed.weight", [256, 32], torch.float32), ("block.w1", [64, 32], torch.bfloat16),
          ("block.b1", [64], torch.bfloat16), ("block.w2", [32, 64], torch.float16),
          ("block.b2", [32], torch.float16), ("head.weight", [10, 32], torch.float32),
          ("norm.weight", [32], torch.float32)]
H, FRAGMENTS = 8, 4


class CountTorchCalls(TorchFunctionMode):
    """Every torch function and Tensor method called from Python while active."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def make_params(seed, device, layout=LAYOUT):
    g = torch.Generator().manual_seed(seed)
    return [(name, torch.nn.Parameter((torch.randn(shape, generator=g) * 0.1).to(device, dtype)))
            for name, shape, dtype in layout]


def snapshot(named):
    return [(p.data_ptr(), p.detach().clone()) for _, p in named]


def unchanged(named, snap):
    return all(p.data_ptr() == ptr and torch.equal(p.detach(), old)
               for (_, p), (ptr, old) in zip(named, snap))


class Check:
    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        if not ok:
            self.failures.append(what)
            print("  FAIL:", what, flush=True)
        return ok


def bad_inputs(ps, check, endpoint, tmp, device, served):
    def refused(params, words, join=False, exc=ValueError):
        snap = snapshot([(n, p) for n, p in params])
        try:
            learner = ps.Learner(servers=endpoint, worker_id=9, params=params,
                                 fragments=FRAGMENTS)
            if join:
                learner.join(timeout=30)
            check(False, f"accepted: {words}")
        except exc as e:
            check(all(w in str(e) for w in words), f"error {e!r} does not name {words}")
        check(unchanged(params, snap), f"a refused model ({words}) changed its parameters")

    ok = make_params(3, device)[:2]
    # A codec or H the learner cannot read (docs/worker.md, "Codec and H from the link").
    for kw, words in (({"inner_steps": "often"}, ["inner_steps", "often"]),
                      ({"codec": "auto", "auto_codecs": "int8:256,int9"}, ["codec", "int9"]),
                      ({"inner_steps": "auto", "inner_steps_min": 80, "inner_steps_max": 40},
                       ["inner_steps", "80", "40"])):
        try:
            ps.Learner(servers=endpoint, worker_id=9, params=ok, fragments=FRAGMENTS, **kw)
            check(False, f"accepted {kw}")
        except ValueError as e:
            check(all(w in str(e) for w in words), f"error {e!r} does not name {words}")
    refused(ok + [("steps", torch.zeros(4, dtype=torch.int64, device=device))],
            ["steps", "dtype"])
    refused(ok + [("empty", torch.nn.Parameter(torch.empty(0, 4, device=device)))],
            ["empty", "empty"])
    refused(ok + [("embed.weight", torch.nn.Parameter(torch.ones(3, device=device)))],
            ["embed.weight", "twice"])
    refused(ok + [("tied", ok[0][1])], ["tied", "same memory", "embed.weight"])
    try:
        ps.write_manifest(ok + [("steps", torch.zeros(4, dtype=torch.int64))], f"{tmp}/bad.json")
        check(False, "write_manifest took an int64 tensor")
    except ValueError as e:
        check("steps" in str(e) and not os.path.exists(f"{tmp}/bad.json"),
              f"write_manifest's refusal: {e}")
    # The shard's model with block.w1 [64, 16]: the refusal names the tensor and both shapes.
    other = make_params(4, device, [(n, [64, 16] if n == "block.w1" else s, d)
                                    for n, s, d in LAYOUT])
    refused(other, ["block.w1", "first difference", "[64,16]", "[64,32]", served],
            join=True, exc=RuntimeError)


def learner_state(ps, check, endpoint, device):
    """state_dict()/load_state_dict(): steps and tokens carried over; another worker id, another
    model or a mangled state refused naming the difference, changing nothing."""
    params = make_params(5, device)
    a = ps.Learner(servers=endpoint, worker_id=7, params=params, fragments=FRAGMENTS)
    a.steps, a.tokens = 12, 3072
    state = a.state_dict()
    b = ps.Learner(servers=endpoint, worker_id=7, params=params, fragments=FRAGMENTS)
    b.load_state_dict(state)
    check((b.steps, b.tokens) == (12, 3072), f"load_state_dict: {b.steps}, {b.tokens}")
    other_worker = ps.Learner(servers=endpoint, worker_id=8, params=params, fragments=FRAGMENTS)
    other_model = ps.Learner(servers=endpoint, worker_id=7, params=params[:3],
                             fragments=FRAGMENTS)
    for learner, bad, words in ((other_worker, state, ["worker 7", "worker 8"]),
                                (other_model, state, ["another model", state["model_fingerprint"]]),
                                (b, {**state, "steps": -1}, ["steps"]),
                                (b, {"format": 2}, ["not a diloco_ps learner state"]),
                                (b, [1, 2], ["not a diloco_ps learner state"])):
        before = (learner.steps, learner.tokens)
        try:
            learner.load_state_dict(bad)
            check(False, f"load_state_dict accepted {bad!r:.80}")
        except ValueError as e:
            check(all(w in str(e) for w in words), f"load_state_dict's error {e} names {words}")
        check((learner.steps, learner.tokens) == before, "a refused state changed the learner")


def learner_figures(ps, check, build, endpoint, device):
    """The figures a learner's heartbeats carry reach the shard's Stats: its steps, the loss
    after_step was given (moving average), tokens/s, a utilization in [0, 1], device "pytorch"."""
    learner = ps.Learner(servers=endpoint, worker_id=5, params=make_params(6, device),
                         fragments=FRAGMENTS, inner_steps=1000)
    learner.join(timeout=30)
    for _ in range(20):
        time.sleep(0.005)  # "training"
        learner.after_step(tokens=64, loss=1.5)
    row, deadline = None, time.monotonic() + 15
    while time.monotonic() < deadline:
        out = subprocess.run([f"{build}/ctl/diloco-ctl", "stats", f"--server={endpoint}"],
                             capture_output=True, text=True, timeout=30)
        rows = [r for r in json.loads(out.stdout or "{}").get("learners", [])
                if r.get("worker") == 5 and r.get("step")]
        if rows:
            row = rows[0]
            break
        time.sleep(0.2)
    if not check(row is not None, "the learner's figures never reached the shard's Stats"):
        return
    check(row["device"] == "pytorch" and 1 <= row["step"] <= 20 and
          abs(row["loss"] - 1.5) < 1e-6 and row["tokens_per_s"] > 0 and
          0 <= row["utilization"] <= 1, f"the learner's figures in Stats: {row}")
    learner.drain(timeout=10)


def scenario(ps, check, build, tmp, device):
    print(f"-- parameters on {device}", flush=True)
    named = make_params(1, device)
    path = f"{tmp}/model-{device}.json"
    fp = ps.write_manifest(named, path, source="learner_params_test")
    doc = json.load(open(path))
    check([t["name"] for t in doc["tensors"]] == [n for n, _, _ in LAYOUT] and
          [t["shape"] for t in doc["tensors"]] == [s for _, s, _ in LAYOUT] and
          [t["dtype"] for t in doc["tensors"]] == ["F32", "BF16", "BF16", "F16", "F16", "F32",
                                                   "F32"] and doc["fingerprint"] == fp,
          f"manifest file {doc}")
    offsets, at = {}, 0
    for name, p in named:
        offsets[name] = at
        at += p.numel()
    with Shard(build, tmp, [f"--model=manifest:{path}", f"--fragments={FRAGMENTS}",
                            "--grace_cap=500ms"], name=f"shard-{device}") as shard:
        bad_inputs(ps, check, shard.endpoint, tmp, device, f"manifest:{path}")
        learner_state(ps, check, shard.endpoint, device)

        learner = ps.Learner(servers=shard.endpoint, worker_id=1, params=named,
                             fragments=FRAGMENTS, inner_steps=H, lockstep=True, stream=True)
        check(learner.model_fingerprint == fp,
              f"fingerprints: learner {learner.model_fingerprint}, manifest file {fp}")
        snap = snapshot(named)
        learner.join(timeout=30)  # the first learner: theta(0) is its own model
        check(unchanged(named, snap), "the first join changed the parameters")
        frags = learner.fragments()
        check(learner.last_written() == [(n, slice(0, p.numel())) for n, p in named],
              f"the join did not write the whole model: {learner.last_written()}")
        check(all(frags), f"a fragment without ranges: {frags}")

        due_at = {H + 2 * i: i for i in range(FRAGMENTS)}
        due_at[2 * H] = 0
        idle_us = []
        for step in range(1, 2 * H + 1):
            with torch.no_grad():  # a training step, as far as the learner can tell
                for _, p in named:
                    p.add_(torch.randn_like(p) * 0.01)
            before = [p.detach().clone() for _, p in named]
            versions = [p._version for _, p in named]
            st0 = learner.stats
            mode = CountTorchCalls()
            with mode:
                t0 = time.perf_counter()
                learner.after_step(tokens=64)
                dt = time.perf_counter() - t0
            if device == "cuda":
                torch.cuda.synchronize()
            st = learner.stats
            due = due_at.get(step)
            if due is None:
                idle_us.append(dt * 1e6)
                check(mode.calls == [] and learner.last_written() == [] and
                      [p._version for _, p in named] == versions and
                      st["fetched_fragments"] == st0["fetched_fragments"],
                      f"step {step}, nothing due: torch calls {mode.calls[:8]}, written "
                      f"{learner.last_written()}")
                continue
            check(st["fetched_fragments"] == st0["fetched_fragments"] + 1 and
                  st["stored_fragments"] == st0["stored_fragments"] + 1 and
                  st["applied"] == st0["applied"] + 1 and "copy_" in mode.calls,
                  f"step {step}: fragment {due} due: fetched "
                  f"{st['fetched_fragments'] - st0['fetched_fragments']}, stored "
                  f"{st['stored_fragments'] - st0['stored_fragments']}, applied "
                  f"{st['applied'] - st0['applied']}")
            written = learner.last_written()
            check(written == frags[due], f"step {step}: wrote {written}, fragment {due} is "
                  f"{frags[due]}")
            g = learner.global_params()
            mask = {name: torch.zeros(p.numel(), dtype=torch.bool) for name, p in named}
            for name, sl in written:
                mask[name][sl] = True
            moved = 0
            for (name, p), old in zip(named, before):
                flat, old = p.detach().view(-1).cpu(), old.view(-1).cpu()
                m = mask[name]
                adopted = g[offsets[name]:offsets[name] + p.numel()].to(p.dtype)
                check(torch.equal(flat[m], adopted[m]),
                      f"step {step}: {name}'s written range is not the adopted fp32 value "
                      f"rounded to {p.dtype}")
                check(torch.equal(flat[~m], old[~m]), f"step {step}: {name} changed outside "
                      "the ranges written")
                moved += int((flat[m] != old[m]).sum())
            check(moved > 0, f"step {step}: the adoption changed no value")
        check(all(p.data_ptr() == ptr for (_, p), (ptr, _) in zip(named, snap)),
              "a parameter's storage moved")
        st = learner.stats
        g = learner.global_params()
        check(st["applied"] == st["pushes"] == len(due_at) and st["refused"] == 0,
              f"pushes {st['pushes']} applied {st['applied']} refused {st['refused']}")
        snap = snapshot(named)
        learner.drain(timeout=10)
        check(learner.last_written() == [] and unchanged(named, snap),
              "a drain with nothing to adopt wrote the parameters")

        idle = (statistics.median(idle_us), max(idle_us), st["fetch_us"] / st["fetched_fragments"],
                st["store_us"] / st["stored_fragments"])
        del learner  # leaves the fleet

        # A second learner joins: the fleet's values reach its parameters.
        second = make_params(2, device)
        snap2 = snapshot(second)
        joiner = ps.Learner(servers=shard.endpoint, worker_id=2, params=second,
                            fragments=FRAGMENTS, inner_steps=4, stream=False)
        joiner.join(timeout=30)
        check(all(torch.equal(p.detach().view(-1).cpu(),
                              g[offsets[n]:offsets[n] + p.numel()].to(p.dtype))
                  for n, p in second) and
              all(p.data_ptr() == ptr for (_, p), (ptr, _) in zip(second, snap2)),
              "a second learner's join did not bring the fleet's values into its parameters")
        # Without lockstep a push moves the local values on along its delta (extrapolate): copied
        # down and up. Its answer is adopted at the next step, over the step taken since (keep:
        # global + the drift since the push).
        c = ps.LearnerOptions().extrapolate
        tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
        for step in range(1, 6):
            if step == 5:  # the answers are in before this step's after_step
                end = time.time() + 20
                while joiner.stats["applied"] < FRAGMENTS and time.time() < end:
                    time.sleep(0.01)
                time.sleep(0.2)
            with torch.no_grad():
                for _, p in second:
                    p.add_(torch.randn_like(p) * 0.01)
            if step == 4:
                before = [p.detach().float().clone() for _, p in second]
                anchor = joiner.global_params()
            if step == 5:
                local = [p.detach().float().clone() for _, p in second]
            st0 = joiner.stats
            joiner.after_step(tokens=64)
            st = joiner.stats
            fetched = st["fetched_fragments"] - st0["fetched_fragments"]
            stored = st["stored_fragments"] - st0["stored_fragments"]
            if step == 4:
                check(fetched == stored == FRAGMENTS and
                      joiner.last_written() == [(n, slice(0, p.numel())) for n, p in second],
                      f"the push step: fetched {fetched}, stored {stored}, written "
                      f"{joiner.last_written()}")
                for (n, p), b in zip(second, before):
                    a = anchor[offsets[n]:offsets[n] + p.numel()].view(p.shape).to(b)
                    check(torch.allclose(p.detach().float(), a + c * (b - a), rtol=tol[p.dtype],
                                         atol=1e-4),
                          f"{n}: the push did not move it to anchor + {c} x (local - anchor)")
                pushed = [p.detach().float().clone() for _, p in second]
            elif step == 5:
                g = joiner.global_params()
                check(st["applied"] == FRAGMENTS and fetched == FRAGMENTS and
                      stored == FRAGMENTS and
                      joiner.last_written() == [(n, slice(0, p.numel())) for n, p in second],
                      f"the adoption step: fetched {fetched}, stored {stored}, written "
                      f"{joiner.last_written()}")
                # The push's values were rounded to the dtype when stored (l4), the learner took
                # out the exact extrapolation: a rounding of l4's size, besides the result's own.
                for (n, p), l5, l4 in zip(second, local, pushed):
                    kept = g[offsets[n]:offsets[n] + p.numel()].view(p.shape).to(l5) + (l5 - l4)
                    err = (p.detach().float() - kept).abs()
                    check(bool((err <= 1e-4 + tol[p.dtype] * (kept.abs() + l4.abs())).all()),
                          f"{n}: the adopted value is not global + the drift since the push "
                          f"(off by up to {float(err.max()):.3g})")
            else:
                check(fetched == stored == 0, f"step {step}: copies with nothing due")
        print(f"   after_step with nothing due, {len(idle_us)} steps: median {idle[0]:.1f} us, "
              f"max {idle[1]:.1f} us; fetch {idle[2]:.0f} us, store {idle[3]:.0f} us per "
              "fragment", flush=True)
        learner_figures(ps, check, build, shard.endpoint, device)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    a = ap.parse_args()
    ps = import_diloco_ps(a.python_dir)
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="diloco-pyparams.")
    check = Check()
    scenario(ps, check, a.build, tmp, "cpu")
    if torch.cuda.is_available():
        scenario(ps, check, a.build, tmp, "cuda")
    else:
        print("-- CUDA: not available to this torch, the CUDA copies are not tested here")
    return verdict(len(check.failures), tmp)


if __name__ == "__main__":
    sys.exit(main())
