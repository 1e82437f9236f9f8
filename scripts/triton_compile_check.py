"""Compiles pyg_edgedot's Triton backward row kernel for sm_90 (H100/H200) with the installed
Triton, without a GPU, over dtypes x feature dims x the specializations a launch can get.

Triton 3.6 (the H200 image's) failed to compile the float64 variants of an earlier version
("PassManager::run failed" in TritonGPURemoveLayoutConversions). To check a Triton release
other than the installed one:

    pip install --target /tmp/t36 triton==3.6.0 --no-deps
    PYTHONPATH=/tmp/t36 python scripts/triton_compile_check.py [0|1]   # 1: SORTED payload
"""
import importlib.util, sys, inspect
import triton, triton.language as tl
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
spec = importlib.util.spec_from_file_location("t", str(__import__("pathlib").Path(__file__).resolve().parents[1] / "pyg_edgedot" / "_triton.py"))
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
import torch

def compile_rows(dtype, feat_dim, index="i64", hubs=True, prev=False, stride_div=True):
    k = m._edge_dot_grad_rows_kernel
    block_k, block_d, nw, ns = m.backward_config(feat_dim, dtype)
    fp = {torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    acc = "fp64" if dtype == torch.float64 else "fp32"
    sig = dict(perm_ptr="*i64", rowptr_ptr="*i32", seg_end_ptr="*i32", partial_ptr=f"*{acc}",
               gather_ptr=f"*{index}", gather_stride="i32", grad_ptr=f"*{fp}", grad_stride="i32",
               x_ptr=f"*{fp}", x_row_stride="i32", num_gather="i32", prev_ptr=f"*{acc}",
               out_ptr=f"*{fp}", num_rows="i32", feat_dim="i32")
    cons = dict(SEGMENT=m.HUB_SEGMENT_EDGES, HAS_HUBS=hubs, HAS_PREV=prev, SORTED=SORTED,
                ACC_DTYPE=tl.float64 if dtype == torch.float64 else tl.float32,
                BLOCK_K=block_k, BLOCK_D=block_d, ROWS_PER_GRID_X=m._ROWS_PER_GRID_X)
    names = list(inspect.signature(k.fn).parameters)
    full = {n: sig.get(n, "constexpr") for n in names}
    div = [names.index(n) for n in ("perm_ptr", "rowptr_ptr", "seg_end_ptr", "partial_ptr", "gather_ptr",
                                    "grad_ptr", "x_ptr", "prev_ptr", "out_ptr", "x_row_stride", "feat_dim")
           if not (n in ("x_row_stride", "feat_dim") and feat_dim % 16) and not (n == "x_row_stride" and not stride_div)]
    attrs = {(i,): [["tt.divisibility", 16]] for i in div}
    src = ASTSource(fn=k, signature=full, constexprs={(names.index(n),): v for n, v in cons.items()}, attrs=attrs)
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=nw, num_stages=ns))

SORTED = bool(int(sys.argv[1])) if len(sys.argv) > 1 else False
fails = []
for dtype in (torch.float64, torch.float32, torch.bfloat16):
    for d in (1, 7, 16, 33, 64, 128, 515):
        for hubs, div, idx, prev in ((True, True, "i64", False), (False, True, "i32", True),
                                     (True, False, "i64", False), (False, False, "i32", False)):
            try:
                compile_rows(dtype, d, index=idx, hubs=hubs, prev=prev, stride_div=div)
            except Exception as e:
                fails.append((dtype, d, hubs, div, str(e).splitlines()[0][:150]))
print(triton.__version__, "failures:", len(fails))
for f in fails: print(f)
