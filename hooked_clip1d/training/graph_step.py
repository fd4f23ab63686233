"""Whole-step CUDA graphs for ``BatchedTrainer`` (``graph_step=True``): forward, backward, AdamW and the loss sum of
one global step captured as one ``torch.cuda.CUDAGraph`` and replayed.

Why: these models are tiny, so a GPU step is bound by the host. On an H100 (benchmarks/README.md, "On a GPU") a
step of 5 full models took 8 ms compiled with inductor's CUDA graphs, of which the GPU was busy 2.8 ms: the rest was
the launches outside the graphs (optimizer, gradient accumulation, input copies) and the graph-tree bookkeeping of
each call. A whole-step graph replays everything with one launch; per step the host only copies the step's batch
indices and mask into the graph's static inputs (PyTorch's "whole-network capture" recipe).

How: the first ``WARMUP`` steps after a (re)start, or after the group's membership changed, run eagerly on a side
stream (real training steps on the same static inputs, as the recipe asks); the next step is captured and every
later step replays it. The graph is dropped when members leave the stack (``StackedCLIP.keep`` replaces the
parameters). Needs a CUDA device, ``dropout_rng="fast"`` (dropout draws from the CUDA generator, which graphs
support) and one learning rate for the whole group (the fused AdamW path; per-member rates read a step count on the
host). Without ``compile`` every step computes what the eager step computes (the same kernels); with ``compile``
(issue 51 item 4) the stacked loss is inductor's (fused forward and backward kernels, compiled during the warm-up
steps, no CUDA graphs of its own) and those kernels are what the step's graph captures, optimizer included. The
batch mask is always passed, as the compiled path does. The graph receives the group's state
(``group_state.GroupState``), not the trainer, and captures again when the members or the parameters' layout change
(``StackedCLIP.layout_version``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from hooked_clip1d.training.group_state import GroupState
from hooked_clip1d.training.stacked import StackedCLIP
from hooked_clip1d.training.stacked_adamw import StackedAdamW

WARMUP = 3  # eager steps before a capture (the recipe's side-stream warm-up: cuBLAS handles, allocator, autograd)


def check_graph_step(state: GroupState, compile: bool, cudagraphs: bool = False) -> None:  # noqa: A002
    """Raise ``ValueError`` naming the first setting of a group (``state``; whether its loss is ``compile``d and
    replayed as inductor's own CUDA graphs, ``cudagraphs``) that a whole-step graph cannot take. A compiled loss is
    taken (its fused kernels are captured inside the whole-step graph); inductor's CUDA graphs are not (a graph
    inside the capture of another)."""
    if cudagraphs:
        raise ValueError(
            "graph_step=True captures the whole step itself: it takes compile=True (inductor's kernels inside the "
            "step's graph) but not cudagraphs=True (inductor's own CUDA graphs)"
        )
    if state.device.type != "cuda":
        raise ValueError(f"graph_step=True needs a CUDA device, got {state.device}")
    if state.dropout_rng != "fast":
        raise ValueError("graph_step=True needs dropout_rng='fast' (matched dropout draws on the host)")
    if len(set(state.opt.lr)) != 1:
        raise ValueError("graph_step=True needs one learning rate for the whole group (the fused AdamW path)")


#: matmul precisions of a training step (``matmul_precision``): fp32 weights and AdamW moments in every one
PRECISIONS = ("fp32", "tf32")


@contextlib.contextmanager
def matmul_precision(precision: str, device: str | torch.device) -> Iterator[None]:
    """Run the enclosed steps with fp32 matmuls (``"fp32"``) or, on a CUDA device, TF32 tensor-core matmuls
    (``"tf32"``: 10-bit mantissa products, fp32 accumulation; weights, gradients and AdamW moments stay fp32). The
    backend flags are restored on exit, so the caller's setting is unchanged. ``"tf32"`` is refused on other
    devices (a CPU's fp32 matmuls have no TF32 mode); bf16 is the other reduced precision, ``amp=True``
    (bfloat16 autocast of the towers, the CLIP head in fp32).

    Example:
        >>> with matmul_precision("fp32", "cpu"):
        ...     pass
        >>> try:
        ...     with matmul_precision("tf32", "cpu"):
        ...         pass
        ... except ValueError as e:
        ...     print(str(e)[:44])
        precision='tf32' is a CUDA matmul mode (tens
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    dev = torch.device(device)
    if precision == "fp32":
        yield
        return
    if dev.type != "cuda":
        raise ValueError(
            f"precision={precision!r} is a CUDA matmul mode (tensor cores); on {dev.type} matmuls are fp32: use "
            "'fp32' (or amp=True for bfloat16 autocast)"
        )
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def set_flat(group: Any, on: bool) -> None:
    """Switch a group (a ``BatchedTrainer`` or its ``GroupState``: anything with the stacked ``model`` and its
    ``opt``) between the per-tensor layout and the flat one (``StackedCLIP.flat_layout``: fused QKV views, one fused
    AdamW call over flat buffers), keeping weights and AdamW state; a captured whole-step graph captures again (the
    layout changed). The default is flat on a GPU, per tensor on a CPU; both compute the same step (bit for bit on
    the CPU, ``tests/test_fast_step.py``).

    Example:
        >>> from hooked_clip1d.model.clip import CLIPConfig
        >>> from hooked_clip1d.settings import DataConfig, TrainConfig
        >>> from hooked_clip1d.training.batched import BatchedTrainer, Member
        >>> cfg = CLIPConfig.from_preset("simplified", n_labels=6, d_model=16, d_head=4, n_heads=2)
        >>> bt = BatchedTrainer([Member(cfg, DataConfig(n_labels=6, n_heldout=2, n2=2), TrainConfig())], None)
        >>> set_flat(bt, True); bt.state.model.flat_data is not None, bt.state.opt.flat_param is not None
        (True, True)
    """
    st = getattr(group, "state", group)  # a BatchedTrainer's GroupState, or the state itself
    model: StackedCLIP = st.model
    opt: StackedAdamW = st.opt
    model.flat_layout(on)
    opt.rebind(flat=on)


class StepGraph:
    """The captured step of one batched group and its static inputs (see the module docstring)."""

    def __init__(self) -> None:
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key: tuple[Any, ...] | None = None  # the active members and parameter layout it was captured for
        self.warm = 0  # eager steps taken since the last (re)start or membership change
        self.flat: torch.Tensor | None = None  # [K * bs] row indices into the padded pair tables
        self.valid: torch.Tensor | None = None  # [K, bs] batch mask

    def _body(self, state: GroupState, autocast: Any, loss_fn: Any) -> None:
        state.opt.zero_grad()  # in the graph: the flat gradient buffer (StackedAdamW) is zeroed by every replay
        with autocast:
            losses = state.losses(loss_fn, self.flat, self.valid, None)
        losses.sum().backward()
        state.opt.step()
        state.loss_sum += losses.detach().float()

    def steps(
        self,
        state: GroupState,
        idx: torch.Tensor,
        valid: torch.Tensor,
        autocast: Any,
        should_stop: Any,
        loss_fn: Any = None,
    ) -> int:
        """Take the steps of one chunk of ``state``'s group (``idx`` [S, K, bs], ``valid`` [S, K, bs]); stop early
        once ``should_stop()``; return the number taken. ``loss_fn``: the stacked loss (``state.model.loss``, or its
        ``torch.compile`` without CUDA graphs: its kernels are then compiled in the warm-up steps and captured)."""
        loss_fn = loss_fn if loss_fn is not None else state.model.loss
        key = (tuple(state.active), state.model.layout_version)
        if key != self.key:  # first chunk, members left the stack, or a new layout: new shapes, new parameters
            self.graph, self.key, self.warm = None, key, 0
            self.flat = torch.empty(idx.shape[1] * idx.shape[2], dtype=torch.long, device=state.device)
            self.valid = torch.empty(idx.shape[1:], dtype=torch.bool, device=state.device)
        n = idx.shape[0]
        for j in range(n):
            self.flat.copy_(idx[j].view(-1), non_blocking=True)
            self.valid.copy_(valid[j], non_blocking=True)
            if self.graph is not None:
                self.graph.replay()
            elif self.warm < WARMUP:
                side = torch.cuda.Stream(state.device)
                side.wait_stream(torch.cuda.current_stream(state.device))
                with torch.cuda.stream(side):
                    state.opt.zero_grad()
                    self._body(state, autocast, loss_fn)
                torch.cuda.current_stream(state.device).wait_stream(side)
                self.warm += 1
            else:  # capture this step, then replay it: capturing records the kernels without running them
                state.opt.zero_grad()  # gradients come back allocated from the graph's pool, rewritten each replay
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    self._body(state, autocast, loss_fn)
                graph.replay()
                self.graph = graph
            state.step += 1
            if should_stop():
                return j + 1
        return n
