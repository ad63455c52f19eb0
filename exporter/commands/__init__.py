"""The one-off commands' own parts: series selection, `probe`, `check`, table cells."""
