#!/usr/bin/env python3
"""A learner given the shards' model source (Learner(model="manifest:PATH")) takes a module whose
named_parameters() come in another order than the source's tensors, matched by name.

One shard on 127.0.0.1 serves a manifest written in LAYOUT's order. A first learner, its
parameters in that order, uploads theta(0) and leaves. Then:
  - a module that registers the same tensors in another order (checked: its named_parameters()
    are not in the manifest's order) presents another fingerprint without model=, and the
    manifest's with it;
  - with model=, it joins: each of its parameters, by name, holds theta(0)'s tensor of that
    name; it trains in lockstep (every push applied, none refused), and after the last step,
    on which every fragment was adopted, each parameter by name is the fleet's global value at
    that tensor's place in the manifest;
  - modules that lack a tensor of the source, have one it lacks, or have a shape that differs,
    and a source that cannot be read, raise ValueError naming the tensor (or the source), and
    leave the module's parameters as they were; a module given as model= raises TypeError;
  - diloco_ps.Island (one gloo rank) passes model= to its learner: it joins the same way.

  /usr/bin/python3 learner_by_name_test.py --build=BUILD_DIR --python_dir=BUILD_DIR/python
Exit status 0 pass, 1 fail, 77 skip (no torch for this interpreter).
"""
import argparse
import os
import socket
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIP: torch is not installed for", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import Shard, import_diloco_ps, verdict  # noqa: E402

# The source's order. 6,650 values; 2 fragments.
LAYOUT = [("embed.weight", [64, 32]), ("block.w1", [48, 32]), ("block.b1", [48]),
          ("block.w2", [32, 48]), ("head.weight", [10, 32]), ("norm.weight", [32])]
SHUFFLED = [3, 5, 0, 2, 4, 1]  # the module registers LAYOUT[i] for i in this order
H, FRAGMENTS, STEPS = 4, 2, 8


def tensors(seed, layout=LAYOUT):
    g = torch.Generator().manual_seed(seed)
    return [(name, torch.randn(shape, generator=g) * 0.1) for name, shape in layout]


def module(seed, order=SHUFFLED, layout=LAYOUT, shapes=None):
    """An nn.Module holding LAYOUT's tensors (or `layout`'s), registered in `order`; `shapes`
    overrides a tensor's shape by name."""
    root = torch.nn.Module()
    values = dict(tensors(seed, layout))
    for i in order:
        name, _ = layout[i]
        value = values[name]
        if shapes and name in shapes:
            value = torch.randn(shapes[name]) * 0.1
        parent = root
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.register_parameter(leaf, torch.nn.Parameter(value))
    return root


def offsets():
    out, at = {}, 0
    for name, shape in LAYOUT:
        n = torch.Size(shape).numel()
        out[name] = (at, at + n)
        at += n
    return out


def snapshot(m):
    return {n: p.detach().clone() for n, p in m.named_parameters()}


def unchanged(m, snap):
    return all(torch.equal(p.detach(), snap[n]) for n, p in m.named_parameters())


def refusals(ps, check, endpoint, source):
    cases = [
        ("the model lacks block.b1", module(5, [i for i in SHUFFLED if i != 2]), source,
         ValueError),
        ("the source lacks extra.bias",
         module(5, SHUFFLED + [6], LAYOUT + [("extra.bias", [7])]), source, ValueError),
        ("head.weight is [10, 16] in the model, [10, 32] in the source",
         module(5, shapes={"head.weight": [10, 16]}), source, ValueError),
        ("model=manifest:/nonexistent/m.json", module(5), "manifest:/nonexistent/m.json",
         ValueError),
    ]
    for words, m, spec, exc in cases + [("the module itself goes in params", module(5), None,
                                         TypeError)]:
        snap = snapshot(m)
        try:
            ps.Learner(servers=endpoint, worker_id=9, params=m,
                       model=m if spec is None else spec, fragments=FRAGMENTS)
            check(False, f"a learner was made ({words})")
        except exc as e:
            check(words in str(e), f"{exc.__name__} does not say '{words}': {e}")
        check(unchanged(m, snap), f"a refused model was changed ({words})")


