"""The LLM judges of the scoring core: the shared client and the cascade's GEMBA and backtranslation checks (llm)."""
