"""The fixed vocabularies of images and captions, and conversions between ids and readable text.

Images (vision tower input, length ``1 + d_image``)::

    0              background pixel, printed "."
    1..n_labels    object labels (Ntot categories), printed as the number
    n_labels + 1   [CLS], printed "C"; always at position 0 of the input

Captions (text tower input, always 4 tokens)::

    0              <pad> (reserved; never produced by the dataset)
    1..n_labels    object labels (the same ids as in images)
    n_labels + 1   "is"
    n_labels + 2   "in the image"
    n_labels + 3   "is on the left of"
    n_labels + 4   "is on the right of"
    n_labels + 5   <eot>, the largest id (the CLIP convention), the text readout position

Caption templates (Paper Sec. 2.1): ``[X] [is] [in the image] [EOT]``, ``[X] [is on the left of] [Y] [EOT]``
and ``[Y] [is on the right of] [X] [EOT]``.

Example:
    >>> v = Vocabulary(20)
    >>> v.caption_to_text(v.left_caption(17, 19))
    '17 is on the left of 19'
    >>> v.text_to_caption("19 is on the right of 17").tolist()
    [19, 24, 17, 25]
    >>> v.image_to_text(v.image({2: 17, 5: 19}, d_image=10))
    'C . . 17 . . 19 . . . .'
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Int

from hooked_clip1d.settings.checks import check_int, is_int

PHRASES = ("is", "in the image", "is on the left of", "is on the right of")


@dataclass(frozen=True)
class Vocabulary:
    """Token ids for a dataset with labels ``1..n_labels``."""

    n_labels: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_labels", check_int(self.n_labels, "n_labels"))

    # ---- image ids -------------------------------------------------------------------------------------------------
    @property
    def background(self) -> int:
        return 0

    @property
    def cls(self) -> int:
        return self.n_labels + 1

    @property
    def image_vocab_size(self) -> int:
        return self.n_labels + 2

    # ---- caption ids -----------------------------------------------------------------------------------------------
    @property
    def pad(self) -> int:
        return 0

    @property
    def is_(self) -> int:
        return self.n_labels + 1

    @property
    def in_the_image(self) -> int:
        return self.n_labels + 2

    @property
    def left_of(self) -> int:
        return self.n_labels + 3

    @property
    def right_of(self) -> int:
        return self.n_labels + 4

    @property
    def eot(self) -> int:
        return self.n_labels + 5

    @property
    def text_vocab_size(self) -> int:
        return self.n_labels + 6

    def _check_label(self, x: int) -> int:
        if isinstance(x, torch.Tensor) and x.numel() == 1 and not x.is_floating_point() and x.dtype != torch.bool:
            x = int(x)  # a 0-d (or one-element) integer tensor, as indexing a label tensor gives
        if not is_int(x):  # a float was truncated; a bool is no label
            raise ValueError(f"a label must be an int in 1..{self.n_labels}, got {x!r}")
        if not 1 <= operator.index(x) <= self.n_labels:
            raise ValueError(f"label {x!r} is outside 1..{self.n_labels}")
        return operator.index(x)

    @staticmethod
    def _token_id(t: Any, what: str) -> int:
        """One token id as an int: an integer (a one-element integer tensor too); a float (truncated before) is
        refused."""
        if isinstance(t, torch.Tensor) and t.numel() == 1 and not t.is_floating_point() and t.dtype != torch.bool:
            return int(t)
        if not is_int(t):
            raise ValueError(f"{what} must be an int, got {t!r}")
        return operator.index(t)

    @staticmethod
    def _one_row(ids: Any, what: str) -> list[int]:
        """A 1-D sequence of ids as a list (a batch of rows is refused: one row is one caption or image)."""
        ids = torch.as_tensor(ids)
        if ids.ndim != 1:
            raise ValueError(f"{what} takes one row of ids [pos], got shape {list(ids.shape)} (loop over a batch)")
        if ids.is_floating_point() or ids.dtype == torch.bool:
            raise ValueError(f"{what} takes integer ids, got dtype {ids.dtype}")
        return ids.tolist()

    def _check_pair(self, x: int, y: int) -> None:
        if self._check_label(x) == self._check_label(y):
            raise ValueError(f"a two-object caption needs two different labels, got {x} twice")

    # ---- building ids ----------------------------------------------------------------------------------------------
    def single_caption(self, x: int) -> Int[torch.Tensor, " 4"]:
        """``[X] [is] [in the image] [EOT]``."""
        return torch.tensor([self._check_label(x), self.is_, self.in_the_image, self.eot])

    def left_caption(self, x: int, y: int) -> Int[torch.Tensor, " 4"]:
        """``[X] [is on the left of] [Y] [EOT]`` (X is the left object; X != Y)."""
        self._check_pair(x, y)
        return torch.tensor([self._check_label(x), self.left_of, self._check_label(y), self.eot])

    def right_caption(self, x: int, y: int) -> Int[torch.Tensor, " 4"]:
        """``[Y] [is on the right of] [X] [EOT]`` for the same scene as ``left_caption(x, y)`` (X != Y)."""
        self._check_pair(x, y)
        return torch.tensor([self._check_label(y), self.right_of, self._check_label(x), self.eot])

    def image(self, objects: Mapping[int, int], d_image: int = 10) -> Int[torch.Tensor, " pos"]:
        """Vision input ``[CLS] + pixels`` with ``objects = {pixel_index: label}`` (pixel 0 is input position 1)."""
        d_image = check_int(d_image, "d_image (the number of pixels)")
        img = torch.zeros(d_image + 1, dtype=torch.long)
        img[0] = self.cls
        for p, x in objects.items():
            if not 0 <= p < d_image:
                raise ValueError(f"pixel index {p} is outside 0..{d_image - 1}")
            img[p + 1] = self._check_label(x)
        return img

    # ---- ids -> text -----------------------------------------------------------------------------------------------
    def text_token_str(self, t: int) -> str:
        """Readable form of one caption id."""
        t = self._token_id(t, "a caption token id")
        if 1 <= t <= self.n_labels:
            return str(t)
        names = {self.pad: "<pad>", self.eot: "<eot>"}
        names.update({self.is_ + i: p for i, p in enumerate(PHRASES)})
        if t not in names:
            raise ValueError(f"caption token id {t} is outside 0..{self.text_vocab_size - 1}")
        return names[t]

    def image_token_str(self, t: int) -> str:
        """Readable form of one image id: ``C``, ``.`` or the label."""
        t = self._token_id(t, "an image token id")
        if t == self.cls:
            return "C"
        if t == self.background:
            return "."
        if 1 <= t <= self.n_labels:
            return str(t)
        raise ValueError(f"image token id {t} is outside 0..{self.image_vocab_size - 1}")

    def caption_to_text(self, ids: Int[torch.Tensor, " pos"]) -> str:
        """``"17 is on the left of 19"``: the caption up to (without) the first EOT."""
        out = []
        for t in self._one_row(ids, "caption_to_text"):
            if t == self.eot:
                break
            out.append(self.text_token_str(t))
        return " ".join(out)

    def image_to_text(self, ids: Int[torch.Tensor, " pos"]) -> str:
        """``"C . . 17 . . 19 . . . ."``."""
        return " ".join(self.image_token_str(t) for t in self._one_row(ids, "image_to_text"))

    def caption_tokens_str(self, ids: Int[torch.Tensor, " pos"]) -> list[str]:
        """One string per caption token (for attention plots)."""
        return [self.text_token_str(t) for t in self._one_row(ids, "caption_tokens_str")]

    def image_tokens_str(self, ids: Int[torch.Tensor, " pos"]) -> list[str]:
        """One string per image token (for attention plots); CLS is ``"[CLS]"``, background ``"·"``."""
        row = self._one_row(ids, "image_tokens_str")
        out = [t for t in row if not 0 <= t < self.image_vocab_size]
        if out:  # shown as a label before
            raise ValueError(f"image token ids {out} are outside 0..{self.image_vocab_size - 1}")
        return ["[CLS]" if t == self.cls else ("·" if t == 0 else str(t)) for t in row]

    # ---- text -> ids -----------------------------------------------------------------------------------------------
    def text_to_caption(self, text: str) -> Int[torch.Tensor, " 4"]:
        """Parse ``"X is in the image"``, ``"X is on the left of Y"`` or ``"Y is on the right of X"``."""
        s = " ".join(text.strip().rstrip(".").split())
        words = s.split(" ")
        try:
            if len(words) == 5 and words[1:] == ["is", "in", "the", "image"]:
                return self.single_caption(int(words[0]))
            if len(words) == 7 and words[1:6] == ["is", "on", "the", "left", "of"]:
                return self.left_caption(int(words[0]), int(words[6]))
            if len(words) == 7 and words[1:6] == ["is", "on", "the", "right", "of"]:
                return self.right_caption(int(words[6]), int(words[0]))
        except ValueError as e:
            raise ValueError(f"cannot parse caption {text!r}: {e}") from None
        raise ValueError(
            f"cannot parse caption {text!r}; expected 'X is in the image', 'X is on the left of Y' "
            f"or 'Y is on the right of X' with labels in 1..{self.n_labels} (X != Y)"
        )

    def text_to_image(self, text: str) -> Int[torch.Tensor, " pos"]:
        """Parse ``"C . . 17 . . 19 . . . ."`` (the ``image_to_text`` format)."""
        toks = text.split()
        if not toks or toks[0] != "C":
            raise ValueError(f"cannot parse image {text!r}: it must start with 'C' (the CLS token)")
        if len(toks) == 1:
            raise ValueError(f"cannot parse image {text!r}: no pixels after 'C' (one '.' or label per pixel)")
        objects = {}
        for i, t in enumerate(toks[1:]):
            if t == ".":
                continue
            if not (t.isascii() and t.isdecimal()):  # "³".isdigit() is True, and int("³") fails
                raise ValueError(f"cannot parse image {text!r}: pixel {i} is {t!r}, not '.' or a label")
            objects[i] = int(t)
        return self.image(objects, d_image=len(toks) - 1)
