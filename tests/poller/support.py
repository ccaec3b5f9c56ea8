"""Shared Poller test data: a persona, a poem and an interpretation."""

from __future__ import annotations

from service.companions.poller import Persona

PERSONA = Persona(
    author="北岛",
    aliases=["Bei Dao"],
    basic_information="Born in Beijing in 1949; a founder of the magazine Today.",
    experience_and_views="I distrust grand words; a poem should refuse the language of the crowd.",
    critics_comments="Critics call his early poems the voice of the Misty poets.",
)
POEM = "卑鄙是卑鄙者的通行证，\n高尚是高尚者的墓志铭。"
TITLE = "回答"
INTERPRETATION = "The poem answers an era of lies: the base thrive, the noble are buried by their own virtue."
