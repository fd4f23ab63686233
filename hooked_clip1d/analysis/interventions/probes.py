"""Linear probes of object position, identity and relation per layer, with a held-out score (Binding §5.2, App. G).

A probe is a linear classifier on one residual-stream vector per input (at the readout token, an object token or
a caption slot), trained on a random ``1 - test_fraction`` of the inputs and scored on the rest. Plain torch:
multinomial logistic regression (L-BFGS, L2 penalty) or closed-form ridge regression on one-hot targets; features
are standardised with the training mean and standard deviation. ``probe_sweep`` fits one probe per depth of the
residual stream (``embed``, ``after L0``, ...) and, as a control, one on randomly permuted labels, which must
score at chance on the test split (``chance`` = accuracy of always predicting the most frequent test class).

Targets (``probe_targets``), computed from the tokens themselves:

- vision (two-object images): ``left_pos`` / ``right_pos`` (pixel index of the left / right object),
  ``left_label`` / ``right_label``, ``relation`` (1 if the smaller label is on the left, i.e. what a mirror
  flips), ``distance`` (p2 - p1);
- text (``X rel Y`` captions): ``subject`` / ``object`` (labels in slots 0 / 2), ``relation`` (1 if the subject
  is the smaller label; for ``left of`` captions, the vision ``relation`` of the image described).

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> from hooked_clip1d.analysis.metrics import pair_grid
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=4), seed=0).eval()
    >>> imgs, _, _ = pair_grid(m.vision.cfg.vocab)
    >>> sweep = probe_sweep(m.vision, imgs, probe_targets(m.vision, imgs, "left_pos"), position="left_object")
    >>> sweep.labels, round(sweep.test_acc[0].item(), 2)  # position is linearly readable from the embeddings
    (['embed', 'after L0'], 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int

from hooked_clip1d.analysis.hooks import check_eval, check_tower, depth_labels, residual_hook_names
from hooked_clip1d.analysis.metrics import check_pair_captions, check_pair_images, object_token_positions
from hooked_clip1d.model.encoders import HookedEncoder, HookedVisionEncoder
from hooked_clip1d.settings.checks import check_int, check_real

VISION_TARGETS = ("left_pos", "right_pos", "left_label", "right_label", "relation", "distance")
TEXT_TARGETS = ("subject", "object", "relation")


@dataclass
class ProbeResult:
    """A fitted linear probe and its scores. ``classes[i]`` is the label of output column ``i``."""

    train_acc: float
    test_acc: float
    chance: float  # accuracy of always predicting the most frequent test class
    n_train: int
    n_test: int
    classes: torch.Tensor  # [n_classes] original label values
    weight: torch.Tensor  # [d, n_classes], on standardised features
    bias: torch.Tensor  # [n_classes]
    mean: torch.Tensor  # [d] feature standardisation
    std: torch.Tensor  # [d]

    def predict(self, X: Float[torch.Tensor, "n d"]) -> Int[torch.Tensor, " n"]:
        """Predicted labels (original values) for features ``X``."""
        Z = (X.to(self.mean.dtype) - self.mean) / self.std
        return self.classes[(Z @ self.weight + self.bias).argmax(-1)]


def _split(n: int, test_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    n_test = int(round(n * test_fraction))
    if n_test < 1 or n - n_test < 2:
        raise ValueError(f"{n} examples are too few for a train/test split with test_fraction={test_fraction}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[n_test:], perm[:n_test]


def fit_probe(
    X: Float[torch.Tensor, "n d"],
    y: Int[torch.Tensor, " n"],
    test_fraction: float = 0.3,
    seed: int = 0,
    method: Literal["logistic", "ridge"] = "logistic",
    l2: float = 1e-3,
    max_iter: int = 100,
) -> ProbeResult:
    """Fit a linear probe on a random train split of ``(X, y)`` and score it on the held-out rest.

    ``l2`` is the penalty on the weights (per example for ``logistic``; ``l2 * n_train`` on ``X^T X`` for
    ``ridge``).

    >>> X = torch.randn(200, 5, generator=torch.Generator().manual_seed(0))
    >>> r = fit_probe(X, (X[:, 0] > 0).long())
    >>> r.test_acc > 0.9, r.n_test
    (True, 60)
    """
    if not isinstance(X, torch.Tensor) or not X.is_floating_point() or X.ndim != 2:
        raise TypeError("X must be a float tensor [n, d]")
    if not isinstance(y, torch.Tensor) or y.is_floating_point() or y.ndim != 1:
        raise TypeError("y must be an integer tensor [n]")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    if method not in ("logistic", "ridge"):
        raise ValueError(f"method must be 'logistic' or 'ridge', got {method!r}")
    l2 = check_real(l2, "fit_probe: l2")  # NaN gave NaN weights and an accuracy
    max_iter = check_int(max_iter, "fit_probe: max_iter")  # 0 returned an untrained probe's accuracy
    if not bool(torch.isfinite(X).all()):  # one NaN cell took the probe to chance: "not decodable"
        raise ValueError("fit_probe: X holds NaN or inf (the activations or a hook?)")
    X = X.detach().double().cpu()
    y = y.detach().cpu()
    classes, yi = torch.unique(y, return_inverse=True)
    C = len(classes)
    if C < 2:
        raise ValueError(f"the target has a single class ({classes.tolist()}); there is nothing to probe")
    tr, te = _split(X.shape[0], test_fraction, seed)
    mean = X[tr].mean(0)
    std = X[tr].std(0).clamp(min=1e-6)
    Z = (X - mean) / std
    Ztr, ytr = Z[tr], yi[tr]
    d = Z.shape[1]
    if method == "ridge":
        Y = F.one_hot(ytr, C).double()
        Ym = Y.mean(0)
        A = Ztr.T @ Ztr + l2 * len(tr) * torch.eye(d, dtype=Z.dtype) + 1e-9 * torch.eye(d, dtype=Z.dtype)
        W = torch.linalg.solve(A, Ztr.T @ (Y - Ym))
        b = Ym
    else:
        W = torch.zeros(d, C, dtype=Z.dtype, requires_grad=True)
        b = torch.zeros(C, dtype=Z.dtype, requires_grad=True)
        opt = torch.optim.LBFGS([W, b], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = F.cross_entropy(Ztr @ W + b, ytr) + l2 * (W * W).sum()
            loss.backward()
            return loss

        with torch.enable_grad():
            opt.step(closure)
        W, b = W.detach(), b.detach()

    def acc(idx: torch.Tensor) -> float:
        return float(((Z[idx] @ W + b).argmax(-1) == yi[idx]).double().mean())

    counts = torch.bincount(yi[te], minlength=C)
    return ProbeResult(
        train_acc=acc(tr),
        test_acc=acc(te),
        chance=float(counts.max()) / len(te),
        n_train=len(tr),
        n_test=len(te),
        classes=classes,
        weight=W,
        bias=b,
        mean=mean,
        std=std,
    )


def _is_vision(tower: HookedEncoder) -> bool:
    return isinstance(tower, HookedVisionEncoder)


def probe_targets(
    tower: HookedEncoder, tokens: Int[torch.Tensor, "batch pos"], name: str
) -> Int[torch.Tensor, " batch"]:
    """Probe labels computed from the inputs (see the module docstring for the names).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0)
    >>> imgs = m.vision.to_tokens(["C 1 . 2 . . . . . . .", "C . 4 . . . 3 . . . ."])
    >>> probe_targets(m.vision, imgs, "left_pos").tolist(), probe_targets(m.vision, imgs, "relation").tolist()
    ([0, 1], [1, 0])
    """
    check_tower(tower)
    tower.validate_tokens(tokens)
    if _is_vision(tower):
        if name not in VISION_TARGETS:
            raise ValueError(f"unknown vision probe target {name!r}; known: {list(VISION_TARGETS)}")
        pos = object_token_positions(tokens)
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        left, right = tokens[rows, pos[:, 0]], tokens[rows, pos[:, 1]]
        out = {
            "left_pos": lambda: pos[:, 0] - 1,
            "right_pos": lambda: pos[:, 1] - 1,
            "left_label": lambda: left,
            "right_label": lambda: right,
            "relation": lambda: (left < right).long(),
            "distance": lambda: pos[:, 1] - pos[:, 0],
        }[name]()
        return out.long()
    if name not in TEXT_TARGETS:
        raise ValueError(f"unknown text probe target {name!r}; known: {list(TEXT_TARGETS)}")
    check_pair_captions(tokens, tower.cfg.vocab)
    return {"subject": tokens[:, 0], "object": tokens[:, 2], "relation": (tokens[:, 0] < tokens[:, 2]).long()}[name]


def _positions(tower: HookedEncoder, tokens: torch.Tensor, position: Any) -> torch.Tensor:
    b, P = tokens.shape
    if isinstance(position, int) and not isinstance(position, bool):
        if not 0 <= position < P:
            raise ValueError(f"position {position} is outside 0..{P - 1}")
        return torch.full((b,), position, dtype=torch.long, device=tokens.device)
    if isinstance(position, torch.Tensor):
        if position.shape != (b,) or position.is_floating_point() or position.dtype == torch.bool:
            raise ValueError(f"a position tensor must be integer [batch={b}], got {tuple(position.shape)}")
        out_of_range = ((position < 0) | (position >= P)).nonzero().flatten().tolist()
        if out_of_range:  # a negative one read from the end (-1: the last position), as the int form refuses
            raise ValueError(
                f"position tensor entries must be in 0..{P - 1}; rows {out_of_range[:5]} hold "
                f"{position[out_of_range[:5]].tolist()}"
            )
        return position.to(tokens.device).long()
    if position == "readout":
        return tower.readout_positions(tokens)
    if _is_vision(tower) and position in ("left_object", "right_object"):
        check_pair_images(tokens)
        return object_token_positions(tokens)[:, 0 if position == "left_object" else 1]
    if not _is_vision(tower) and position in ("subject", "relation", "object", "eot"):
        return torch.full((b,), ("subject", "relation", "object", "eot").index(position), device=tokens.device)
    allowed = "'readout', 'left_object', 'right_object'" if _is_vision(tower) else "'readout', 'subject', 'object'"
    raise ValueError(f"unknown position {position!r}; use an int, a [batch] tensor, or {allowed}")


@torch.no_grad()
def residual_activations(
    tower: HookedEncoder,
    tokens: Int[torch.Tensor, "batch pos"],
    position: Any = "readout",
    hook_names: list[str] | None = None,
) -> Float[torch.Tensor, "n_hooks batch d_model"]:
    """The residual vector at ``position`` (see ``probe_sweep``) of every input, at each hook (default: every depth).

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=5), seed=0).eval()
    >>> residual_activations(m.text, m.text.to_tokens(["1 is on the left of 2"]), "subject").shape
    torch.Size([2, 1, 128])
    """
    check_eval(check_tower(tower))
    tower.validate_tokens(tokens)
    hook_names = residual_hook_names(tower) if hook_names is None else list(hook_names)
    tokens = tokens.to(tower.W_E.device)
    pos = _positions(tower, tokens, position)
    _, cache = tower.run_with_cache(tokens, names_filter=hook_names)
    rows = torch.arange(tokens.shape[0], device=tokens.device)
    out = []
    for n in hook_names:
        if n not in cache:
            raise KeyError(f"hook {n!r} did not fire in {type(tower).__name__} (see .hook_names())")
        act = cache[n]
        if act.ndim != 3:
            raise ValueError(f"{n} is not a residual-stream activation [batch, pos, d_model]: {tuple(act.shape)}")
        out.append(act[rows, pos])
    return torch.stack(out)


@dataclass
class ProbeSweep:
    """Held-out probe accuracy per depth (``labels``), with the shuffled-label control."""

    tower: str
    position: str
    labels: list[str]
    test_acc: torch.Tensor  # [n_depths]
    train_acc: torch.Tensor  # [n_depths]
    chance: float
    control_acc: torch.Tensor | None  # [n_depths] test accuracy with permuted labels
    control_chance: float | None  # chance level of the permuted test labels
    n_classes: int
    n_test: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "tower": self.tower,
            "position": self.position,
            "labels": self.labels,
            "test_acc": self.test_acc.tolist(),
            "train_acc": self.train_acc.tolist(),
            "chance": self.chance,
            "control_acc": None if self.control_acc is None else self.control_acc.tolist(),
            "control_chance": self.control_chance,
            "n_classes": self.n_classes,
            "n_test": self.n_test,
        }


def probe_sweep(
    tower: HookedEncoder,
    tokens: Int[torch.Tensor, "batch pos"],
    targets: Int[torch.Tensor, " batch"],
    position: Any = "readout",
    hook_names: list[str] | None = None,
    method: Literal["logistic", "ridge"] = "logistic",
    test_fraction: float = 0.3,
    seed: int = 0,
    control: bool = True,
    l2: float = 1e-3,
) -> ProbeSweep:
    """One probe per depth of the residual stream (or per hook in ``hook_names``) predicting ``targets``.

    ``position``: ``"readout"`` (CLS / EOT), an int, a [batch] tensor, ``"left_object"`` / ``"right_object"``
    (vision) or ``"subject"`` / ``"relation"`` / ``"object"`` / ``"eot"`` (text slots). With ``control``, a second
    probe per depth is fitted on the targets permuted at random (same split): it should score at ``chance``.

    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=4), seed=0).eval()
    >>> caps = m.text.to_tokens([f"{x} is on the left of {y}" for x in range(1, 5) for y in range(1, 5) if x != y])
    >>> s = probe_sweep(m.text, caps, probe_targets(m.text, caps, "subject"), position="subject", control=False)
    >>> s.test_acc.tolist()  # the subject label is in the subject slot's embedding
    [1.0, 1.0]
    """
    if not isinstance(targets, torch.Tensor):  # a list gave a bare AttributeError ('ndim')
        raise TypeError(f"targets must be an integer tensor [batch], got {type(targets).__name__}")
    if targets.ndim != 1 or targets.shape[0] != tokens.shape[0]:
        raise ValueError(f"targets must be [batch={tokens.shape[0]}], got {tuple(targets.shape)}")
    hook_names = residual_hook_names(tower) if hook_names is None else list(hook_names)
    if not hook_names:  # a bare "stack expects a non-empty TensorList"
        raise ValueError("probe_sweep: hook_names is empty (None: every depth of the residual stream)")
    acts = residual_activations(tower, tokens, position, hook_names)
    perm_y = targets[torch.randperm(len(targets), generator=torch.Generator().manual_seed(seed + 1))]
    test, train, ctrl = [], [], []
    res = ctrl_res = None
    for a in acts:
        res = fit_probe(a, targets, test_fraction, seed, method, l2)
        test.append(res.test_acc)
        train.append(res.train_acc)
        if control:
            ctrl_res = fit_probe(a, perm_y, test_fraction, seed, method, l2)
            ctrl.append(ctrl_res.test_acc)
    assert res is not None
    labels = (
        depth_labels(tower)
        if hook_names == residual_hook_names(tower)
        else [n.replace("blocks.", "L") for n in hook_names]
    )
    return ProbeSweep(
        tower="vision" if _is_vision(tower) else "text",
        position=position if isinstance(position, str) else str(position if isinstance(position, int) else "custom"),
        labels=labels,
        test_acc=torch.tensor(test),
        train_acc=torch.tensor(train),
        chance=res.chance,
        control_acc=torch.tensor(ctrl) if control else None,
        control_chance=ctrl_res.chance if ctrl_res is not None else None,
        n_classes=len(res.classes),
        n_test=res.n_test,
    )


__all__ = [
    "TEXT_TARGETS",
    "VISION_TARGETS",
    "ProbeResult",
    "ProbeSweep",
    "fit_probe",
    "probe_sweep",
    "probe_targets",
    "residual_activations",
]
