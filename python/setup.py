"""Builds diloco_ps: the package's .py files from python/diloco_ps/, and its extension
(_diloco_ps) and _version.py made by CMake from the repository root, configured for the
interpreter that runs this (sys.executable) with -DDILOCO_PYTHON_ONLY=ON (no tests, no
benchmarks), Release, Ninja, and building the _diloco_ps target only.

The version is the root CMakeLists.txt's project(diloco_ps VERSION x.y.z), its one source.

Environment:
  DILOCO_CMAKE_BUILD_DIR  the CMake build folder, kept: the next install compiles only what
                          changed (default: build/python/cmake in the repository root, which git
                          ignores); setuptools' own folders go to its setuptools/ subfolder,
                          not into python/
  DILOCO_CUDA             ON builds the CUDA paths (default OFF)
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (CMake's own variable)
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent.parent
CMAKE_DIR = Path(os.environ.get("DILOCO_CMAKE_BUILD_DIR") or ROOT / "build" / "python" / "cmake")
CMAKE_DIR = CMAKE_DIR.resolve()
SETUPTOOLS_DIR = CMAKE_DIR / "setuptools"


def cmake_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*diloco_ps\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text)
    if not m:
        raise RuntimeError(f"no project(diloco_ps VERSION x.y.z) in {ROOT / 'CMakeLists.txt'}")
    return m.group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = CMAKE_DIR
        cuda = os.environ.get("DILOCO_CUDA", "OFF")
        if cuda not in ("ON", "OFF", "AUTO"):
            raise RuntimeError(f"DILOCO_CUDA={cuda}: must be ON, OFF or AUTO")
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
                     "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}",
                     "-DDILOCO_PYTHON_ONLY=ON", f"-DDILOCO_CUDA={cuda}"]
        try:
            import pybind11  # a PyPI pybind11 (build isolation); Debian's pybind11-dev needs none
            configure.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_diloco_ps"], check=True)
        made = build_dir / "python" / "diloco_ps"
        modules = sorted(made.glob("_diloco_ps*.so"))
        if len(modules) != 1:
            raise RuntimeError(f"expected one _diloco_ps module in {made}, found {modules}: "
                               "pybind11 (pybind11-dev) or the Python headers (python3-dev) "
                               "missing? see the CMake output above")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(modules[0], target)
        shutil.copyfile(made / "_version.py", target.parent / "_version.py")


shutil.rmtree(SETUPTOOLS_DIR / "build", ignore_errors=True)  # no file of an earlier install
SETUPTOOLS_DIR.mkdir(parents=True, exist_ok=True)
setup(version=cmake_version(),
      options={"build": {"build_base": str(SETUPTOOLS_DIR / "build")},
               "egg_info": {"egg_base": str(SETUPTOOLS_DIR)}},
      ext_modules=[Extension("diloco_ps._diloco_ps", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
