r"""DECL on Flickr30K (SCAN precomp features) with image-level noisy correspondence.

    accelerate launch recipes/decl_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.2 \
        --output-dir runs/decl_f30k_sgr_20
    accelerate launch recipes/decl_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.2 \
        --similarity saf --output-dir runs/decl_f30k_saf_20
    hfncl evaluate runs/decl_f30k_sgr_20/best runs/decl_f30k_saf_20/best --data-dir /data/f30k_precomp

DECL's protocol permutes the targets of a share of the images, all 5 captions of an image
moving together (``--noise-kind image``; the RCL index files are of this kind, ``--noise-file``).
Defaults follow Supp. Table 1 for 20% / 40% noise and the authors' ``train_f30k.sh``: the SGR
head (``--similarity saf`` trains DECL-SAF; DECL-SGRAF, the paper's best, is the two checkpoints'
mean similarity, the ``hfncl evaluate`` line above), batch 128, Adam lr 2e-4 decayed x0.1 after
20 of the 40 epochs that follow 5 warmup epochs, grad clip 2, joint space 1024. At 60% / 80%
noise the paper warms up for 2 epochs: ``--warmup-epochs 2 --epochs 42 --lr-decay-epochs 22``.
DECL's options (tau 0.1, lambda1 0.8, lambda2 0.1, eta 0.025, mu 5, margin 0.2, the tanh score)
are the plugin's defaults; docs/reproduction.md compares every setting.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["decl"],
            paper="f30k",
            defaults={
                "epochs": 45,
                "warmup_epochs": 5,
                "lr_decay_epochs": [25],
                "similarity": "sgr",
                "noise_kind": "image",
                "output_dir": "runs/decl_f30k",
            },
        )
    )
