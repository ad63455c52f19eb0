"""The daemon: scheduler, HTTP port and endpoints, web config, results, budget, signals."""
