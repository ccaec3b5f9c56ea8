"""The scoring core: corpus, novelty, signals, critical content, risk and the LLM judges (judges/), importable
without the web app."""
