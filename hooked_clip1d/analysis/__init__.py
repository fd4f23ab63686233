"""Mechanistic analyses as hook factories and functions of an ``ActivationCache``, in three wings with a one-way rule
(``tests/test_architecture.py`` enforces it: ``interventions`` and ``circuits`` never import ``mechanism``; nothing
in ``analysis`` imports ``training``). Every public name is exported here, whatever its wing.

Beside the wings, what all three use:

- ``hooks``: the general-purpose hook factories (``patch_hook``, ``add_hook``, ``swap_slots_hook``,
  ``zero_heads_hooks``, ``knockout_hooks``, ``splice_hook``), the ``Hook`` / ``Hooks`` / ``Metric`` aliases and the
  checks the analyses share.
- ``metrics``: CLIP-similarity beliefs (true caption vs its left/right swap) and paired inputs.

``interventions/``: the toolkit any hooked-CLIP user runs, paper or not.

- ``decompose``: attention scores split over residual components at any layer (Eq. 1-2, App. D-E), Fig. 13 shares.
- ``terms``: ``ablate_terms``, hooks that remove score terms (EP, PE, PP, BP, ...) or VP during a forward pass.
- ``term_ablation``: mean and resample ablation of score terms (beside ``hooks``' mean / resample factories).
- ``ablation``: ``evaluate_ablations``, retrieval accuracy under each ablation condition (Fig. 5e, 16, 17).
- ``patching``: activation patching, mirror-swap / caption-swap patching (re-exports the three modules below).
- ``tl_adapter``: ``tl_patching``, the same patching effect through ``transformer_lens.patching``.
- ``interchange``: interchange interventions on the text tower (``text_interchange``).
- ``knockout``: attention-edge knockout (``knockout_sweep``).
- ``probes``: linear probes per layer with held-out scores and shuffled-label controls.
- ``captions``: caption directions (CLIP's unembedding), direct attribution of residual components to caption
  logits, the CLS logit lens.
- ``sae``: sparse autoencoders on any hook point (collect, train ReLU / top-k, splice back in).

``circuits/``: circuit discovery.

- ``graph``: the writer / port graph of a tower or the whole CLIP that circuit discovery scores, the patching
  ``Task`` (``mirror_task``) and edge interventions.
- ``attribution``: the ``Attribution`` result and what node and edge attribution share (runs, AtP*'s QK fix and
  GradDrop); ``node_attribution``: exact node patching, AtP, AtP*; ``edge_attribution``: exact edge patching, EAP,
  EAP-IG; ``path_patching``: a sender's effect through chosen receivers only.
- ``methods``: the registry of attribution methods (``METHODS``, name -> method; the benchmark iterates it) and
  ``check_attribution`` (a sample patched exactly; a warning when a gradient method disagrees).
- ``scores``: ground-truth circuits as data, faithfulness / completeness / minimality, ACDC-style pruning, and ROC
  AUC / precision at k / rank correlation of a method against a ground truth.

``mechanism/``: this paper's readings.

- ``heads``: CLS -> object left/right bias (Fig. 4c), delta-label vs delta-p.e. and head roles (Fig. 5c, d), text
  EOT bias (Fig. 6).
- ``rope``: the RoPE mechanism: consistency rates, Pi_bias, key PCA, effective rank, rho (App. I, Fig. 19).
- ``alignment``: Procrustes alignment of vision and text label embeddings (Fig. 7).
- ``spatial_ids``: spatial IDs per position and steering by adding ID differences.
- ``report``: the EP-gradient mechanism as one report per model (the recipe study's checks), the unseen-pair probe
  set, the CLS row's identifiability (``move_cls_embedding``, ``ablate_cls_key_position``), where a CLS-row gradient
  comes from (``gradient_sources``), a single-head run's bias and gradient (``single_head_mechanism``).
- ``dynamics``: the mechanism over a training trajectory (emergence rows, the restated checks M1-M4, windows).
- ``dissolution``: the contrastive loss and its gradient split by whether an item's caption is shared in its batch
  (``caption_split``; record x18).
- ``reparametrize``: output-preserving reparametrisations and the invariance audit.

Pruning and retraining (App. K, Fig. 22: ``head_subset_sweep``) is training: ``hooked_clip1d.training.retrain``.
"""

import sys
from typing import Any, no_type_check

