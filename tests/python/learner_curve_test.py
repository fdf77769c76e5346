#!/usr/bin/env python3
"""diloco_ps.Learner over CURVE: the key files diloco-ctl keys makes, against a CURVE shard on
127.0.0.1 (docs/security.md).

  - a learner with its listed key (server key given as a file) joins, trains in lockstep and has
    its pushes applied and the answers adopted; one given the server key as Z85 text joins too;
  - a learner whose key the shard does not list, one holding another server's public key, and
    one with no keys at all each get a RuntimeError from join() naming the shard's address and
    the cause, well within the join's timeout (never a silent wait);
  - one key without the other is a ValueError at construction.

  /usr/bin/python3 learner_curve_test.py --build=BUILD_DIR --python_dir=BUILD_DIR/python
Exit status 0 pass, 1 fail, 77 skip (no torch for this interpreter).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed for", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import Shard, import_diloco_ps, verdict  # noqa: E402

H, FRAGMENTS = 4, 2
JOIN_TIMEOUT = 60.0  # a refusal must come long before this
REFUSAL_BOUND = 20.0


def make_params(seed):
    g = torch.Generator().manual_seed(seed)
    return [("w1", torch.nn.Parameter(torch.randn(64, 32, generator=g))),
            ("b1", torch.nn.Parameter(torch.randn(64, generator=g))),
            ("w2", torch.nn.Parameter(torch.randn(16, 64, generator=g)))]


def keys(ctl, out, workers):
    r = subprocess.run([ctl, "keys", f"--out={out}", f"--workers={workers}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return out


class Check:
    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        if not ok:
            self.failures.append(what)
            print("  FAILED:", what, flush=True)
        return ok


def refused_join(ps, check, endpoint, params, what, words, **kw):
    """join() must raise RuntimeError within REFUSAL_BOUND s naming `endpoint` and `words`."""
    learner = ps.Learner(servers=endpoint, worker_id=1, params=params, fragments=FRAGMENTS,
                         inner_steps=H, **kw)
    t0 = time.monotonic()
    try:
        learner.join(timeout=JOIN_TIMEOUT)
        check(False, f"{what}: join succeeded")
        return
    except RuntimeError as e:
        why = str(e)
    except Exception as e:  # noqa: BLE001 - the wrong kind of error is a failure too
        check(False, f"{what}: {type(e).__name__}: {e}")
        return
    took = time.monotonic() - t0
    print(f"   {what}: refused after {took:.1f}s: {why}", flush=True)
    check(took < REFUSAL_BOUND, f"{what}: refused only after {took:.1f}s")
    check(endpoint in why, f"{what}: the error does not name the shard {endpoint}: {why}")
    for w in words:
        check(w in why, f"{what}: the error does not say '{w}': {why}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    a = ap.parse_args()
    ps = import_diloco_ps(a.python_dir)
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="diloco-pycurve.")
    ctl = f"{a.build}/ctl/diloco-ctl"
    fleet = keys(ctl, f"{tmp}/keys", 2)  # workers 0 and 1
    other = keys(ctl, f"{tmp}/other", 2)  # another cluster's keys: listed nowhere here
    check = Check()
    manifest = f"{tmp}/model.json"
    ps.write_manifest(make_params(1), manifest, source="learner_curve_test")
    with Shard(a.build, tmp, [f"--model=manifest:{manifest}", f"--fragments={FRAGMENTS}",
                              "--grace_cap=500ms",
                              f"--curve_secret_key_file={fleet}/server.secret",
                              f"--curve_authorized_keys={fleet}/authorized_keys"]) as shard:
        print("-- a listed key trains", flush=True)
        named = make_params(1)
        learner = ps.Learner(servers=shard.endpoint, worker_id=0, params=named,
                             fragments=FRAGMENTS, inner_steps=H, lockstep=True,
                             curve_server_key=f"{fleet}/server.public",
                             curve_secret_key_file=f"{fleet}/worker-0.secret")
        learner.join(timeout=30)
        for _ in range(3 * H):
            with torch.no_grad():
                for _, p in named:
                    p.add_(torch.randn_like(p) * 0.01)
            learner.after_step(tokens=64)
        learner.drain(timeout=20)
        st = learner.stats
        print(f"   stats: pushes {st['pushes']} applied {st['applied']} adoptions "
              f"{st['adoptions']} refused {st['refused']}", flush=True)
        check(st["applied"] >= 2 * FRAGMENTS, f"pushes not applied over CURVE: {st}")
        check(st["adoptions"] >= 2 * FRAGMENTS, f"answers not adopted over CURVE: {st}")
        check(st["refused"] == 0, f"refusals over CURVE: {st}")

        print("-- the server key as Z85 text", flush=True)
        text = open(f"{fleet}/server.public").read().strip()
        second = ps.Learner(servers=shard.endpoint, worker_id=1, params=make_params(2),
                            fragments=FRAGMENTS, inner_steps=H, curve_server_key=text,
                            curve_secret_key_file=f"{fleet}/worker-1.secret")
        second.join(timeout=30)
        check(second.joined, "a learner given the server key as text did not join")
        second.drain(timeout=10)

        print("-- refusals", flush=True)
        refused_join(ps, check, shard.endpoint, make_params(3), "unlisted key",
                     ["refused the CURVE handshake", "authorized_keys"],
                     curve_server_key=f"{fleet}/server.public",
                     curve_secret_key_file=f"{other}/worker-1.secret")
        refused_join(ps, check, shard.endpoint, make_params(3), "another server's key",
                     ["--curve_server_key", open(f"{other}/server.public").read().strip()],
                     curve_server_key=f"{other}/server.public",
                     curve_secret_key_file=f"{fleet}/worker-1.secret")
        refused_join(ps, check, shard.endpoint, make_params(3), "no keys",
                     ["requires CURVE"])
        try:
            ps.Learner(servers=shard.endpoint, worker_id=1, params=make_params(3),
                       fragments=FRAGMENTS, curve_server_key=f"{fleet}/server.public")
            check(False, "a server key without a secret key file was taken")
        except ValueError as e:
            check("CURVE needs both" in str(e), f"half the keys: {e}")
        try:
            ps.Learner(servers=shard.endpoint, worker_id=1, params=make_params(3),
                       fragments=FRAGMENTS, curve_server_key=f"{fleet}/server.public",
                       curve_secret_key_file=f"{tmp}/missing.secret")
            check(False, "a missing secret key file was taken")
        except (ValueError, RuntimeError) as e:
            check("missing.secret" in str(e), f"a missing key file: {e}")
    return verdict(check.failures, tmp)


if __name__ == "__main__":
    sys.exit(main())
