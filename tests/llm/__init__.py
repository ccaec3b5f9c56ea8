"""Tests of the LLM judges (service.core.judges.llm) against the local OpenAI-protocol server."""
