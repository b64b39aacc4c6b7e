r"""DMCM on Pascal-Sentence (category-labelled features) with noisy labels; mAP over the full ranking.

    accelerate launch recipes/dmcm_pascal.py --data-path /data/pascal_dscmr --noise-ratio 0.4 \
        --output-dir runs/dmcm_pascal_40
    # one unsplit set of .npy files (split 40 / 5 / 5 per class; --split-fractions 0.7 0.1 0.2 tests the
    # paper's 200 samples, 10 per class), e.g. two text encoders' views:
    python recipes/dmcm_pascal.py --image-features ../shared/data/pascal_sentence/sentence_features.npy \
        --text-features ../shared/data/pascal_sentence/sentence_features_doc2vec_bert_768.npy \
        --labels ../shared/data/pascal_sentence/labels.npy --noise-ratio 0.4

Defaults follow the paper (Sec. 3.2): Adam lr 1e-4, batch 100, 150 epochs with 5 warmup
epochs, beta 0.7, tau1 = tau2 = 1, common space 512, symmetric noise with the rate
known to the division.
"""

import sys

from hfncl.recipe import run_recipe
from hfncl_plugins.dmcm import paper_training

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["dmcm"],
            defaults={**paper_training("pascal_sentence"), "output_dir": "runs/dmcm_pascal"},
        )
    )
