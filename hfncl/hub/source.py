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
    """The commit a Hub id's revision points to, or ``None`` when it cannot be resolved.

    Resolved with :meth:`huggingface_hub.HfApi.resolve_revision` (from the local cache when
    offline). Failures are left to ``from_pretrained``, whose errors say more.
    """
    try:
        return HfApi().resolve_revision(
            name,
            revision=kwargs.get("revision"),
            cache_dir=kwargs.get("cache_dir"),
            local_files_only=bool(kwargs.get("local_files_only")) or is_offline_mode(),
            token=kwargs.get("token"),
        )
    except (RevisionResolutionError, OSError, ValueError):
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
