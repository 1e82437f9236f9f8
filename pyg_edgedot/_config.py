"""Every ``PYG_EDGEDOT_*`` environment variable, read here and only here, once per process.

At import:

* ``PYG_EDGEDOT_FORCE_FALLBACK=1``: build nothing, no Triton: the pure-PyTorch fallback.
* ``PYG_EDGEDOT_CUDA=0``: use (or build) the CPU kernel only; CUDA tensors take the Triton path.
* ``PYG_EDGEDOT_TRITON=0``: never use the Triton kernels.

While installing (read through ``setup.py``, and ``PYG_EDGEDOT_PREBUILD`` through the build
backend too, like flash-attention's build switches):

* ``PYG_EDGEDOT_PREBUILD=0``: do not compile the kernels into the wheel; the first import
  builds them just in time instead.
* ``PYG_EDGEDOT_CUDA=0``: compile the CPU kernel only.

``PYG_EDGEDOT_CPU_AVX2=0`` (keep the CPU scoring loops' and ``topk_dst``'s scan's baseline
x86-64 form) and
``PYG_EDGEDOT_CPU_AVX512=0`` (keep their AVX2 form) are read by the CPU kernels themselves
(``csrc/cpu/row_dot.h``), the one place that acts on them.
``TORCH_CUDA_ARCH_LIST`` and ``TORCH_EXTENSIONS_DIR`` are torch's own, read by the loader.

This module imports nothing from the package, so ``setup.py`` and the build backend
(``build_backend/``) can load it on their own.
"""
import os
from dataclasses import dataclass
from typing import Mapping, Optional


@dataclass(frozen=True)
class Config:
    force_fallback: bool = False
    build_cuda: bool = True
    use_triton: bool = True
    prebuild: bool = True

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "Config":
        env = os.environ if environ is None else environ
        return cls(force_fallback=env.get("PYG_EDGEDOT_FORCE_FALLBACK", "0") == "1",
                   build_cuda=env.get("PYG_EDGEDOT_CUDA", "1") != "0",
                   use_triton=env.get("PYG_EDGEDOT_TRITON", "1") != "0",
                   prebuild=env.get("PYG_EDGEDOT_PREBUILD", "1") != "0")
