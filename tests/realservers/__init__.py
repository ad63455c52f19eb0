"""Helpers for the real-server tests: generated GGUF model, server processes, recorded streams."""
