r"""VSE++ (hardest-negative triplet loss, no division) on Flickr30K: the baseline noise breaks.

    accelerate launch recipes/vsepp_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.5 \
        --output-dir runs/vsepp_f30k_50
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["vsepp"],
            paper="f30k",
            defaults={"epochs": 30, "lr_decay_epochs": [15], "output_dir": "runs/vsepp_f30k"},
        )
    )
