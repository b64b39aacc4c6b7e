r"""DECL on MS-COCO (SCAN precomp features) with image-level noisy correspondence.

    accelerate launch recipes/decl_coco.py --data-dir /data/coco_precomp --noise-ratio 0.2 \
        --output-dir runs/decl_coco_sgr_20
    accelerate launch recipes/decl_coco.py --data-dir /data/coco_precomp --noise-ratio 0.2 \
        --similarity saf --output-dir runs/decl_coco_saf_20
    hfncl evaluate runs/decl_coco_sgr_20/best runs/decl_coco_saf_20/best --data-dir /data/coco_precomp \
        --split testall --folds 5

Image-level noise as in ``recipes/decl_f30k.py``. Defaults follow Supp. Table 1 for MS-COCO at
20% / 40% noise and the authors' ``train_coco.sh``: the SGR head (``--similarity saf`` for DECL-SAF;
DECL-SGRAF is the two checkpoints' mean similarity), batch 128, Adam lr 5e-4 decayed x0.1 after 10
of the 20 epochs that follow 2 warmup epochs; the test split is ``testall`` (5K images), reported
whole and averaged over 5 folds of 1K (Table 1 reports the folds, Table 2 the 5K). At 60% / 80%
noise the paper warms up for 1 epoch: ``--warmup-epochs 1 --epochs 21 --lr-decay-epochs 11``.
The DECL options are the plugin's defaults, as in ``recipes/decl_f30k.py``.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["decl"],
            paper="coco",
            defaults={
                "epochs": 22,
                "warmup_epochs": 2,
                "lr_decay_epochs": [12],
                "learning_rate": 5e-4,
                "similarity": "sgr",
                "noise_kind": "image",
                "test_split": "testall",
                "test_folds": 5,
                "output_dir": "runs/decl_coco",
            },
        )
    )
