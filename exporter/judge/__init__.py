"""Judged quality: a configured target and model grade golden answers against their references
(`engine`), with prompts and a strict verdict reader (`prompt`) and canned answers of known
verdict that check the judge itself (`calibration`)."""
