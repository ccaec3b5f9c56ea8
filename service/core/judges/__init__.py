"""The LLM judges of the scoring core: the cascade's GEMBA and backtranslation checks (llm), Poller and MATA."""
