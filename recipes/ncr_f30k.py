"""NCR on Flickr30K (SCAN precomp features) with noisy correspondence.

    accelerate launch recipes/ncr_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.5 \
        --output-dir runs/ncr_f30k_50

Defaults follow the paper and its official code: batch 128, Adam lr 2e-4 decayed x0.1
at epoch 30, 40 epochs with warmup, grad clip 2, joint space 1024, caption-level
noise (``--noise-file`` reads a published index such as BiCro's instead).
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["ncr"],
            defaults={"epochs": 40, "warmup_epochs": 5, "lr_decay_epochs": [30], "output_dir": "runs/ncr_f30k"},
        )
    )
