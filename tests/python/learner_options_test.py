#!/usr/bin/env python3
"""diloco_ps.LearnerOptions and the Learner's keywords (python/learner_options.cc,
diloco_ps/_learner.py).

Without torch, against the native module alone: options made from keywords only, with the
defaults of the Learner's docstring; a positional option, an unknown keyword or a value of the
wrong type is a TypeError; each bad value is a ValueError that names its keyword and the value
(worker::Validate with the keywords' names, the check diloco-worker's flags make); the Learner's
docstring lists every keyword with its default. With torch as well: diloco_ps.Learner refuses a
bad keyword the same way, takes keywords only, and merges keywords over an options object.

  /usr/bin/python3 learner_options_test.py --build=BUILD_DIR --python_dir=BUILD_DIR/python
Exit status 0 pass, 1 fail.
"""
import argparse
import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Each bad value and the start of its ValueError's message (CURVE's: a part of it, the message of
# schema/curve.h, which names the flags).
BAD = [
    (dict(link_margin=0.5), "link_margin=0.5: expected a factor >= 1"),
    (dict(adopt_alpha=0.5), "adopt_alpha=0.5: applies to adopt=lerp only"),
    (dict(adopt="lerp", adopt_alpha=1.5), "adopt_alpha=1.5: must be in [0, 1]"),
    (dict(adopt="copy"), "adopt=copy: expected keep or lerp"),
    (dict(extrapolate=0.5), "extrapolate=0.5: must be in [1, 3]"),
    (dict(fragments=0), "fragments=0: expected at least one fragment"),
    (dict(inner_steps=0), "inner_steps=0: expected a positive number of steps"),
    (dict(inner_steps="often"), "inner_steps=often: expected a positive number of steps"),
    (dict(inner_steps="auto", inner_steps_min=80, inner_steps_max=40), "inner_steps=auto: "),
    (dict(codec="int9"), "codec=int9: "),
    (dict(codec="auto", auto_codecs=","), "codec=auto: no codec to choose from"),
    (dict(lockstep=True, codec="auto"), "lockstep with codec=auto: lockstep runs are"),
    (dict(curve_server_key="x" * 40), "both --curve_server_key and --curve_secret_key_file"),
]


def doc_of_learner(path):
    """The Learner class's docstring, read from the source (no torch needed)."""
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Learner":
            return ast.get_docstring(node)
    raise AssertionError(f"no class Learner in {path}")


def shown(value):
    return f'"{value}"' if isinstance(value, str) else repr(value)


def check_native(native, failures):
    LearnerOptions = native.LearnerOptions
    d = LearnerOptions()
    defaults = d.keywords()
    if (d.codec, d.inner_steps, d.fragments, d.link_margin, d.align_pushes,
            d.curve_server_key) != ("int8:256", 50, 4, 1.5, True, None):
        failures.append(f"defaults: {d!r}")
    if LearnerOptions(**defaults).keywords() != defaults:
        failures.append("LearnerOptions(**keywords()) differs from the options")
    o = LearnerOptions(codec="int4:128", inner_steps="auto", inner_steps_min=20,
                       inner_steps_max=400, fragments=2, adopt="lerp", adopt_alpha=0.25,
                       extrapolate=1.5, align_pushes=False, curve_server_key=None)
    got = (o.codec, o.inner_steps, o.inner_steps_min, o.inner_steps_max, o.fragments, o.adopt,
           o.adopt_alpha, o.extrapolate, o.align_pushes)
    if got != ("int4:128", "auto", 20, 400, 2, "lerp", 0.25, 1.5, False):
        failures.append(f"keywords not taken: {got}")
    if LearnerOptions(inner_steps="25").inner_steps != 25:
        failures.append("inner_steps='25' is not H = 25")
    for args, kw, why in [(("int8:256",), {}, "a positional option"),
                          ((), {"codecs": "int8"}, "an unknown keyword"),
                          ((), {"fragments": "four"}, "a string for a number")]:
        try:
            LearnerOptions(*args, **kw)
            failures.append(f"{why} was accepted")
        except TypeError:
            pass
    try:
        o.codec = "fp32"
        failures.append("an option could be changed after its check")
    except AttributeError:
        pass
    for kw, message in BAD:
        try:
            LearnerOptions(**kw)
            failures.append(f"{kw} accepted")
        except ValueError as e:
            curve = "curve_server_key" in kw
            if not (message in str(e) if curve else str(e).startswith(message)):
                failures.append(f"{kw}: ValueError {e!r}, expected it to start {message!r}")
    doc = doc_of_learner(os.path.join(ROOT, "python", "diloco_ps", "_learner.py"))
    for name, value in defaults.items():
        if f"{name}={shown(value)}" not in doc:
            failures.append(f"the Learner's docstring does not list {name}={shown(value)}")
    return defaults


def check_learner(diloco_ps, failures):
    import torch
    params = list(torch.nn.Linear(8, 8).named_parameters())
    endpoint = "tcp://127.0.0.1:9"  # never reached: nothing here joins
    try:
        diloco_ps.Learner(servers=endpoint, worker_id=1, params=params, link_margin=0.5)
        failures.append("Learner(link_margin=0.5) accepted")
    except ValueError as e:
        if "link_margin=0.5" not in str(e):
            failures.append(f"Learner's ValueError does not name link_margin: {e}")
    try:
        diloco_ps.Learner(endpoint, 1, params, "int8:256")
        failures.append("a positional codec was taken as the options")
    except TypeError as e:
        if "keywords" not in str(e):
            failures.append(f"a positional codec: {e}")
    learner = diloco_ps.Learner(servers=endpoint, worker_id=1, params=params, fragments=1,
                                inner_steps=10, codec="fp32")
    if (learner.options.fragments, learner.options.inner_steps) != (1, 10):
        failures.append(f"keywords not taken: {learner.options!r}")
    merged = diloco_ps.Learner(servers=endpoint, worker_id=2, params=params,
                               options=diloco_ps.LearnerOptions(fragments=1, codec="fp32"),
                               inner_steps=7)
    if (merged.options.fragments, merged.options.codec, merged.options.inner_steps) != (
            1, "fp32", 7):
        failures.append(f"keywords over options: {merged.options!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python_dir", required=True)
    a = ap.parse_args()
    failures = []
    try:
        import torch  # noqa: F401  (diloco_ps needs it)
    except ImportError:
        torch = None
    if torch is None:  # the native module alone, by its own name (loaded once: pybind11 types)
        print("torch is not installed: diloco_ps.Learner itself not checked")
        sys.path.insert(0, os.path.join(a.python_dir, "diloco_ps"))
        import _diloco_ps
        check_native(_diloco_ps, failures)
    else:
        sys.path.insert(0, a.python_dir)
        import diloco_ps
        check_native(diloco_ps._diloco_ps, failures)
        check_learner(diloco_ps, failures)
    for f in failures:
        print("FAIL:", f)
    print("PASS" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
