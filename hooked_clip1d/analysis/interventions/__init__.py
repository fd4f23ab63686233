"""Interventions on a hooked CLIP, the toolkit any user runs: score decomposition and term ablations, activation
patching (TransformerLens's too), interchange, knockout, probes, caption attributions, sparse autoencoders.
Never imports ``analysis.mechanism`` (this paper's readings). The public names are exported by
``hooked_clip1d.analysis``.
"""
