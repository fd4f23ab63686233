"""Circuit discovery: the writer / port graph and its edge interventions, node and edge attribution (exact patching,
AtP, AtP*, EAP, EAP-IG, path patching), the methods' registry, ground-truth circuits and the scores of a method
against them. Never imports ``analysis.mechanism``. The public names are exported by ``hooked_clip1d.analysis``.
"""
