r"""UGNCL on Flickr30K (SCAN precomp features) with noisy correspondence.

    accelerate launch recipes/ugncl_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.5 \
        --output-dir runs/ugncl_f30k_sgr_50
    accelerate launch recipes/ugncl_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.5 \
        --similarity saf --output-dir runs/ugncl_f30k_saf_50
    hfncl evaluate runs/ugncl_f30k_sgr_50/best runs/ugncl_f30k_saf_50/best --data-dir /data/f30k_precomp

Defaults follow Sec. 4.2 of the paper: the SGR head (``--similarity saf`` trains UGNCL-SAF; the
paper's UGNCL* is the two checkpoints' mean similarity, the ``hfncl evaluate`` line above), W = 2
image views, batch K = 128, joint space 1024, 5 warmup epochs then 40 epochs, otherwise NCR's
settings (Adam lr 2e-4 decayed x0.1 after 30 of the 40 epochs, grad clip 2). Options
(``--options '{"ugncl.xi2": 0.8}'``): tau 0.1, p = epsilon = 0.5, xi2 0.8, gamma 0.2, m 10,
Delta 10, theta 5 as printed; evidence from the head's raw score less Eq. 3's floor, the
belief share as the hard pairs' label, lambda's decay 0.025 per step (the authors' code) and
xi1 0.001 (0.1 collapses the heads); docs/reproduction.md compares every setting.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["ugncl"],
            paper="f30k",
            defaults={
                "epochs": 45,
                "warmup_epochs": 5,
                "lr_decay_epochs": [35],
                "similarity": "sgr",
                "output_dir": "runs/ugncl_f30k",
            },
        )
    )
