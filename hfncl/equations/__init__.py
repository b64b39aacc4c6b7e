"""What methods share, for plugin authors: the equations several methods use and the toolkit around them.

- :mod:`~hfncl.equations.losses`: ranking losses on a batch's similarity matrix (triplet, soft margins);
- :mod:`~hfncl.equations.label_losses`: prototype probabilities and robust losses for noisy category labels;
- :mod:`~hfncl.equations.evidential`: subjective logic on Dirichlet evidence (opinions, their combination);
- :mod:`~hfncl.equations.division`: dividing samples into clean and noisy sets (a GMM on the losses, thresholds);
- :mod:`~hfncl.equations.beta_mixture`: the two-component Beta mixture on losses;
- :mod:`~hfncl.equations.toolkit`: plain functions over the trainer view (peers, ledger columns, batch views).

The core never names a method: a method (a plugin, :mod:`hfncl.hookspecs`) imports what it needs from here.
"""
