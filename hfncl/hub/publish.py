"""Publishing a checkpoint directory to the Hugging Face Hub."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi

from hfncl.hub.card import card_name, write_model_card
from hfncl.hub.checkpoint import checkpoint_files


def push_checkpoint(
    checkpoint: str | Path,
    repo_id: str,
    private: bool | None = None,
    commit_message: str | None = None,
    token: str | bool | None = None,
    keep_card: bool = False,
    license: str | None = None,
) -> CommitInfo:
    """Upload a checkpoint (all its networks, config, vocabulary, record and card) to a Hub model repository.

    The card is regenerated first from the checkpoint's record, naming ``repo_id`` in
    its usage example and metadata, unless ``keep_card`` asks to upload ``README.md`` as
    it is. The files are checked (:func:`hfncl.hub.checkpoint.checkpoint_files`) before
    anything is sent; the repository is created if needed, and the files go up in one
    commit. Only the checkpoint's own files are sent, never other files of the directory.

    Args:
        checkpoint: the checkpoint directory.
        repo_id: ``user/name`` (or ``org/name``) of the model repository.
        private: visibility of a repository created here (an existing one keeps its own).
        commit_message: default ``"Upload <name> with hfncl"``.
        token: Hub token; default: the saved login or ``HF_TOKEN``.
        keep_card: upload the existing ``README.md`` unchanged.
        license: Hub license identifier for the regenerated card's metadata.

    Returns:
        The commit (its ``commit_url`` and ``oid``).
    """
    checkpoint = Path(checkpoint)
    if not keep_card:
        write_model_card(checkpoint, repo_id=repo_id, license=license)
    files = checkpoint_files(checkpoint)
    api = HfApi(token=token)
    repo = api.create_repo(repo_id, private=private, exist_ok=True)
    operations = [
        CommitOperationAdd(path_in_repo=path.relative_to(checkpoint).as_posix(), path_or_fileobj=str(path))
        for path in files
    ]
    return api.create_commit(
        repo_id=repo.repo_id,
        operations=operations,
        commit_message=commit_message or f"Upload {card_name(repo_id)} with hfncl",
    )
