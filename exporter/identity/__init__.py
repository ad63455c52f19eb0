"""Model-equality testing for `kind: identity` probes: is an endpoint still serving the
distribution of answers its reference sample was drawn from? `stats` (the test), `worker` (a
test in a child process), `store` (the reference sample in the state directory), `monitor` (the
identity series of the running config)."""
