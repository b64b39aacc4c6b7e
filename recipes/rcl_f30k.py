r"""RCL on Flickr30K (SCAN precomp features) with partially mismatched pairs.

    accelerate launch recipes/rcl_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.6 \
        --output-dir runs/rcl_f30k_60

Defaults follow the paper's Table 2 model (RCL-SGR) and the official code's ``train_f30k.sh``: the
SGR head, batch 128, Adam lr 2e-4 decayed x0.1 after 15 of 30 epochs, grad clip 2, joint space
1024, tau 0.05, the L_log penalty over all B - 1 negatives, no warmup. The noise is DECL's
image-level protocol the paper follows (``--noise-kind image``: a share of the images trade all
their captions); ``--noise-file`` reads the authors' published ``noise_inx_*.npy`` instead.
The paper's RCL-SGRAF averages an RCL-SGR and an RCL-SAF trained apart (``--similarity saf``).
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["rcl"],
            paper="f30k",
            defaults={
                "epochs": 30,
                "warmup_epochs": 0,
                "lr_decay_epochs": [15],
                "similarity": "sgr",
                "noise_kind": "image",
                "output_dir": "runs/rcl_f30k",
            },
        )
    )