from hooked_clip1d.analysis.circuits.attribution import Attribution
from hooked_clip1d.analysis.circuits.edge_attribution import eap, eap_ig, exact_edge_patching
from hooked_clip1d.analysis.circuits.graph import build_graph
from hooked_clip1d.analysis.circuits.methods import METHODS, check_attribution
from hooked_clip1d.analysis.circuits.node_attribution import atp, atp_star, exact_patching
from hooked_clip1d.analysis.circuits.path_patching import path_patch, path_patching
from hooked_clip1d.analysis.circuits.scores import (
    Circuit,
    acdc,
    circuit_scores,
    ground_truth_circuit,
    precision_at_k,
    rank_correlation,
    roc_auc,
    score_method,
)
from hooked_clip1d.analysis.circuits.task import Task, mirror_task, run_with_edges
from hooked_clip1d.analysis.hooks import (
    add_hook,
    knockout_hooks,
    mean_ablation_hooks,
    mean_heads_hooks,
    patch_hook,
    resample_ablation_hooks,
    resample_heads_hooks,
    splice_hook,
    swap_slots_hook,
    zero_heads_hooks,
)
from hooked_clip1d.analysis.interventions.ablation import PAPER_ABLATIONS, evaluate_ablations, format_ablations
from hooked_clip1d.analysis.interventions.captions import caption_attributions, caption_directions, cls_logit_lens
from hooked_clip1d.analysis.interventions.decompose import (
    TOKEN_POSITION_TERMS,
    WEIGHT_BIAS_TERMS,
    ScoreDecomposition,
    decompose_attention_scores,
    residual_components,
    row_std_shares,
)
from hooked_clip1d.analysis.interventions.interchange import text_interchange
from hooked_clip1d.analysis.interventions.knockout import knockout_sweep
from hooked_clip1d.analysis.interventions.patching import caption_swap_patching, mirror_swap_patching, patch_sweep
from hooked_clip1d.analysis.interventions.probes import fit_probe, probe_sweep, probe_targets
from hooked_clip1d.analysis.interventions.sae import SparseAutoencoder, collect_activations, train_sae
from hooked_clip1d.analysis.interventions.term_ablation import mean_ablate_terms, resample_ablate_terms
from hooked_clip1d.analysis.interventions.terms import (
    ABLATABLE_TERMS,
    POSITIONAL_TERMS,
    SCORE_TERMS,
    ablate_terms,
    attention_terms,
)
from hooked_clip1d.analysis.interventions.tl_adapter import tl_patching
from hooked_clip1d.analysis.mechanism.alignment import embedding_alignment, procrustes
from hooked_clip1d.analysis.mechanism.dissolution import caption_split
from hooked_clip1d.analysis.mechanism.heads import (
    classify_head_roles,
    cls_object_bias,
    label_pe_deltas,
    pair_captions,
    text_eot_bias,
    to_jsonable,
)
from hooked_clip1d.analysis.mechanism.report import (
    ablate_cls_key_position,
    gradient_sources,
    mechanism_report,
    move_cls_embedding,
    single_head_mechanism,
    spearman_position,
    unseen_probe,
)
from hooked_clip1d.analysis.mechanism.rope import consistency_condition, key_effective_rank, rope_mechanism
from hooked_clip1d.analysis.mechanism.spatial_ids import steer_text, steer_vision, text_role_ids, vision_spatial_ids
from hooked_clip1d.analysis.metrics import caption_belief, image_belief, mirror_images, pair_inputs

__all__ = [
    "ABLATABLE_TERMS",
    "METHODS",
    "Attribution",
    "Circuit",
    "PAPER_ABLATIONS",
    "POSITIONAL_TERMS",
    "SCORE_TERMS",
    "ScoreDecomposition",
    "SparseAutoencoder",
    "TOKEN_POSITION_TERMS",
    "Task",
    "WEIGHT_BIAS_TERMS",
    "ablate_cls_key_position",
    "ablate_terms",
    "acdc",
    "add_hook",
    "atp",
    "atp_star",
    "attention_terms",
    "build_graph",
    "check_attribution",
    "caption_attributions",
    "caption_belief",
    "caption_split",
    "caption_directions",
    "caption_swap_patching",
    "circuit_scores",
    "classify_head_roles",
    "cls_logit_lens",
    "cls_object_bias",
    "collect_activations",
    "consistency_condition",
    "decompose_attention_scores",
    "eap",
    "eap_ig",
    "embedding_alignment",
    "evaluate_ablations",
    "exact_edge_patching",
    "exact_patching",
    "fit_probe",
    "format_ablations",
    "gradient_sources",
    "ground_truth_circuit",
    "image_belief",
    "key_effective_rank",
    "knockout_hooks",
    "knockout_sweep",
    "label_pe_deltas",
    "mean_ablate_terms",
    "mean_ablation_hooks",
    "mean_heads_hooks",
    "mechanism_report",
    "mirror_images",
    "mirror_swap_patching",
    "mirror_task",
    "move_cls_embedding",
    "pair_captions",
    "pair_inputs",
    "patch_hook",
    "patch_sweep",
    "path_patch",
    "path_patching",
    "precision_at_k",
    "probe_sweep",
    "probe_targets",
    "procrustes",
    "rank_correlation",
    "resample_ablate_terms",
    "resample_ablation_hooks",
    "resample_heads_hooks",
    "residual_components",
    "roc_auc",
    "rope_mechanism",
    "row_std_shares",
    "run_with_edges",
    "score_method",
    "single_head_mechanism",
    "spearman_position",
    "splice_hook",
    "steer_text",
    "steer_vision",
    "swap_slots_hook",
    "text_eot_bias",
    "text_interchange",
    "text_role_ids",
    "tl_patching",
    "to_jsonable",
    "train_sae",
    "unseen_probe",
    "vision_spatial_ids",
    "zero_heads_hooks",
]


def _from_import(frame: Any) -> bool:
    """Whether ``frame`` is executing ``from ... import name`` (its current instruction is IMPORT_FROM)."""
    import dis

    code = frame.f_code.co_code if frame is not None else b""
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == dis.opmap.get("IMPORT_FROM")


@no_type_check  # not wrapped by the tests' type checkers: it reads its caller's frame
def __getattr__(name: str) -> object:
    if name == "head_subset_sweep":
        hint = (
            "hooked_clip1d.analysis.head_subset_sweep moved to hooked_clip1d.training.retrain (it retrains heads; "
            "analysis never imports training): from hooked_clip1d.training.retrain import head_subset_sweep"
        )
        # ``from ... import`` turns an AttributeError into a bare "cannot import name" ImportError, dropping the
        # hint; an ImportError passes through it. Elsewhere (getattr, hasattr) it stays an AttributeError.
        if _from_import(sys._getframe(1)):
            raise ImportError(hint, name=__name__)
        raise AttributeError(hint)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
