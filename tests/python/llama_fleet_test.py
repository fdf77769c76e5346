#!/usr/bin/env python3
"""Any architecture in and out: a Llama-style PyTorch model (python/examples/llama.py) trained
by a fleet that has never seen a GPT, exported as a Hugging Face folder, loaded back.

Two shards serve the model's folder (--model=hf:DIR: config.json, model.safetensors and a
generation_config.json). diloco-worker --device=synthetic --init_from uploads theta(0) from
another folder of the model, in BF16; two learners join (each must hold that theta(0),
widened: checksum; neither trains before both joined, --go_file) and train 60 steps each at
H = 10, then drain, which tells the shards they leave (docs/protocol.md, "Leaving"): a PyTorch
learner (python/examples/llama_learner.py) and an island of 2 gloo ranks under DDP
(python/examples/llama_island.py: one worker id, every rank holding theta(0) after the join and
the same parameters after the drain). A third learner joins with --steps=0: its module then
holds the fleet's global model, whole, in fp32; it scores it on fixed held-out tokens and saves
it. The fleet runs twice (ARMS), on fresh shards each time:
  - lockstep: shards at quorum 2 and learners at --lockstep, so every round holds a push of
    each and the global model's progress does not depend on the learners' relative speed
    (3.676 in every run);
  - async: quorum 1 and a 1 s grace cap, each learner at its own pace. Until a learner that was
    done told the shards so, it stayed live for --worker_timeout, and the other's rounds counted
    it as a zero delta of its usual weight (a fifth of a step for the lighter learner: the
    island's pushes weigh 4x, tokens^2/steps); now its rounds are whole. It ends within
    ASYNC_MARGIN of the lockstep arm (rounds split by the learners' timing cost the most:
    rounds_of counts them).
The shards are stopped by PID (SIGTERM: a final checkpoint), and `diloco-ctl export
--format=hf --model=hf:DIR` writes the lockstep stores' model. Checked:
  - both arms' global models learned: the held-out loss well below theta(0)'s, and the async
    one's within ASYNC_MARGIN of the lockstep one's;
  - each learner (and the uploading worker) left each shard (its log's "left" lines);
  - the export is a folder the module loads strictly (load_state_dict(strict=True): the same
    names and shapes, nothing more), tensor for tensor equal to the global model the learner
    joined, and so with the very same held-out loss;
  - config.json and generation_config.json are the source's, byte for byte;
  - a manifest: source (the same tensors) exports with --format=safetensors to the same
    tensors, and is refused --format=hf (no config.json to carry) with exit status 2.
Every process is bounded in time and stopped by its PID.

  /usr/bin/python3 llama_fleet_test.py --build=BUILD_DIR --python_dir=BUILD_DIR/python
Exit status 0 pass, 1 fail, 77 skip (no torch for this interpreter).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed for", sys.executable)
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "python", "examples")
sys.path.insert(0, EXAMPLES)
import llama  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import kill_all, verdict, wait_bounded, wait_for_file  # noqa: E402

# How far above the lockstep fleet's held-out loss the asynchronous fleet's may end: measured
# 3.86-4.59 beside the lockstep arm's 3.676 over 20 runs (2026-12-06, quiet to a load of 9 on
# 2 cores), the most behind with the learners' pushes in separate rounds; a fleet whose global
# model barely trained (5.46, as once before Leave) is 1.8 behind.
ASYNC_MARGIN = 1.2


def last_json(path):
    lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
    if not lines:
        raise AssertionError(f"no JSON line in {path}:\n{open(path).read()[-3000:]}")
    return json.loads(lines[-1])


def wait_for_line(p, log, text, timeout):
    end = time.time() + timeout
    while text not in open(log).read():
        if p.poll() is not None or time.time() > end:
            raise AssertionError(f"{log}: no '{text}' line:\n{open(log).read()[-3000:]}")
        time.sleep(0.05)


def wait(p, timeout, what, log):
    if (rc := wait_bounded(p, timeout, what, log)) != 0:
        raise AssertionError(f"{what} exited {rc}:\n{open(log).read()[-3000:]}")


# The arms: the shards' round flags and the learners' extra flags. Lockstep: quorum 2, every
# round holds a push of each learner (a 60 s cap no round reaches). Asynchronous: quorum 1 and a
# 1 s cap, each learner at its own pace; when one is done it leaves (docs/protocol.md,
# "Leaving") and the other's rounds are whole rounds of the fleet that stays.
ARMS = {
    "lockstep": (["--quorum=2", "--grace_cap=60s"], ["--lockstep"]),
    "async": (["--grace_cap=1s"], []),
}


def run_fleet(arm, tmp, a, plan, start_dir, theta0, learner, heldout, procs, failures):
    """One arm's fleet in tmp/ARM: two shards, theta(0) uploaded by diloco-worker --init_from,
    the two learners (checked: each joined theta(0), the island's ranks agree after the drain,
    pushes applied), then the reading learner, which saves the global model and scores it.
    Returns the reader's JSON, the stores and the shards (stopped, by SIGTERM)."""
    server, worker = f"{a.build}/server/diloco-server", f"{a.build}/worker/diloco-worker"
    d = f"{tmp}/{arm}"
    os.makedirs(d)
    shard_flags, learner_flags = ARMS[arm]
    env = dict(os.environ, PYTHONPATH=a.python_dir)
    shards = []
    for i in range(2):
        shards.append(subprocess.Popen(
            [server, *plan, f"--shard={i}", "--shards=2", "--bind=tcp://127.0.0.1:*",
             f"--port_file={d}/port{i}", f"--store={d}/store{i}", *shard_flags,
             "--worker_timeout=5s", "--durability=per-round", "--progress_interval=1000s",
             f"--audit_jsonl={d}/audit{i}.jsonl"],
            stdout=open(f"{d}/shard{i}.log", "w"), stderr=subprocess.STDOUT))
    procs.extend(shards)
    servers = ",".join(wait_for_file(f"{d}/port{i}", 20) for i in range(2))
    init = subprocess.Popen(
        [worker, "--device=synthetic", *plan, f"--servers={servers}", "--steps=1",
         "--inner_steps=1000", "--synthetic_step_time=1ms", f"--init_from={start_dir}"],
        stdout=open(f"{d}/init.log", "w"), stderr=subprocess.STDOUT)
    procs.append(init)
    wait(init, 60, "diloco-worker --init_from", f"{d}/init.log")
    # Both join before either trains (--go_file), so both must join theta(0).
    island = [sys.executable, f"{EXAMPLES}/llama_island.py", "--ranks=2", *learner[2:]]
    learners = []
    for w, cmd in enumerate([learner, island]):
        learners.append(subprocess.Popen(
            cmd + [f"--servers={servers}", f"--worker_id={w}", "--steps=60", "--inner_steps=10",
                   "--progress=10", f"--go_file={d}/go", *learner_flags],
            stdout=open(f"{d}/learner{w}.log", "w"), stderr=subprocess.STDOUT, env=env))
    procs.extend(learners)
    for w in range(2):
        wait_for_line(learners[w], f"{d}/learner{w}.log", " joined: ", 300)
    open(f"{d}/go", "w").close()
    for w, p in enumerate(learners):
        wait(p, 300, f"{arm} learner {w}", f"{d}/learner{w}.log")
    want = diloco_ps_checksum(theta0)
    for w in range(2):
        j = last_json(f"{d}/learner{w}.log")
        joined = j["joined_checksums"] if w == 1 else [j["joined_checksum"]]
        if joined != [want] * (2 if w == 1 else 1):
            failures.append(f"{arm} learner {w} joined {joined}, not theta(0) of --init_from "
                            f"({want})")
        if w == 1 and (len(j["checksums"]) != 2 or len(set(j["checksums"])) != 1):
            failures.append(f"{arm}: the island's ranks differ after the drain: {j['checksums']}")
        if j["pushes"] < 4 or j["applied"] < 4 or j["refused"] != 0:
            failures.append(f"{arm} learner {w}: pushes {j['pushes']} applied {j['applied']} "
                            f"refused {j['refused']}")
    reader = subprocess.Popen(
        learner + [f"--servers={servers}", "--worker_id=9", "--steps=0", f"--eval={heldout}",
                   f"--save={d}/global.safetensors"],
        stdout=open(f"{d}/reader.log", "w"), stderr=subprocess.STDOUT, env=env)
    procs.append(reader)
    wait(reader, 120, f"{arm}: the reading learner", f"{d}/reader.log")
    for i, s in enumerate(shards):
        s.send_signal(signal.SIGTERM)
        if s.wait(timeout=30) != 0:
            failures.append(f"{arm} shard {i} exited {s.returncode}")
        # Each learner, and the uploading worker before them, left each shard when done.
        left = open(f"{d}/shard{i}.log").read().count(" left: ")
        if left != 3:
            failures.append(f"{arm} shard {i} logged {left} leaves, not 3")
    return last_json(f"{d}/reader.log"), [f"{d}/store0", f"{d}/store1"], rounds_of(d)


