#!/usr/bin/env python3
"""Any architecture in and out: a Llama-style PyTorch model (python/examples/llama.py) trained
by a fleet that has never seen a GPT, exported as a Hugging Face folder, loaded back.

Two shards serve the model's folder (--model=hf:DIR: config.json, model.safetensors and a
generation_config.json). diloco-worker --device=synthetic --init_from uploads theta(0) from
another folder of the model, in BF16; two learners join (each must hold that theta(0),
widened: checksum; neither trains before both joined, --go_file) and train 60 steps each at
H = 10 in lockstep (shards at quorum 2: every round holds a push of each, so the global model's
progress does not depend on the two learners' relative speed), then drain: a PyTorch learner
(python/examples/llama_learner.py) and an island of 2 gloo ranks under DDP
(python/examples/llama_island.py: one worker id, every rank holding theta(0) after the join and
the same parameters after the drain). A third learner joins with
--steps=0: its module then holds the fleet's global model, whole, in fp32; it scores it on fixed
held-out tokens and saves it. The shards are stopped by PID (SIGTERM: a final checkpoint), and
`diloco-ctl export --format=hf --model=hf:DIR` writes the stores' model. Checked:
  - the export is a folder the module loads strictly (load_state_dict(strict=True): the same
    names and shapes, nothing more), tensor for tensor equal to the global model the learner
    joined, and so with the very same held-out loss;
  - the model learned: that loss is well below theta(0)'s;
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    a = ap.parse_args()
    server, ctl = f"{a.build}/server/diloco-server", f"{a.build}/ctl/diloco-ctl"
    worker = f"{a.build}/worker/diloco-worker"
    sys.path.insert(0, a.python_dir)
    import diloco_ps
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
    env = dict(os.environ, PYTHONPATH=a.python_dir)
    learner = [sys.executable, f"{EXAMPLES}/llama_learner.py", f"--model_dir={src}",
               "--fragments=4", "--num_workers=2", f"--ctl={ctl}", "--codec=int8:256"]
    shards, procs, failures = [], [], []
    try:
        for i in range(2):
            shards.append(subprocess.Popen(
                [server, *plan, f"--shard={i}", "--shards=2", "--bind=tcp://127.0.0.1:*",
                 f"--port_file={tmp}/port{i}", f"--store={tmp}/store{i}", "--quorum=2",
                 "--grace_cap=60s", "--worker_timeout=5s", "--durability=per-round",
                 "--progress_interval=1000s"],
                stdout=open(f"{tmp}/shard{i}.log", "w"), stderr=subprocess.STDOUT))
        servers = ",".join(wait_for_file(f"{tmp}/port{i}", 20) for i in range(2))
        init = subprocess.Popen(
            [worker, "--device=synthetic", *plan, f"--servers={servers}", "--steps=1",
             "--inner_steps=1000", "--synthetic_step_time=1ms", f"--init_from={start_dir}"],
            stdout=open(f"{tmp}/init.log", "w"), stderr=subprocess.STDOUT)
        procs.append(init)
        wait(init, 60, "diloco-worker --init_from", f"{tmp}/init.log")
        # Both join before either trains (--go_file), so both must join theta(0).
        island = [sys.executable, f"{EXAMPLES}/llama_island.py", "--ranks=2", *learner[2:]]
        for w, cmd in enumerate([learner, island]):
            procs.append(subprocess.Popen(
                cmd + [f"--servers={servers}", f"--worker_id={w}", "--steps=60",
                       "--inner_steps=10", "--progress=20", f"--go_file={tmp}/go",
                       "--lockstep"],
                stdout=open(f"{tmp}/learner{w}.log", "w"), stderr=subprocess.STDOUT, env=env))
        for w in range(2):
            wait_for_line(procs[1 + w], f"{tmp}/learner{w}.log", " joined: ", 300)
        open(f"{tmp}/go", "w").close()
        for w, p in enumerate(procs):
            wait(p, 300, f"learner {w}", f"{tmp}/learner{w}.log")
        want = diloco_ps.checksum(torch.cat([p.reshape(-1) for p in theta0.parameters()]))
        for w in range(2):
            d = last_json(f"{tmp}/learner{w}.log")
            joined = d["joined_checksums"] if w == 1 else [d["joined_checksum"]]
            if joined != [want] * (2 if w == 1 else 1):
                failures.append(f"learner {w} joined {joined}, not theta(0) of --init_from "
                                f"({want})")
            if w == 1 and (len(d["checksums"]) != 2 or len(set(d["checksums"])) != 1):
                failures.append(f"the island's ranks differ after the drain: {d['checksums']}")
            if d["pushes"] < 4 or d["applied"] < 4 or d["refused"] != 0:
                failures.append(f"learner {w}: pushes {d['pushes']} applied {d['applied']} "
                                f"refused {d['refused']}")
        reader = subprocess.Popen(
            learner + [f"--servers={servers}", "--worker_id=9", "--steps=0", f"--eval={heldout}",
                       f"--save={tmp}/global.safetensors"],
            stdout=open(f"{tmp}/reader.log", "w"), stderr=subprocess.STDOUT, env=env)
        procs.append(reader)
        wait(reader, 120, "the reading learner", f"{tmp}/reader.log")
        joined = last_json(f"{tmp}/reader.log")
        for i, s in enumerate(shards):
            s.send_signal(signal.SIGTERM)
            if s.wait(timeout=30) != 0:
                failures.append(f"shard {i} exited {s.returncode}")
        stores = [f"{tmp}/store0", f"{tmp}/store1"]

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
        global_model, _ = llama.read_safetensors(f"{tmp}/global.safetensors")
        differ = [n for n in names if not torch.equal(global_model[n], tensors[n])]
        if differ:
            failures.append(f"export differs from the fleet's global model in {differ[:3]}")
        tokens = llama.read_bin(heldout)
        T = llama.DEFAULTS["max_position_embeddings"]
        loss = llama.heldout_loss(exported, tokens, 16, T)
        start = llama.heldout_loss(theta0, tokens, 16, T)
        if abs(loss - joined["heldout_loss"]) > 1e-6:
            failures.append(f"export's held-out loss {loss} != the learner's "
                            f"{joined['heldout_loss']} for the global model")
        if not loss < start - 0.5:
            failures.append(f"the global model did not learn: {start:.4f} -> {loss:.4f}")
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
        print(f"held-out loss {start:.4f} (theta(0)) -> {loss:.4f} (export) = "
              f"{joined['heldout_loss']:.4f} (the global model a learner joined); "
              f"{len(names)} tensors exported under their own names")
    except AssertionError as e:
        failures.append(str(e))
    finally:
        kill_all(procs + shards)
    return verdict(failures, tmp)


if __name__ == "__main__":
    sys.exit(main())
