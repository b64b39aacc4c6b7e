r"""NPC on MS-COCO raw images, fine-tuning CLIP ViT-B/32 (both towers), as the authors' README trains it.

    accelerate launch recipes/npc_coco_clip.py --data-dir /data/coco_images --noise-ratio 0.2 \
        --output-dir runs/npc_coco_clip_20

The data directory is an imagefolder of the Karpathy splits (``train`` / ``dev`` / ``testall``, 5 captions per
image; docs/data-formats.md). The test is MS-COCO 1K, the mean of 5 folds of ``testall``.
Defaults follow the authors' README command (``main_NPC.py --batch_size 256 --epochs 5 --lr 2e-7
--vision_model ViT-B/32``) and ``params.py``: AdamW with weight decay 0.2 (its betas 0.9 / 0.98
and eps 1e-6 are torch's defaults here), gradient norm clipped at 10; both towers from
``openai/clip-vit-base-patch32`` with their pooled (EOS / class) outputs; no warmup epoch (the memory bank is
built from pretrained CLIP before the first step, as the authors' ``get_memorybank.py`` builds theirs).
The towers' heads start from CLIP's own ``visual_projection`` / ``text_projection`` (``embed_dim`` 512 is
ViT-B/32's projection size); the authors' cosine schedule with 500 warmup steps is a constant rate here:
docs/reproduction.md lists every difference.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["npc"],
            paper="coco",
            defaults={
                "epochs": 5,
                "warmup_epochs": 0,
                "batch_size": 256,
                "learning_rate": 2e-7,
                "optimizer": "adamw",
                "weight_decay": 0.2,
                "lr_decay_epochs": [],
                "grad_clip": 10.0,
                "data_format": "imagefolder",
                "test_split": "testall",
                "test_folds": 5,
                "image_tower": "openai/clip-vit-base-patch32",
                "text_tower": "openai/clip-vit-base-patch32",
                "image_pooling": "pooler",
                "text_pooling": "pooler",
                "embed_dim": 512,
                "output_dir": "runs/npc_coco_clip",
            },
        )
    )
