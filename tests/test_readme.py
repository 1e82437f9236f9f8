"""README.md's "Use" section (with "Beyond the dot product") is runnable code: its ```python
blocks run, in order, in one namespace; and the argument names its snippets use for the
ranking ops are the names those functions' error messages use."""
import ast
import contextlib
import inspect
import io
import os
import re

import pytest
import torch

import pyg_edgedot

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def use_section_blocks():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^## Use\n(.*?)^## ", text, re.S | re.M)
    assert section, "README.md has no '## Use' section"
    assert "### Beyond the dot product" in section.group(1)
    blocks = re.findall(r"^```python\n(.*?)^```", section.group(1), re.S | re.M)
    assert len(blocks) >= 2, "expected the Use and Beyond snippets"
    return blocks


def test_use_section_runs():
    namespace = {}
    torch.manual_seed(0)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for number, block in enumerate(use_section_blocks()):
            exec(compile(block, f"README.md (Use, python block {number})", "exec"), namespace)
    assert "torch.Size([80])" in out.getvalue()
    assert namespace["logits"].shape == (50,) and namespace["rank"].shape == (50,)
    assert namespace["scores"].shape == (50, 21)
    # Recommendation: one top-k row per test user, PyG's metrics computed from it.
    assert namespace["top_index"].shape == (namespace["users"].numel(), 10)
    assert set(namespace["metrics"].compute()) == {"LinkPredRecall@10", "LinkPredNDCG@10"}


@pytest.mark.parametrize("function", ["rank_candidates", "score_candidates"])
def test_snippet_argument_names_are_the_error_message_names(function):
    # e.g. rank_candidates(z, z, src_index, pos_index, neg_index): an error names neg_index,
    # so the README calls it neg_index too.
    params = list(inspect.signature(getattr(pyg_edgedot, function)).parameters)
    calls = [node for block in use_section_blocks() for node in ast.walk(ast.parse(block))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == function]
    assert calls, f"the README does not call {function}"
    for call in calls:
        for position, arg in enumerate(call.args[2:], start=2):
            assert isinstance(arg, ast.Name) and arg.id == params[position], (
                f"README: {function}'s argument {position} is {ast.unparse(arg)}, but its "
                f"errors call it {params[position]}")
    z = torch.randn(4, 3)
    index = torch.zeros(2, dtype=torch.int64)
    bad = torch.full((2, 2), 9)
    args = (index, index, bad) if function == "rank_candidates" else (index, bad)
    with pytest.raises(IndexError, match=rf"^{function}: {params[len(args) + 1]} holds"):
        getattr(pyg_edgedot, function)(z, z, *args)
