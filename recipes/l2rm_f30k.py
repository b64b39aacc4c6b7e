r"""L2RM on Flickr30K (SCAN precomp features) with image-level noisy correspondence.

    accelerate launch recipes/l2rm_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.2 \
        --output-dir runs/l2rm_f30k_sgr_20

The authors' noise index files permute the targets of a share of the images, all 5 captions of an
image moving together (``--noise-kind image``; ``--noise-file`` reads such an index). Defaults follow
the authors' ``train_f30k.sh`` and ``opt.py`` (hhc1997/L2RM): the SGR head, batch 128, Adam lr 2e-4
decayed x0.1 after 15 of the 35 epochs that follow 5 RCE warmup epochs, grad clip 2, joint space
1024, Sinkhorn reg 0.01 (``l2rm.reg``), tau 0.05, transported mass rho 0.1, margin 0.2, the noisy
pairs' own diagonal masked out of the transport. The cost is fixed at C = 1 - S (docs/methods/l2rm.md).
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["l2rm"],
            paper="f30k",
            defaults={
                "epochs": 40,
                "warmup_epochs": 5,
                "lr_decay_epochs": [20],
                "similarity": "sgr",
                "noise_kind": "image",
                "options": {"l2rm.reg": 0.01},
                "output_dir": "runs/l2rm_f30k",
            },
        )
    )
