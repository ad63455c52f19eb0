"""The one-off commands' own parts: series selection, `probe`, `check` and its plan, table cells."""
