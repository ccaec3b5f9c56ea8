"""The companion judges, a wing beside the translation-risk core: Poller (a judge in a poet's persona scores
readers' interpretations; personas) and MATA (grades, multiple-choice runs), each with its routes, over the core's LLM
client."""
