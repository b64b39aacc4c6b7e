"""NCR on CC152K (Conceptual Captions subset with real noise; one caption per image).

    accelerate launch recipes/ncr_cc152k.py --data-dir /data/cc152k_precomp --output-dir runs/ncr_cc152k

The noise is real, so no synthetic noise is added (``--noise-ratio 0``) and division
quality cannot be measured against a hidden mask (every pair counts as clean). Captions
are read from ``{split}_caps.tsv``. 40 epochs, lr 2e-4 decayed at epoch 30.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["ncr"],
            defaults={"epochs": 40, "warmup_epochs": 5, "lr_decay_epochs": [30], "output_dir": "runs/ncr_cc152k"},
        )
    )
