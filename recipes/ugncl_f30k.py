r"""UGNCL on Flickr30K (SCAN precomp features) with noisy correspondence.

    accelerate launch recipes/ugncl_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.5 \
        --output-dir runs/ugncl_f30k_50

Defaults follow Sec. 4.2 of the paper: W = 2 image views, batch K = 128, joint space
1024, 5 warmup epochs then 40 epochs, otherwise NCR's settings (Adam lr 2e-4 decayed
x0.1 at epoch 30, grad clip 2). Options (``--options '{"ugncl.xi2": 0.8}'``): tau 0.1,
p = epsilon = 0.5, xi1 0.1, xi2 0.8, gamma 0.2, m 10, Delta 10, delta 0.25, theta 5;
``ugncl.ensemble`` 1 (2 trains the paper's UGNCL*, two networks averaged at inference).
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["ugncl"],
            defaults={"epochs": 45, "warmup_epochs": 5, "lr_decay_epochs": [30], "output_dir": "runs/ugncl_f30k"},
        )
    )
