"""The scoring core: corpus, novelty, signals and risk, importable without the web app."""
