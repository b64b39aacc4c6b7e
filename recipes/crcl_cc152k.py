r"""CRCL on CC152K (Conceptual Captions subset with real noise; one caption per image).

    accelerate launch recipes/crcl_cc152k.py --data-dir /data/cc152k_precomp --output-dir runs/crcl_cc152k

The noise is real, so none is added (``--noise-ratio 0``). The official code ships only its
Flickr30K command (``train.sh``); these are its settings, as in ``recipes/crcl_f30k.py`` (SGR
head, AdamW lr 5e-4 with weight decay 0.01, x0.1 at epochs 15 and 30, 2 warmup + 30 epochs, tau
0.05, lambda 5, alpha 0.8, one self-refining stage).
"""

import runpy
import sys
from pathlib import Path

from hfncl.recipe import run_recipe

TRAIN_SH = runpy.run_path(str(Path(__file__).with_name("crcl_f30k.py")))["TRAIN_SH"]
"""``train.sh``'s settings, as ``recipes/crcl_f30k.py`` holds them."""

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["crcl"],
            paper="cc152k",
            defaults={**TRAIN_SH, "output_dir": "runs/crcl_cc152k"},
        )
    )