def island(ps, check, endpoint, source, theta0):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    try:
        m = module(7)
        isl = ps.Island(servers=endpoint, worker_id=4, params=m, model=source,
                        fragments=FRAGMENTS, inner_steps=H, lockstep=True, stream=False)
        isl.join(timeout=30)
        check(all(torch.equal(p.detach(), theta0[n]) for n, p in m.named_parameters()),
              "the island's parameters are not theta(0)'s tensors of their names")
        isl.drain(timeout=10)
        dist.destroy_process_group()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    args = ap.parse_args()
    ps = import_diloco_ps(args.python_dir)
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print("FAIL:", what, flush=True)

    tmp = tempfile.mkdtemp(prefix="diloco-by-name.")
    path = f"{tmp}/model.json"
    first = [(n, torch.nn.Parameter(t)) for n, t in tensors(1)]
    fp = ps.write_manifest(first, path, source="learner_by_name_test")
    source = f"manifest:{path}"
    theta0 = {n: p.detach().clone() for n, p in first}
    place = offsets()

    shuffled = module(2)
    order = [n for n, _ in shuffled.named_parameters()]
    check(order != [n for n, _ in LAYOUT] and sorted(order) == sorted(n for n, _ in LAYOUT),
          f"the module's order is the manifest's: {order}")
    with Shard(args.build, tmp, [f"--model={source}", f"--fragments={FRAGMENTS}",
                                 "--grace_cap=500ms"]) as shard:
        uploader = ps.Learner(servers=shard.endpoint, worker_id=1, params=first,
                              fragments=FRAGMENTS, inner_steps=H, lockstep=True, stream=False)
        uploader.join(timeout=30)
        uploader.drain(timeout=10)
        del uploader

        refusals(ps, check, shard.endpoint, source)

        plain = ps.Learner(servers=shard.endpoint, worker_id=2, params=shuffled,
                           fragments=FRAGMENTS)
        check(plain.model_fingerprint != fp, "the shuffled order without model= has the "
              "manifest's fingerprint")
        del plain

        learner = ps.Learner(servers=shard.endpoint, worker_id=3, params=shuffled, model=source,
                             fragments=FRAGMENTS, inner_steps=H, lockstep=True, stream=False)
        check(learner.model_fingerprint == fp,
              f"fingerprints: learner {learner.model_fingerprint}, manifest {fp}")
        check(learner.names == [n for n, _ in LAYOUT], f"the learner's order: {learner.names}")
        learner.join(timeout=30)
        check(all(torch.equal(p.detach(), theta0[n]) for n, p in shuffled.named_parameters()),
              "after the join a parameter is not theta(0)'s tensor of its name")
        for _ in range(STEPS):
            with torch.no_grad():
                for _, p in shuffled.named_parameters():
                    p.add_(torch.randn_like(p) * 0.01)
            learner.after_step(tokens=64)
        st = learner.stats
        check(st["applied"] == st["pushes"] == FRAGMENTS * STEPS // H and st["refused"] == 0,
              f"pushes {st['pushes']}, applied {st['applied']}, refused {st['refused']}")
        # Each applied push is answered by the version it made: int8 updates (the shard's
        # default downloads) after the join's whole fragments, every one rebuilt to the bit.
        check(st["updates_full"] == FRAGMENTS and st["updates_delta"] == st["applied"]
              and st["download_mismatches"] == 0,
              f"downloads: {st['updates_full']} whole, {st['updates_delta']} updates, "
              f"{st['download_mismatches']} mismatches for {st['applied']} applied pushes")
        g = learner.global_params()
        check(all(torch.equal(p.detach().view(-1), g[place[n][0]:place[n][1]])
                  for n, p in shuffled.named_parameters()),
              "after the last adoption a parameter is not the global value at its name's place")
        check(not all(torch.equal(p.detach(), theta0[n])
                      for n, p in shuffled.named_parameters()), "training changed nothing")
        learner.drain(timeout=10)
        del learner

        island(ps, check, shard.endpoint, source, {n: g[a:b].view(theta0[n].shape)
                                                   for n, (a, b) in place.items()})
    return verdict(failures, tmp)


if __name__ == "__main__":
    sys.exit(main())
