"""diloco_ps.write_manifest: a model's manifest file for `diloco-server --model=manifest:PATH`.

The file is the one `diloco-ctl manifest --out=PATH` writes (common/manifest_json.h, written by
the same C++ code, atomically): the tensors' names, shapes and dtypes in the order given, and
the model's fingerprint, which is the one a Learner of the same parameters presents to the
shards. The values are never read, so a model on the meta device serves as well.
"""
from . import _params
from ._diloco_ps import write_manifest as _write


def write_manifest(model_or_named_params, path, source=""):
    """Writes the manifest of an nn.Module (its named_parameters()), a dict or (name, tensor)
    pairs, in that order, to `path`; returns the model's fingerprint (16 hex digits). `source`
    is recorded as the file's informative "source" when given."""
    names, shapes, dtypes = _params.describe(_params.named_tensors(model_or_named_params))
    return _write(str(path), names, shapes, dtypes, source)
