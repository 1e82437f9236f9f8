"""Which implementation serves each (op group, device), decided once, and its registration.

:func:`decide` is the one place this is decided: a pure function of the build result, the
configuration and whether Triton can run. :func:`load` calls it once per process and
registers what it says; :func:`backends`, ``python -m pyg_edgedot`` and the tests read the
same table.

* CPU: the fused C++ kernel (``cpp``), else the pure-PyTorch fallback (``python``).
* CUDA: the fused CUDA kernel (``cuda``) when it was built; else the Triton kernels
  (``triton``) for the groups that have them, when Triton can run; else ``python``.
* A group with ``COMPOSITE = True`` (``edge_dot_loss``) has no kernel of its own: its
  Python implementation, made of the other groups' ops, serves every device (``composite``).
* A group with ``CPU_ONLY = True`` (``negative_sampling``) has a C++ kernel and no CUDA or
  Triton one: CUDA tensors use its pure-PyTorch implementation (``python``).

When nothing could be compiled, the op schemas are defined from Python (read from
``csrc/<group>.cpp``, see :func:`pyg_edgedot._build.schemas`), so the public API, autograd
and ``torch.compile`` behave the same way; one warning says why and how to fix it.
"""
import os
import warnings
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from . import _build
from ._config import Config

DEVICES = ("cpu", "cuda")


class Backend(NamedTuple):
    impl: str                  # "cuda", "cpp", "triton", "python" or "composite"
    reason: Optional[str]      # why a faster implementation does not serve, or None


Table = Dict[Tuple[str, str], Backend]


def triton_unusable(config: Config) -> Optional[str]:
    """None if the Triton kernels can serve CUDA tensors here, else why not."""
    if config.force_fallback:
        return "PYG_EDGEDOT_FORCE_FALLBACK=1 is set"
    if not config.use_triton:
        return "PYG_EDGEDOT_TRITON=0 is set"
    try:
        from .ops import edge_dot_triton
    except Exception as err:  # noqa: BLE001  (a broken triton install: say so, go on)
        return f"importing the Triton kernels failed: {_build.short_reason(err)}"
    return edge_dot_triton.unavailable()


def decide(build: _build.BuildResult, triton_error: Optional[str],
           groups_with_triton: Dict[str, bool], composite: Sequence[str] = (),
           cpu_only: Sequence[str] = ()) -> Table:
    """``{(group, device): Backend}`` for every op group and device."""
    table: Table = {}
    for group, has_triton in groups_with_triton.items():
        if group in composite:
            for device in DEVICES:
                table[group, device] = Backend("composite", None)
            continue
        if build.extension is not None:
            table[group, "cpu"] = Backend("cpp", None)
        else:
            table[group, "cpu"] = Backend("python", build.cpu_error)
        if group in cpu_only:
            table[group, "cuda"] = Backend("python", "this op group has no CUDA kernel")
        elif build.extension == "cuda":
            table[group, "cuda"] = Backend("cuda", None)
        elif has_triton and triton_error is None:
            table[group, "cuda"] = Backend("triton", build.cuda_error)
        elif has_triton:
            table[group, "cuda"] = Backend(
                "python", f"{build.cuda_error}, and the Triton path is unusable ({triton_error})")
        else:
            table[group, "cuda"] = Backend("python", f"{build.cuda_error}; this op group has "
                                                     "no Triton kernels")
    return table


class _Loaded(NamedTuple):
    config: Config
    build: _build.BuildResult
    triton_error: Optional[str]
    table: Table


_LOADED: Optional[_Loaded] = None
_LIBRARIES: List[torch.library.Library] = []


def _groups() -> Sequence:
    from .ops import GROUPS
    return GROUPS


def _register(table: Table, build: _build.BuildResult, groups: Sequence) -> None:
    if build.extension is None:
        lib = torch.library.Library(_build.NAMESPACE, "DEF")
        declared = _build.schemas()
        for group in groups:
            for schema in declared[group.NAME].values():
                lib.define(schema)
        _LIBRARIES.append(lib)
    lib = torch.library.Library(_build.NAMESPACE, "IMPL")
    for group in groups:
        for device, key in (("cpu", "CPU"), ("cuda", "CUDA")):
            impl = table[group.NAME, device].impl
            if impl in ("cpp", "cuda"):
                continue  # registered by the library's TORCH_LIBRARY_IMPL blocks
            impls = group.triton_impls() if impl == "triton" else group.fallback_impls()
            for name, fn in impls.items():
                lib.impl(name, fn, key)
    _LIBRARIES.append(lib)
    for group in groups:
        group.register_fake_and_autograd()


def _warn(build: _build.BuildResult, table: Table) -> None:
    if build.extension is None:
        warnings.warn(
            f"pyg_edgedot: using the slower pure-PyTorch fallback because {build.cpu_error}. "
            "To fix it, install a C++ compiler and ninja (`pip install ninja`), then run "
            "`python -m pyg_edgedot --build` to see the full build log.", stacklevel=4)
    elif torch.cuda.is_available() and table["edge_dot", "cuda"].impl == "python":
        warnings.warn(
            f"pyg_edgedot: CUDA tensors use the slower pure-PyTorch fallback because "
            f"{table['edge_dot', 'cuda'].reason}. To fix it, install the CUDA toolkit "
            f"matching torch.version.cuda={torch.version.cuda}, set CUDA_HOME, and run "
            "`python -m pyg_edgedot --build`.", stacklevel=4)


def load() -> None:
    """Build or load the extension, decide the table, register it (once per process)."""
    global _LOADED
    if _LOADED is not None:
        return
    config = Config.from_env()
    build = _build.build(config)
    triton_error = None if build.extension == "cuda" else triton_unusable(config)
    groups = _groups()
    table = decide(build, triton_error,
                   {g.NAME: hasattr(g, "triton_impls") for g in groups},
                   [g.NAME for g in groups if getattr(g, "COMPOSITE", False)],
                   [g.NAME for g in groups if getattr(g, "CPU_ONLY", False)])
    _register(table, build, groups)
    _LOADED = _Loaded(config, build, triton_error, table)
    _warn(build, table)


def loaded() -> _Loaded:
    """The configuration, build result and table this process uses."""
    load()
    return _LOADED


def backends() -> Dict[str, str]:
    """Which implementation each device type uses for ``edge_dot``: ``cuda``, ``triton``,
    ``cpp`` or ``python``."""
    table = loaded().table
    return {device: table["edge_dot", device].impl for device in DEVICES}
