"""Word vocabularies in the SCAN format and a regex tokenizer that needs no network.

SCAN, NCR and their descendants tokenize captions with ``nltk.word_tokenize`` (which
needs the ``punkt`` download) and store vocabularies as JSON::

    {"idx2word": {"0": "<pad>", "1": "<start>", ...}, "word2idx": {"<pad>": 0, ...}, "idx": N}

:func:`tokenize` follows the same Penn Treebank conventions with one regular
expression, so the published vocabularies cover the tokens it produces.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from hfncl.data.errors import DataFormatError

_TOKEN_RE = re.compile(
    r"""
      (?:[^\W\d_]\.){2,}          # abbreviations with inner periods: u.s., a.m.
    | \d+(?:[.,:]\d+)+            # numbers with separators: 3.5, 1,000, 11:20
    | [^\W_]+(?=n't\b)            # the stem of a negative contraction: do|n't, ca|n't
    | n't\b                       # ... and its clitic
    | '(?:s|re|ve|ll|m|d)\b       # clitics: 's 're 've 'll 'm 'd
    | [^\W_]+(?:-[^\W_]+)*        # words; hyphenated compounds stay whole: t-shirt
    | \.\.\.|--                   # multi-character punctuation
    | \S                          # any other single non-space character
    """,
    re.VERBOSE,
)
_OPENING_CONTEXT = "([{<"


class CaptionTokenizer(Protocol):
    """What turns captions into token ids: a :class:`Vocabulary` or a :class:`TokenizerVocabulary`."""

    def encode(self, caption: str) -> list[int]:
        """The token ids of ``caption``."""
        ...

    def __len__(self) -> int:
        """The number of token ids."""
        ...


def tokenize(text: str) -> list[str]:
    """Lower-case ``text`` and split it into words and punctuation.

    Mirrors ``nltk.word_tokenize(text.lower())`` as SCAN uses it, without nltk: clitics
    are split off (``"dog's"`` -> ``["dog", "'s"]``, ``"don't"`` -> ``["do", "n't"]``),
    hyphenated words are kept whole, and a double quote becomes the Treebank opening
    quote (two backticks) or closing quote (two apostrophes).

    >>> tokenize("A dog, running.")
    ['a', 'dog', ',', 'running', '.']
    """
    text = text.lower()
    tokens = []
    for match in _TOKEN_RE.finditer(text):
        token = match.group()
        if token == '"':
            before = text[match.start() - 1] if match.start() else " "
            token = "``" if before.isspace() or before in _OPENING_CONTEXT else "''"
        tokens.append(token)
    return tokens


class Vocabulary:
    """A word <-> id mapping with SCAN's four special tokens at ids 0..3.

    ``idx2word[i]`` is the word of id ``i``; ``word2idx`` the inverse mapping.
    """

    PAD = "<pad>"
    START = "<start>"
    END = "<end>"
    UNK = "<unk>"
    SPECIALS = (PAD, START, END, UNK)
    pad_id, start_id, end_id, unk_id = 0, 1, 2, 3

    def __init__(self, words: Iterable[str] = ()) -> None:
        """Special tokens first, then ``words`` in the given order (duplicates are an error)."""
        self.idx2word: list[str] = list(self.SPECIALS)
        self.word2idx: dict[str, int] = {word: i for i, word in enumerate(self.SPECIALS)}
        for word in words:
            if word in self.word2idx:
                raise ValueError(f"Vocabulary: word {word!r} given twice")
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)

    @classmethod
    def build(cls, captions: Iterable[str], min_count: int = 4) -> Vocabulary:
        """Vocabulary of the words seen at least ``min_count`` times in ``captions``.

        SCAN builds its vocabularies from the training captions with threshold 4. Words
        are ordered by descending count, ties alphabetically, so a build is reproducible.
        """
        if min_count < 1:
            raise ValueError(f"Vocabulary.build: min_count must be >= 1, got {min_count}")
        counts = Counter(token for caption in captions for token in tokenize(caption))
        kept = [(word, n) for word, n in counts.items() if n >= min_count and word not in cls.SPECIALS]
        kept.sort(key=lambda item: (-item[1], item[0]))
        return cls(word for word, _ in kept)

    @classmethod
    def from_json(cls, path: str | Path) -> Vocabulary:
        """Read a SCAN vocabulary JSON file (validated as in :meth:`from_dict`).

        Raises :class:`DataFormatError` naming the file and the missing or invalid field.
        """
        path = Path(path)
        if not path.is_file():
            raise DataFormatError(f"{path}: vocabulary file not found")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise DataFormatError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
        except json.JSONDecodeError as err:
            raise DataFormatError(f"{path}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "vocabulary") -> Vocabulary:
        """Vocabulary of a parsed SCAN vocabulary (``idx2word`` keys may be ``str`` or ``int``).

        Raises :class:`DataFormatError` naming ``source`` and the missing or invalid field.
        """
        if not isinstance(data, dict):
            raise DataFormatError(f"{source}: expected a JSON object with 'idx2word', 'word2idx' and 'idx'")
        idx2word = _field(data, "idx2word", Mapping, "a JSON object", source)
        word2idx = _field(data, "word2idx", Mapping, "a JSON object", source)
        size = _field(data, "idx", int, "an integer", source)

        words: dict[int, str] = {}
        for key, word in idx2word.items():
            try:
                i = int(key)
            except (TypeError, ValueError):
                raise DataFormatError(f"{source}: idx2word key {key!r} is not an integer") from None
            if i < 0 or not isinstance(word, str) or i in words:
                raise DataFormatError(
                    f"{source}: idx2word[{key!r}] = {word!r} is invalid (negative or duplicate id, or not a string)"
                )
            words[i] = word
        if size != len(words) or sorted(words) != list(range(len(words))):
            missing = sorted(set(range(max(size, len(words)))) - set(words))[:5]
            raise DataFormatError(
                f"{source}: idx2word must hold ids 0..idx-1 exactly once (idx = {size}, "
                f"{len(words)} entries, missing ids {missing})"
            )
        for i, special in enumerate(cls.SPECIALS):
            if words.get(i) != special:
                raise DataFormatError(f"{source}: idx2word['{i}'] is {words.get(i)!r}, expected {special!r}")
        ordered = [words[i] for i in range(len(words))]
        if len(set(ordered)) != len(ordered):
            raise DataFormatError(f"{source}: idx2word maps two ids to the same word")
        for i, word in enumerate(ordered):
            if word2idx.get(word) != i:
                raise DataFormatError(
                    f"{source}: word2idx[{word!r}] is {word2idx.get(word)!r}, but idx2word['{i}'] is {word!r}"
                )
        if len(word2idx) != len(ordered):
            raise DataFormatError(f"{source}: word2idx has {len(word2idx)} entries, idx2word has {len(ordered)}")
        return cls(ordered[len(cls.SPECIALS) :])

    def save_json(self, path: str | Path) -> None:
        """Write the vocabulary in the SCAN JSON format (``idx2word`` keys as strings)."""
        data = {
            "idx2word": {str(i): word for i, word in enumerate(self.idx2word)},
            "word2idx": dict(self.word2idx),
            "idx": len(self),
        }
        Path(path).write_text(json.dumps(data), encoding="utf-8")

    def __len__(self) -> int:
        return len(self.idx2word)

    def __contains__(self, word: object) -> bool:
        return word in self.word2idx

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.idx2word == other.idx2word

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} words)"

    def encode(self, caption: str) -> list[int]:
        """``[<start>] + token ids + [<end>]``; words outside the vocabulary become ``<unk>``."""
        unk = self.unk_id
        return [self.start_id, *(self.word2idx.get(t, unk) for t in tokenize(caption)), self.end_id]

    def decode(self, ids: Iterable[int]) -> str:
        """The words of ``ids`` joined by spaces, without ``<pad>``, ``<start>`` and ``<end>``."""
        words = []
        for raw in ids:
            i = int(raw)
            if not 0 <= i < len(self.idx2word):
                raise ValueError(f"Vocabulary.decode: id {i} is outside 0..{len(self.idx2word) - 1}")
            if i not in (self.pad_id, self.start_id, self.end_id):
                words.append(self.idx2word[i])
        return " ".join(words)


def _field(data: dict[str, Any], name: str, kind: type, what: str, source: str) -> Any:
    """``data[name]`` checked to be of ``kind`` (described as ``what``; bool is not an int here)."""
    if name not in data:
        raise DataFormatError(f"{source}: missing field {name!r} (SCAN vocabulary format)")
    value = data[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise DataFormatError(f"{source}: field {name!r} must be {what}, got {type(value).__name__}")
    return value


class TokenizerVocabulary:
    """A transformers tokenizer behind :class:`Vocabulary`'s ``encode`` interface (transformer text towers).

    ``encode`` returns the tokenizer's input ids with its special tokens (BERT:
    ``[CLS] ... [SEP]``), truncated to ``max_length``; the batches pad them with 0 and
    carry their lengths, and the towers mask by length, so the padding id is never read.
    ``len()`` is the number of token ids.

    Args:
        tokenizer: a ``PreTrainedTokenizerBase`` (e.g. from ``AutoTokenizer.from_pretrained``).
        max_length: longest encoding kept; default the tokenizer's ``model_max_length``
            (no truncation when the tokenizer declares none).
    """

    SUBFOLDER = "tokenizer"
    """Where a checkpoint keeps the tokenizer (a subfolder: a BPE tokenizer's own ``vocab.json`` would clash)."""

    def __init__(self, tokenizer: Any, max_length: int | None = None) -> None:
        if max_length is None and tokenizer.model_max_length < _NO_MAX_LENGTH:
            max_length = int(tokenizer.model_max_length)
        if max_length is not None and max_length < 2:
            raise ValueError(f"TokenizerVocabulary: max_length must be >= 2, got {max_length}")
        self.tokenizer = tokenizer
        self.max_length = max_length

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, subfolder: str = "", **kwargs: Any) -> TokenizerVocabulary:
        """``AutoTokenizer.from_pretrained`` (Hub id or directory) behind the adapter.

        Raises:
            OSError: naming ``name_or_path`` when no tokenizer can be read there.
        """
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(name_or_path), subfolder=subfolder, **kwargs)
        except (OSError, ValueError) as error:
            where = f"{name_or_path}/{subfolder}" if subfolder else str(name_or_path)
            raise OSError(f"Cannot load a tokenizer from {where!r}: {error}") from error
        return cls(tokenizer)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write the tokenizer into ``directory/tokenizer``; returns that folder."""
        target = Path(directory) / self.SUBFOLDER
        self.tokenizer.save_pretrained(str(target))
        return target

    def encode(self, caption: str) -> list[int]:
        """The tokenizer's input ids of ``caption`` (special tokens included, truncated to ``max_length``)."""
        truncate = self.max_length is not None
        return list(self.tokenizer(caption, truncation=truncate, max_length=self.max_length)["input_ids"])

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __repr__(self) -> str:
        return f"TokenizerVocabulary({type(self.tokenizer).__name__}, {len(self)} ids)"


_NO_MAX_LENGTH = 10**9
"""transformers' ``model_max_length`` for a tokenizer that declares none is about 1e30."""
