"""The eight Poller dimensions (the research's, defined in our own words) and how a request names them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from service.platform.errors import InputError

__all__ = [
    "DEFAULT_DIMENSIONS",
    "DIMENSIONS",
    "Dimension",
    "DimensionName",
    "PromptLanguage",
    "dimension_named",
    "resolve_dimensions",
]

PromptLanguage = Literal["en", "zh"]
DimensionName = Literal[
    "content",
    "language",
    "imagery",
    "rhetorical_techniques",
    "rhythm",
    "defamiliarization",
    "thought_and_emotion",
    "modernity",
]


class Dimension(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One dimension: its API name, its label and definition per prompt language, and the labels answers use."""

    name: DimensionName
    label_en: str
    label_zh: str
    definition_en: str
    definition_zh: str
    # further names a judge may write for it (the labels above always count); compared after folding
    aliases: tuple[str, ...] = ()

    def label(self, language: PromptLanguage) -> str:
        return self.label_zh if language == "zh" else self.label_en

    def definition(self, language: PromptLanguage) -> str:
        return self.definition_zh if language == "zh" else self.definition_en


# the research's eight, in its order; definitions paraphrase METHOD.md section 2 (the reader's understanding of ...)
DIMENSIONS: tuple[Dimension, ...] = (
    Dimension(
        "content",
        "Content",
        "内容",
        "what the poem is about: its subject and the situation or scene it presents",
        "诗歌写了什么：它的题材，以及它呈现的情境或场景",
    ),
    Dimension(
        "language",
        "Language",
        "语言",
        "the characteristics of the poem's language and what is new in it",
        "诗歌语言的特点及其创新之处",
        aliases=("语言特色", "语言特点"),
    ),
    Dimension(
        "imagery",
        "Imagery",
        "意象",
        "which images the poem uses and what they do in it",
        "诗中用了哪些意象，这些意象在诗中起什么作用",
        aliases=("images",),
    ),
    Dimension(
        "rhetorical_techniques",
        "Rhetorical techniques",
        "修辞手法",
        "which rhetorical techniques the poem uses and what function each serves",
        "诗中用了哪些修辞手法，各自起什么作用",
        aliases=("rhetorical technique", "rhetoric", "rhetorical devices", "修辞", "修辞技巧"),
    ),
    Dimension(
        "rhythm",
        "Rhythm",
        "节奏",
        "the poem's pauses, line breaks and stanzas and the rhythm they make",
        "诗歌的停顿、分行与分节，以及由此形成的节奏",
        aliases=("韵律", "节奏韵律"),
    ),
    Dimension(
        "defamiliarization",
        "Defamiliarization",
        "陌生化",
        "the unfamiliar, estranging expressions in the poem, if there are any, and their effect",
        "诗中有没有陌生化的表达；如果有，它们产生了什么效果",
        aliases=("defamiliarisation",),
    ),
    Dimension(
        "thought_and_emotion",
        "Thought and emotion",
        "思想情感",
        "the ideas and the feelings the poem expresses",
        "诗歌表达的思想和情感",
        aliases=("thought & emotion", "thoughts and emotions", "thought and feeling", "思想与情感", "思想感情"),
    ),
    Dimension(
        "modernity",
        "Modernity",
        "现代性",
        "what makes the poem modern: its modern sensibility, themes or forms",
        "诗歌的现代性：现代的感受方式、主题或形式",
    ),
)
_BY_NAME: dict[str, Dimension] = {d.name: d for d in DIMENSIONS}
DEFAULT_DIMENSIONS: tuple[str, ...] = tuple(d.name for d in DIMENSIONS)


def resolve_dimensions(names: Sequence[str] | None) -> list[Dimension]:
    """The named dimensions in the request's order (None = all eight); unknown or repeated names are bad input."""
    if names is None:
        return list(DIMENSIONS)
    if not names:
        raise InputError("dimensions: give at least one dimension (or leave it out for all eight)")
    unknown = [n for n in names if n not in _BY_NAME]
    if unknown:
        raise InputError(
            f"unknown dimension(s) {unknown}", extra={"field": "dimensions", "known": list(DEFAULT_DIMENSIONS)}
        )
    if len(set(names)) != len(names):
        raise InputError("dimensions: a dimension is named twice", extra={"field": "dimensions"})
    return [_BY_NAME[n] for n in names]


def dimension_named(name: str) -> Dimension:
    """The dimension with this API name; an unknown name is bad input."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise InputError(f"unknown dimension {name!r}", extra={"known": list(DEFAULT_DIMENSIONS)}) from None
