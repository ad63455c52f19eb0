"""`bench`: load levels against configured series, summaries, baseline comparison, outputs.

`model` (the typed run document and its JSON) and `summary` (the numbers of a level, computed
from its records) are all that `compare` and `report` use; `options` parses the command line,
`loadgen` and `workers` run levels, `run` drives a whole benchmark, `tables` and `output` show and
write it, `command` is the `bench` command. Nothing is imported here, so that reading a run.json
(`compare`, `report`) never loads the prober.
"""
