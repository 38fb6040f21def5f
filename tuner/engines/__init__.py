"""Engine knowledge: the specs (YAML in the top-level ``engines/``, with cited sources), the condition
language of their rules, failure signatures, GPU profiles, container-runtime errors and the model
config reader.
Code here interprets data; it knows no engine by name."""
