"""tuner: find the fastest way to serve an LLM on given hardware."""

__version__ = "0.1.0"
