"""The persona of a poem's author (who the Poller judge plays) and its content hash, the persona version."""

from __future__ import annotations

import hashlib

import msgspec

from service.core.text import require_text, script_words
from service.platform.errors import InputError

__all__ = [
    "PERSONA_FIELD_MAX_CHARS",
    "PERSONA_NAME_MAX_CHARS",
    "Persona",
    "names_author",
    "persona_version",
    "validate_persona",
]

# the research summarised each poet in 1,000-2,500 words; 20,000 characters per field leaves room for that in any
# script while keeping one prompt far below a model's context
PERSONA_FIELD_MAX_CHARS = 20_000
PERSONA_NAME_MAX_CHARS = 200
PERSONA_MAX_ALIASES = 10

_VERSION_PREFIX = b"trisk-persona/1\n"


class Persona(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The author as the judge plays them: name (and other names), basic information, own views, critics' comments.

    Each text field holds at most ``PERSONA_FIELD_MAX_CHARS`` characters (``validate_persona``).
    """

    author: str
    basic_information: str
    experience_and_views: str = ""
    critics_comments: str = ""
    # other names of the author (another script, a pen name): a declared role naming any of them names the author
    aliases: list[str] = []


_TEXT_FIELDS = ("basic_information", "experience_and_views", "critics_comments")


def validate_persona(persona: Persona, *, at: str = "persona") -> Persona:
    """The persona, or an InputError naming the field: an empty name or basic information, a field over its limit.

    Experience and views and critics' comments may be empty (the prompt then leaves that part out).
    """
    for i, name in enumerate([persona.author, *persona.aliases]):
        field = f"{at}.author" if i == 0 else f"{at}.aliases[{i - 1}]"
        require_text(name, field=field, max_chars=PERSONA_NAME_MAX_CHARS)
    if len(persona.aliases) > PERSONA_MAX_ALIASES:
        raise InputError(f"{at}.aliases: at most {PERSONA_MAX_ALIASES}", extra={"field": f"{at}.aliases"})
    for name in _TEXT_FIELDS:
        value: str = getattr(persona, name)
        if value or name == "basic_information":
            require_text(value, field=f"{at}.{name}", max_chars=PERSONA_FIELD_MAX_CHARS)
    return persona


def persona_version(persona: Persona) -> str:
    """``sha256:<hex>`` of the persona's fields in a fixed order (JSON-encoded, exactly as given, no normalising).

    Any edit, even of whitespace, makes a new version, so an evaluation names exactly the text its prompt used.
    """
    material = msgspec.json.encode(
        [
            persona.author,
            persona.aliases,
            persona.basic_information,
            persona.experience_and_views,
            persona.critics_comments,
        ]
    )
    return "sha256:" + hashlib.sha256(_VERSION_PREFIX + material).hexdigest()


def _contains(words: list[str], name: list[str]) -> bool:
    k = len(name)
    return k > 0 and any(words[i : i + k] == name for i in range(len(words) - k + 1))


def names_author(text: str, persona: Persona) -> bool:
    """Whether ``text`` names the author or an alias: the name's words appear in a row, as whole words.

    Whole words, so "Li" is not found in "believe"; Chinese names match character by character ("北岛" in
    "我是诗人北岛"). NFKC and case are ignored.
    """
    words = script_words(text)
    return any(_contains(words, script_words(name)) for name in [persona.author, *persona.aliases])
