"""setuptools' build backend, with torch and ninja needed for wheels only.

setup.py compiles the kernels against torch while building a wheel (``pip install .``,
``pip install git+...``, ``pip wheel``), so pip's isolated build environment needs them
then; an editable install (``pip install -e .``) or an sdist compiles nothing, so it is not
made to install torch into a throwaway environment. ``PYG_EDGEDOT_PREBUILD=0`` needs no
torch either.
"""
import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every other hook, unchanged)


def get_requires_for_build_wheel(config_settings=None):
    requires = _setuptools.get_requires_for_build_wheel(config_settings)
    if os.environ.get("PYG_EDGEDOT_PREBUILD", "1") != "0":
        requires = requires + ["torch>=2.5", "ninja"]
    return requires
