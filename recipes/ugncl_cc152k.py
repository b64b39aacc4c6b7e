r"""UGNCL on CC152K (Conceptual Captions subset with real noise; one caption per image).

    accelerate launch recipes/ugncl_cc152k.py --data-dir /data/cc152k_precomp --output-dir runs/ugncl_cc152k_sgr
    accelerate launch recipes/ugncl_cc152k.py --data-dir /data/cc152k_precomp --similarity saf \
        --output-dir runs/ugncl_cc152k_saf
    hfncl evaluate runs/ugncl_cc152k_sgr/best runs/ugncl_cc152k_saf/best --data-dir /data/cc152k_precomp

The noise is real, so no synthetic noise is added (``--noise-ratio 0``) and division
quality cannot be measured against a hidden mask (every pair counts as clean). Captions
are read from ``{split}_caps.tsv``; 150,000 training, 1,000 validation and 1,000 test pairs
(Sec. 4.1, NCR's subset). Defaults follow Sec. 4.2 of the paper for the datasets other than
MS-COCO, as ``recipes/ugncl_f30k.py``: the SGR head (``--similarity saf`` for UGNCL-SAF; Table 2's
UGNCL* is the two checkpoints' mean similarity, the ``hfncl evaluate`` line above), W = 2 image
views, batch K = 128, joint space 1024, 5 warmup epochs then 40 epochs, otherwise NCR's CC152K
settings (Adam lr 2e-4 decayed x0.1 after 30 of the 40 epochs, grad clip 2). The UGNCL options
are those of ``recipes/ugncl_f30k.py``; docs/reproduction.md compares every setting.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["ugncl"],
            paper="cc152k",
            defaults={
                "epochs": 45,
                "warmup_epochs": 5,
                "lr_decay_epochs": [35],
                "similarity": "sgr",
                "output_dir": "runs/ugncl_cc152k",
            },
        )
    )
