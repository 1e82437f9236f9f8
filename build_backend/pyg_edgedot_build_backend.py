"""setuptools' build backend, with torch and ninja needed for wheels only.

setup.py compiles the kernels against torch while building a wheel (``pip install .``,
``pip install git+...``, ``pip wheel``), so pip's isolated build environment needs them
then; an editable install (``pip install -e .``) or an sdist compiles nothing, so it is not
made to install torch into a throwaway environment. ``PYG_EDGEDOT_PREBUILD=0`` needs no
torch either.
"""
import importlib.util
import sys
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every other hook, unchanged)

ROOT = Path(__file__).resolve().parent.parent


def load_standalone(name: str):
    """Loads ``pyg_edgedot/<name>.py`` without importing the package, whose import loads the
    kernels: for this backend and ``setup.py``. They cannot use ``pyg_edgedot/_build.py``'s
    loader of the same form, as that module imports torch, which may be missing here; the
    installed package, which lacks this folder, uses that one."""
    spec = importlib.util.spec_from_file_location(f"_pyg_edgedot_{name}",
                                                  ROOT / "pyg_edgedot" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def get_requires_for_build_wheel(config_settings=None):
    requires = _setuptools.get_requires_for_build_wheel(config_settings)
    if load_standalone("_config").Config.from_env().prebuild:
        requires = requires + ["torch>=2.5", "ninja"]
    return requires
