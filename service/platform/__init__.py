"""The platform pieces every layer stands on: settings, errors, telemetry, redaction, API keys, rate limits,
Redis errors, callbacks' address policy, bounded outbound HTTP, retries, CPUs, sealed secrets."""
