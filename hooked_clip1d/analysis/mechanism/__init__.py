"""This paper's readings: head biases and roles, RoPE, the vision/text alignment, spatial IDs, the EP-gradient mechanism
report, its dynamics over training and the output-preserving reparametrisations that audit them. May use the other
wings; they never import it. The public names are exported by ``hooked_clip1d.analysis``.
"""
