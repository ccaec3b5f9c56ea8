"""Personas (limits, version hash, naming the author) and dimension names."""

from __future__ import annotations

import msgspec
import pytest

from service.companions.poller import (
    DEFAULT_DIMENSIONS,
    PERSONA_FIELD_MAX_CHARS,
    Persona,
    names_author,
    persona_version,
    resolve_dimensions,
    validate_persona,
)
from service.platform.errors import InputError

from .support import PERSONA


def test_persona_version_is_a_content_hash_of_every_field() -> None:
    version = persona_version(PERSONA)
    assert version.startswith("sha256:") and len(version) == 7 + 64
    assert persona_version(msgspec.json.decode(msgspec.json.encode(PERSONA), type=Persona)) == version
    for field, value in [
        ("author", "北島"),
        ("aliases", ["Bei Dao", "Zhao Zhenkai"]),
        ("basic_information", PERSONA.basic_information + " "),
        ("experience_and_views", "other views"),
        ("critics_comments", ""),
    ]:
        assert persona_version(msgspec.structs.replace(PERSONA, **{field: value})) != version, field


def test_persona_field_limit_is_inclusive() -> None:
    at_limit = msgspec.structs.replace(PERSONA, critics_comments="x" * PERSONA_FIELD_MAX_CHARS)
    assert validate_persona(at_limit) is at_limit
    over = msgspec.structs.replace(PERSONA, experience_and_views="x" * (PERSONA_FIELD_MAX_CHARS + 1))
    with pytest.raises(InputError, match=r"persona\.experience_and_views has 20001 characters; the limit is 20000"):
        validate_persona(over)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("author", " ", "persona.author is empty"), ("basic_information", "", "persona.basic_information is empty")],
)
def test_persona_needs_a_name_and_basic_information(field: str, value: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        validate_persona(msgspec.structs.replace(PERSONA, **{field: value}))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("I am the poet Bei Dao, reading my own poem.", True),
        ("我是诗人北岛。", True),
        ("I am BEI  DAO", True),
        ("I am the poet who wrote this poem.", False),
        ("I am a poet from Beijing; Dao is a word I like", False),
    ],
)
def test_names_author(text: str, named: bool) -> None:
    assert names_author(text, PERSONA) is named


def test_short_latin_names_match_whole_words_only() -> None:
    li = Persona(author="Li", basic_information="b")
    assert names_author("I believe in the poem", li) is False
    assert names_author("As Li, I think", li) is True


def test_dimensions_default_order_and_bad_names() -> None:
    assert (
        [d.name for d in resolve_dimensions(None)]
        == list(DEFAULT_DIMENSIONS)
        == [
            "content",
            "language",
            "imagery",
            "rhetorical_techniques",
            "rhythm",
            "defamiliarization",
            "thought_and_emotion",
            "modernity",
        ]
    )
    assert [d.name for d in resolve_dimensions(["rhythm", "content"])] == ["rhythm", "content"]
    with pytest.raises(InputError, match="unknown dimension"):
        resolve_dimensions(["content", "beauty"])
    with pytest.raises(InputError, match="named twice"):
        resolve_dimensions(["content", "content"])
    with pytest.raises(InputError, match="at least one"):
        resolve_dimensions([])
