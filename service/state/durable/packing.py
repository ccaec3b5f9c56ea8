"""Records packed for the durable store: msgspec JSON, zlib-compressed when that saves a quarter or more."""

from __future__ import annotations

import zlib
from typing import Any

import msgspec

__all__ = ["pack", "unpack"]

_enc = msgspec.json.Encoder()
_RAW, _ZLIB = b"j", b"z"  # the first byte says which
# below this a record rarely shrinks enough to pay for the inflate on every read
_MIN_COMPRESS = 400
# a decoder per type: msgspec.json.decode(type=...) rebuilds its view of the type on each call unless msgspec can
# cache it on a Struct, and LLMPart's nested types cost 0.1 ms a call that way, half the API's CPU on GETs
# (py-spy, bench/bench_store_scale.py); decoders are safe to share between threads
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def pack(obj: Any) -> bytes:
    raw = _enc.encode(obj)
    if len(raw) >= _MIN_COMPRESS:
        packed = zlib.compress(raw, 6)
        if len(packed) * 4 <= len(raw) * 3:
            return _ZLIB + packed
    return _RAW + raw


def unpack(blob: bytes, type_: Any = Any) -> Any:
    """The record ``pack`` made, decoded as ``type_`` (msgspec.ValidationError when it no longer fits the type)."""
    blob = bytes(blob)
    head, body = blob[:1], blob[1:]
    if head == _ZLIB:
        body = zlib.decompress(body)
    elif head != _RAW:
        raise msgspec.DecodeError(f"not a packed record (starts with {head!r})")
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders.setdefault(type_, msgspec.json.Decoder(type_))
    return decoder.decode(body)
