"""The word-level error detector: synthetic errors from the aligned corpus, lexicon features, a learned model."""

from __future__ import annotations
