"""Where a model was loaded from: a local checkpoint directory, or a Hub repository pinned to a commit."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, ResolvedRevision, is_offline_mode
from huggingface_hub.errors import RevisionResolutionError


@dataclass(frozen=True)
class CheckpointSource:
    """Where a model was loaded from, so that ``push_to_hub`` can take its companion files from there.

    Attributes:
        name_or_path: the absolute path of a local checkpoint directory, or a Hub repository id.
        is_local: ``name_or_path`` is a local directory.
        subfolder: the ``subfolder`` argument of ``from_pretrained`` (``""``: the top level).
        revision: for a Hub id, the commit the weights were loaded from (the revision asked
            for, resolved once before loading so that weights and companion files come from
            the same commit); the revision as asked when it could not be resolved.
        cache_dir: the ``cache_dir`` argument of ``from_pretrained`` (Hub ids only).
    """

    name_or_path: str
    is_local: bool
    subfolder: str = ""
    revision: str | None = None
    cache_dir: str | None = None

    def __str__(self) -> str:
        where = f"{self.name_or_path}/{self.subfolder}" if self.subfolder else self.name_or_path
        if self.is_local:
            return where
        return f"the Hub repository {where!r}" + (f" at revision {self.revision}" if self.revision else "")


def _resolved_revision(name: str, kwargs: dict[str, Any]) -> ResolvedRevision | None:
    """The commit a Hub id's revision points to, or ``None`` when the Hub answered with an error.

    Resolved with :meth:`huggingface_hub.HfApi.resolve_revision` (from the local cache when
    offline). The Hub's own answers (no such repository, no access) are left to
    ``from_pretrained``, whose errors say more.

    Raises:
        OSError: the Hub cannot be reached (no network, ``HF_HUB_OFFLINE=1``) and the local Hub cache has no copy:
            one line saying so at once, instead of the downloads' retries that end blaming the network.
    """
    try:
        return HfApi().resolve_revision(
            name,
            revision=kwargs.get("revision"),
            cache_dir=kwargs.get("cache_dir"),
            local_files_only=bool(kwargs.get("local_files_only")) or is_offline_mode(),
            token=kwargs.get("token"),
        )
    except RevisionResolutionError as error:
        why = (
            "HF_HUB_OFFLINE=1 forbids downloading it from the Hub"
            if is_offline_mode()
            else "local_files_only=True forbids downloading it from the Hub"
            if error.__cause__ is None
            else f"the Hub cannot be reached to download it ({type(error.__cause__).__name__})"
        )
        raise OSError(
            f"{name!r} is not a local directory, and {why} (nor is a copy in the local Hub cache). Give the path of "
            "a saved checkpoint directory (none of that name exists here), or check the network"
        ) from None
    except (OSError, ValueError):
        return None


def pin_source(name: str, kwargs: dict[str, Any]) -> CheckpointSource:
    """Where ``from_pretrained(name, **kwargs)`` loads from. For a Hub id, ``kwargs["revision"]``
    is replaced by the resolved commit (a ``ResolvedRevision``, which transformers passes on as
    it is), so that the weights come from the commit recorded here."""
    subfolder = kwargs.get("subfolder") or ""
    if os.path.isdir(name):
        return CheckpointSource(str(Path(name).resolve()), is_local=True, subfolder=subfolder)
    revision = _resolved_revision(name, kwargs)
    if revision is not None:
        kwargs["revision"] = revision
    cache_dir = kwargs.get("cache_dir")
    return CheckpointSource(
        name,
        is_local=False,
        subfolder=subfolder,
        revision=kwargs.get("revision") if revision is None else revision.resolved,
        cache_dir=None if cache_dir is None else str(cache_dir),
    )
