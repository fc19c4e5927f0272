"""What pre-trained encoders have learned: the statistics behind ``ptm analyse`` (docs/analysis.md).

Statistics on arrays, one purpose per module:

* :mod:`~ptmkit.analysis.contextuality`: Ethayarajh (2019): self-similarity, intra-sentence
  similarity, maximum explainable variance, the anisotropy baseline, first-PC static vectors;
  :mod:`~ptmkit.analysis.contextuality_stream` computes them over a corpus read once.
* :mod:`~ptmkit.analysis.attention_stats`: Clark et al. (2019): per-head entropy and where the
  attention goes; heads that track a dependency relation against positional baselines.
* :mod:`~ptmkit.analysis.probes` (linear / one-hidden-layer probes), :mod:`~ptmkit.analysis.controls`
  (Hewitt & Liang's control tasks, selectivity), :mod:`~ptmkit.analysis.structural` and
  :mod:`~ptmkit.analysis.trees` (Hewitt & Manning's structural probe and its scores),
  :mod:`~ptmkit.analysis.layer_weights` (Tenney et al.'s expected layer and center of gravity).
"""
