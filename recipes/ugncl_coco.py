r"""UGNCL on MS-COCO (SCAN precomp features) with noisy correspondence.

    accelerate launch recipes/ugncl_coco.py --data-dir /data/coco_precomp --noise-ratio 0.2 \
        --output-dir runs/ugncl_coco_sgr_20
    accelerate launch recipes/ugncl_coco.py --data-dir /data/coco_precomp --noise-ratio 0.2 \
        --similarity saf --output-dir runs/ugncl_coco_saf_20
    hfncl evaluate runs/ugncl_coco_sgr_20/best runs/ugncl_coco_saf_20/best --data-dir /data/coco_precomp \
        --split testall --folds 5

Defaults follow Sec. 4.2 of the paper for MS-COCO: the SGR head (``--similarity saf`` for
UGNCL-SAF; UGNCL* is the two checkpoints' mean similarity), 2 warmup epochs then 20 epochs,
W = 2 image views, otherwise NCR's COCO settings (lr 2e-4 decayed x0.1 after 15 of the 20
epochs); the test split is ``testall`` (5K images), reported whole and averaged over 5 folds of
1K. The UGNCL options are those of ``recipes/ugncl_f30k.py``.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["ugncl"],
            paper="coco",
            defaults={
                "epochs": 22,
                "warmup_epochs": 2,
                "lr_decay_epochs": [17],
                "similarity": "sgr",
                "test_split": "testall",
                "test_folds": 5,
                "output_dir": "runs/ugncl_coco",
            },
        )
    )
