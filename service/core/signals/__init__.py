"""Reference-free candidate signals (computed by signal families) and hard flags for the candidates of one passage."""

from __future__ import annotations

from service.core.signals.base import CandidateSignals, Passage, SignalFamily
from service.core.signals.compute import FAMILIES, PEER_SIGNALS, SIGNAL_NAMES, compute_signals
from service.core.signals.flags import candidate_flags
from service.core.signals.length_model import (
    LengthModel,
    fit_length_model,
    length_model_json,
    length_model_path,
    letter_count,
    load_length_model,
)
from service.core.signals.translator import add_translator_signal

__all__ = [
    "FAMILIES",
    "PEER_SIGNALS",
    "SIGNAL_NAMES",
    "CandidateSignals",
    "LengthModel",
    "Passage",
    "SignalFamily",
    "add_translator_signal",
    "candidate_flags",
    "compute_signals",
    "fit_length_model",
    "length_model_json",
    "length_model_path",
    "letter_count",
    "load_length_model",
]
