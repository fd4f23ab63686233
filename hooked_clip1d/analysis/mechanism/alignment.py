"""Do the two towers' label embeddings agree up to a rotation? (Paper Sec. 6.2, Fig. 7).

Both towers embed the object labels 1..Ntot with their own ``W_E``. Raw cosine similarity between a label's
vision and text embeddings shows little alignment (Fig. 7a). The paper fits a rotation on labels 1-15 and finds
markedly stronger alignment on the held-out labels 16-20 (Fig. 7b). ``embedding_alignment`` does this fit
(orthogonal Procrustes: ``R = argmin ||T R - V||_F`` over (semi-)orthogonal ``R``, i.e. ``R = U W^T`` for
``T^T V = U S W^T``) and scores it on another label set against two baselines:

- ``raw``: cosines of the embeddings as they are (needs equal widths; otherwise reported as None);
- ``shuffled``: Procrustes fitted on a random relabelling of the fit labels (mean over ``n_shuffles``), the
  chance level of a rotation fitted to few points in a wide space (15 points in 128 dims leave most of the
  rotation unconstrained).

That leftover freedom makes ``procrustes``' answer depend on the null-space basis an SVD returns;
``canonical_procrustes`` (``embedding_alignment(..., rotation="canonical")``) picks, of all the solutions, the one
closest to the identity, the same on every run (Fig. 7 in ``reproduce``). The label tables are not identifiable on
their own either: a constant moved from every row of ``W_E`` into every row of ``W_pos`` changes no output, which
``center=True`` removes.

Scores on the test labels (text rows vs vision columns of the cosine matrix): ``matched_cos`` (mean diagonal),
``unmatched_cos`` (mean off-diagonal), ``acc`` (fraction of text labels whose most similar vision label among
the test labels is the right one; chance 1/n_test) and ``acc_all`` (the same among all labels; chance 1/Ntot).

Example:
    >>> from hooked_clip1d import CLIP1D, CLIPConfig
    >>> m = CLIP1D(CLIPConfig.from_preset("simplified", n_labels=8), seed=0)
    >>> res = embedding_alignment(m, fit_labels=range(1, 7), test_labels=[7, 8])
    >>> sorted(res["procrustes"])
    ['acc', 'acc_all', 'fit_acc', 'fit_matched_cos', 'matched_cos', 'unmatched_cos']
    >>> res["procrustes"]["fit_matched_cos"] > res["raw"]["fit_matched_cos"]
    True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float

from hooked_clip1d.model.captioning import check_contrastive
from hooked_clip1d.model.clip import CLIP1D
from hooked_clip1d.settings.checks import check_int, check_label_list


def procrustes(
    source: Float[torch.Tensor, "n d_source"], target: Float[torch.Tensor, "n d_target"]
) -> Float[torch.Tensor, "d_source d_target"]:
    """The (semi-)orthogonal ``R`` minimising ``||source @ R - target||_F`` (orthogonal Procrustes).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.randn(10, 4, generator=g)
        >>> q, _ = torch.linalg.qr(torch.randn(4, 4, generator=g))
        >>> torch.allclose(procrustes(x, x @ q), q, atol=1e-5)
        True
    """
    if source.ndim != 2 or target.ndim != 2 or source.shape[0] != target.shape[0]:
        raise ValueError(
            f"procrustes needs [n, d] matrices with the same n; got {tuple(source.shape)}, {tuple(target.shape)}"
        )
    U, _, Vh = torch.linalg.svd(source.T @ target, full_matrices=False)
    return U @ Vh


def canonical_procrustes(
    source: Float[torch.Tensor, "n d_source"], target: Float[torch.Tensor, "n d_target"], complete: bool = True
) -> Float[torch.Tensor, "d_source d_target"]:
    """The Procrustes solution made unique: of every (semi-)orthogonal ``R`` minimising ``||source @ R - target||_F``,
    the one closest to the identity (largest ``trace(R)``, the identity truncated where the widths differ).

    With fewer points than dimensions (15 labels in 128 dims) Procrustes fixes ``R`` only on the span the points
    occupy; ``procrustes`` completes it with whatever null-space basis the SVD returns, which can change between
    runs. Here ``R = U_r W_r^T`` on the span (``source^T target = U S W^T``, r = its numerical rank) plus, on the
    orthogonal complements, the isometry closest to the identity: a function of the two complements alone, not of
    the basis an SVD picks for them. ``complete=False`` returns the span part only (a partial isometry of rank r).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> a, b = torch.randn(3, 6, generator=g), torch.randn(3, 6, generator=g)
        >>> r = canonical_procrustes(a, b)
        >>> bool(torch.allclose(r.T @ r, torch.eye(6), atol=1e-5))  # orthogonal
        True
        >>> bool(torch.allclose(a @ r, a @ procrustes(a, b), atol=1e-5))  # the same fit on the points
        True
        >>> q, _ = torch.linalg.qr(torch.randn(6, 6, generator=g))  # rotating the problem rotates the answer
        >>> bool(torch.allclose(canonical_procrustes(a @ q, b @ q), q.T @ r @ q, atol=1e-5))
        True
    """
    if source.ndim != 2 or target.ndim != 2 or source.shape[0] != target.shape[0]:
        raise ValueError(
            f"canonical_procrustes needs [n, d] matrices with the same n; got {tuple(source.shape)}, "
            f"{tuple(target.shape)}"
        )
    if not (bool(torch.isfinite(source).all()) and bool(torch.isfinite(target).all())):
        raise ValueError("canonical_procrustes needs finite inputs (got NaN or inf)")
    A, B = source.detach().double(), target.detach().double()
    M = A.T @ B  # [ds, dt]
    U, S, Vh = torch.linalg.svd(M, full_matrices=True)
    tol = (S.max() if S.numel() else torch.tensor(0.0, dtype=M.dtype)) * max(M.shape) * torch.finfo(M.dtype).eps
    r = int((S > tol).sum())
    R = U[:, :r] @ Vh[:r]
    ds, dt = M.shape
    if complete and r < min(ds, dt):
        Qu, Qw = U[:, r:], Vh[r:].T  # orthonormal bases of the two complements (any basis gives the same R)
        eye = torch.eye(ds, dt, dtype=M.dtype)
        X, _, Yh = torch.linalg.svd(Qw.T @ eye.T @ Qu, full_matrices=False)  # C = X diag Y^T; O = Y X^T
        R = R + Qu @ (Yh.T @ X.T) @ Qw.T
    return R.to(source.dtype)


def _scores(
    text: torch.Tensor, vision: torch.Tensor, fit_idx: torch.Tensor, test_idx: torch.Tensor
) -> dict[str, float]:
    """Scores of an aligned pair of [n_labels, d] embedding tables (row i of each = label i + 1)."""
    cos = F.normalize(text, dim=-1) @ F.normalize(vision, dim=-1).T  # [n_labels, n_labels]
    test = cos[test_idx][:, test_idx]
    fit = cos[fit_idx][:, fit_idx]
    n = len(test_idx)
    eye = torch.eye(n, dtype=torch.bool)
    ar = torch.arange(n)
    return {
        "matched_cos": test.diagonal().mean().item(),
        "unmatched_cos": test[~eye].mean().item() if n > 1 else float("nan"),
        "acc": (test.argmax(-1) == ar).float().mean().item(),
        "acc_all": (cos[test_idx].argmax(-1) == test_idx).float().mean().item(),
        "fit_matched_cos": fit.diagonal().mean().item(),
        "fit_acc": (fit.argmax(-1) == torch.arange(len(fit_idx))).float().mean().item(),
    }


def _label_list(labels: Iterable[int], n_labels: int, what: str) -> list[int]:
    return check_label_list(labels, n_labels, what)


def _fit_test_labels(
    model: CLIP1D, fit_labels: Iterable[int] | None, test_labels: Iterable[int] | None
) -> tuple[list[int], list[int]]:
    """``embedding_alignment``'s fit and test labels, checked: the paper's split (1..Npair / the held-out labels,
    from ``model.data_config``; without one the last quarter is held out) where not given."""
    n = model.cfg.n_labels
    if fit_labels is None or test_labels is None:
        dc = model.data_config
        n_pair = dc.n_pair if dc is not None else n - max(1, n // 4)
        fit_labels = range(1, n_pair + 1) if fit_labels is None else fit_labels
        test_labels = range(n_pair + 1, n + 1) if test_labels is None else test_labels
    fit = _label_list(fit_labels, n, "fit_labels")
    test = _label_list(test_labels, n, "test_labels")
    if len(fit) < 2:
        raise ValueError(f"fit_labels: a rotation needs at least 2 labels to fit, got {fit}")
    both = sorted(set(fit) & set(test))
    if both:  # a held-out score on labels the rotation was fitted on measures the fit, not its transfer
        raise ValueError(f"fit_labels and test_labels overlap on {both}: the test labels must be held out of the fit")
    return fit, test


@torch.no_grad()
def embedding_alignment(
    model: CLIP1D,
    fit_labels: Iterable[int] | None = None,
    test_labels: Iterable[int] | None = None,
    center: bool = False,
    project_text: bool = False,
    n_shuffles: int = 20,
    seed: int = 0,
    *,
    rotation: str = "procrustes",
) -> dict[str, Any]:
    """Fit a rotation from the text to the vision label embeddings on ``fit_labels``; score it on ``test_labels``.

    Defaults follow the paper: fit on the labels of the two-object training pairs (1..Npair, i.e. 1-15 for
    Ntot = 20) and test on the held-out labels (16-20), read from ``model.data_config``; without one, the last
    quarter of the labels is held out. ``center`` subtracts each table's mean over the fit labels first (the paper
    does not; off by default). ``project_text`` maps the text embeddings through the CLIP text projection
    ``W_proj`` first (the space the two towers' outputs are compared in). ``rotation`` picks the fit:
    ``"procrustes"`` (``procrustes``: unique only on the fit labels' span), ``"canonical"`` (``canonical_procrustes``:
    the solution closest to the identity, the same on every run) or ``"span"`` (its span part alone); the shuffled
    control uses the same fit.

    Returns a JSON-able dict: ``fit_labels``, ``test_labels``; ``raw``, ``procrustes`` and ``shuffled`` score
    dicts (see the module docstring; ``raw`` is None when the widths differ); ``cos_raw`` and ``cos_procrustes``,
    the full [Ntot, Ntot] text x vision cosine matrices as nested lists (Fig. 7a, b); and ``orthogonality_error``,
    ``max |R^T R - I|`` of the fitted map.
    """
    if not isinstance(model, CLIP1D):
        raise TypeError(f"embedding_alignment needs a CLIP1D (both towers), got {type(model).__name__}")
    n = model.cfg.n_labels
    fit, test = _fit_test_labels(model, fit_labels, test_labels)
    n_shuffles = check_int(n_shuffles, "n_shuffles", minimum=0)
    fits = {
        "procrustes": procrustes,
        "canonical": canonical_procrustes,
        "span": lambda a, b: canonical_procrustes(a, b, complete=False),
    }
    if rotation not in fits:
        raise ValueError(f"rotation must be one of {sorted(fits)}, got {rotation!r}")
    fit_rotation = fits[rotation]
    V = model.vision.W_E[1 : n + 1].detach().float().cpu()  # label i at row i - 1 (same ids in both towers)
    T = model.text.W_E[1 : n + 1].detach().float().cpu()
    if project_text:
        check_contrastive(model, "embedding_alignment(project_text=True)")
        T = T @ model.W_proj.detach().float().cpu()
    fit_idx, test_idx = torch.tensor(fit) - 1, torch.tensor(test) - 1
    if center:
        V = V - V[fit_idx].mean(0)
        T = T - T[fit_idx].mean(0)
    R = fit_rotation(T[fit_idx], V[fit_idx])
    eye = torch.eye(R.shape[0] if R.shape[0] <= R.shape[1] else R.shape[1])
    ortho = (R @ R.T - eye).abs().max() if R.shape[0] <= R.shape[1] else (R.T @ R - eye).abs().max()
    gen = torch.Generator().manual_seed(seed)
    shuffled: dict[str, float] | None = None
    if n_shuffles:
        runs = []
        for _ in range(n_shuffles):
            perm = fit_idx[torch.randperm(len(fit_idx), generator=gen)]
            runs.append(_scores(T @ fit_rotation(T[fit_idx], V[perm]), V, fit_idx, test_idx))
        shuffled = {k: sum(r[k] for r in runs) / n_shuffles for k in runs[0]}
    same_width = T.shape[1] == V.shape[1]
    cos_raw = F.normalize(T, dim=-1) @ F.normalize(V, dim=-1).T if same_width else None
    return {
        "fit_labels": fit,
        "test_labels": test,
        "raw": _scores(T, V, fit_idx, test_idx) if same_width else None,
        "procrustes": _scores(T @ R, V, fit_idx, test_idx),
        "shuffled": shuffled,
        "cos_raw": cos_raw.tolist() if cos_raw is not None else None,
        "cos_procrustes": (F.normalize(T @ R, dim=-1) @ F.normalize(V, dim=-1).T).tolist(),
        "orthogonality_error": float(ortho),
        "center": center,
        "project_text": project_text,
        "rotation": rotation,
    }
