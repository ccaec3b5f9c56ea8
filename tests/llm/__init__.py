"""Tests of the LLM judges (service.core.llm) against the local OpenAI-protocol server."""
