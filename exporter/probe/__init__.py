"""One probe: stamping transport, failure causes, the prober, result assembly, checks, hints."""
