"""Which implementation serves each (op group, device), decided once, and its registration.

:func:`decide` is the one place this is decided: a pure function of the build result, the
configuration and whether Triton can run. :func:`load` calls it once per process and
registers what it says; :func:`backends`, ``python -m pyg_edgedot`` and the tests read the
same table.

Each op group (a module of :mod:`pyg_edgedot.ops`) describes itself once, read by
:func:`describe`: ``KERNELS``, the devices its compiled kernels in ``csrc/`` serve (both by
default); ``triton_impls``, present when it has Triton kernels; ``FALLBACK``, what serves a
device without a kernel: ``"python"`` (its pure-PyTorch kernels, the default) or
``"composite"`` (its implementation made of the other groups' ops, so each device still runs
their fused kernels).

* CPU: the group's C++ kernel (``cpp``) when the library was built, else its fallback.
* CUDA: its CUDA kernel (``cuda``) when the CUDA library was built; else its Triton kernels
  (``triton``) when it has them and Triton can run; else its fallback.

When nothing could be compiled, the op schemas are defined from Python (read from
``csrc/<group>.cpp``, see :func:`pyg_edgedot._build.schemas`), so the public API, autograd
and ``torch.compile`` behave the same way; one warning says why and how to fix it.
"""
import warnings
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

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


class Group(NamedTuple):
    """What an op group brings: see the module's docstring."""
    kernels: FrozenSet[str] = frozenset(DEVICES)
    triton: bool = False
    fallback: str = "python"


def describe(module) -> Group:
    """The :class:`Group` an op group's module declares."""
    return Group(frozenset(getattr(module, "KERNELS", DEVICES)), hasattr(module, "triton_impls"),
                 getattr(module, "FALLBACK", "python"))


def decide(build: _build.BuildResult, triton_error: Optional[str],
           groups: Dict[str, Group]) -> Table:
    """``{(group, device): Backend}`` for every op group and device."""
    table: Table = {}
    for name, group in groups.items():
        if "cpu" not in group.kernels:
            table[name, "cpu"] = Backend(group.fallback, "this op group has no CPU kernel")
        elif build.extension is not None:
            table[name, "cpu"] = Backend("cpp", None)
        else:
            table[name, "cpu"] = Backend(group.fallback, build.cpu_error)
        if "cuda" in group.kernels and build.extension == "cuda":
            table[name, "cuda"] = Backend("cuda", None)
        elif "cuda" not in group.kernels and not group.triton:
            table[name, "cuda"] = Backend(group.fallback, "this op group has no CUDA kernel")
        elif group.triton and triton_error is None:
            table[name, "cuda"] = Backend("triton", build.cuda_error)
        elif group.triton:
            table[name, "cuda"] = Backend(
                group.fallback,
                f"{build.cuda_error}, and the Triton path is unusable ({triton_error})")
        else:
            table[name, "cuda"] = Backend(group.fallback, f"{build.cuda_error}; this op group "
                                                          "has no Triton kernels")
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


def _warn(config: Config, build: _build.BuildResult, table: Table) -> None:
    if build.extension is None:
        fix = (" (unset it for the compiled kernels)" if config.force_fallback else
               ". To fix it, install a C++ compiler and ninja (`pip install ninja`), then run "
               "`python -m pyg_edgedot --build` to see the full build log")
        warnings.warn(
            f"pyg_edgedot: using the slower pure-PyTorch fallback because "
            f"{build.cpu_error}{fix}.", stacklevel=4)
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
    table = decide(build, triton_error, {g.NAME: describe(g) for g in groups})
    _register(table, build, groups)
    _LOADED = _Loaded(config, build, triton_error, table)
    _warn(config, build, table)


def loaded() -> _Loaded:
    """The configuration, build result and table this process uses."""
    load()
    return _LOADED


def backends() -> Dict[str, str]:
    """Which implementation each device type uses for ``edge_dot``: ``cuda``, ``triton``,
    ``cpp`` or ``python``."""
    table = loaded().table
    return {device: table["edge_dot", device].impl for device in DEVICES}
