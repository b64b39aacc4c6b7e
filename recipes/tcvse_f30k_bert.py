"""TcVSE on Flickr30K with the paper's BERT-base text backbone (Table 1, "(Bert-base)").

    accelerate launch recipes/tcvse_f30k_bert.py --data-dir /data/f30k_precomp --output-dir runs/tcvse_f30k_bert

As ``recipes/tcvse_f30k.py`` (AdamW lr 5e-4, weight decay 1e-4, 25 epochs, lr x0.1 at epoch 15,
batch K = 128, tau = 0.05, MaxTimes = 3, max pooling of regions and tokens), with the text
tower ``bert-base-uncased`` (``--text-tower``: a Hub id or a local directory, read once when the
model is built; captions are tokenised by its tokenizer). BERT's weights train at a tenth of
the rate (Sec. 3.1: "5e-5" for Bert-base, ``--text-tower-lr-scale 0.1``; its projection head
keeps 5e-4, as VSE-infinity's code) and are frozen in the first epoch
(``--freeze-text-tower-epochs 1``, issue 21's reading of the authors' code; not in the paper).
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["tcvse"],
            paper="f30k",
            defaults={
                "epochs": 25,
                "learning_rate": 5e-4,
                "optimizer": "adamw",
                "weight_decay": 1e-4,
                "lr_decay_epochs": [15],
                "lr_decay_factor": 0.1,
                "text_tower": "bert-base-uncased",
                "text_tower_lr_scale": 0.1,
                "freeze_text_tower_epochs": 1,
                "output_dir": "runs/tcvse_f30k_bert",
            },
        )
    )
