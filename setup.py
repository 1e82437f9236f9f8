"""Builds pyg_edgedot's wheel with its kernels compiled in, like pytorch/extension-cpp.

The kernel sources (``csrc/``, at the top of the repository) are copied into the package
(``pyg_edgedot/csrc``), so every install carries them. Then the kernel library is compiled
(the CUDA variant where torch is a CUDA build and nvcc is found, else the CPU one) with the
same flags and the same build cache as the just-in-time build (``pyg_edgedot/_build.py``),
and copied into the package next to a record of its build key; the import loads it while
that key matches. A failed build does not fail the install: the first import then builds
just in time, or falls back to pure PyTorch with one warning.

Switches, read while building by ``pyg_edgedot/_config.py`` (loaded on its own, like
``_build.py``, by the build backend's ``load_standalone``: importing the package would load
the kernels): ``PYG_EDGEDOT_PREBUILD=0`` skips the install-time build;
``PYG_EDGEDOT_CUDA=0`` builds the CPU kernel only. Editable installs (``pip install -e .``)
build nothing here: the first import builds from the checkout, and rebuilds when its sources
change.
"""
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "build_backend"))  # imported already where pip runs this file
from pyg_edgedot_build_backend import load_standalone  # noqa: E402

CONFIG = load_standalone("_config").Config.from_env()


class BinaryDistribution(Distribution):
    """A wheel holding a compiled library is platform-specific."""

    def has_ext_modules(self):
        return CONFIG.prebuild


class BuildPyWithKernels(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        package = Path(self.build_lib) / "pyg_edgedot"
        shutil.rmtree(package / "csrc", ignore_errors=True)
        shutil.copytree(ROOT / "csrc", package / "csrc")
        for stale in package.glob("pyg_edgedot_*.*"):  # left by an earlier build in build/
            stale.unlink()
        if not CONFIG.prebuild:
            print("pyg_edgedot: PYG_EDGEDOT_PREBUILD=0: not compiling the kernels now; the "
                  "first import builds them", file=sys.stderr)
            return
        try:
            import torch  # noqa: F401
        except ImportError:
            print("pyg_edgedot: torch is not importable while building (pip's build isolation "
                  "off?): not compiling the kernels now; the first import builds them",
                  file=sys.stderr)
            return
        load_standalone("_build").prebuild(package, package / "csrc", CONFIG)


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPyWithKernels})