def rounds_of(d):
    """How the arm's rounds were made, from the shards' audit logs (one line per Applied push):
    the rounds, and those holding one learner's push only (the other's came in a later round)."""
    pushes = {}
    for i in range(2):
        for line in open(f"{d}/audit{i}.jsonl"):
            e = json.loads(line)
            if e["event"] == "applied":
                pushes.setdefault((e["fragment"], e["version"]), set()).add(e["worker"])
    return len(pushes), sum(len(w) == 1 for w in pushes.values())


def diloco_ps_checksum(module):
    import diloco_ps
    return diloco_ps.checksum(torch.cat([p.reshape(-1) for p in module.parameters()]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    ap.add_argument("--arms", default="lockstep,async", help="which arms run, in this order")
    a = ap.parse_args()
    ctl = f"{a.build}/ctl/diloco-ctl"
    sys.path.insert(0, a.python_dir)
    tmp = tempfile.mkdtemp(prefix="diloco-llama.")
    src = f"{tmp}/llama"
    torch.manual_seed(1)
    initial = llama.Llama(llama.DEFAULTS)
    llama.save_hf_folder(initial, src)
    generation = '{"bos_token_id": 1, "eos_token_id": 2, "max_new_tokens": 32}\n'
    with open(f"{src}/generation_config.json", "w") as f:
        f.write(generation)
    model = f"--model=hf:{src}"
    plan = [model, "--fragments=4"]
    # theta(0): another draw of the model, in BF16, uploaded by diloco-worker --init_from.
    torch.manual_seed(2)
    start_dir = f"{tmp}/start"
    llama.save_hf_folder(llama.Llama(llama.DEFAULTS), start_dir, torch.bfloat16)
    theta0 = llama.load_hf_folder(start_dir)  # widened to float32
    heldout = f"{tmp}/heldout.bin"
    subprocess.run([ctl, "gen-data", "--heldout", f"--out={heldout}"], check=True,
                   stdout=subprocess.DEVNULL, timeout=60)
    learner = [sys.executable, f"{EXAMPLES}/llama_learner.py", f"--model_dir={src}",
               "--fragments=4", "--num_workers=2", f"--ctl={ctl}", "--codec=int8:256"]
    tokens = llama.read_bin(heldout)
    T = llama.DEFAULTS["max_position_embeddings"]
    start = llama.heldout_loss(theta0, tokens, 16, T)
    procs, failures, losses = [], [], {}
    try:
        for arm in a.arms.split(","):
            joined, stores, (rounds, lone) = run_fleet(arm, tmp, a, plan, start_dir, theta0,
                                                       learner, heldout, procs, failures)
            losses[arm] = joined["heldout_loss"]
            print(f"{arm}: {rounds} rounds, {lone} of them holding one learner's push; "
                  f"global model {losses[arm]:.4f}")
            if not losses[arm] < start - 0.5:
                failures.append(f"{arm}: the global model did not learn: {start:.4f} -> "
                                f"{losses[arm]:.4f}")
            if arm == "lockstep":
                check_export(tmp, ctl, plan, stores, initial, generation, src, joined, tokens,
                             T, start, failures)
        # The asynchronous fleet trains as far as the lockstep one, within the scatter of its
        # runs (ASYNC_MARGIN).
        if "lockstep" in losses and "async" in losses and not (
                losses["async"] < losses["lockstep"] + ASYNC_MARGIN):
            failures.append(f"the asynchronous fleet's global model {losses['async']:.4f} is "
                            f"more than {ASYNC_MARGIN} above the lockstep one's "
                            f"{losses['lockstep']:.4f}")
        print("held-out loss of the global model: theta(0) " + f"{start:.4f}; " +
              "; ".join(f"{arm} {loss:.4f}" for arm, loss in losses.items()))
    except AssertionError as e:
        failures.append(str(e))
    finally:
        kill_all(procs)
    return verdict(failures, tmp)


def check_export(tmp, ctl, plan, stores, initial, generation, src, joined, tokens, T, start,
                 failures):
    """The lockstep arm's stores exported as a Hugging Face folder and through a manifest."""
    out = subprocess.run([ctl, "export", "--format=hf", *plan, "--shards=2",
                          f"--out={tmp}/export", *stores], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"export: {out.stdout}{out.stderr}")
    exported = llama.load_hf_folder(f"{tmp}/export")  # strict: raises on any difference
    tensors, meta = llama.read_safetensors(f"{tmp}/export/model.safetensors")
    names = [n for n, _ in initial.named_parameters()]
    if list(tensors) != names or meta.get("format") != "pt":
        failures.append(f"export names {list(tensors)[:4]}..., metadata {meta}")
    if any(t.dtype != torch.float32 for t in tensors.values()):
        failures.append("export is not F32")
    global_model, _ = llama.read_safetensors(f"{tmp}/lockstep/global.safetensors")
    differ = [n for n in names if not torch.equal(global_model[n], tensors[n])]
    if differ:
        failures.append(f"export differs from the fleet's global model in {differ[:3]}")
    loss = llama.heldout_loss(exported, tokens, 16, T)
    if abs(loss - joined["heldout_loss"]) > 1e-6:
        failures.append(f"export's held-out loss {loss} != the learner's "
                        f"{joined['heldout_loss']} for the global model")
    for name, want in (("config.json", open(f"{src}/config.json").read()),
                       ("generation_config.json", generation)):
        got = open(f"{tmp}/export/{name}").read() if os.path.exists(
            f"{tmp}/export/{name}") else None
        if got != want:
            failures.append(f"export/{name} is not the source's: {got!r}")

    # The same stores through a manifest of the same tensors: the same model.
    llama.write_manifest(initial, f"{tmp}/m.json")
    mplan = [f"--model=manifest:{tmp}/m.json", "--fragments=4", "--shards=2"]
    out = subprocess.run([ctl, "export", *mplan, f"--out={tmp}/m.safetensors", *stores],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        failures.append(f"manifest export: {out.stdout}{out.stderr}")
    else:
        m, _ = llama.read_safetensors(f"{tmp}/m.safetensors")
        if list(m) != names or any(not torch.equal(m[n], tensors[n]) for n in names):
            failures.append("the manifest export differs from the hf export")
    out = subprocess.run([ctl, "export", "--format=hf", *mplan, f"--out={tmp}/m_hf",
                          *stores], capture_output=True, text=True, timeout=120)
    if out.returncode != 2 or "config.json" not in out.stderr or os.path.exists(
            f"{tmp}/m_hf"):
        failures.append(f"--format=hf of a manifest: exit {out.returncode}: {out.stderr}")
    print(f"export: held-out loss {loss:.4f} = {joined['heldout_loss']:.4f} (the global model "
          f"a learner joined); {len(names)} tensors exported under their own names")


if __name__ == "__main__":
    sys.exit(main())
