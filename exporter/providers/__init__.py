"""What the hosted providers accept and how they refuse: facts, not code paths.

`rules` is the table of request rules per API style and model family (read by the protocols,
the config checks and `check`'s advice); `refusals` turns a provider's 400 into the parameter it
refused and what it asks for instead (read by `exporter.probe.adapt`). Nothing here imports the
protocols, so the config can check itself against the table.
"""
