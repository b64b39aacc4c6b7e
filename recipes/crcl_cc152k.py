r"""CRCL on CC152K (Conceptual Captions subset with real noise; one caption per image).

    accelerate launch recipes/crcl_cc152k.py --data-dir /data/cc152k_precomp --output-dir runs/crcl_cc152k

The noise is real, so none is added (``--noise-ratio 0``). The official code ships only its
Flickr30K command (``train.sh``); these are its settings, as in ``recipes/crcl_f30k.py`` (SGR
head, AdamW lr 5e-4 with weight decay 0.01, x0.1 at epochs 15 and 30, 2 warmup + 30 epochs, tau
0.05, lambda 5, alpha 0.8, one self-refining stage).
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["crcl"],
            paper="cc152k",
            defaults={
                "epochs": 32,
                "warmup_epochs": 2,
                "learning_rate": 5e-4,
                "optimizer": "adamw",
                "weight_decay": 0.01,
                "lr_decay_epochs": [15, 30],
                "similarity": "sgr",
                "output_dir": "runs/crcl_cc152k",
            },
        )
    )
