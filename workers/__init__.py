"""ARQ workers: the cheap tier and the LLM tier of assessments, and callback delivery."""
